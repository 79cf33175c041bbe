"""The single-sequence skeleton (adapt-then-combine) of DP-OAdam, DAdam and DSGD: the
gradient is taken at X_{k-1} (the params),

    X_k = (X_{k-1} - eta * direction(G_k, state)) W_k^t
"""
from __future__ import annotations

from dadam3.optim.base import NodeOptimizer
from dadam3.optim.skeletons import PARAMS, Round

STEP = 0                                       # the one phase (a Round's ``phase``)


class SingleSequenceGossip(NodeOptimizer):
    """The single-sequence skeleton (see the module docstring): no buffers of its own."""

    OWN = ()
    START = ()
    ROUNDS = (Round(STEP, PARAMS, 0),)

    @classmethod
    def phase(algorithm, which, g, t, a, p, own, state):
        """Phase ``which`` (STEP, the only one) on one element: (value to mix, new own, new state)."""
        out = algorithm.direction(g * t.sign, a, *state)    # the step direction and the algorithm's new state
        return p - t.lr * out[0], None, out[1:]        # X_{k-1} - eta * direction, mixed into X_k
