"""The plain simultaneous baseline on M nodes: every player steps along the operator at
the current point, then the parameters are gossiped (adapt-then-combine).

    DSGD:  X_k = (X_{k-1} - eta g_k) W^t

(DAdam, the same with bias-corrected Adam moments, is in :mod:`dadam3.optim.adam`.)
"""
from __future__ import annotations

from dadam3.optim.hparams import LR
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.single import SingleSequenceGossip


@optimizer("dsgd")
class DSGD(SingleSequenceGossip):
    """Simultaneous (decentralized) stochastic gradient descent-ascent; hyper-parameter lr."""

    HPARAMS = {"lr": LR}

    @staticmethod
    def direction(g, a):
        return (g,)                                          # g_k
