"""Plain simultaneous baselines on M nodes: every player steps along the operator at
the current point, then the parameters are gossiped (adapt-then-combine).

    DSGD:  X_k = (X_{k-1} - eta g_k) W^t
    DAdam: X_k = (X_{k-1} - eta m_hat_k / (sqrt(v_hat_k) + eps)) W^t
           (Kingma & Ba 2015, bias-corrected moments as in DP-OAdam)
"""
from __future__ import annotations

import torch

from dadam3.optim.base import SingleSequenceGossip, adam_direction


class DSGD(SingleSequenceGossip):
    """Simultaneous (decentralized) stochastic gradient descent-ascent."""

    def __init__(self, params, mixer=None, lr: float = 1e-3, maximize: bool = False):
        super().__init__(params, dict(lr=lr, maximize=maximize), mixer)

    def _local_step(self, p, g, st, group, k):
        return p - group["lr"] * g


class DAdam(SingleSequenceGossip):
    """Simultaneous (decentralized) Adam."""

    def __init__(self, params, mixer=None, lr: float = 1e-3, beta1: float = 0.5, beta2: float = 0.999,
                 eps: float = 1e-8, maximize: bool = False):
        super().__init__(params, dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, maximize=maximize), mixer)
        for p in self._params():
            self.state[p].update(m=torch.zeros_like(p), v=torch.zeros_like(p))

    def _local_step(self, p, g, st, group, k):
        return p - group["lr"] * adam_direction(g, st, group, k)
