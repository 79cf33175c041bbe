"""The 2-D torus."""
from __future__ import annotations

import math
import numbers
from typing import Annotated, Any

import numpy as np

from dadam3.errors.config import ConfigError
from dadam3.topologies.checks import check_nodes
from dadam3.topologies.metropolis import metropolis_hastings
from dadam3.topologies.registry import topology


def torus_supports(M: int) -> bool:
    """A torus needs M = r x c with r, c >= 2 (or M <= 3)."""
    return M <= 3 or any(M % r == 0 and M // r >= 2 for r in range(2, math.isqrt(M) + 1))


def divisor(key: str, value: Any) -> Any:
    """A number or null (:func:`torus` checks it is an integer divisor of the nodes)."""
    if value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        return value
    raise ConfigError(key, value, "must be an integer divisor of nodes, or null (the most square factorisation)")


@topology("torus", supports=torus_supports)
def torus(nodes: int, rows: Annotated[Any, divisor] = None) -> np.ndarray:
    """2-D torus of ``rows x (M // rows)`` nodes, each linked to its 4 grid neighbours
    (wrapping around), Metropolis-Hastings weights (1/5 each when both sides >= 3).

    ``rows=None`` picks the most square factorisation of M.
    """
    M = check_nodes(nodes)
    if rows is None:
        rows = max(r for r in range(1, int(math.isqrt(M)) + 1) if M % r == 0)
        if rows == 1 and M > 3:
            raise ConfigError("name", "torus", "{nodes} has no factorisation r x c with r, c >= 2: the torus "
                              "would be a ring; use {name=ring} or another nodes", {"nodes": M, "name": "torus"})
    if isinstance(rows, bool) or int(rows) != rows or not 1 <= rows <= M or M % int(rows):
        raise ConfigError("rows", rows, "must be an integer divisor of {nodes}", {"nodes": M})
    rows = int(rows)
    cols = M // rows
    A = np.zeros((M, M))
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                j = ((r + dr) % rows) * cols + (c + dc) % cols
                if j != i:
                    A[i, j] = A[j, i] = 1.0
    return metropolis_hastings(A)
