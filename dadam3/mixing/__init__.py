"""Mixing, the one communication operator: the mixers (:mod:`~dadam3.mixing.mixer`: ``Mixer``,
``LocalMixer``), their kernels (:mod:`~dadam3.mixing.ordered`: a gossip round in a fixed order,
numba on the CPU and Triton on CUDA (:mod:`~dadam3.mixing.ordered_triton`);
:mod:`~dadam3.mixing.stencil`: a sum over cyclic shifts) and what the gossip study counts of
communication (:mod:`~dadam3.mixing.gossip_bytes`). The mixer of a rank under torch.distributed
is :class:`dadam3.distributed.DistributedMixer`.
"""
from dadam3.mixing.mixer import KERNELS, LocalMixer, Mixer, complete_graph, ieee_fp32_matmul

__all__ = ["KERNELS", "LocalMixer", "Mixer", "complete_graph", "ieee_fp32_matmul"]
