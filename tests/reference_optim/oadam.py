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

import torch

from .base import ADAM_HPARAMS, SingleSequenceGossip, adam_direction


class DPOAdam(SingleSequenceGossip):
    """Decentralized parallel optimistic Adam (see module docstring); lr, beta1, beta2, eps."""

    HPARAMS = ADAM_HPARAMS

    def __init__(self, params, mixer=None, maximize: bool = False, **hparams):
        super().__init__(params, hparams, mixer, maximize)

    def _init_state(self, p):
        return {"m": torch.zeros_like(p), "v": torch.zeros_like(p), "d": torch.zeros_like(p)}

    def _local_step(self, p, g, st, group, k):
        d = adam_direction(g, st, group, k)                                   # D_k
        x_half = p - 2 * group["lr"] * d + group["lr"] * st["d"]
        st["d"] = d
        return x_half
