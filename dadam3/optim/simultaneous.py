"""Plain simultaneous baselines on M nodes: every player steps along the operator at
the current point, then the parameters are gossiped (adapt-then-combine).

    DSGD:  X_k = (X_{k-1} - eta g_k) W^t
    DAdam: X_k = (X_{k-1} - eta m_hat_k / (sqrt(v_hat_k) + eps)) W^t
           (Kingma & Ba 2015, bias-corrected moments as in DP-OAdam)
"""
from __future__ import annotations

from dadam3.optim.base import ADAM_HPARAMS, LR
from dadam3.optim.elementwise import AdamScalars, adam_direction, adam_scalars
from dadam3.optim.skeletons.single import SingleSequenceGossip


class DSGD(SingleSequenceGossip):
    """Simultaneous (decentralized) stochastic gradient descent-ascent; hyper-parameter lr."""

    HPARAMS = {"lr": LR}

    @staticmethod
    def direction(g, a):
        return (g,)                                          # g_k


class DAdam(SingleSequenceGossip):
    """Simultaneous (decentralized) Adam; lr, beta1, beta2, eps."""

    HPARAMS = ADAM_HPARAMS

    STATE = {"m": 0.0, "v": 0.0}

    SCALARS = AdamScalars
    scalars = staticmethod(adam_scalars)

    @staticmethod
    def direction(g, a, m, v):
        return adam_direction(g, a, m, v)                    # D_k
