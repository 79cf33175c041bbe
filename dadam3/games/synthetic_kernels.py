"""The synthetic game's compiled loop: the optimizers on the 2-D game at under 1 us/iteration.

Fig. 1 needs 10^7 iterations and the torch optimizers cost 0.3-1 ms per iteration there, so the
loop over iterations (the game's closed-form operator, the metrics, the gossip with the
time-varying operators) is compiled by numba. The optimizer is not spelled again: an
iteration runs the optimizer class's skeleton rounds (its ``START`` once, then its ``ROUNDS``),
each the skeleton's ``phase`` (calling the algorithm's ``direction``) over the node buffers
(:func:`dadam3.optim.numba_compile.element_pass`) followed by its mixing, with the algorithm's
own ``scalars``: the functions the torch optimizers run. The rounds and the small helpers are
inlined into the loop (numba's ``inline="always"``), and the only call left, :func:`_record`,
comes at the ~50 logged iterations: a call between compiled functions passes each array with
an atomic reference count up and down, which at M = 5 cost more than the math (Dadam3 ~475 ns
per iteration with a call per round and helper, ~225 without). ``tests/test_games_synthetic.py`` proves the
loop equal to the torch optimizers step by step (float64) on the same sample stream. The loop
of each optimizer class is compiled once and cached on disk (:func:`dadam3.optim.numba_compile.compiled`):
the loop and its rounds are closures over the compiled functions they call (:func:`make_game_loop`,
:func:`make_round`), so every name they use is defined in the source you read.

Buffers are flat, node-major: ``[theta_0, alpha_0, theta_1, alpha_1, ...]``; ``points`` is the
parameters (the gradient point) followed by the skeleton's own buffers; ``ops`` = (W [P, M, M],
cols [P, M, M], count [P, M]): ``W[(m-1) % P]`` is iteration m's mixing operator W_m^t and row i's
nonzero columns are ``cols[., i, :count[., i]]`` (:func:`dadam3.games.synthetic_run.sparse_operators`).

Every skeleton runs compiled, the two-gradient one too (extra-gradient: a local round, ``into <-
work`` without gossip, and a round that takes the gradient again at the parameters, on the
iteration's same sample, before its phase; the algorithm's scalars at its two ticks 2k - 1 and 2k,
as :meth:`~dadam3.optim.skeletons.extragradient.ExtraGradientGossip.step_scalars` gives them). An
algorithm whose math numba cannot compile runs on the game through the torch optimizers
(``engine=torch``): :func:`kernel_for` returns None for it.
"""
from __future__ import annotations

import logging
import math
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from dadam3.compiled.numba_cache import njit_cached
from dadam3.optim.base import gradients_per_step
from dadam3.optim.numba_compile import cache_name, compiled, element_pass, jitted, math_digest
from dadam3.optim.skeletons import StepScalars

log = logging.getLogger(__name__)


class Kernel(NamedTuple):
    """An optimizer class's compiled loop: ``run(h, k0, points, state, is_c, ops, game, rec, li)``
    (see :func:`game_loop`)."""
    run: Any
    cls: type                      # the optimizer class (HPARAMS, STATE, OWN, Hyper)


def kernel_for(cls) -> Kernel | None:
    """The compiled loop of optimizer class ``cls``, or None when numba cannot compile its math (or
    its step takes more than two gradients, or ``start()`` one: no skeleton does)."""
    if gradients_per_step(cls) > 2 or any(rnd.fresh_gradient for rnd in cls.START):
        return None
    if cls not in _KERNELS:
        from numba.core.errors import NumbaError
        again = gradients_per_step(cls) > 1       # a round takes the gradient again: it needs the sample
        loop = make_game_loop(_chain(cls, cls.START), _chain(cls, cls.ROUNDS), step_scalars(cls),
                              _sample if again else _no_sample)
        kernel = Kernel(compiled(loop, cache_name("game_loop", cls), math_digest(cls)), cls)
        try:
            _trial(kernel)
        except NumbaError as e:
            log.info("%s: numba cannot compile its math (%s)", cls.__name__, str(e).strip().splitlines()[0])
            kernel = None
        _KERNELS[cls] = kernel
    return _KERNELS[cls]


_KERNELS: dict[type, Kernel | None] = {}


def _chain(cls, rounds):
    """``rounds`` as one compiled call ``(k, ops, t, a, g, points, state, work, sample)``: each
    round (:func:`make_round`), then the next."""
    then = _no_round
    for rnd in reversed(rounds):
        then = make_round(element_pass(cls, rnd), rnd, then)
    return then


