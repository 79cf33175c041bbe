"""The two-sequence (optimistic) skeleton of Dadam3, DOSG and OAdagrad:

    Z_k = (X_{k-1} - eta D_{k-1}) W_k^t          (gradient point; the params)
    G_k = operator at Z_k
    D_k = direction(G_k, state)                    (algorithm-specific)
    X_k = (X_{k-1} - eta D_k) W_k^t
    Z_{k+1} = (X_k - eta D_k) W_{k+1}^t

with D_0 = 0, so Z_1 = X_0 W_1^t; X_0 is the parameters' value at ``start()``.
"""
from __future__ import annotations

from dadam3.optim.base import NodeOptimizer
from dadam3.optim.skeletons import PARAMS, Round, into_own

TAKE_X0, STEP, EXTRAPOLATE = 0, 1, 2          # the phases (a Round's ``phase``)


class OptimisticGossip(NodeOptimizer):
    """The optimistic skeleton (see the module docstring): buffers ``x`` (X) and ``d`` (D)."""

    OWN = ("x", "d")
    START = (Round(TAKE_X0, PARAMS, 1),)
    ROUNDS = (Round(STEP, into_own(OWN, "x"), 0), Round(EXTRAPOLATE, PARAMS, 1))

    @classmethod
    def phase(algorithm, which, g, t, a, p, own, state):
        """Phase ``which`` (a round's ``phase``) on one element: (value to mix, new own, new state)."""
        x, d = own
        if which == TAKE_X0:            # start(): X_0 = the parameters, mixed into Z_1 = X_0 W_1^t
            return p, (p, d), None
        if which == STEP:               # D_k and the algorithm's new state; X_{k-1} - eta D_k, mixed into X_k
            out = algorithm.direction(g * t.sign, a, *state)
            return x - t.lr * out[0], (x, out[0]), out[1:]
        return x - t.lr * d, None, None     # EXTRAPOLATE: X_k - eta D_k, mixed into Z_{k+1}
