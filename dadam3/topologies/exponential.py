"""The static exponential graph."""
from __future__ import annotations

import numpy as np

from dadam3.topologies.checks import check_nodes
from dadam3.topologies.metropolis import metropolis_hastings
from dadam3.topologies.registry import topology


@topology("exponential")
def exponential(nodes: int) -> np.ndarray:
    """Static exponential graph: i linked to i +- 2^k (mod M) for 2^k < M, made undirected,
    Metropolis-Hastings weights (so W is symmetric, as the paper's theory assumes)."""
    M = check_nodes(nodes)
    A = np.zeros((M, M))
    hop = 1
    while hop < M:
        for i in range(M):
            A[i, (i + hop) % M] = A[(i + hop) % M, i] = 1.0
        hop *= 2
    return metropolis_hastings(A)
