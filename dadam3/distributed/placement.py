"""Where the M nodes of a run live: the contiguous block of nodes each rank holds, and
:class:`Placement`, through which the trainer moves per-node values between ranks.

Layout. M nodes over R ranks (R <= M): rank r holds the contiguous block
``node_blocks(M, R)[r]``; block sizes differ by at most one (the first M mod R blocks
hold one node more). A rank's tensors are its rows of the stacked ones, ``[|B|, ...]``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from dadam3.distributed.failures import DistributedTimeout, first_line
from dadam3.distributed.startup import ProcessGroupInfo
from dadam3.errors.config import ConfigError, check_int
from dadam3.topologies import check_nodes


def node_blocks(M: int, R: int) -> list[range]:
    """Contiguous node blocks of R ranks over M nodes; the first M mod R hold one more.

    node_blocks(5, 2) = [range(0, 3), range(3, 5)]."""
    M, R = check_nodes(M), check_int("world_size", R, 1)
    if R > M:
        raise ConfigError("world_size", R, "at most {nodes} ranks: every rank holds at least one node", {"nodes": M})
    q, extra = divmod(M, R)
    return [range(r * q + min(r, extra), (r + 1) * q + min(r + 1, extra)) for r in range(R)]


class Placement:
    """Where the M nodes of a run live: all in this process (the simulator, ``info=None``), or
    rank r of a torch.distributed group holding ``node_blocks(M, R)[r]``. The trainer moves
    per-node values through it: records are gathered to every rank, states and nets to rank 0
    (which logs, samples, evaluates and writes checkpoints), and every decision that ends or
    steers the loop (a NaN on some node, a stop signal) is agreed by all ranks. On one
    process each method returns its argument."""

    def __init__(self, nodes: int, info: ProcessGroupInfo | None = None):
        self.nodes = nodes
        self.distributed = info is not None
        self.rank, self.world_size = (info.rank, info.world_size) if info is not None else (0, 1)
        self.blocks = node_blocks(nodes, self.world_size)
        self.block = self.blocks[self.rank]
        self.is_main = self.rank == 0
        self._device = info.device if info is not None and info.backend == "nccl" else torch.device("cpu")
        self.timeout_s = info.timeout_s if info is not None else None

    def _collective(self, name: str, fn: Callable, *args, **kwargs) -> None:
        """A collective; a peer that died or hung (the group's timeout) becomes DistributedTimeout."""
        try:
            fn(*args, **kwargs)
        except (RuntimeError, dist.DistError) as e:
            raise DistributedTimeout(f"rank {self.rank}: {name} failed: a peer died or hung for longer than "
                                     f"timeout_s={self.timeout_s:g} ({first_line(e)})", self.rank, [],
                                     self.timeout_s) from None

    def gather_rows(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's rows ``[|block|, ...]`` -> all M rows ``[M, ...]`` (CPU), on every rank."""
        if not self.distributed:
            return t
        parts = [None] * self.world_size
        self._collective("all_gather_object", dist.all_gather_object, parts, t.detach().cpu())
        return torch.cat(parts)

    def gather_to_main(self, obj: Any) -> list | None:
        """Every rank's ``obj`` in rank order on rank 0 (None elsewhere)."""
        if not self.distributed:
            return [obj]
        parts = [None] * self.world_size if self.is_main else None
        self._collective("gather_object", dist.gather_object, obj, parts, dst=0)
        return parts

    def all_objects(self, obj: Any) -> list:
        if not self.distributed:
            return [obj]
        parts = [None] * self.world_size
        self._collective("all_gather_object", dist.all_gather_object, parts, obj)
        return parts

    def agree_max(self, values: Sequence[int]) -> list[int]:
        """Element-wise maximum of ``values`` over the ranks (one small all-reduce)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(list(values), dtype=torch.int64, device=self._device)
        self._collective("all_reduce", dist.all_reduce, t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        if not self.distributed:
            return t
        t = t.to(self._device).clone()
        self._collective("all_reduce", dist.all_reduce, t)
        return t

    def from_main(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        self._collective("broadcast_object_list", dist.broadcast_object_list, box, src=0)
        return box[0]
