"""The extra-gradient skeleton (Korpelevich 1976; stochastic and with Adam: Gidel et al., ICLR 2019)
of ExtraAdam: two gradients per step, a local extrapolation, then the update from the same point
and one gossip round (adapt-then-combine, as DP-OAdam):

    G_{k-1/2} = operator at X_{k-1}                          (the params; the caller's gradient)
    X_{k-1/2} = X_{k-1} - eta direction(G_{k-1/2}, state)     (local: no gossip; into the params)
    G_k       = operator at X_{k-1/2}                        (the step's gradient callback)
    X_k       = (X_{k-1} - eta direction(G_k, state)) W_k^t

The algorithm's clock ticks twice per step: the extrapolation reads its ``scalars(h, 2k - 1)``,
the update its ``scalars(h, 2k)`` (``a`` is the pair), and both update its state.
"""
from __future__ import annotations

from dadam3.optim.base import NodeOptimizer
from dadam3.optim.skeletons import PARAMS, Round, StepScalars

EXTRAPOLATE, UPDATE = 0, 1                     # the phases (a Round's ``phase``)


class ExtraGradientGossip(NodeOptimizer):
    """The extra-gradient skeleton (see the module docstring): buffer ``x`` (X_{k-1}, kept while
    the parameters hold the extrapolated point)."""

    OWN = ("x",)
    START = ()
    ROUNDS = (Round(EXTRAPOLATE, PARAMS, 0, gossip=False), Round(UPDATE, PARAMS, 0, fresh_gradient=True))

    @classmethod
    def phase(algorithm, which, g, t, a, p, own, state):
        """Phase ``which`` (a round's ``phase``) on one element: (value to mix, new own, new state)."""
        if which == EXTRAPOLATE:        # X_{k-1} kept; X_{k-1} - eta D_{k-1/2}: the params (locally)
            out = algorithm.direction(g * t.sign, a[0], *state)
            return p - t.lr * out[0], (p,), out[1:]
        out = algorithm.direction(g * t.sign, a[1], *state)     # UPDATE: X_{k-1} - eta D_k, mixed into X_k
        return own[0] - t.lr * out[0], None, out[1:]

    @classmethod
    def step_scalars(cls, group, k: int) -> tuple[tuple, StepScalars]:
        """Step k's numbers: the algorithm's ``scalars`` at its ticks 2k - 1 and 2k, flat."""
        first, t = super().step_scalars(group, 2 * k - 1)
        second, _ = super().step_scalars(group, 2 * k)
        return (*first, *second), t

    @classmethod
    def split_scalars(cls, values) -> tuple[tuple, StepScalars]:
        """The flat scalars ``[*SCALARS(2k-1), *SCALARS(2k), *StepScalars]`` as ((two SCALARS), StepScalars)."""
        n = len(cls.SCALARS._fields)
        return (cls.SCALARS(*values[:n]), cls.SCALARS(*values[n:2 * n])), StepScalars(*values[2 * n:])