def step_scalars(cls):
    """The algorithm's scalars of step k as its skeleton's phases read them, compiled: ``scalars(h,
    k)``; for a step of two gradients the pair at the algorithm's ticks 2k - 1 and 2k (the
    extra-gradient skeleton's ``step_scalars``)."""
    scalars = jitted(cls.scalars)
    if gradients_per_step(cls) == 1:
        return scalars

    @njit(inline="always")
    def two_ticks(h, k):
        return scalars(h, 2 * k - 1), scalars(h, 2 * k)
    return two_ticks


def _trial(kernel: Kernel) -> None:
    """Zero iterations on one node with the argument types of a real run: compiles (or loads)
    the loop or raises numba's error."""
    cls = kernel.cls
    h = cls.Hyper(**{name: float(hp.default) for name, hp in cls.HPARAMS.items()})
    points = tuple(np.zeros(2) for _ in range(1 + len(cls.OWN)))
    state = tuple(np.zeros(2) for _ in cls.STATE)
    rec = (np.ones(2), np.zeros(1), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(2))
    ops = (np.ones((1, 1, 1)), np.zeros((1, 1, 1), dtype=np.int64), np.ones((1, 1), dtype=np.int64))
    kernel.run(h, 0, points, state, np.zeros((0, 1), dtype=np.bool_), ops, (1.0, 0.0), rec, 0)


# ---------------------------------------------------------------- the game and the loop

def make_game_loop(start, step, scalars, sample):
    """The game's loop with the rounds of ``start()`` (``start``) and of a step (``step``), both
    :func:`_chain` s, the algorithm's ``scalars`` of a step (:func:`step_scalars`), and ``sample``:
    what the rounds get of the iteration's sample (:func:`_sample`, or :func:`_no_sample` for a step
    of one gradient: no array handed to the rounds, so the loop is what it was without them)."""

    def game_loop(h, k0, points, state, is_c, ops, game, rec, li):
        """Run ``is_c.shape[0]`` iterations from iteration ``k0 + 1`` (``start`` first when k0 = 0);
        ``points`` and the flat ``state`` arrays are updated in place; ``game`` = (c, k); ``rec`` =
        (zstar, acc, log_its, err_out, r_out, hit): ``hit`` = (e*, first iteration k with e_k <= e*,
        0.0 while none), e_k computed at every iteration until then, exactly as at a logged one
        (:func:`_error`). Returns (next index into ``log_its``, iterations done); stops early after
        the first iteration whose point is not finite."""
        p = points[0]
        c, kk = game
        acc, log_its, zstar, hit = rec[1], rec[2], rec[0], rec[5]
        g = np.zeros_like(p)
        work = np.empty_like(p)
        t = StepScalars(1.0, h.lr)                          # the game's operator is already G: sign +1
        if k0 == 0:
            start(0, ops, t, scalars(h, 1), g, points, state, work, None)
        total = acc[0]                                      # sum_{i<=k} ||grad F(z_bar_i)||^2
        for n in range(is_c.shape[0]):
            k = k0 + n + 1
            theta, alpha, sq = _mean_grad_sq(p, (c + 2.0) / 3.0, kk)
            total += sq
            if hit[1] == 0.0 and _error(theta, alpha, zstar) <= hit[0]:
                hit[1] = k
            if li < log_its.shape[0] and log_its[li] == k:
                _record(theta, alpha, total / k, rec, li)
                li += 1
            _operator(p, is_c[n], c, kk, g)
            step(k, ops, t, scalars(h, k), g, points, state, work, sample(is_c, n, c, kk))
            if not _finite(p):
                acc[0] = total
                return li, n + 1
        acc[0] = total
        return li, is_c.shape[0]
    return game_loop


