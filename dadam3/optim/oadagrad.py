"""OAdagrad: optimistic AdaGrad (Liu, Mroueh, Ross, Zhang, Cui, Das, Yang, "Towards
Better Understanding of Adaptive Gradient Algorithms in Generative Adversarial Nets",
ICLR 2020, Algorithm 1):

    z_k = x_{k-1} - eta H_{k-1}^{-1} g_{k-1}
    g_k = stochastic operator at z_k
    H_k = delta I + diag(||g_{1:k, i}||_2)           (per coordinate: sqrt of the sum of squares)
    x_k = x_{k-1} - eta H_k^{-1} g_k

This is the two-sequence structure with D_k = g_k / (delta + sqrt(sum_{s<=k} g_s^2)).
On M > 1 nodes the same gossip W^t as Dadam3 is applied (beyond the paper, which uses
OAdagrad on one node).
"""
from __future__ import annotations

import torch

from dadam3.optim.base import OptimisticGossip


class OAdagrad(OptimisticGossip):
    """Optimistic AdaGrad (see module docstring); ``delta`` is the paper's delta."""

    def __init__(self, params, mixer=None, lr: float = 1e-2, delta: float = 1e-8, maximize: bool = False):
        super().__init__(params, dict(lr=lr, delta=delta, maximize=maximize), mixer)

    def _init_direction_state(self, p, group):
        return {"sum_sq": torch.zeros_like(p)}

    def _direction(self, g, st, group, k, work):
        st["sum_sq"].addcmul_(g, g)                                  # ||g_{1:k,i}||^2
        h = torch.sqrt(st["sum_sq"], out=st["d"]).add_(group["delta"])
        torch.div(g, h, out=h)                                       # H_k^{-1} g_k
