"""The strongly-convex-strongly-concave game of Section 5.1:

    f(theta, alpha; xi) = a (theta - alpha) + theta^2 - alpha^2 + k theta alpha,
    a = c w.p. 1/3,  a = 1 w.p. 2/3                     (c >= 1, k >= 0)

    F(theta, alpha) = (c+2)/3 (theta - alpha) + theta^2 - alpha^2 + k theta alpha

with the unique FNE (theta*, alpha*) = -(c+2)/(3k^2+12) (2-k, 2+k). The operator
(the paper's min-max convention) is

    G(z; a) = [df/dtheta, -df/dalpha] = [a + 2 theta + k alpha,  a + 2 alpha - k theta].

Each node draws its own a every iteration. Samples are drawn in chunks from one
``numpy.random.Generator`` as booleans ``is_c`` [n, M] (True: a = c), so the fast
kernels and the torch reference consume exactly the same stream.

Heterogeneous nodes (``spread`` s in [0, 1], beyond the paper; s = 0 is the paper's game): node i of
M draws a = c with its own probability

    p_i = (1 + s u_i) / 3,   u_i = (2i - (M-1)) / (M-1) evenly spaced in [-1, 1]   (u_0 = 0 when M = 1)

so node i's own game has E[a_i] = 1 + (c-1) p_i, while the mean of the p_i stays 1/3: the average
game (1/M) sum_i E f_i is F above, with the same FNE z*. At s = 1 node 0 never draws c and node M-1
draws it w.p. 2/3.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dadam3.errors.config import check_range


@dataclass(frozen=True)
class SyntheticGame:
    c: float = 1010.0
    k: float = 0.01
    spread: float = 0.0            # s: node i draws a = c w.p. (1 + s u_i)/3 (0: the paper's iid nodes)

    def __post_init__(self):
        # the one check of c, k and spread (the config's game node defers to it); beyond 1e100
        # the iterates overflow float64
        check_range("c", self.c, 1.0, 1e100, high_open=False)
        check_range("k", self.k, 0.0, 1e100, high_open=False)
        check_range("spread", self.spread, 0.0, 1.0, high_open=False)

    @property
    def mean_a(self) -> float:
        return (self.c + 2.0) / 3.0

    def fne(self) -> np.ndarray:
        """z* = -(c+2)/(3k^2+12) * (2-k, 2+k)."""
        return -(self.c + 2.0) / (3.0 * self.k ** 2 + 12.0) * np.array([2.0 - self.k, 2.0 + self.k])

    def mean_operator(self, z: np.ndarray) -> np.ndarray:
        """grad F in the min-max convention at z = (theta, alpha) (last axis)."""
        z = np.asarray(z, dtype=float)
        th, al = z[..., 0], z[..., 1]
        return np.stack([self.mean_a + 2 * th + self.k * al, self.mean_a + 2 * al - self.k * th], axis=-1)

    def loss(self, theta: torch.Tensor, alpha: torch.Tensor, is_c: torch.Tensor) -> torch.Tensor:
        """f(theta, alpha; a) summed over nodes (each node's value depends on its own row only)."""
        a = torch.where(is_c, torch.as_tensor(self.c, dtype=theta.dtype), torch.as_tensor(1.0, dtype=theta.dtype))
        a = a.reshape(theta.shape)
        return (a * (theta - alpha) + theta ** 2 - alpha ** 2 + self.k * theta * alpha).sum()

    def probabilities(self, nodes: int) -> np.ndarray:
        """p_i = (1 + s u_i)/3 for the M nodes (all 1/3 when s = 0), shape [M]."""
        u = (2.0 * np.arange(nodes) - (nodes - 1)) / (nodes - 1) if nodes > 1 else np.zeros(1)
        return (1.0 + self.spread * u) / 3.0

    def node_mean_a(self, nodes: int) -> np.ndarray:
        """E[a_i] = 1 + (c-1) p_i of each node's own game, shape [M]."""
        return 1.0 + (self.c - 1.0) * self.probabilities(nodes)

    def draw(self, rng: np.random.Generator, n: int, nodes: int) -> np.ndarray:
        """n iterations of samples for M nodes: ``is_c[i, j]`` is True w.p. p_j (1/3 when s = 0)."""
        return rng.random((n, nodes)) < self.probabilities(nodes)


def log_iterations(iterations: int, count: int = 50) -> np.ndarray:
    """About ``count`` log-spaced iterations in [1, iterations], always including the last."""
    its = np.unique(np.round(np.logspace(0, np.log10(max(iterations, 1)), count)).astype(np.int64))
    its = its[(its >= 1) & (its <= iterations)]
    return np.unique(np.append(its, iterations))
