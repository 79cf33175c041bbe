"""The optimistic skeleton with one adaptive scale for every node, kept in consensus by gossip: the
tracking construction of Chen, Karimi, Zhao & Li, "On the Convergence of Decentralized Adaptive
Gradient Methods" (ACML 2023, arXiv 2109.03194), on Algorithm 2's two sequences.

Each node keeps its own scale Lambda_i,k (the algorithm's state) as Dadam3 does, and a tracked
scale U_i,k that it steps with; U is gossiped and corrected by the node's own change of scale, as
gradient tracking corrects by the change of gradient::

    Z_k     = (X_{k-1} - eta D_{k-1}) W_k^t               (gradient point; the params)
    G_k     = operator at Z_k
    U_{k-1} <- W_k^t U_{k-1}                                (the TRACK round: the scales' gossip)
    (D_k, U_k, state) = direction(G_k, U_{k-1}, state)      U_k = W_k^t U_{k-1} + Lambda_k - Lambda_{k-1}
    X_k     = (X_{k-1} - eta D_k) W_k^t
    Z_{k+1} = (X_k - eta D_k) W_{k+1}^t

with U_0 = 0 (U tracks Lambda - Lambda_0; the algorithm steps with Lambda_0 + U). For a doubly
stochastic W the node average of U_k is the node average of Lambda_k - Lambda_0 at every k (the
tracking invariant), and U_k -> that average as the scales settle. :class:`ExactScaleGossip` is the
ideal reference: its TRACK round is the exact node average 11^T/M (an all-reduce) instead of gossip.

Buffers ``x`` (X), ``d`` (D) and ``u`` (U); the algorithm's ``direction(g, a, u, *state)`` receives
the gossiped U_{k-1} and returns (D_k, U_k, *new_state).
"""
from __future__ import annotations

from dadam3.optim.base import NodeOptimizer
from dadam3.optim.skeletons import PARAMS, Round, into_own

TAKE_X0, TRACK, STEP, EXTRAPOLATE = 0, 1, 2, 3          # the phases (a Round's ``phase``)
OWN = ("x", "d", "u")


class TrackedScaleGossip(NodeOptimizer):
    """The optimistic skeleton with a tracked, shared scale (see the module docstring)."""

    OWN = OWN
    START = (Round(TAKE_X0, PARAMS, 1),)
    ROUNDS = (Round(TRACK, into_own(OWN, "u"), 0), Round(STEP, into_own(OWN, "x"), 0),
              Round(EXTRAPOLATE, PARAMS, 1))

    @classmethod
    def phase(algorithm, which, g, t, a, p, own, state):
        """Phase ``which`` (a round's ``phase``) on one element: (value to mix, new own, new state)."""
        x, d, u = own
        if which == TAKE_X0:            # start(): X_0 = the parameters, mixed into Z_1 = X_0 W_1^t
            return p, (p, d, u), None
        if which == TRACK:              # U_{k-1}, mixed into W_k^t U_{k-1}
            return u, None, None
        if which == STEP:               # D_k, U_k and the algorithm's state; X_{k-1} - eta D_k, mixed into X_k
            out = algorithm.direction(g * t.sign, a, u, *state)
            return x - t.lr * out[0], (x, out[0], out[1]), out[2:]
        return x - t.lr * d, None, None     # EXTRAPOLATE: X_k - eta D_k, mixed into Z_{k+1}


class ExactScaleGossip(TrackedScaleGossip):
    """The ideal reference: U_k = 11^T/M U_{k-1} + Lambda_k - Lambda_{k-1}, one exact node average of
    the scales per step (an all-reduce) where :class:`TrackedScaleGossip` gossips them."""

    ROUNDS = (Round(TRACK, into_own(OWN, "u"), 0, average=True), *TrackedScaleGossip.ROUNDS[1:])
