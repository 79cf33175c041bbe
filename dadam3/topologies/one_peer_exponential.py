"""The time-varying one-peer exponential graph (Ying et al., NeurIPS 2021), beyond the paper."""
from __future__ import annotations

import math

import numpy as np

from dadam3.topologies.checks import check_nodes
from dadam3.topologies.registry import topology


def one_peer_period(M: int) -> int:
    """tau = ceil(log2 M): the one-peer exponential graph's period (1 for a single node)."""
    return max(1, math.ceil(math.log2(M))) if M > 1 else 1


@topology("one_peer_exponential")
def one_peer_exponential(nodes: int) -> np.ndarray:
    """The schedule ``[tau, M, M]`` of the time-varying one-peer exponential graph.

    At iteration k node i averages with the single peer (i + 2^(k mod tau)) mod M,
    tau = ceil(log2 M): W_k = (I + P_k)/2 with P_k a cyclic shift. Each W_k is doubly
    stochastic but not symmetric; for M a power of two the product over one period
    is exact averaging.
    """
    M = check_nodes(nodes)
    if M == 1:
        return np.ones((1, 1, 1))
    schedule = np.zeros((one_peer_period(M), M, M))
    for k, W in enumerate(schedule):
        shift = 2 ** k
        W += 0.5 * np.eye(M)
        for i in range(M):
            W[i, (i + shift) % M] += 0.5
    return schedule
