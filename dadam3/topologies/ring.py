"""The paper's ring."""
from __future__ import annotations

import numpy as np

from dadam3.topologies.checks import check_nodes
from dadam3.topologies.registry import topology


@topology("ring")
def ring(nodes: int) -> np.ndarray:
    """The paper's ring: W_ij = 1/3 if |i-j| <= 1 or |i-j| = M-1.

    M = 1 is the single node (W = [1]); M = 2 has one neighbour each, so each node
    averages itself and its neighbour with weight 1/2; M = 3 is the complete graph.
    """
    M = check_nodes(nodes)
    if M == 1:
        return np.ones((1, 1))
    if M == 2:
        return np.full((2, 2), 0.5)
    d = np.abs(np.subtract.outer(np.arange(M), np.arange(M)))
    return np.where((d <= 1) | (d == M - 1), 1.0 / 3.0, 0.0)
