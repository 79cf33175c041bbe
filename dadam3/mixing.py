"""Mixing: the one communication operator of every algorithm here.

``Mixer.mix(tensors, k)`` applies the iteration-k mixing operator (W^t for t gossip
rounds) along the leading node axis of each tensor::

    X[i] <- sum_j (W^t)[i, j] X[j]          (stacked: X <- W^t @ X)

Two mixers share this interface:

* ``LocalMixer`` (here) holds all M nodes in one process (the simulator); each gossip round
  sums every node's terms in ascending node index (:mod:`dadam3.ordered_mix`), the order a
  rank uses too, so results do not depend on the number of ranks (also in float32).
* ``DistributedMixer`` (``dadam3.distributed.mixer``) runs under torch.distributed: each rank
  holds a contiguous block of nodes, its tensors are those rows only (``[local_nodes, ...]``),
  and every gossip round sends rows point to point to the ranks holding neighbours.

Both count the bytes each node sends, identically: per gossip round, node i sends its
whole buffer to every out-neighbour j != i with W[j, i] > 0.

Gossip is elementwise (products and sums, each rounded once), so it runs in IEEE float32
on CUDA whatever TF32 setting the rest of the run uses (TF32 keeps 10 mantissa bits: every
mix would move each parameter by about 5e-4 of its size and no longer preserve the node
average exactly). ``ieee_fp32_matmul`` switches TF32 off for a matmul.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch

from dadam3.ordered_mix import RoundTerms
from dadam3.topology import Topology


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

    def _round_phases(self, k: int) -> list[int]:
        """Schedule index of each gossip round of iteration k (0 for a static W)."""
        topo = self.topology
        if not topo.time_varying:
            return [0] * topo.rounds
        return [((k - 1) * topo.rounds + r) % topo.period for r in range(topo.rounds)]

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


class LocalMixer(Mixer):
    """All M nodes in one process: ``X <- W_k^t @ X``, t rounds in the fixed order of
    :class:`dadam3.ordered_mix.RoundTerms` (``operator``: the product as one matrix)."""

    def __init__(self, topology: Topology):
        super().__init__(topology)
        self._ops: dict[tuple, torch.Tensor] = {}
        self._round_terms: dict[int, RoundTerms] = {}
        self.identity = self.nodes == 1

    def operator(self, k: int, device, dtype) -> torch.Tensor:
        phase = 0 if not self.topology.time_varying else ((k - 1) * self.topology.rounds) % self.topology.period
        key = (phase, str(device), dtype)
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
        phases = self._round_phases(k)
        for t, o in zip(tensors, out):                  # t rounds, each in the fixed order of ordered_mix
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
