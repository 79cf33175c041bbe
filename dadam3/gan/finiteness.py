"""The NaN policy: a run stops, naming node and iteration, once a loss or parameter is NaN/Inf.

Finiteness is noted on the device each iteration (:meth:`FinitenessWatch.note`: the first
iteration at which each value stopped being finite, per node) and read back only where
something is about to be written (:meth:`FinitenessWatch.check`: a record, a sample grid, a
checkpoint), so an iteration never waits for the device. Under torch.distributed every rank
stops at the same check, naming the earliest iteration and, at it, the lowest node that went
bad over all ranks.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

import torch

from dadam3.distributed.placement import Placement
from dadam3.errors.stops import Diverged

LOSS_KEYS = ("loss_d", "loss_g", "gp", "wasserstein")
WATCHED = (*LOSS_KEYS, "d_fake")           # d_fake: the critic scores (a non-finite score names no loss)


class TrainingDiverged(Diverged):
    """A loss or parameter became NaN/Inf; the message names the node and iteration."""


class Divergence(NamedTuple):
    """The first non-finite value every rank agreed on."""
    message: str
    node: int
    iteration: int


def first_false(mask: torch.Tensor) -> int | None:
    """Index of the first False in the bool vector ``mask`` (a node), or None if all are True.

    The NaN checks' one host read of a device value (a sync).
    """
    if bool(mask.all()):
        return None
    return int((~mask).nonzero()[0])


class FinitenessWatch:
    """Watches this rank's nodes ``node_ids`` (global indices) of ``placement``."""

    def __init__(self, node_ids: list[int], placement: Placement):
        self.node_ids, self.placement = node_ids, placement
        self.first_bad: dict[str, torch.Tensor] = {}      # per value: [nodes] first non-finite iteration (0: none)

    def note(self, out: dict[str, torch.Tensor], k: int) -> None:
        """Note, on the device, which values of iteration ``k``'s ``out`` are not finite."""
        for key in out:
            if key in WATCHED:
                first = self.first_bad.get(key)
                if first is None:
                    first = self.first_bad[key] = torch.zeros(out[key].shape, dtype=torch.int64,
                                                              device=out[key].device)
                first.masked_fill_(~torch.isfinite(out[key]) & (first == 0), k)

    def check(self, nets: Iterable[tuple[str, torch.nn.Module]], iteration: int) -> Divergence | None:
        """The losses noted since the run (re)started, then the parameters of ``nets`` (name,
        net) after ``iteration``: the first non-finite value all ranks agree on, or None."""
        return (self._agree(*self._losses(iteration)) or self._agree(*self._params(nets, iteration)))

    def _losses(self, iteration: int) -> tuple[int | None, str | None, int]:
        """The earliest iteration, then the lowest node index, at which a noted value went bad."""
        node, message = None, None
        if self.first_bad:
            keys = list(self.first_bad)
            firsts = torch.stack([self.first_bad[key] for key in keys])                       # [keys, M]
            never = torch.iinfo(torch.int64).max
            per_node = torch.where(firsts == 0, never, firsts).min(0).values                  # [M]
            i = first_false((per_node != per_node.min()) | (per_node == never))
            if i is not None:
                node, iteration = self.node_ids[i], int(per_node[i])
                bad = [key for key, f in zip(keys, firsts[:, i].tolist()) if f == iteration and key in LOSS_KEYS]
                message = (f"NaN/Inf in {', '.join(bad) or 'the critic scores'} of node {node} "
                           f"at iteration {iteration}")
        return node, message, iteration

    def _params(self, nets: Iterable[tuple[str, torch.nn.Module]],
                iteration: int) -> tuple[int | None, str | None, int]:
        node, message = None, None
        for name, net in nets:
            for pname, p in net.named_parameters():
                i = first_false(torch.isfinite(p.detach().reshape(len(self.node_ids), -1)).all(1))
                if node is None and i is not None:
                    node = self.node_ids[i]
                    message = f"NaN/Inf in {name} parameter {pname} of node {node} after iteration {iteration}"
        return node, message, iteration

    def _agree(self, node: int | None, message: str | None, iteration: int) -> Divergence | None:
        """The earliest (iteration, node) over all ranks, with its message, or None."""
        M, never = self.placement.nodes, 1 << 62
        code = never if node is None else iteration * M + node                  # (iteration, node) in one int
        (first,) = self.placement.agree_max([never - code])                     # max of never - code: min code
        if first == 0:
            return None
        first_iteration, first_node = divmod(never - first, M)
        message = next(m for n, m in self.placement.all_objects((node, message)) if n == first_node and m)
        return Divergence(message, first_node, first_iteration)
