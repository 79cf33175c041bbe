"""Consensus distance of node-stacked parameters."""
from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor


def consensus_distance(params: Iterable[Tensor], all_sum: Callable[[Tensor], Tensor] | None = None,
                       nodes: int | None = None) -> float:
    r"""(1/M) Σ_i ‖x_i − x̄‖², summed over all tensors.

    Every tensor has the node axis first, shape ``[M, ...]``; ``x̄`` is the mean over that
    axis. Zero iff all M copies agree. Accumulated in float64. An empty list gives 0.0.

    Under torch.distributed each process holds its block of rows of ``nodes`` nodes in all;
    ``all_sum`` sums a tensor over the processes (``Placement.all_sum``), for x̄ and the total.
    """
    if all_sum is not None:
        rows = [p.detach().double().reshape(p.shape[0], -1) for p in params]
        x_bar = [all_sum(x.sum(0)) / nodes for x in rows]
        local = sum(((x - m.to(x.device)).square().sum() for x, m in zip(rows, x_bar)),
                    torch.zeros((), dtype=torch.float64))
        return float(all_sum(local.reshape(1))[0]) / nodes
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
