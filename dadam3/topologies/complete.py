"""The complete graph: exact averaging (the centralized variants)."""
from __future__ import annotations

import numpy as np

from dadam3.topologies.checks import check_nodes
from dadam3.topologies.registry import topology


@topology("complete")
def complete(nodes: int) -> np.ndarray:
    """W = 11^T / M: one mixing round is exact averaging (the centralized variants)."""
    M = check_nodes(nodes)
    return np.full((M, M), 1.0 / M)
