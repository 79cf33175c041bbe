"""The two skeletons an algorithm runs on: where the gradient is taken, how the step is
formed from the algorithm's direction and when the gossip happens.

Each composes the algorithm's ``direction(g, s, *state) -> (direction, *new_state)`` into the
class's ``update`` on whole flat buffers (eager, or fused by ``torch.compile``); the numba
loop body of the same update is :data:`dadam3.optim.fused.BODIES`. ``s`` ends with the
gradient's sign and -eta (:meth:`~dadam3.optim.base.NodeOptimizer.step_scalars`).
"""
from __future__ import annotations

import torch

from dadam3.optim.base import NodeOptimizer
from dadam3.optim.together import MixRound


def _write_state(state, new) -> None:
    for buf, value in zip(state, new):
        buf.copy_(value)


class OptimisticGossip(NodeOptimizer):
    """The two-sequence structure shared by Dadam3, DOSG and OAdagrad:

        Z_k = (X_{k-1} - eta D_{k-1}) W^t          (gradient point; the params)
        G_k = operator at Z_k
        D_k = direction(G_k, state)                  (algorithm-specific)
        X_k = (X_{k-1} - eta D_k) W^t

    with D_0 = 0, so Z_1 = X_0 W^t; X_0 is the parameters' value at :meth:`start`.
    Per group the state holds ``x`` (X), ``d`` (D) and the algorithm's own buffers, all flat.
    ``update`` writes D_k into ``d``, the algorithm's new state, and ``X_{k-1} - eta D_k`` into
    ``work``; the mixer reads ``work`` for X_k, then ``X_k - eta D_k`` (written into ``work``
    again) for Z_{k+1}.
    """

    SKELETON = "optimistic"

    @staticmethod
    def compose(direction):
        def update(g, s, x, d, work, *state):
            out = direction(g * s[-2], s, *state)             # D_k and the new state
            d.copy_(out[0])
            _write_state(state, out[1:])
            torch.addcmul(x, d, s[-1], out=work)              # X_{k-1} - eta D_k
        return update

    def _start_rounds(self):
        self.started = True
        for flat in self.flat:
            flat.state["x"].copy_(flat.param_buf)                                            # X_0
        yield MixRound([f.state["x"] for f in self.flat], [f.param_buf for f in self.flat], 1)  # Z_1 = X_0 W^t

    def _state_init(self):
        return {"x": 0.0, "d": 0.0, **self.STATE}

    def _rounds(self):
        k = self._update_groups(lambda flat: (flat.state["x"], flat.state["d"], flat.work))
        yield MixRound([f.work for f in self.flat], [f.state["x"] for f in self.flat], k)      # X_k
        for group, flat in zip(self.param_groups, self.flat):
            torch.add(flat.state["x"], flat.state["d"], alpha=-group["lr"], out=flat.work)      # X_k - eta D_k
        yield MixRound([f.work for f in self.flat], [f.param_buf for f in self.flat], k + 1)  # Z_{k+1}


class SingleSequenceGossip(NodeOptimizer):
    """One sequence, adapt-then-combine: the gradient is taken at X_{k-1} (the params),

        X_k = (X_{k-1} - eta * direction(G_k, state)) W^t

    ``update`` writes ``X_{k-1} - eta * direction`` into ``work``, which the mixer reads.
    """

    SKELETON = "single"

    @staticmethod
    def compose(direction):
        def update(g, s, p, work, *state):
            out = direction(g * s[-2], s, *state)             # the step direction and the new state
            _write_state(state, out[1:])
            torch.addcmul(p, out[0], s[-1], out=work)         # X_{k-1} - eta * direction
        return update

    def _rounds(self):
        k = self._update_groups(lambda flat: (flat.param_buf, flat.work))
        yield MixRound([f.work for f in self.flat], [f.param_buf for f in self.flat], k)
