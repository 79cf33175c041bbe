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


def take_x0(direction, g, t, a, p, own, state):
    """start(): X_0 = the parameters, mixed into Z_1 = X_0 W_1^t."""
    x, d = own
    return p, (p, d), None


def step(direction, g, t, a, p, own, state):
    """D_k and the algorithm's new state; X_{k-1} - eta D_k, mixed into X_k."""
    x, d = own
    out = direction(g * t.sign, a, *state)
    return x - t.lr * out[0], (x, out[0]), out[1:]


def extrapolate(direction, g, t, a, p, own, state):
    """X_k - eta D_k, mixed into Z_{k+1}."""
    x, d = own
    return x - t.lr * d, None, None


class OptimisticGossip(NodeOptimizer):
    """The optimistic skeleton (see the module docstring): buffers ``x`` (X) and ``d`` (D)."""

    OWN = ("x", "d")
    START = (Round(take_x0, PARAMS, 1),)
    ROUNDS = (Round(step, into_own(OWN, "x"), 0), Round(extrapolate, PARAMS, 1))
