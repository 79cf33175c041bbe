"""The run's log: which iterations get a record (:class:`Records`), and what a record holds,
gathered from the ranks that hold the nodes.

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

from dadam3.run.checkpoint.contents import stack_node_states
from dadam3.distributed.placement import Placement
from dadam3.gan.finiteness import LOSS_KEYS
from dadam3.gan.stacked import StackedNet
from dadam3.run.rewind import LoggingGrid
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


class Records:
    """Records of the run into ``logger`` (a :mod:`dadam3.run.loggers` logger; on ranks other
    than 0 a ``MultiLogger()`` of none): one at every iteration on the logging ``grid`` (stored in
    checkpoints: :mod:`dadam3.run.rewind`), at the last one and at every evaluation (:meth:`due`)."""

    def __init__(self, logger, grid: LoggingGrid, placement: Placement):
        self.logger, self.grid, self.placement = logger, grid, placement

    def due(self, k: int, last: bool, evaluating: bool) -> bool:
        return self.grid.on_grid(k) or last or evaluating

    def record(self, k: int, state) -> dict[str, Any]:
        """Iteration k's record of the run's ``state`` (:class:`dadam3.run.state.TrainState`; a
        collective when distributed). The window closes at multiples of ``log_every`` only: an
        off-grid record (last iteration, evaluation) leaves it running, so a run resumed from
        here logs exactly what an uninterrupted one does."""
        pl, mixer = self.placement, state.mixer
        sent = mixer.bytes_sent if mixer is not None else np.zeros(pl.nodes)
        rec = {"iteration": k, "time": state.wall_time(), "status": "running", **state.window.means(pl),
               **consensus_record(state.G, state.D, pl), **bytes_record(sent)}
        if k % self.grid.log_every == 0:
            state.window = LoggingWindow()
        return rec

    def status(self, k: int, status: str, time: float, **fields: Any) -> None:
        """A record that is not a training iteration's: ``resumed``, ``finished``, ``diverged``, ..."""
        self.logger.log({"iteration": k, "status": status, **fields, "time": time}, step=k)

    def state_dict(self, k: int) -> dict[str, Any]:
        """The log's place, for a checkpoint at iteration k: the W&B run it continues, and
        whether k's record is on the grid (:func:`dadam3.run.rewind.record_at_resume_point_kept`)."""
        run_id = next((lg.run_id for lg in getattr(self.logger, "loggers", []) if hasattr(lg, "run_id")), None)
        return {"wandb_run_id": run_id, "record_on_grid": self.grid.on_grid(k)}
