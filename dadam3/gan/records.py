"""What a logged record of the training run holds, gathered from the ranks that hold the nodes.

A record at iteration k: the per-node means of the losses and the operator norm over the
logging window (the iterations since the last record on the grid; :class:`LoggingWindow`),
the players' consensus distances, and the bytes each node has sent. Per-node values come as
``<key>_nodes`` (all M nodes, on every rank) beside their mean ``<key>``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from dadam3.checkpoint.contents import stack_node_states
from dadam3.distributed.placement import Placement
from dadam3.gan.finiteness import LOSS_KEYS
from dadam3.gan.stacked import StackedNet
from dadam3.metrics.consensus import consensus_distance

WINDOW_KEYS = (*LOSS_KEYS, "operator_norm")


@dataclass
class LoggingWindow:
    """Running sums (on the device, [nodes] each) of :data:`WINDOW_KEYS` since the last record
    that closed the window, and how many iterations they hold; stored in checkpoints, so a
    resumed run logs the same means as an uninterrupted one."""

    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    count: int = 0

    def add(self, out: dict[str, torch.Tensor]) -> None:
        for key in WINDOW_KEYS:
            if key in out:
                self.sums[key] = self.sums[key] + out[key] if key in self.sums else out[key].clone()
        self.count += 1

    def means(self, placement: Placement) -> dict[str, Any]:
        """``<key>`` and ``<key>_nodes``: the window's mean per node, all M nodes gathered."""
        rec = {}
        for key, total in self.sums.items():
            per_node = placement.gather_rows((total / self.count).double().cpu())
            rec[key] = float(per_node.mean())
            rec[f"{key}_nodes"] = per_node.tolist()
        return rec


def consensus_record(G: StackedNet, D: StackedNet, placement: Placement) -> dict[str, float]:
    """Both players' consensus distances and their sum (a collective when distributed)."""
    distance = partial(consensus_distance, all_sum=placement.all_sum, nodes=placement.nodes) \
        if placement.distributed else consensus_distance
    rec = {"consensus_distance_g": distance(G.parameters()), "consensus_distance_d": distance(D.parameters())}
    rec["consensus_distance"] = rec["consensus_distance_g"] + rec["consensus_distance_d"]
    return rec


def bytes_record(bytes_sent: np.ndarray) -> dict[str, Any]:
    """``bytes_sent_nodes`` ([M], cumulative) and their mean ``bytes_sent``."""
    return {"bytes_sent_nodes": [float(b) for b in bytes_sent], "bytes_sent": float(bytes_sent.mean())}


def gathered_net(net: StackedNet, full: StackedNet | None, placement: Placement) -> StackedNet | None:
    """All M nodes of ``net`` on rank 0, loaded into ``full`` (None on other ranks); a collective
    when distributed, ``net`` itself on one process."""
    if not placement.distributed:
        return net
    parts = placement.gather_to_main({k: v.cpu() for k, v in net.state_dict().items()})
    if parts is None:
        return None
    full.load_state_dict(stack_node_states(parts))
    return full
