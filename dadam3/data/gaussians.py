"""The 2-D ring of Gaussians (Metz et al., 2017) and its mode-coverage metric.

The data: a uniform mixture of ``modes`` isotropic Gaussians whose means sit on a
circle of radius ``radius`` (mode k at angle 2πk/modes, the first one at (radius, 0)),
each with standard deviation ``std``. The defaults (8 modes, radius 2, std 0.02) are
the ring of Metz, Poole, Pfau & Sohl-Dickstein, "Unrolled Generative Adversarial
Networks", ICLR 2017.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from dadam3.errors.config import ConfigError, check_int, check_range


def ring_centers(modes: int = 8, radius: float = 2.0) -> Tensor:
    """float32 ``[modes, 2]`` means on a circle: mode k at angle ``2πk / modes``."""
    angles = torch.arange(modes, dtype=torch.float64) * (2 * math.pi / modes)
    return (radius * torch.stack([angles.cos(), angles.sin()], dim=1)).to(torch.float32)


class GaussianRing:
    """An infinite source of 2-D points from the ring mixture.

    There is no ``__len__``: :meth:`sample` draws fresh points from the given
    ``torch.Generator`` on every call (equal mixture weights).
    """

    name = "gaussians"
    labels = None
    shape = (2,)

    def __init__(self, modes: int = 8, radius: float = 2.0, std: float = 0.02):
        self.modes = check_int("modes", modes, 1)
        self.radius = check_range("radius", radius, 0.0, None, low_open=True)
        self.std = check_range("std", std, 0.0, None, low_open=True)
        self.centers = ring_centers(self.modes, self.radius)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """float32 ``[n, 2]``: a uniform mode index, then that mean plus ``std`` · N(0, I)."""
        mode = torch.randint(self.modes, (n,), generator=generator)
        noise = torch.randn(n, 2, generator=generator)
        return self.centers[mode] + self.std * noise

    def __repr__(self) -> str:
        return f"GaussianRing(modes={self.modes}, radius={self.radius}, std={self.std})"


def mode_metrics(samples: Tensor, centers: Tensor, std: float, n_std: float = 3.0) -> dict[str, float | int]:
    """Mode coverage and sample quality of generated 2-D points.

    The rule of Srivastava et al., "VEEGAN: Reducing Mode Collapse in GANs using
    Implicit Variational Learning", NeurIPS 2017, Sec. 5.1, used there on Metz et al.'s
    ring (and later reused by e.g. PacGAN, Lin et al. 2018):

    * a sample is **high quality** if it is within ``n_std`` = 3 standard deviations
      (Euclidean distance) of its nearest mode mean;
    * the **number of modes captured** is the number of mixture components whose mean
      is the nearest mean of at least one high-quality sample.

    (For real data from the ring, the expected high-quality share is
    P(‖N(0, σ²I₂)‖ ≤ 3σ) = 1 - e^{-9/2} ≈ 0.989.)

    Args:
        samples: ``[N, 2]`` points.
        centers: ``[K, 2]`` mode means (e.g. :func:`ring_centers` or ``GaussianRing.centers``).
        std: the mixture's per-coordinate standard deviation.
        n_std: the quality radius in units of ``std``.

    Returns:
        ``{"modes_covered": int, "high_quality_share": float}``; share is 0.0 for N = 0.
    """
    if samples.ndim != 2 or samples.shape[1] != 2:
        raise ConfigError("samples", tuple(samples.shape), "must have shape [N, 2]")
    if centers.ndim != 2 or centers.shape[1] != 2:
        raise ConfigError("centers", tuple(centers.shape), "must have shape [K, 2]")
    std = check_range("std", std, 0.0, None, low_open=True)
    if samples.shape[0] == 0:
        return {"modes_covered": 0, "high_quality_share": 0.0}
    s = samples.detach().to("cpu", torch.float64)
    c = centers.detach().to("cpu", torch.float64)
    dist = (s[:, None, :] - c[None, :, :]).square().sum(-1).sqrt()   # [N, K]
    nearest_dist, nearest = dist.min(dim=1)
    good = nearest_dist <= n_std * std
    return {
        "modes_covered": int(nearest[good].unique().numel()),
        "high_quality_share": float(good.double().mean()),
    }
