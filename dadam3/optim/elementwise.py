"""The element-wise vocabulary an algorithm's math is written in, once, for every back end.

An algorithm's ``direction(g, a, *state) -> (direction, *new_state)`` and ``scalars(h, k)``
(which returns its named tuple ``a`` of per-step numbers) are pure functions written with
arithmetic, comparisons and the functions below, as are the skeletons' phases
(:mod:`dadam3.optim.skeletons`). The same function objects then run

* on whole ``[n, P]`` tensors: eagerly, or compiled into one kernel by ``torch.compile`` (CUDA);
* on one number at a time inside numba loops (:mod:`dadam3.optim.numba_pass`): the CPU's
  numba pass over the flat buffers and the synthetic game's compiled loop
  (:mod:`dadam3.games.synthetic_kernels`),

because :mod:`dadam3.optim.numba_pass` registers a numba implementation of each name here. An
algorithm that needs another primitive adds it here and its numba twin in
:func:`dadam3.optim.numba_pass.register_twins`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch


def sqrt(x):
    return torch.sqrt(x)


def maximum(a, b):
    return torch.maximum(a, b)


def sign(x):
    return torch.sign(x)


class AdamScalars(NamedTuple):
    """Step k's numbers of :func:`adam_direction`."""
    one_minus_beta1: float
    one_minus_beta2: float
    m_correction: float            # 1 / (1 - b1^k)
    v_correction: float            # 1 / sqrt(1 - b2^k)
    eps: float


def adam_scalars(h, k: int) -> AdamScalars:
    return AdamScalars(1.0 - h.beta1, 1.0 - h.beta2, 1.0 / (1.0 - h.beta1 ** k), 1.0 / math.sqrt(1.0 - h.beta2 ** k),
                       h.eps)


def adam_direction(g, a, m, v):
    """Bias-corrected Adam (Kingma & Ba 2015) with ``a`` = :func:`adam_scalars`:
    m_k = b1 m + (1-b1) g, v_k = b2 v + (1-b2) g^2, D = (m_k/(1-b1^k)) / (sqrt(v_k/(1-b2^k)) + eps).
    Returns (D, m_k, v_k)."""
    m = m + a.one_minus_beta1 * (g - m)
    v = v + a.one_minus_beta2 * (g * g - v)
    return m / (sqrt(v) * a.v_correction + a.eps) * a.m_correction, m, v


# written only in this vocabulary: numba compiles them as they are (dadam3.optim.numba_pass)
HELPERS = (adam_scalars, adam_direction)
