"""Dadam3 with one adaptive scale for every node (beyond the paper).

Algorithm 2 divides node i's step by its own scale Lambda_i; gossip mixes the iterates but never
the scales, so with heterogeneous nodes the node average rests where sum_i M_i / sqrt(Lambda_i) = 0,
a 1/sqrt(Lambda)-weighted mean of the nodes' games, not at the FNE z* (docs/topology.md). Here every
node steps with a scale kept in consensus by gradient tracking (Chen, Karimi, Zhao & Li, ACML 2023;
the skeleton :mod:`dadam3.optim.skeletons.shared_scale`)::

    M_k, V_k, Lambda_k as in Algorithm 2 (each node's own, from its own G_k)
    U_k = W^t U_{k-1} + Lambda_k - Lambda_{k-1}            (U_0 = 0; W^t U_{k-1}: the TRACK round)
    D_k = M_k / (sqrt(Lambda_0 + U_k) + eps)

so that for a doubly stochastic W the node average of Lambda_0 + U_k is the node average of Lambda_k.
Lambda is non-decreasing (Lambda_k >= Lambda_{k-1}), so with W >= 0 U stays >= 0 and the square
root is real. Names:

=====================  ==========================================================================
``dadam3_shared``      the tracked scale on the configured topology (gossip of U: one buffer more
                       per step, so 3/2 of Dadam3's bytes)
``cadam3_shared``      the same on the complete graph W = 11^T/M
``dadam3_shared_exact``  the ideal reference: the configured topology for X and Z, one exact node
                       average of U per step (an all-reduce) instead of its gossip
=====================  ==========================================================================

On identical nodes (equal gradients everywhere) U_k = Lambda_k - Lambda_0 and every variant equals
Dadam3. With M = 1 it is Adam3.
"""
from __future__ import annotations

from typing import NamedTuple

from dadam3.optim.adam3 import DADAM3_HPARAMS, DADAM3_SYNTHETIC, dadam3_moments, dadam3_scalars
from dadam3.optim.elementwise import helper, sqrt
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.shared_scale import ExactScaleGossip, TrackedScaleGossip


class SharedScaleScalars(NamedTuple):
    """Step k's numbers: Algorithm 2's (:class:`dadam3.optim.adam3.Dadam3Scalars`) and Lambda_0."""
    one_minus_beta1k: float
    one_minus_beta2: float
    one_minus_beta3: float
    eps: float
    lambda0: float


@helper
def shared_scale_scalars(h, k: int) -> SharedScaleScalars:
    a = dadam3_scalars(h, k)
    return SharedScaleScalars(a.one_minus_beta1k, a.one_minus_beta2, a.one_minus_beta3, a.eps, h.lambda0)


@helper
def shared_scale_direction(g, a, u, m, v, lam):
    """(D_k, U_k, M_k, V_k, Lambda_k) from G_k = ``g``, the gossiped ``u`` = W^t U_{k-1} and the node's
    own state (``a``: :class:`SharedScaleScalars`)."""
    m, v, lam_k = dadam3_moments(g, a, m, v, lam)
    u = u + (lam_k - lam)                                          # U_k = W^t U_{k-1} + Lambda_k - Lambda_{k-1}
    return m / (sqrt(a.lambda0 + u) + a.eps), u, m, v, lam_k       # D_k = M_k / (sqrt(Lambda_0 + U_k) + eps)


@optimizer("cadam3_shared", topology="complete")      # W = 11^T/M
@optimizer("dadam3_shared")
class Dadam3Shared(TrackedScaleGossip):
    """Dadam3 stepping every node with one tracked scale (see the module docstring); Dadam3's
    hyper-parameters (lr, beta1, beta2, beta3, eps, beta1_decay, lambda0)."""

    HPARAMS = DADAM3_HPARAMS
    STATE = {"m": 0.0, "v": 0.0, "lam": "lambda0"}
    SYNTHETIC = DADAM3_SYNTHETIC
    SCALARS = SharedScaleScalars
    scalars = staticmethod(shared_scale_scalars)
    direction = staticmethod(shared_scale_direction)

    @staticmethod
    def step_scale(h, own, state):
        """The scale each node divides its step by, Lambda_0 + U_k (per node)."""
        return h.lambda0 + own["u"]


@optimizer("dadam3_shared_exact")
class Dadam3SharedExact(ExactScaleGossip):
    """The ideal reference of :class:`Dadam3Shared`: one exact node average of U per step (see the
    module docstring); the same hyper-parameters and math."""

    HPARAMS = DADAM3_HPARAMS
    STATE = Dadam3Shared.STATE
    SYNTHETIC = DADAM3_SYNTHETIC
    SCALARS = SharedScaleScalars
    scalars = staticmethod(shared_scale_scalars)
    direction = staticmethod(shared_scale_direction)
    step_scale = Dadam3Shared.step_scale
