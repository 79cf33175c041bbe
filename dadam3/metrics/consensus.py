"""Consensus distance of node-stacked parameters."""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


def consensus_distance(params: Iterable[Tensor]) -> float:
    r"""(1/M) Σ_i ‖x_i − x̄‖², summed over all tensors.

    Every tensor has the node axis first, shape ``[M, ...]``; ``x̄`` is the mean over that
    axis. Zero iff all M copies agree. Accumulated in float64. An empty list gives 0.0.
    """
    total: Tensor | None = None
    num_nodes = None
    for p in params:
        if p.dim() == 0:
            raise ValueError("consensus_distance: tensors need a leading node axis, got a scalar")
        if num_nodes is None:
            num_nodes = p.shape[0]
        elif p.shape[0] != num_nodes:
            raise ValueError(f"consensus_distance: node axes differ ({num_nodes} vs {p.shape[0]})")
        x = p.detach().to(torch.float64).reshape(num_nodes, -1)
        sq = (x - x.mean(dim=0, keepdim=True)).square().sum()
        total = sq if total is None else total + sq.to(total.device)
    return 0.0 if total is None else float(total) / num_nodes
