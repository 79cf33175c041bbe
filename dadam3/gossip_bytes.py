"""What the gossip study counts of communication: rho per gossip round, and the bytes each node
sends (the mixer's own count, :attr:`dadam3.mixing.Mixer.bytes_sent`) after any iteration."""
from __future__ import annotations

import numpy as np
import torch

from dadam3.mixing import Mixer
from dadam3.optim import build_optimizer
from dadam3.topology import Topology


def rho_per_round(topo: Topology) -> float:
    """rho of one gossip round: ||W - 11^T/M||_2 of a static W; of a time-varying schedule the
    per-round geometric mean rho(W_P ... W_1)^(1/P) over its period P."""
    return topo.rho if not topo.time_varying else topo.rho ** (1.0 / topo.period)


def mixer_bytes(optimizer: str, hparams: dict, mixer: Mixer, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The mixer's own count (``Mixer.bytes_sent``, [M] per node) of the torch optimizer on this
    game's buffers (theta and alpha, float64): after its start, and after each of the iterations
    1..P of one period of the schedule (P = 1 for a static W), cumulative."""
    theta = torch.zeros(nodes, 1, dtype=torch.float64)
    alpha = torch.zeros(nodes, 1, dtype=torch.float64)
    opt = build_optimizer(optimizer, [{"params": [theta]}, {"params": [alpha], "maximize": True}], mixer, **hparams)
    start = mixer.bytes_sent.copy()
    period = []
    for _ in range(mixer.topology.period if mixer.topology.time_varying else 1):
        theta.grad, alpha.grad = torch.zeros_like(theta), torch.zeros_like(alpha)
        opt.step()
        period.append(mixer.bytes_sent.copy())
    return start, np.array(period)


def bytes_after(k: int, start: np.ndarray, period: np.ndarray) -> np.ndarray:
    """Bytes each node sent by the end of iteration k (the schedule repeats every len(period))."""
    P = len(period)
    per = period[-1] - start
    return start + (k // P) * per + (period[k % P - 1] - start if k % P else 0.0)
