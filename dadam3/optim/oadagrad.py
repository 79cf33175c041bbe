"""OAdagrad: optimistic AdaGrad (Liu, Mroueh, Ross, Zhang, Cui, Das, Yang, "Towards
Better Understanding of Adaptive Gradient Algorithms in Generative Adversarial Nets",
ICLR 2020, Algorithm 1):

    z_k = x_{k-1} - eta H_{k-1}^{-1} g_{k-1}
    g_k = stochastic operator at z_k
    H_k = delta I + diag(||g_{1:k, i}||_2)           (per coordinate: sqrt of the sum of squares)
    x_k = x_{k-1} - eta H_k^{-1} g_k

This is the two-sequence structure with D_k = H_k^{-1} g_k = g_k / (delta + sqrt(sum_{s<=k} g_s^2)).
On M > 1 nodes the same gossip W^t as Dadam3 is applied (beyond the paper, which uses
OAdagrad on one node).
"""
from __future__ import annotations

from typing import NamedTuple

from dadam3.optim.hparams import LR, HParam
from dadam3.optim.elementwise import sqrt
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.optimistic import OptimisticGossip


class OAdagradScalars(NamedTuple):
    delta: float


@optimizer("oadagrad")
class OAdagrad(OptimisticGossip):
    """Optimistic AdaGrad (see module docstring); hyper-parameters lr (eta) and delta."""

    HPARAMS = {"lr": LR, "delta": HParam(1e-8, 0.0, None, low_open=True)}   # lr: Table 6's eta

    STATE = {"sum_sq": 0.0}
    SCALARS = OAdagradScalars

    @staticmethod
    def scalars(h, k):
        return OAdagradScalars(h.delta)

    @staticmethod
    def direction(g, a, sum_sq):
        sum_sq = sum_sq + g * g                              # ||g_{1:k,i}||^2
        return g / (sqrt(sum_sq) + a.delta), sum_sq          # D_k = H_k^{-1} g_k
