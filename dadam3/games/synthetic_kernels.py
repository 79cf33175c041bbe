"""Numba kernels that run the optimizers on the 2-D synthetic game at ~100 ns/iteration.

These are a second, compiled spelling of the torch optimizers in ``dadam3.optim``
specialised to the closed-form operator of the synthetic game (one (theta, alpha)
pair per node). They exist only because Fig. 1 needs 10^7 iterations and eager
PyTorch costs ~100 us per step; ``tests/test_synthetic.py`` proves each kernel equal
to its torch optimizer step by step (float64) on the same sample stream, so the
optimizers stay the single source of truth.

Each algorithm is one :class:`Kernel`: its step (``step(g, x, out, state, k, hp)``), the
named scalars it reads (a namedtuple, so the step writes ``hp.beta1``) and its initial
state arrays. The loops are shared; per iteration k (1-based), with ``ops[(k-1) % P]``
the mixing operator W_k^t:

    optimistic family (Dadam3, DOSG, OAdagrad; step writes D_k into ``out``):
        G_k at Z_k; D_k = step; X_k = W_k^t (X_{k-1} - eta D_k); Z_{k+1} = W_{k+1}^t (X_k - eta D_k)
    single-sequence family (DP-OAdam, DAdam, DSGD; step writes the point before mixing):
        G_k at X_{k-1}; X_k = W_k^t step(X_{k-1}, G_k)

:data:`KERNELS` maps each optimizer class to its kernel; an optimizer without one runs on the
game through the torch optimizers instead (``backend=torch``, about 1 ms per iteration).
"""
from __future__ import annotations

import math
from collections import namedtuple
from typing import Any, Callable, NamedTuple

import numpy as np
from numba import njit

from dadam3.optim import DOSG, DSGD, DAdam, Dadam3, DPOAdam, OAdagrad

AdamScalars = namedtuple("AdamScalars", "lr beta1 beta2 eps")
Adam3Scalars = namedtuple("Adam3Scalars", "lr beta1 beta2 beta3 eps beta1_decay")
AdagradScalars = namedtuple("AdagradScalars", "lr delta")
LrScalars = namedtuple("LrScalars", "lr")


class Kernel(NamedTuple):
    step: Any                                               # a numba function, see the module docstring
    scalars: type                                           # namedtuple of the hyper-parameters it reads
    init_state: Callable[[dict, tuple], tuple]              # (hparams, shape) -> state arrays
    optimistic: bool                                        # family: run_optimistic, else run_single


def _zeros(n: int):
    return lambda hp, shape: tuple(np.zeros(shape) for _ in range(n))


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
def _record(z, k, mean_a, kk, zstar, acc, log_its, li, err_out, r_out):
    """Accumulate ||grad F(z_bar_k)||^2 and, at logged iterations, write e_k and R_k."""
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


@njit(cache=True)
def run_optimistic(direction, k0, z, x, d, state, is_c, ops, hp, c, kk, zstar, acc, log_its, li, err_out, r_out):
    """Run ``is_c.shape[0]`` iterations from iteration ``k0 + 1``; ``z, x, d, state`` are
    updated in place. Returns (next index into ``log_its``, iterations done); stops early
    after the first iteration whose point is not finite."""
    P = ops.shape[0]
    g = np.empty_like(z)
    tmp = np.empty_like(z)
    for n in range(is_c.shape[0]):
        k = k0 + n + 1
        li = _record(z, k, (c + 2.0) / 3.0, kk, zstar, acc, log_its, li, err_out, r_out)
        _operator(z, is_c[n], c, kk, g)
        direction(g, x, d, state, k, hp)                     # D_k
        for i in range(z.shape[0]):
            for p in range(2):
                tmp[i, p] = x[i, p] - hp.lr * d[i, p]
        _mix(ops[(k - 1) % P], tmp, x)                       # X_k
        for i in range(z.shape[0]):
            for p in range(2):
                tmp[i, p] = x[i, p] - hp.lr * d[i, p]
        _mix(ops[k % P], tmp, z)                             # Z_{k+1}
        if not _finite(z):
            return li, n + 1
    return li, is_c.shape[0]


