"""Metropolis-Hastings weights: the W of an undirected graph (torus, star, exponential, Erdős–Rényi)."""
from __future__ import annotations

import numpy as np


def metropolis_hastings(adjacency: np.ndarray) -> np.ndarray:
    """Metropolis-Hastings weights of an undirected graph (no self loops in ``adjacency``):

    W_ij = 1 / (1 + max(deg_i, deg_j)) for each edge, W_ii = 1 - sum_{j != i} W_ij.
    Symmetric and doubly stochastic for every undirected graph.
    """
    A = (np.asarray(adjacency) > 0).astype(float)
    np.fill_diagonal(A, 0.0)
    deg = A.sum(axis=1)
    W = np.where(A > 0, 1.0 / (1.0 + np.maximum(deg[:, None], deg[None, :])), 0.0)
    W[np.diag_indices_from(W)] = 1.0 - W.sum(axis=1)
    return W
