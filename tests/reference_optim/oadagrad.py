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

import torch

from .base import LR, HParam, OptimisticGossip


class OAdagrad(OptimisticGossip):
    """Optimistic AdaGrad (see module docstring); hyper-parameters lr (eta) and delta."""

    HPARAMS = {"lr": HParam(1e-2, 0.0, None, low_open=True), "delta": HParam(1e-8, 0.0, None, low_open=True)}

    def __init__(self, params, mixer=None, maximize: bool = False, **hparams):
        super().__init__(params, hparams, mixer, maximize)

    def _init_direction_state(self, p, group):
        return {"sum_sq": torch.zeros_like(p)}

    def _write_direction(self, g, st, group, k, work):
        st["sum_sq"].addcmul_(g, g)                                  # ||g_{1:k,i}||^2
        torch.sqrt(st["sum_sq"], out=work).add_(group["delta"])      # diagonal of H_k
        torch.div(g, work, out=st["d"])                              # D_k = H_k^{-1} g_k
