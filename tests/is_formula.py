r"""The Inception Score formula on given class probabilities: the oracle the metrics tests
compare torch-fidelity's IS with (the package itself always takes IS from torch-fidelity).

Paper Sec. 5.3 (Salimans et al., 2016)::

    log IS = E_{x ~ p_g} KL( p(y|x) || p(y) ),     p(y) = E_{x ~ p_g} p(y|x)
"""
from __future__ import annotations

import torch
from torch import Tensor

from dadam3.errors.config import ConfigError


def inception_score_from_probs(probs: Tensor, splits: int = 10) -> tuple[float, float]:
    """IS = exp(mean_x KL(p(y|x) || p(y))) per split; returns (mean, std) over splits.

    ``probs`` is ``[N, K]`` with rows summing to 1. Split ``i`` holds rows
    ``i*N//splits : (i+1)*N//splits`` (torch-fidelity's chunking, no shuffling here) and
    ``p(y)`` is that split's mean row. ``std`` is the population std (numpy's default, as
    torch-fidelity and the original TF code report it). ``0·log 0`` is taken as 0, so
    one-hot predictions are fine.
    """
    if probs.dim() != 2:
        raise ValueError(f"probs must be [N, K], got shape {tuple(probs.shape)}")
    n = probs.shape[0]
    if not 1 <= splits <= n:
        raise ConfigError("splits", splits, f"must be in [1, {n}] (number of samples)")
    p = probs.detach().to(torch.float64)
    scores = []
    for i in range(splits):
        chunk = p[i * n // splits:(i + 1) * n // splits]
        marginal = chunk.mean(dim=0, keepdim=True)
        kl = (torch.special.xlogy(chunk, chunk) - torch.special.xlogy(chunk, marginal)).sum(dim=1)
        scores.append(kl.mean().exp())
    s = torch.stack(scores)
    return float(s.mean()), float(s.std(correction=0))
