"""The star."""
from __future__ import annotations

import numpy as np

from dadam3.topologies.checks import check_nodes
from dadam3.topologies.metropolis import metropolis_hastings
from dadam3.topologies.registry import topology


@topology("star")
def star(nodes: int) -> np.ndarray:
    """Star with node 0 as hub, Metropolis-Hastings weights (hub-leaf weight 1/M)."""
    M = check_nodes(nodes)
    A = np.zeros((M, M))
    A[0, 1:] = A[1:, 0] = 1.0
    return metropolis_hastings(A)
