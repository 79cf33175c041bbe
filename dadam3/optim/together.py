"""Stepping several optimizers at once: their gossip rounds side by side, one mixer call per
round for all of them (under torch.distributed one message per neighbour per round for both
players of a game).

An optimizer's step (and its start) is a generator of :class:`MixRound` requests; the
optimizer writes its update between rounds. :func:`step_together` advances the generators of
all optimizers in lock step and mixes their buffers with one call.
"""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

import torch
from torch.optim import Optimizer as NodeOptimizer      # a dadam3.optim.base.NodeOptimizer: its _rounds, mixer, k

class MixRound:
    """One gossip round of a step: ``outs <- W_k^t tensors`` (a plain copy without a mixer)."""

    def __init__(self, tensors: list[torch.Tensor], outs: list[torch.Tensor], k: int):
        self.tensors, self.outs, self.k = tensors, outs, k


@torch.no_grad()
def step_together(optimizers: Sequence[NodeOptimizer]) -> None:
    """Step ``optimizers`` (e.g. the generator's and the critic's) at once: each gossip round
    mixes all of their buffers in ONE mixer call, so under torch.distributed a round sends one
    message per neighbour for all players. Same results as stepping them one by one.

    Optimizers with different mixers, classes or iteration counters are stepped one by one."""
    for opt in optimizers:
        if not opt.started:
            raise RuntimeError(f"{type(opt).__name__}.step() before start(): call start() (or "
                               "start_together) once before the first gradient of a fresh run")
    _together(list(optimizers), lambda opt: opt._rounds())


@torch.no_grad()
def start_together(optimizers: Sequence[NodeOptimizer]) -> None:
    """``start()`` of several optimizers sharing a mixer, with one exchange for all of them."""
    _together(list(optimizers), lambda opt: opt._start_rounds())


def _together(optimizers: list[NodeOptimizer], rounds_of: Callable[[NodeOptimizer], Iterator["MixRound"]]) -> None:
    """Run the optimizers' gossip-round generators side by side, one mixer call per round."""
    first = optimizers[0]
    if any(o.mixer is not first.mixer or type(o) is not type(first) or o.k != first.k for o in optimizers):
        for opt in optimizers:
            _together([opt], rounds_of)
        return
    rounds = [rounds_of(opt) for opt in optimizers]
    while True:
        requests = [next(r, None) for r in rounds]
        if requests[0] is None:
            return
        tensors = [t for req in requests for t in req.tensors]
        outs = [o for req in requests for o in req.outs]
        if first.mixer is None:
            for o, t in zip(outs, tensors):
                o.copy_(t)
        else:
            first.mixer.mix(tensors, requests[0].k, out=outs)


