"""Mixing: the one communication operator of every algorithm here.

``Mixer.mix(tensors, k)`` applies the iteration-k mixing operator (W^t for t gossip
rounds) along the leading node axis of each tensor::

    X[i] <- sum_j (W^t)[i, j] X[j]          (stacked: X <- W^t @ X)

``LocalMixer`` holds all M nodes in one process (the simulator) and does one matmul
per call on a flat [M, P] buffer. A ``torch.distributed`` mixer with the same
interface exchanges the rows with neighbours instead.

Both count the bytes each node sends: per gossip round, node i sends its whole
buffer to every out-neighbour j != i with W[j, i] > 0.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from dadam3.topology import Topology, build_topology


class Mixer:
    """Interface: ``mix(tensors, k) -> list of mixed tensors`` (inputs are not modified)."""

    nodes: int
    bytes_sent: np.ndarray  # [M] cumulative bytes sent by each node

    def mix(self, tensors: Sequence[torch.Tensor], k: int = 1) -> list[torch.Tensor]:
        raise NotImplementedError


class LocalMixer(Mixer):
    """All M nodes in one process: ``X <- W_k^t @ X`` for each tensor, one matmul per call."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.nodes = topology.nodes
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

    def mix(self, tensors: Sequence[torch.Tensor], k: int = 1) -> list[torch.Tensor]:
        tensors = list(tensors)
        if not tensors or self.identity:
            return tensors
        M = self.nodes
        for t in tensors:
            if t.shape[0] != M:
                raise ValueError(f"mixing expects a leading node axis of size {M}, got shape {tuple(t.shape)}")
        self._count_bytes(k, sum(t[0].numel() * t.element_size() for t in tensors))
        groups: dict[tuple, list[int]] = {}
        for i, t in enumerate(tensors):
            groups.setdefault((t.device, t.dtype), []).append(i)
        out: list[torch.Tensor] = [None] * len(tensors)  # type: ignore[list-item]
        for (device, dtype), idx in groups.items():
            Wt = self.operator(k, device, dtype)
            if len(idx) == 1:
                t = tensors[idx[0]]
                out[idx[0]] = (Wt @ t.reshape(M, -1)).reshape(t.shape)
                continue
            flat = torch.cat([tensors[i].reshape(M, -1) for i in idx], dim=1)
            parts = torch.split(Wt @ flat, [tensors[i][0].numel() for i in idx], dim=1)
            for i, part in zip(idx, parts):
                out[i] = part.reshape(tensors[i].shape)
        return out

def local_mixer(name: str, nodes: int, rounds: int = 1, **kw) -> LocalMixer:
    """Shortcut: ``LocalMixer(build_topology(name, nodes, rounds, **kw))``."""
    return LocalMixer(build_topology(name, nodes, rounds, **kw))
