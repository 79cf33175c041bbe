"""Adam3 / Dadam3 / Cadam3: adaptive momentum for min-max problems.

Barazandeh, Huang, Michailidis, "A Decentralized Adaptive Momentum Method for Solving
a Class of Min-Max Optimization Problems", Algorithm 1 (Adam3, one node) and
Algorithm 2 (Dadam3). With mixing matrix W and t gossip rounds, for k = 1..N:

    Z_k      = (X_{k-1} - eta D_{k-1}) W^t
    G_k      = stochastic operator [grad_theta f, -grad_alpha f] at Z_k
    M_k      = beta_{1,k} M_{k-1} + (1 - beta_{1,k}) G_k,      beta_{1,k} = beta1 * lambda^(k-1)
    V_k      = beta2 V_{k-1} + (1 - beta2) G_k * G_k
    Lambda_k = beta3 Lambda_{k-1} + (1 - beta3) max(Lambda_{k-1}, V_k)
    D_k      = M_k / (sqrt(Lambda_k) + eps)
    X_k      = (X_{k-1} - eta D_k) W^t

Adam3 is M = 1 (W = [1]); Cadam3 is the complete graph W = 11^T/M. Initial values:
X_0 = the parameters, M_0 = V_0 = D_0 = 0, Lambda_0 = ``lambda0`` (0 in the paper).
"""
from __future__ import annotations

import torch

from dadam3.optim.base import EPS, LR, UNIT, HParam, OptimisticGossip


class Dadam3(OptimisticGossip):
    """Decentralized ADAptive Momentum Min-Max (Algorithm 2).

    Args: params (stacked [M, ...]), mixer (None = no communication), maximize (per
    group), and the hyper-parameters of ``HPARAMS``: lr (eta), beta1, beta2, beta3, eps,
    beta1_decay (lambda of the schedule beta1 * lambda^(k-1); 1 keeps beta1 constant),
    lambda0 (initial Lambda_0).
    """

    HPARAMS = {"lr": LR, "beta1": UNIT, "beta2": HParam(0.999, 0.0, 1.0), "beta3": HParam(0.1, 0.0, 1.0),
               "eps": EPS, "beta1_decay": HParam(1.0, 0.0, 1.0, low_open=True, high_open=False),
               "lambda0": HParam(0.0)}

    STATE = {"m": 0.0, "v": 0.0, "lam": "lambda0"}

    def scalars(self, group, k):
        beta1_k = group["beta1"] * group["beta1_decay"] ** (k - 1)
        return [1 - beta1_k, 1 - group["beta2"], 1 - group["beta3"], group["eps"]]

    @staticmethod
    def direction(g, s, d, scratch, m, v, lam):
        m.lerp_(g, s[0])                                     # M_k = b1k M + (1 - b1k) G_k
        v.lerp_(g * g, s[1])                                 # V_k = b2 V + (1 - b2) G_k^2
        torch.maximum(lam, v, out=scratch)                   # max(Lambda_{k-1}, V_k)
        lam.lerp_(scratch, s[2])                             # Lambda_k
        torch.sqrt(lam, out=scratch).add_(s[3])              # sqrt(Lambda_k) + eps
        torch.div(m, scratch, out=d)                         # D_k
