"""DOSG / COSG: decentralized (centralized) optimistic stochastic gradient.

Liu, Zhang, Cui, Das, Yang, "A Decentralized Parallel Algorithm for Training
Generative Adversarial Nets", NeurIPS 2020 (DPOSG). Here in the same two-sequence
form as Dadam3 with the raw stochastic operator in place of D:

    Z_k = (X_{k-1} - eta G_{k-1}) W^t,   G_k at Z_k,   X_k = (X_{k-1} - eta G_k) W^t

with G_0 = 0. COSG is the complete graph W = 11^T/M.
"""
from __future__ import annotations

from dadam3.optim.base import OptimisticGossip


class DOSG(OptimisticGossip):
    """Decentralized optimistic stochastic gradient (see module docstring)."""

    def __init__(self, params, mixer=None, lr: float = 1e-3, maximize: bool = False):
        super().__init__(params, dict(lr=lr, maximize=maximize), mixer)

    def _direction(self, g, st, group, k, work):
        st["d"].copy_(g)  # D_k = G_k, copied so a later zero_grad cannot change it
