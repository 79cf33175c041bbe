"""The Adam family: bias-corrected Adam moments (Kingma & Ba 2015), their defaults and
helpers, and the two algorithms built on them.

DAdam, simultaneous Adam + gossip (plain baseline; single sequence, adapt-then-combine):

    X_k = (X_{k-1} - eta D_k) W^t

DP-OAdam, decentralized parallel optimistic Adam: optimistic Adam of Daskalakis, Ilyas,
Syrgkanis, Zeng, "Training GANs with Optimism", ICLR 2018, Algorithm 1 (bias-corrected), run on
each node and followed by gossip averaging of the parameters (the DP-OAdam baseline of Liu et
al., NeurIPS 2020):

    X_k = (X_{k-1} - 2 eta D_k + eta D_{k-1}) W^t                 (D_0 = 0)

both with

    m_k = beta1 m_{k-1} + (1 - beta1) g_k,      m_hat_k = m_k / (1 - beta1^k)
    v_k = beta2 v_{k-1} + (1 - beta2) g_k^2,    v_hat_k = v_k / (1 - beta2^k)
    D_k = m_hat_k / (sqrt(v_hat_k) + eps)

Single sequence: the gradient is taken at X_k, which the parameters hold. (Adam3 / Dadam3 /
Cadam3, the paper's adaptive momentum with its own max-of-second-moments, is
:mod:`dadam3.optim.adam3`.)
"""
from __future__ import annotations

import math
from typing import NamedTuple

from dadam3.optim.hparams import EPS, LR, HParam
from dadam3.optim.elementwise import helper, sqrt
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.single import SingleSequenceGossip

# defaults: Table 6 (eta = 5e-5, beta1 = 0.5, beta2 = 0.999, eps = 1e-8)
ADAM_HPARAMS = {"lr": LR, "beta1": HParam(0.5, 0.0, 1.0), "beta2": HParam(0.999, 0.0, 1.0), "eps": EPS}
# the synthetic game (Section 5.1): beta1 = 0, beta2 = 1/(1+c^2) (its lr: configs/synthetic.yaml)
ADAM_SYNTHETIC = {"beta1": 0.0, "beta2": "${inv_one_plus_sq:${game.c}}"}


class AdamScalars(NamedTuple):
    """Step k's numbers of :func:`adam_direction`."""
    one_minus_beta1: float
    one_minus_beta2: float
    m_correction: float            # 1 / (1 - b1^k)
    v_correction: float            # 1 / sqrt(1 - b2^k)
    eps: float


@helper
def adam_scalars(h, k: int) -> AdamScalars:
    return AdamScalars(1.0 - h.beta1, 1.0 - h.beta2, 1.0 / (1.0 - h.beta1 ** k), 1.0 / math.sqrt(1.0 - h.beta2 ** k),
                       h.eps)


@helper
def adam_direction(g, a, m, v):
    """Bias-corrected Adam with ``a`` = :func:`adam_scalars`: m_k = b1 m + (1-b1) g,
    v_k = b2 v + (1-b2) g^2, D = (m_k/(1-b1^k)) / (sqrt(v_k/(1-b2^k)) + eps). Returns (D, m_k, v_k)."""
    m = m + a.one_minus_beta1 * (g - m)
    v = v + a.one_minus_beta2 * (g * g - v)
    return m / (sqrt(v) * a.v_correction + a.eps) * a.m_correction, m, v


@optimizer("dadam")
class DAdam(SingleSequenceGossip):
    """Simultaneous (decentralized) Adam; lr, beta1, beta2, eps."""

    HPARAMS = ADAM_HPARAMS
    SYNTHETIC = ADAM_SYNTHETIC

    STATE = {"m": 0.0, "v": 0.0}

    SCALARS = AdamScalars
    scalars = staticmethod(adam_scalars)

    @staticmethod
    def direction(g, a, m, v):
        return adam_direction(g, a, m, v)                    # D_k


@optimizer("dp_oadam")
class DPOAdam(SingleSequenceGossip):
    """Decentralized parallel optimistic Adam (see module docstring); lr, beta1, beta2, eps."""

    HPARAMS = ADAM_HPARAMS
    SYNTHETIC = ADAM_SYNTHETIC

    STATE = {"m": 0.0, "v": 0.0, "d": 0.0}

    SCALARS = AdamScalars
    scalars = staticmethod(adam_scalars)

    @staticmethod
    def direction(g, a, m, v, d):
        d_k, m, v = adam_direction(g, a, m, v)               # D_k
        return 2.0 * d_k - d, m, v, d_k                      # X_{k-1} - eta (2 D_k - D_{k-1})