def make_round(element_pass, rnd, then):
    """One round ``rnd`` of step k, compiled to be inlined: its phase over the node buffers
    (``element_pass``), ``points[into] <- W_{k+offset}^t work`` (the exact node average for an
    ``average`` round, ``work`` itself for a local one), then ``then`` (the next round); a
    ``fresh_gradient`` round takes the gradient again at the parameters first, on the iteration's
    ``sample`` (:func:`_sample`). Each kind is a closure of its own: a round of one kind runs
    nothing of the others (no helper handed the buffers: each would count their references)."""
    into, offset = rnd.into, rnd.offset
    if rnd.fresh_gradient:
        inner = make_round(element_pass, rnd._replace(fresh_gradient=False), then)

        @njit(inline="always")
        def fresh_round(k, ops, t, a, g, points, state, work, sample):
            _operator(points[0], sample[0], sample[1], sample[2], g)
            inner(k, ops, t, a, g, points, state, work, sample)
        return fresh_round

    if rnd.average:
        @njit(inline="always")
        def average_round(k, ops, t, a, g, points, state, work, sample):
            element_pass(g, t, a, points[0], points[1:], state, work)
            _average(work, points[into])
            then(k, ops, t, a, g, points, state, work, sample)
        return average_round

    if not rnd.gossip:
        @njit(inline="always")
        def local_round(k, ops, t, a, g, points, state, work, sample):
            element_pass(g, t, a, points[0], points[1:], state, work)
            points[into][:] = work
            then(k, ops, t, a, g, points, state, work, sample)
        return local_round

    @njit(inline="always")
    def game_round(k, ops, t, a, g, points, state, work, sample):
        element_pass(g, t, a, points[0], points[1:], state, work)
        _mix(ops, (k + offset - 1) % ops[0].shape[0], work, points[into])
        then(k, ops, t, a, g, points, state, work, sample)
    return game_round


@njit(inline="always")
def _no_round(k, ops, t, a, g, points, state, work, sample):
    pass


@njit(inline="always")
def _sample(is_c, n, c, kk):
    """Iteration n's sample, as a second gradient needs it: which nodes draw a = c, c and k."""
    return is_c[n], c, kk


@njit(inline="always")
def _no_sample(is_c, n, c, kk):
    return None


@njit(inline="always")
def _operator(z, is_c, c, kk, g):
    for i in range(is_c.shape[0]):
        a = c if is_c[i] else 1.0
        g[2 * i] = a + 2.0 * z[2 * i] + kk * z[2 * i + 1]
        g[2 * i + 1] = a + 2.0 * z[2 * i + 1] - kk * z[2 * i]


@njit(inline="always")
def _mix(ops, phase, src, dst):
    """dst <- W src with W = ``ops[0][phase]``, node by node; row i sums its nonzero entries only
    (``ops[1][phase, i, :ops[2][phase, i]]``, ascending column index): the dense row's sum with the
    exact zeros left out, which add nothing (+0.0 or -0.0 to a sum started at +0.0), so the same
    float64 result at the cost of the graph's edges rather than M^2 (64 nodes on a ring: 3 of 64)."""
    W, cols, count = ops[0][phase], ops[1][phase], ops[2][phase]
    M = W.shape[0]
    for i in range(M):
        for q in range(2):
            s = 0.0
            for c in range(count[i]):
                j = cols[i, c]
                s += W[i, j] * src[2 * j + q]
            dst[2 * i + q] = s


@njit(inline="always")
def _average(src, dst):
    """dst <- 11^T/M src, node by node: each coordinate's sum over the nodes in ascending node index,
    times 1/M, as the torch mixers' ordered sum with W = 11^T/M computes it."""
    M = src.shape[0] // 2
    w = 1.0 / M
    for q in range(2):
        s = 0.0
        for j in range(M):
            s += w * src[2 * j + q]
        for i in range(M):
            dst[2 * i + q] = s


@njit(inline="always")
def _mean_grad_sq(z, mean_a, kk):
    """The node average z_bar = (theta, alpha) and ||grad F(z_bar)||^2."""
    M = z.shape[0] // 2
    t = 0.0
    a = 0.0
    for i in range(M):
        t += z[2 * i]
        a += z[2 * i + 1]
    t /= M
    a /= M
    g0 = mean_a + 2.0 * t + kk * a
    g1 = mean_a + 2.0 * a - kk * t
    return t, a, g0 * g0 + g1 * g1


@njit_cached
def _record(t, a, r, rec, li):
    """At a logged iteration: e_k of z_bar = (t, a) into ``err_out[li]``, R_k = ``r`` into ``r_out[li]``."""
    err_out, r_out = rec[3], rec[4]
    err_out[li] = _error(t, a, rec[0])
    r_out[li] = r


@njit(inline="always")
def _error(t, a, zstar):
    """e_k = ||z_bar - z*|| / ||z*|| of z_bar = (t, a)."""
    d0 = t - zstar[0]
    d1 = a - zstar[1]
    return math.sqrt(d0 * d0 + d1 * d1) / math.sqrt(zstar[0] ** 2 + zstar[1] ** 2)


@njit(inline="always")
def _finite(a):
    for v in a:
        if not math.isfinite(v):
            return False
    return True
