"""Plain simultaneous baselines on M nodes: every player steps along the operator at
the current point, then the parameters are gossiped (adapt-then-combine).

    DSGD:  X_k = (X_{k-1} - eta g_k) W^t
    DAdam: X_k = (X_{k-1} - eta m_hat_k / (sqrt(v_hat_k) + eps)) W^t
           (Kingma & Ba 2015, bias-corrected moments as in DP-OAdam)
"""
from __future__ import annotations

import torch

from .base import ADAM_HPARAMS, LR, SingleSequenceGossip, adam_direction


class DSGD(SingleSequenceGossip):
    """Simultaneous (decentralized) stochastic gradient descent-ascent; hyper-parameter lr."""

    HPARAMS = {"lr": LR}

    def __init__(self, params, mixer=None, maximize: bool = False, **hparams):
        super().__init__(params, hparams, mixer, maximize)

    def _local_step(self, p, g, st, group, k):
        return p - group["lr"] * g


class DAdam(SingleSequenceGossip):
    """Simultaneous (decentralized) Adam; lr, beta1, beta2, eps."""

    HPARAMS = ADAM_HPARAMS

    def __init__(self, params, mixer=None, maximize: bool = False, **hparams):
        super().__init__(params, hparams, mixer, maximize)

    def _init_state(self, p):
        return {"m": torch.zeros_like(p), "v": torch.zeros_like(p)}

    def _local_step(self, p, g, st, group, k):
        return p - group["lr"] * adam_direction(g, st, group, k)
