"""The Erdős–Rényi graph G(M, p), redrawn until connected."""
from __future__ import annotations

from typing import Annotated, Any

import numpy as np

from dadam3.errors.config import ConfigError, check_int, check_range
from dadam3.topologies.checks import check_nodes
from dadam3.topologies.metropolis import metropolis_hastings
from dadam3.topologies.registry import topology

MAX_TRIES = 1000            # draws before a p too small for a connected graph is refused


def probability(key: str, value: Any) -> float:
    """An edge probability in (0, 1]."""
    return check_range(key, value, 0.0, 1.0, low_open=True, high_open=False)


def graph_seed(key: str, value: Any) -> int:
    """A seed numpy's generator accepts: an integer in [0, 2^32 - 1]."""
    return check_int(key, value, 0, 2**32 - 1)


@topology("erdos_renyi")
def erdos_renyi(nodes: int, p: Annotated[float, probability] = 0.5, seed: Annotated[int, graph_seed] = 0
                ) -> np.ndarray:
    """G(M, p) with Metropolis-Hastings weights, redrawn (seeded) until connected."""
    M = check_nodes(nodes)
    p, seed = probability("p", p), graph_seed("seed", seed)
    rng = np.random.default_rng(seed)
    for _ in range(MAX_TRIES):
        upper = np.triu(rng.random((M, M)) < p, k=1)
        A = (upper | upper.T).astype(float)
        if connected(A):
            return metropolis_hastings(A)
    raise ConfigError("p", p, f"no connected G({M}, p) in {MAX_TRIES} draws; raise p")


def connected(A: np.ndarray) -> bool:
    """Whether the graph of adjacency matrix ``A`` is connected."""
    M = A.shape[0]
    seen, stack = {0}, [0]
    while stack:
        i = stack.pop()
        for j in np.nonzero(A[i])[0]:
            if int(j) not in seen:
                seen.add(int(j))
                stack.append(int(j))
    return len(seen) == M
