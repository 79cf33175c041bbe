"""The mixers: the one communication operator of every algorithm here.

``Mixer.mix(tensors, k)`` applies the iteration-k mixing operator (W^t for t gossip
rounds) along the leading node axis of each tensor::

    X[i] <- sum_j (W^t)[i, j] X[j]          (stacked: X <- W^t @ X)

Two mixers share this interface:

* ``LocalMixer`` (here) holds all M nodes in one process (the simulator); each gossip round
  sums every node's terms in ascending node index (:mod:`dadam3.mixing.ordered`), the order a
  rank uses too, so results do not depend on the number of ranks (also in float32).
* ``DistributedMixer`` (``dadam3.distributed.mixer``) runs under torch.distributed: each rank
  holds a contiguous block of nodes, its tensors are those rows only (``[local_nodes, ...]``),
  and every gossip round sends rows point to point to the ranks holding neighbours.

Both count the bytes each node sends, identically: per gossip round, node i sends its
whole buffer to every out-neighbour j != i with W[j, i] > 0. ``Mixer.average`` (the exact node
average 11^T/M, an all-reduce) is charged as a ring all-reduce: 2 (M - 1) / M of a node's buffer
per node, what a user running it for real pays (a reduce-scatter and an all-gather).

Gossip is elementwise by default (``kernel="ordered"``: products and sums, each rounded once,
in ascending node index: :mod:`dadam3.mixing.ordered`), so it runs in IEEE float32 on CUDA
whatever TF32 setting the rest of the run uses (TF32 keeps 10 mantissa bits: every mix would
move each parameter by about 5e-4 of its size and no longer preserve the node average
exactly), and a rank computes its rows exactly as the simulator does. ``kernel="matmul"`` (one
matmul by W^t per tensor, TF32 off through :func:`ieee_fp32_matmul`) is the reference.

The stencil kernel (``LocalMixer(kernel="stencil")``: a sum over the cyclic shifts W uses,
compiled by ``torch.compile`` on CUDA) is :mod:`dadam3.mixing.stencil`.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from dadam3.mixing.ordered import RoundTerms
from dadam3.mixing.stencil import compiled_stencil_mix, cyclic_shifts, stencil_mix, use_stencil
from dadam3.topologies import Topology, build_topology


class Mixer:
    """Interface: ``mix(tensors, k, out=None) -> list of mixed tensors`` (inputs are not
    modified; ``out``, if given, receives the results and must not alias the inputs).

    Attributes: ``topology``; ``nodes`` (M, all nodes); ``local_nodes`` (the leading size
    of the tensors this process mixes: M for the simulator, its block's size for a rank);
    ``bytes_sent`` ([M] float64, cumulative bytes sent by each node, the same array in
    every process). Round r = 0..t-1 of iteration k applies the schedule's matrix number
    ``(k-1) t + r`` (mod its period): the order of ``Topology.operator(k)``.
    """

    topology: Topology
    nodes: int
    local_nodes: int
    bytes_sent: np.ndarray  # [M] cumulative bytes sent by each node

    def __init__(self, topology: Topology):
        self.topology = topology
        self.nodes = topology.nodes
        self.local_nodes = topology.nodes
        self.bytes_sent = np.zeros(self.nodes, dtype=np.float64)
        self._out_degree: dict[int, np.ndarray] = {}
        self._average: Mixer | None = None

    def _round_phases(self, k: int) -> list[int]:
        """Schedule index of each gossip round of iteration k (0 for a static W)."""
        return [self.topology.phase(k, r) for r in range(self.topology.rounds)]

    def _round_matrix(self, phase: int) -> np.ndarray:
        topo = self.topology
        return topo.matrix(phase) if topo.time_varying else topo.static_W

    def _count_bytes(self, k: int, nbytes_per_node: int) -> None:
        """bytes_sent[i] += (out-degree of i in each round) x bytes of one node's rows."""
        for phase in self._round_phases(k):
            if phase not in self._out_degree:
                W = self._round_matrix(phase)
                off = (W > 0) & ~np.eye(self.nodes, dtype=bool)
                self._out_degree[phase] = off.sum(axis=0).astype(np.float64)
            self.bytes_sent += self._out_degree[phase] * nbytes_per_node

    def mix(self, tensors: Sequence[torch.Tensor], k: int = 1,
            out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
        raise NotImplementedError

    def average(self, tensors: Sequence[torch.Tensor], out: Sequence[torch.Tensor] | None = None
                ) -> list[torch.Tensor]:
        """The exact node average ``X <- 11^T/M X`` of each tensor (every node gets the mean of all
        M rows, summed in ascending node index as every mix is, so a rank computes the simulator's
        numbers), charged as a ring all-reduce: 2 (M - 1) / M of one node's rows per node."""
        if self._average is None:
            self._average = self.like(complete_graph(self.nodes))
        result = self._average.mix(tensors, 1, out=out)
        self.bytes_sent += 2.0 * (self.nodes - 1) / self.nodes * sum(t[0].numel() * t.element_size()
                                                                       for t in tensors)
        return result

    def like(self, topology: Topology) -> "Mixer":
        """A mixer of the same kind (and process group) over ``topology``: the one :meth:`average` uses."""
        raise NotImplementedError


def complete_graph(nodes: int) -> Topology:
    """The complete graph's W = 11^T/M on ``nodes`` nodes (one round)."""
    return build_topology("complete", nodes, 1)


KERNELS = ("ordered", "matmul", "stencil", "auto")


class LocalMixer(Mixer):
    """All M nodes in one process: ``X <- W_k^t @ X``.

    ``kernel``: ``"ordered"`` (the default: t rounds, each in the fixed order of
    :class:`dadam3.mixing.ordered.RoundTerms`, the order every rank uses, so float32 results do
    not depend on the number of processes; one compiled pass over each buffer and round: numba
    on the CPU, Triton on CUDA),
    ``"matmul"`` (the reference: one matmul by W^t per tensor), ``"stencil"`` (a sum over the
    cyclic shifts W uses; compiled by ``torch.compile`` on CUDA, eager elsewhere) or ``"auto"``
    (the stencil on CUDA for sparse graphs by :func:`use_stencil`, ordered otherwise)."""

    def __init__(self, topology: Topology, kernel: str = "ordered"):
        super().__init__(topology)
        if kernel not in KERNELS:
            raise ValueError(f"kernel={kernel!r}: must be one of {', '.join(KERNELS)}")
        self.kernel = kernel
        self._ops: dict[tuple, torch.Tensor] = {}
        self._stencils: dict[tuple, tuple[tuple[int, ...], torch.Tensor]] = {}
        self._round_terms: dict[int, RoundTerms] = {}
        self.identity = self.nodes == 1

    def _phase(self, k: int) -> int:
        return self.topology.phase(k)

    def like(self, topology: Topology) -> "LocalMixer":
        return LocalMixer(topology, self.kernel)

    def stencil(self, k: int, device, dtype) -> tuple[tuple[int, ...], torch.Tensor]:
        """(shifts, coefficients ``[S, M, 1]``) of the iteration-k operator W_k^t (cached per phase)."""
        key = (self._phase(k), str(device), dtype)
        if key not in self._stencils:
            shifts, coeffs = cyclic_shifts(self.topology.operator(k))
            self._stencils[key] = (shifts, torch.as_tensor(coeffs, device=device, dtype=dtype).unsqueeze(-1))
        return self._stencils[key]

    def _uses_stencil(self, k: int, t: torch.Tensor) -> bool:
        if self.kernel != "auto":
            return self.kernel == "stencil"
        if t.device.type != "cuda" or not t.is_floating_point():
            return False
        return use_stencil(len(self.stencil(k, t.device, t.dtype)[0]), self.nodes)

    def operator(self, k: int, device, dtype) -> torch.Tensor:
        key = (self._phase(k), str(device), dtype)
        if key not in self._ops:
            self._ops[key] = torch.as_tensor(self.topology.operator(k), device=device, dtype=dtype)
        return self._ops[key]

    def mix(self, tensors: Sequence[torch.Tensor], k: int = 1,
            out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """W_k^t along dim 0 of each tensor; with ``out``, the results are written there
        (the last round straight into its destination: no concatenation copies)."""
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
        if self._uses_stencil(k, tensors[0]):
            # compiled frames do not run under a dispatch mode (FLOP / byte counters, fake tensors)
            compiled = tensors[0].device.type == "cuda" and _get_current_dispatch_mode() is None
            mix = compiled_stencil_mix() if compiled else stencil_mix
            for t, o in zip(tensors, out):
                shifts, coeffs = self.stencil(k, t.device, t.dtype)
                mix(t.reshape(M, -1), coeffs, shifts, o.view(M, -1))
            return list(out)
        if self.kernel == "matmul":
            with ieee_fp32_matmul(tensors[0].device):
                for t, o in zip(tensors, out):
                    Wt = self.operator(k, t.device, t.dtype)
                    torch.matmul(Wt, t.reshape(M, -1), out=o.view(M, -1))
            return list(out)
        phases = self._round_phases(k)
        for t, o in zip(tensors, out):                  # t rounds, each in the fixed order of mixing.ordered
            x = t.reshape(M, -1)
            for r, phase in enumerate(phases):
                y = o.view(M, -1) if r + 1 == len(phases) else torch.empty_like(x)
                x = self._terms(phase).apply(x, y)
        return list(out)

    def _terms(self, phase: int) -> RoundTerms:
        if phase not in self._round_terms:
            self._round_terms[phase] = RoundTerms(self._round_matrix(phase), np.arange(self.nodes))
        return self._round_terms[phase]


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
