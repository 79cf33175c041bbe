"""The element-wise vocabulary an algorithm's math is written in, once, for every back end.

An algorithm's ``direction(g, s, *state) -> (direction, *new_state)`` and ``scalars(h, k)``
are pure functions written with arithmetic, comparisons and the functions below. The same
function objects then run

* on whole ``[n, P]`` tensors: eagerly, or fused into one kernel by ``torch.compile`` (CUDA);
* on one number at a time inside numba loops (:mod:`dadam3.optim.fused`): the CPU's fused
  update and the synthetic game's compiled loop (:mod:`dadam3.games.synthetic_kernels`),

because :mod:`dadam3.optim.fused` registers a numba implementation of each name here. An
algorithm that needs another primitive adds it here and its numba twin in
:func:`dadam3.optim.fused.register_twins`.
"""
from __future__ import annotations

import math

import torch


def sqrt(x):
    return torch.sqrt(x)


def maximum(a, b):
    return torch.maximum(a, b)


def sign(x):
    return torch.sign(x)


def adam_scalars(h, k: int) -> tuple:
    """(1 - b1, 1 - b2, 1 / (1 - b1^k), 1 / sqrt(1 - b2^k), eps) for :func:`adam_direction`."""
    return (1.0 - h.beta1, 1.0 - h.beta2, 1.0 / (1.0 - h.beta1 ** k), 1.0 / math.sqrt(1.0 - h.beta2 ** k), h.eps)


def adam_direction(g, s, m, v):
    """Bias-corrected Adam (Kingma & Ba 2015) with ``s`` = :func:`adam_scalars`:
    m_k = b1 m + (1-b1) g, v_k = b2 v + (1-b2) g^2, D = (m_k/(1-b1^k)) / (sqrt(v_k/(1-b2^k)) + eps).
    Returns (D, m_k, v_k)."""
    m = m + s[0] * (g - m)
    v = v + s[1] * (g * g - v)
    return m / (sqrt(v) * s[3] + s[4]) * s[2], m, v


# written only in this vocabulary: numba compiles them as they are (dadam3.optim.fused)
HELPERS = (adam_scalars, adam_direction)
