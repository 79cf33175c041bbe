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

    def __post_init__(self):
        # the one check of c and k (the config's game node defers to it); beyond 1e100 the
        # iterates overflow float64
        check_range("c", self.c, 1.0, 1e100, high_open=False)
        check_range("k", self.k, 0.0, 1e100, high_open=False)

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

    @staticmethod
    def draw(rng: np.random.Generator, n: int, nodes: int) -> np.ndarray:
        """n iterations of samples for M nodes: ``is_c[i, j]`` is True w.p. 1/3."""
        return rng.random((n, nodes)) < (1.0 / 3.0)


def log_iterations(iterations: int, count: int = 50) -> np.ndarray:
    """About ``count`` log-spaced iterations in [1, iterations], always including the last."""
    its = np.unique(np.round(np.logspace(0, np.log10(max(iterations, 1)), count)).astype(np.int64))
    its = its[(its >= 1) & (its <= iterations)]
    return np.unique(np.append(its, iterations))
