"""DOSG / COSG: decentralized (centralized) optimistic stochastic gradient.

Liu, Zhang, Cui, Das, Yang, "A Decentralized Parallel Algorithm for Training
Generative Adversarial Nets", NeurIPS 2020 (DPOSG). Here in the same two-sequence
form as Dadam3 with the raw stochastic operator in place of D:

    Z_k = (X_{k-1} - eta G_{k-1}) W^t,   G_k at Z_k,   X_k = (X_{k-1} - eta G_k) W^t

with G_0 = 0. COSG is the complete graph W = 11^T/M.
"""
from __future__ import annotations

from dadam3.optim.hparams import LR
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.optimistic import OptimisticGossip


@optimizer("cosg", topology="complete")      # W = 11^T/M
@optimizer("dosg")
class DOSG(OptimisticGossip):
    """Decentralized optimistic stochastic gradient (see module docstring); hyper-parameter lr."""

    HPARAMS = {"lr": LR}

    @staticmethod
    def direction(g, a):
        return (g,)                                          # D_k = G_k
