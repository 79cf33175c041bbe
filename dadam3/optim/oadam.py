"""DP-OAdam: decentralized parallel optimistic Adam.

Optimistic Adam of Daskalakis, Ilyas, Syrgkanis, Zeng, "Training GANs with Optimism",
ICLR 2018, Algorithm 1 (bias-corrected), run on each node and followed by gossip
averaging of the parameters (the DP-OAdam baseline of Liu et al., NeurIPS 2020):

    m_k = beta1 m_{k-1} + (1 - beta1) g_k,      m_hat_k = m_k / (1 - beta1^k)
    v_k = beta2 v_{k-1} + (1 - beta2) g_k^2,    v_hat_k = v_k / (1 - beta2^k)
    D_k = m_hat_k / (sqrt(v_hat_k) + eps)                         (D_0 = 0)
    X_k = (X_{k-1} - 2 eta D_k + eta D_{k-1}) W^t

Single sequence: the gradient is taken at X_k, which the parameters hold.
"""
from __future__ import annotations

from dadam3.optim.base import ADAM_HPARAMS
from dadam3.optim.elementwise import AdamScalars, adam_direction, adam_scalars
from dadam3.optim.skeletons.single import SingleSequenceGossip


class DPOAdam(SingleSequenceGossip):
    """Decentralized parallel optimistic Adam (see module docstring); lr, beta1, beta2, eps."""

    HPARAMS = ADAM_HPARAMS

    STATE = {"m": 0.0, "v": 0.0, "d": 0.0}

    SCALARS = AdamScalars
    scalars = staticmethod(adam_scalars)

    @staticmethod
    def direction(g, a, m, v, d):
        d_k, m, v = adam_direction(g, a, m, v)               # D_k
        return 2.0 * d_k - d, m, v, d_k                      # X_{k-1} - eta (2 D_k - D_{k-1})
