"""``loop.clip_grad_norm``: per node and per player, the node's gradients scaled so that their
global norm is at most the bound (0: off). For node i of a player with stacked parameters
``p_1 … p_n`` (each ``[M, ...]``)::

    n_i = sqrt(sum_j ||p_j.grad[i]||^2),    p_j.grad[i] <- p_j.grad[i] * min(1, bound / n_i)

applied to every method alike, after the operator norm is recorded and before the optimizer
step; one batched computation on the device, no host read.
"""
from __future__ import annotations

import torch

from dadam3.gan.stacked import StackedNet


def clip_node_grads_(net: StackedNet, bound: float) -> None:
    """Scale, in place, each node's gradients of ``net`` to global norm <= ``bound`` (> 0)."""
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    if not grads:
        return
    m = grads[0].shape[0]
    sq = torch.stack([g.detach().reshape(m, -1).pow(2).sum(dim=1) for g in grads]).sum(dim=0)
    # a zero norm gives bound / 0 = inf, clamped to 1: nothing to scale
    scale = (bound / sq.sqrt()).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype).reshape(m, *([1] * (g.dim() - 1))))
