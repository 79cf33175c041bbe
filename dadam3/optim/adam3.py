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

from typing import NamedTuple

from dadam3.optim.hparams import EPS, LR, HParam
from dadam3.optim.elementwise import helper, maximum, sqrt
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.optimistic import OptimisticGossip

# defaults: Table 6 (eta = 5e-5, beta1 = 0.5, beta2 = 0.999, beta3 = 0.5)
DADAM3_HPARAMS = {"lr": LR, "beta1": HParam(0.5, 0.0, 1.0), "beta2": HParam(0.999, 0.0, 1.0),
                  "beta3": HParam(0.5, 0.0, 1.0),
                  "eps": EPS, "beta1_decay": HParam(1.0, 0.0, 1.0, low_open=True, high_open=False),
                  "lambda0": HParam(0.0)}
# the synthetic game (Section 5.1): beta1 = 0, beta2 = 1/(1+c^2), beta3 = 0.1 (its lr: configs/synthetic.yaml)
DADAM3_SYNTHETIC = {"beta1": 0.0, "beta2": "${inv_one_plus_sq:${game.c}}", "beta3": 0.1}


class Dadam3Scalars(NamedTuple):
    one_minus_beta1k: float        # 1 - beta_{1,k}
    one_minus_beta2: float
    one_minus_beta3: float
    eps: float


@helper
def dadam3_scalars(h, k: int) -> Dadam3Scalars:
    beta1_k = h.beta1 * h.beta1_decay ** (k - 1)
    return Dadam3Scalars(1.0 - beta1_k, 1.0 - h.beta2, 1.0 - h.beta3, h.eps)


@helper
def dadam3_moments(g, a, m, v, lam):
    """Algorithm 2's moments and scale at G_k = ``g`` (``a``: :class:`Dadam3Scalars`): (M_k, V_k, Lambda_k)."""
    m = m + a.one_minus_beta1k * (g - m)                       # M_k = b1k M + (1 - b1k) G_k
    v = v + a.one_minus_beta2 * (g * g - v)                    # V_k = b2 V + (1 - b2) G_k^2
    lam = lam + a.one_minus_beta3 * (maximum(lam, v) - lam)    # Lambda_k = b3 Lambda + (1 - b3) max(Lambda, V_k)
    return m, v, lam


@optimizer("cadam3", topology="complete")      # W = 11^T/M
@optimizer("dadam3")
@optimizer("adam3", single_node=True)
class Dadam3(OptimisticGossip):
    """Decentralized ADAptive Momentum Min-Max (Algorithm 2).

    Args: params (stacked [M, ...]), mixer (None = no communication), maximize (per
    group), and the hyper-parameters of ``HPARAMS``: lr (eta), beta1, beta2, beta3, eps,
    beta1_decay (lambda of the schedule beta1 * lambda^(k-1); 1 keeps beta1 constant),
    lambda0 (initial Lambda_0).
    """

    HPARAMS = DADAM3_HPARAMS
    STATE = {"m": 0.0, "v": 0.0, "lam": "lambda0"}
    SYNTHETIC = DADAM3_SYNTHETIC
    SCALARS = Dadam3Scalars
    scalars = staticmethod(dadam3_scalars)

    @staticmethod
    def direction(g, a, m, v, lam):
        m, v, lam = dadam3_moments(g, a, m, v, lam)
        return m / (sqrt(lam) + a.eps), m, v, lam                  # D_k = M_k / (sqrt(Lambda_k) + eps)

    @staticmethod
    def step_scale(h, own, state):
        """The scale each node divides its step by, Lambda_k (per node): what the shared-scale
        study compares across nodes (:mod:`dadam3.optim.adam3_shared`)."""
        return state["lam"]
