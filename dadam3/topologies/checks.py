"""The checks every mixing matrix W passes before it mixes (:func:`dadam3.topologies.build_topology`):
square, finite, non-negative, doubly stochastic, symmetric where the theory asks, connected
(Assumption D: rho = ||W - 11^T/M||_2 < 1), and a W that is doubly stochastic only within
:data:`TOLERANCE` made exactly so. Pure numpy (float64).
"""
from __future__ import annotations

import logging

import numpy as np

from dadam3.errors.config import ConfigError, check_int

log = logging.getLogger(__name__)

TOLERANCE = 1e-6          # a W further than this from doubly stochastic is refused
EXACT = 1e-14             # a W within TOLERANCE but further than this is projected (Sinkhorn)


def check_nodes(M) -> int:
    """M as an int: the number of nodes of a topology, a node layout or a sampler (>= 1)."""
    return check_int("nodes", M, 1)


def spectral_gap_rho(W: np.ndarray) -> float:
    """rho = ||W - 11^T/M||_2 (largest singular value of W minus the averaging matrix)."""
    M = W.shape[0]
    return float(np.linalg.norm(W - np.full((M, M), 1.0 / M), ord=2))


def validate(W: np.ndarray, key: str = "W", symmetric: bool = True,
             require_connected: bool = True, tol: float = TOLERANCE) -> None:
    """Raise a one-line :class:`ConfigError` unless W is a valid mixing matrix:
    square, finite, non-negative, rows and columns summing to 1 (within ``tol``),
    symmetric when ``symmetric``, and connected (rho < 1) when ``require_connected``."""
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ConfigError(key, f"matrix of shape {W.shape}", "mixing matrix must be square")
    if not np.all(np.isfinite(W)):
        raise ConfigError(key, "matrix with NaN/Inf", "mixing matrix entries must be finite")
    if W.min() < -tol:
        i, j = np.unravel_index(np.argmin(W), W.shape)
        raise ConfigError(key, f"W[{i},{j}]={W[i, j]:g}", "mixing matrix entries must be >= 0")
    for what, sums in (("row", W.sum(axis=1)), ("column", W.sum(axis=0))):
        i = int(np.argmax(np.abs(sums - 1)))
        if abs(sums[i] - 1) > tol:        # 1+1.3e-06, not 1 (as :.6g would print it)
            total = f"{sums[i]:.6g}" if abs(sums[i] - 1) >= 1e-4 else f"1{sums[i] - 1:+.3g}"
            raise ConfigError(key, f"{what} {i} sums to {total}",
                              "mixing matrix must be doubly stochastic (rows and columns sum to 1)")
    if symmetric and np.max(np.abs(W - W.T)) > tol:
        raise ConfigError(key, "non-symmetric matrix", "must be symmetric (undirected graph, Assumption D); "
                          "set {require_symmetric=false} to allow it", {"require_symmetric": True})
    if require_connected and W.shape[0] > 1 and spectral_gap_rho(W) >= 1 - 1e-9:
        raise ConfigError(key, f"rho={spectral_gap_rho(W):.6g}", "graph must be connected (rho = ||W - 11^T/M||_2 < 1)")


def stochastic_deviation(W: np.ndarray) -> float:
    """max over rows and columns of |sum - 1|."""
    return float(max(np.max(np.abs(W.sum(axis=1) - 1)), np.max(np.abs(W.sum(axis=0) - 1))))


def make_doubly_stochastic(W: np.ndarray, key: str = "W", symmetric: bool = True, max_iter: int = 1000) -> np.ndarray:
    """W (:func:`validate`-d: within ``TOLERANCE``) made doubly stochastic to rounding (row and
    column sums within :data:`EXACT` of 1; rows summing to 1 + delta would scale the node average
    by 1 + delta every round), said in one log line; a W within ``EXACT`` is returned as given.
    Sinkhorn-Knopp scaling ``W <- D_r W D_c`` keeps the zero pattern; a symmetric W is symmetrised,
    then scaled by ``W <- D W D``, ``D = diag(1/sqrt(W 1))``, so it stays exactly symmetric."""
    W0 = np.array(W, dtype=float)
    before = stochastic_deviation(W0)
    if before <= EXACT and (not symmetric or np.array_equal(W0, W0.T)):
        return W0
    W = np.maximum(W0, 0.0)                    # validate allowed entries down to -TOLERANCE
    if symmetric:
        W = (W + W.T) / 2
    settled = 0
    while settled <= 3 and max_iter > 0:  # a few more rounds once within EXACT: down to rounding
        settled, max_iter = settled + 1 if stochastic_deviation(W) <= EXACT else 0, max_iter - 1
        d_row = 1.0 / np.sqrt(W.sum(axis=1)) if symmetric else 1.0 / W.sum(axis=1)
        W = W * np.outer(d_row, d_row) if symmetric else W * d_row[:, None] / (W * d_row[:, None]).sum(axis=0)
    after = stochastic_deviation(W)
    if after > EXACT:
        raise ConfigError(key, f"row/column sums off by {before:.3g}",
                          f"cannot be scaled to doubly stochastic within {EXACT:g} (left {after:.3g}); give an "
                          "exactly doubly stochastic matrix")
    log.info("%s: rows/columns sum to 1 only within %.3g; using its doubly stochastic scaling "
             "(Sinkhorn%s, max |sum - 1| now %.3g, largest entry change %.3g)", key, before,
             ", symmetric" if symmetric else "", after, float(np.max(np.abs(W - W0))))
    return W
