"""The synthetic game's compiled loop: the optimizers on the 2-D game at ~0.1 us/iteration.

Fig. 1 needs 10^7 iterations and eager PyTorch costs ~100 us per step, so the loop over
iterations (the game's closed-form operator, the metrics, the gossip with the time-varying
operators) is compiled by numba. The step itself is not spelled again: it is the
optimizer's own fused update (:func:`dadam3.optim.fused.fused_update`: the algorithm's
``direction`` inside its skeleton's loop body) and its ``scalars``, compiled from the same
functions the torch optimizers run. ``tests/test_synthetic.py`` proves the loop equal to the
torch optimizers step by step (float64) on the same sample stream.

Per iteration k (1-based), with ``ops[(k-1) % P]`` the mixing operator W_k^t:

    optimistic skeleton (Dadam3, DOSG, OAdagrad):
        G_k at Z_k; D_k and X_{k-1} - eta D_k by the update; X_k = W_k^t (X_{k-1} - eta D_k);
        Z_{k+1} = W_{k+1}^t (X_k - eta D_k)
    single-sequence skeleton (DP-OAdam, DAdam, DSGD):
        G_k at X_{k-1}; X_k = W_k^t (X_{k-1} - eta * direction) by the update

An algorithm whose math numba cannot compile runs on the game through the torch optimizers
(``backend=torch``, about 1 ms per iteration): :func:`kernel_for` returns None for it.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from dadam3.optim import fused


class Kernel(NamedTuple):
    """An optimizer class's compiled loop (``run(h, k0, points, state, is_c, ops, game, rec, li)``,
    see :func:`_loops`) and its skeleton."""
    run: Any
    optimistic: bool               # points: (z, x, d), else x
    cls: type                      # the optimizer class (HPARAMS, STATE, Hyper)


def kernel_for(cls) -> Kernel | None:
    """The compiled loop of optimizer class ``cls``, or None when numba cannot compile its math."""
    step = fused.numba_step(cls)
    if step is None:
        return None
    if cls not in _KERNELS:
        optimistic = cls.SKELETON == "optimistic"
        _KERNELS[cls] = Kernel(_loops(*step)[0 if optimistic else 1], optimistic, cls)
    return _KERNELS[cls]


_KERNELS: dict[type, Kernel] = {}


# ---------------------------------------------------------------- the game and the loops

@njit(cache=True)
def _operator(z, is_c, c, kk, g):
    for i in range(z.shape[0]):
        a = c if is_c[i] else 1.0
        g[i, 0] = a + 2.0 * z[i, 0] + kk * z[i, 1]
        g[i, 1] = a + 2.0 * z[i, 1] - kk * z[i, 0]


@njit(cache=True)
def _mix(W, src, dst):
    M = src.shape[0]
    for i in range(M):
        for p in range(src.shape[1]):
            s = 0.0
            for j in range(M):
                s += W[i, j] * src[j, p]
            dst[i, p] = s


@njit(cache=True)
def _record(z, k, mean_a, kk, rec, li):
    """Accumulate ||grad F(z_bar_k)||^2 and, at logged iterations, write e_k and R_k."""
    zstar, acc, log_its, err_out, r_out = rec
    M = z.shape[0]
    t = 0.0
    a = 0.0
    for i in range(M):
        t += z[i, 0]
        a += z[i, 1]
    t /= M
    a /= M
    g0 = mean_a + 2.0 * t + kk * a
    g1 = mean_a + 2.0 * a - kk * t
    acc[0] += g0 * g0 + g1 * g1
    if li < log_its.shape[0] and log_its[li] == k:
        d0 = t - zstar[0]
        d1 = a - zstar[1]
        err_out[li] = math.sqrt(d0 * d0 + d1 * d1) / math.sqrt(zstar[0] ** 2 + zstar[1] ** 2)
        r_out[li] = acc[0] / k
        li += 1
    return li


@njit(cache=True)
def _finite(a):
    for v in a.ravel():
        if not math.isfinite(v):
            return False
    return True


def _loops(update, scalars):
    """The two loops with this algorithm's ``update`` and ``scalars`` compiled in (direct calls
    numba can inline, instead of function values)."""

    @njit
    def scalars_into(s, h, k):
        t = scalars(h, k) + (1.0, -h.lr)                     # the skeleton's: gradient sign, -eta
        for i in range(len(t)):
            s[i] = t[i]

    @njit
    def run_optimistic(h, k0, points, state, is_c, ops, game, rec, li):
        """Run ``is_c.shape[0]`` iterations from iteration ``k0 + 1``; ``points`` = (z, x, d) and
        the flat ``state`` arrays are updated in place; ``game`` = (c, k); ``rec`` = (zstar, acc,
        log_its, err_out, r_out). Returns (next index into ``log_its``, iterations done); stops
        early after the first iteration whose point is not finite."""
        z, x, d = points
        c, kk = game
        P = ops.shape[0]
        g = np.empty_like(z)
        tmp = np.empty_like(z)
        s = np.empty(len(scalars(h, 1)) + 2)
        for n in range(is_c.shape[0]):
            k = k0 + n + 1
            li = _record(z, k, (c + 2.0) / 3.0, kk, rec, li)
            _operator(z, is_c[n], c, kk, g)
            scalars_into(s, h, k)
            update(g.reshape(-1), s, x.reshape(-1), d.reshape(-1), tmp.reshape(-1), *state)  # D_k; X_{k-1} - eta D_k
            _mix(ops[(k - 1) % P], tmp, x)                   # X_k
            for i in range(z.shape[0]):
                for p in range(2):
                    tmp[i, p] = x[i, p] - h.lr * d[i, p]
            _mix(ops[k % P], tmp, z)                         # Z_{k+1}
            if not _finite(z):
                return li, n + 1
        return li, is_c.shape[0]

    @njit
    def run_single(h, k0, x, state, is_c, ops, game, rec, li):
        """Single-sequence skeleton: the update writes the point before mixing; see run_optimistic."""
        c, kk = game
        P = ops.shape[0]
        g = np.empty_like(x)
        tmp = np.empty_like(x)
        s = np.empty(len(scalars(h, 1)) + 2)
        for n in range(is_c.shape[0]):
            k = k0 + n + 1
            li = _record(x, k, (c + 2.0) / 3.0, kk, rec, li)
            _operator(x, is_c[n], c, kk, g)
            scalars_into(s, h, k)
            update(g.reshape(-1), s, x.reshape(-1), tmp.reshape(-1), *state)
            _mix(ops[(k - 1) % P], tmp, x)                   # X_k
            if not _finite(x):
                return li, n + 1
        return li, is_c.shape[0]

    return run_optimistic, run_single
