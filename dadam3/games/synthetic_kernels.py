"""Numba kernels that run the optimizers on the 2-D synthetic game at ~100 ns/iteration.

These are a second, compiled spelling of the torch optimizers in ``dadam3.optim``
specialised to the closed-form operator of the synthetic game (one (theta, alpha)
pair per node). They exist only because Fig. 1 needs 10^7 iterations and eager
PyTorch costs ~100 us per step; ``tests/test_synthetic.py`` proves each kernel equal
to its torch optimizer step by step (float64) on the same sample stream, so the
optimizers stay the single source of truth.

Per iteration k (1-based), with ``ops[(k-1) % P]`` the mixing operator W_k^t:

    optimistic family (kind 0 Dadam3, 1 DOSG, 2 OAdagrad):
        G_k at Z_k; D_k = direction; X_k = W_k^t (X_{k-1} - eta D_k); Z_{k+1} = W_{k+1}^t (X_k - eta D_k)
    single-sequence family (kind 3 DP-OAdam, 4 DAdam, 5 DSGD):
        G_k at X_{k-1}; X_k = W_k^t local_step(X_{k-1}, G_k)
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

KINDS = {"dadam3": 0, "dosg": 1, "oadagrad": 2, "dp_oadam": 3, "dadam": 4, "dsgd": 5}


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
def run_optimistic(kind, k0, z, x, d, m, v, lam, is_c, ops, hp, c, kk, zstar, acc,
                   log_its, li, err_out, r_out):
    """Run ``is_c.shape[0]`` iterations from iteration ``k0 + 1``; state arrays are updated
    in place. hp = (lr, beta1, beta2, beta3, eps, beta1_decay, delta). Returns the next
    index into ``log_its``."""
    lr, b1, b2, b3, eps, b1_decay, delta = hp[0], hp[1], hp[2], hp[3], hp[4], hp[5], hp[6]
    M = z.shape[0]
    P = ops.shape[0]
    g = np.empty_like(z)
    tmp = np.empty_like(z)
    for n in range(is_c.shape[0]):
        k = k0 + n + 1
        li = _record(z, k, (c + 2.0) / 3.0, kk, zstar, acc, log_its, li, err_out, r_out)
        _operator(z, is_c[n], c, kk, g)
        if kind == 0:
            b1k = b1 * b1_decay ** (k - 1)
        for i in range(M):
            for p in range(2):
                gi = g[i, p]
                if kind == 0:        # Dadam3
                    m[i, p] = m[i, p] * b1k + (1.0 - b1k) * gi
                    v[i, p] = v[i, p] * b2 + (1.0 - b2) * (gi * gi)
                    lam[i, p] = lam[i, p] * b3 + (1.0 - b3) * max(lam[i, p], v[i, p])
                    d[i, p] = m[i, p] / (math.sqrt(lam[i, p]) + eps)
                elif kind == 1:      # DOSG
                    d[i, p] = gi
                else:                # OAdagrad (v holds the sum of squares)
                    v[i, p] = v[i, p] + gi * gi
                    d[i, p] = gi / (math.sqrt(v[i, p]) + delta)
                tmp[i, p] = x[i, p] - lr * d[i, p]
        _mix(ops[(k - 1) % P], tmp, x)
        for i in range(M):
            for p in range(2):
                tmp[i, p] = x[i, p] - lr * d[i, p]
        _mix(ops[k % P], tmp, z)
    return li


@njit(cache=True)
def run_single(kind, k0, x, d, m, v, is_c, ops, hp, c, kk, zstar, acc, log_its, li, err_out, r_out):
    """Single-sequence family (DP-OAdam, DAdam, DSGD); hp = (lr, beta1, beta2, eps)."""
    lr, b1, b2, eps = hp[0], hp[1], hp[2], hp[3]
    M = x.shape[0]
    P = ops.shape[0]
    g = np.empty_like(x)
    tmp = np.empty_like(x)
    for n in range(is_c.shape[0]):
        k = k0 + n + 1
        li = _record(x, k, (c + 2.0) / 3.0, kk, zstar, acc, log_its, li, err_out, r_out)
        _operator(x, is_c[n], c, kk, g)
        for i in range(M):
            for p in range(2):
                gi = g[i, p]
                if kind == 5:        # DSGD
                    tmp[i, p] = x[i, p] - lr * gi
                    continue
                m[i, p] = m[i, p] * b1 + (1.0 - b1) * gi
                v[i, p] = v[i, p] * b2 + (1.0 - b2) * (gi * gi)
                dk = (m[i, p] / (1.0 - b1 ** k)) / (math.sqrt(v[i, p] / (1.0 - b2 ** k)) + eps)
                if kind == 3:        # DP-OAdam
                    tmp[i, p] = x[i, p] - 2.0 * lr * dk + lr * d[i, p]
                    d[i, p] = dk
                else:                # DAdam
                    tmp[i, p] = x[i, p] - lr * dk
        _mix(ops[(k - 1) % P], tmp, x)
    return li
