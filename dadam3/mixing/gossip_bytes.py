"""What the gossip study counts of communication: rho per gossip round, and the bytes each node
sends (the mixer's own count, :attr:`dadam3.mixing.Mixer.bytes_sent`) over one period of the
schedule and after any iteration."""
from __future__ import annotations

from typing import Callable

import numpy as np

from dadam3.mixing.mixer import Mixer
from dadam3.topologies import Topology


def rho_per_round(topo: Topology) -> float:
    """rho of one gossip round: ||W - 11^T/M||_2 of a static W; of a time-varying schedule the
    per-round geometric mean rho(W_P ... W_1)^(1/P) over its period P."""
    return topo.rho if not topo.time_varying else topo.rho ** (1.0 / topo.period)


def period_bytes(mixer: Mixer, step: Callable[[], None]) -> tuple[np.ndarray, np.ndarray]:
    """The mixer's own count (``Mixer.bytes_sent``, [M] per node) now, and after each of the
    iterations 1..P of one period of the schedule (P = 1 for a static W), cumulative: ``step()``
    is one iteration of whatever mixes with ``mixer`` (an optimizer's step)."""
    start = mixer.bytes_sent.copy()
    period = []
    for _ in range(mixer.topology.period if mixer.topology.time_varying else 1):
        step()
        period.append(mixer.bytes_sent.copy())
    return start, np.array(period)


def bytes_after(k: int, start: np.ndarray, period: np.ndarray) -> np.ndarray:
    """Bytes each node sent by the end of iteration k (the schedule repeats every len(period))."""
    P = len(period)
    per = period[-1] - start
    return start + (k // P) * per + (period[k % P - 1] - start if k % P else 0.0)
