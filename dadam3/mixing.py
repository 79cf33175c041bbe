"""Mixing: the one communication operator of every algorithm here.

``Mixer.mix(tensors, k)`` applies the iteration-k mixing operator (W^t for t gossip
rounds) along the leading node axis of each tensor::

    X[i] <- sum_j (W^t)[i, j] X[j]          (stacked: X <- W^t @ X)

``LocalMixer`` holds all M nodes in one process (the simulator) and does one matmul
per tensor, written straight into its destination. A ``torch.distributed`` mixer with the same
interface exchanges the rows with neighbours instead.

Both count the bytes each node sends: per gossip round, node i sends its whole
buffer to every out-neighbour j != i with W[j, i] > 0.

On CUDA the gossip matmul always runs in IEEE float32, whatever TF32 setting the rest of
the run uses: TF32 keeps 10 mantissa bits, so every mix would move each parameter by
about 5e-4 of its size (about the size of an Adam step at lr 5e-5) and would no longer
preserve the node average exactly. The matmul is memory-bound, so TF32 would gain nothing.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch

from dadam3.topology import Topology, build_topology


class Mixer:
    """Interface: ``mix(tensors, k, out=None) -> list of mixed tensors`` (inputs are not
    modified; ``out``, if given, receives the results and must not alias the inputs)."""

    nodes: int              # M, all nodes of the run
    local_nodes: int        # the rows this process holds (all M in the simulator)
    bytes_sent: np.ndarray  # [M] cumulative bytes sent by each node

    def mix(self, tensors: Sequence[torch.Tensor], k: int = 1,
            out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
        raise NotImplementedError


class LocalMixer(Mixer):
    """All M nodes in one process: ``X <- W_k^t @ X``, one matmul per tensor."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.nodes = self.local_nodes = topology.nodes
        self.bytes_sent = np.zeros(self.nodes, dtype=np.float64)
        self._ops: dict[tuple, torch.Tensor] = {}
        self._out_degree: dict[int, np.ndarray] = {}
        self.identity = self.nodes == 1

    def operator(self, k: int, device, dtype) -> torch.Tensor:
        phase = 0 if not self.topology.time_varying else ((k - 1) * self.topology.rounds) % self.topology.period
        key = (phase, str(device), dtype)
        if key not in self._ops:
            self._ops[key] = torch.as_tensor(self.topology.operator(k), device=device, dtype=dtype)
        return self._ops[key]

    def _count_bytes(self, k: int, nbytes_per_node: int) -> None:
        topo = self.topology
        for r in range(topo.rounds):
            kk = (k - 1) * topo.rounds + r if topo.time_varying else 0
            phase = kk % topo.period
            if phase not in self._out_degree:
                W = topo.matrix(phase) if topo.time_varying else topo.static_W
                off = (W > 0) & ~np.eye(self.nodes, dtype=bool)
                self._out_degree[phase] = off.sum(axis=0).astype(np.float64)
            self.bytes_sent += self._out_degree[phase] * nbytes_per_node

    def mix(self, tensors: Sequence[torch.Tensor], k: int = 1,
            out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """W_k^t along dim 0 of each tensor; with ``out``, the results are written there
        (one matmul per tensor straight into its destination: no concatenation copies)."""
        tensors = list(tensors)
        if out is None:
            out = [torch.empty_like(t) for t in tensors] if not self.identity else tensors
        elif self.identity:
            for o, t in zip(out, tensors):
                if o is not t:
                    o.copy_(t)
        if not tensors or self.identity:
            return list(out)
        M = self.nodes
        for t in tensors:
            if t.shape[0] != M:
                raise ValueError(f"mixing expects a leading node axis of size {M}, got shape {tuple(t.shape)}")
        self._count_bytes(k, sum(t[0].numel() * t.element_size() for t in tensors))
        with ieee_fp32_matmul(tensors[0].device):
            for t, o in zip(tensors, out):
                Wt = self.operator(k, t.device, t.dtype)
                torch.matmul(Wt, t.reshape(M, -1), out=o.view(M, -1))
        return list(out)


@contextmanager
def ieee_fp32_matmul(device: torch.device) -> Iterator[None]:
    """On CUDA, float32 matmuls inside run in IEEE float32 (TF32 off), then the previous
    setting returns. Uses torch's ``fp32_precision`` flag; a no-op elsewhere."""
    flags = torch.backends.cuda.matmul
    if device.type != "cuda" or flags.fp32_precision == "ieee":
        yield
        return
    previous = flags.fp32_precision
    flags.fp32_precision = "ieee"
    try:
        yield
    finally:
        flags.fp32_precision = previous