@njit(cache=True)
def run_single(local_step, k0, x, state, is_c, ops, hp, c, kk, zstar, acc, log_its, li, err_out, r_out):
    """Single-sequence family: ``local_step`` writes the point before mixing; see run_optimistic."""
    P = ops.shape[0]
    g = np.empty_like(x)
    tmp = np.empty_like(x)
    for n in range(is_c.shape[0]):
        k = k0 + n + 1
        li = _record(x, k, (c + 2.0) / 3.0, kk, zstar, acc, log_its, li, err_out, r_out)
        _operator(x, is_c[n], c, kk, g)
        local_step(g, x, tmp, state, k, hp)
        _mix(ops[(k - 1) % P], tmp, x)                       # X_k
        if not _finite(x):
            return li, n + 1
    return li, is_c.shape[0]


# ---------------------------------------------------------------- optimistic directions: write D_k

@njit(cache=True)
def dadam3_direction(g, x, d, state, k, hp):
    m, v, lam = state
    b1k = hp.beta1 * hp.beta1_decay ** (k - 1)
    for i in range(g.shape[0]):
        for p in range(2):
            m[i, p] = m[i, p] * b1k + (1.0 - b1k) * g[i, p]
            v[i, p] = v[i, p] * hp.beta2 + (1.0 - hp.beta2) * (g[i, p] * g[i, p])
            lam[i, p] = lam[i, p] * hp.beta3 + (1.0 - hp.beta3) * max(lam[i, p], v[i, p])
            d[i, p] = m[i, p] / (math.sqrt(lam[i, p]) + hp.eps)


@njit(cache=True)
def dosg_direction(g, x, d, state, k, hp):
    d[:] = g


@njit(cache=True)
def oadagrad_direction(g, x, d, state, k, hp):
    (sum_sq,) = state
    for i in range(g.shape[0]):
        for p in range(2):
            sum_sq[i, p] += g[i, p] * g[i, p]
            d[i, p] = g[i, p] / (math.sqrt(sum_sq[i, p]) + hp.delta)


# ---------------------------------------------------------------- single-sequence steps: the point before mixing

@njit(cache=True)
def _adam_direction(gi, m, v, i, p, c1, c2, hp):
    """Bias-corrected Adam direction of one coordinate, updating m, v; c1 = 1 - beta1^k,
    c2 = 1 - beta2^k (computed once per iteration: two pow calls per coordinate doubled
    DP-OAdam's time)."""
    m[i, p] = m[i, p] * hp.beta1 + (1.0 - hp.beta1) * gi
    v[i, p] = v[i, p] * hp.beta2 + (1.0 - hp.beta2) * (gi * gi)
    return (m[i, p] / c1) / (math.sqrt(v[i, p] / c2) + hp.eps)


@njit(cache=True)
def dp_oadam_step(g, x, out, state, k, hp):
    m, v, d_prev = state
    c1, c2 = 1.0 - hp.beta1 ** k, 1.0 - hp.beta2 ** k
    for i in range(g.shape[0]):
        for p in range(2):
            dk = _adam_direction(g[i, p], m, v, i, p, c1, c2, hp)
            out[i, p] = x[i, p] - 2.0 * hp.lr * dk + hp.lr * d_prev[i, p]
            d_prev[i, p] = dk


@njit(cache=True)
def dadam_step(g, x, out, state, k, hp):
    m, v = state
    c1, c2 = 1.0 - hp.beta1 ** k, 1.0 - hp.beta2 ** k
    for i in range(g.shape[0]):
        for p in range(2):
            out[i, p] = x[i, p] - hp.lr * _adam_direction(g[i, p], m, v, i, p, c1, c2, hp)


@njit(cache=True)
def dsgd_step(g, x, out, state, k, hp):
    for i in range(g.shape[0]):
        for p in range(2):
            out[i, p] = x[i, p] - hp.lr * g[i, p]


KERNELS: dict[type, Kernel] = {
    Dadam3: Kernel(dadam3_direction, Adam3Scalars,
                   lambda hp, shape: (np.zeros(shape), np.zeros(shape), np.full(shape, hp["lambda0"])), True),
    DOSG: Kernel(dosg_direction, LrScalars, _zeros(1), True),   # numba cannot type an empty tuple: one unused array
    OAdagrad: Kernel(oadagrad_direction, AdagradScalars, _zeros(1), True),
    DPOAdam: Kernel(dp_oadam_step, AdamScalars, _zeros(3), False),
    DAdam: Kernel(dadam_step, AdamScalars, _zeros(2), False),
    DSGD: Kernel(dsgd_step, LrScalars, _zeros(1), False),
}
