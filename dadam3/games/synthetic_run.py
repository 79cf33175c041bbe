"""Run any optimizer on the synthetic game and record e_k and R_k (Section 5.1).

Two engines consume the same sample stream and give the same numbers:

* ``torch``: the optimizers of ``dadam3.optim`` on stacked (theta, alpha) tensors, the
  gradient of f by autograd, alpha in a ``maximize`` group. 0.25-0.8 ms per iteration.
* ``numba``: the compiled loop of :mod:`dadam3.games.synthetic_kernels` around the
  optimizer's own math compiled by numba, proven equal to the torch engine in the
  tests. Under 1 us per iteration (``docs/benchmarks.md``).

Metrics at iteration k, with z_bar_k the node average of the point where the k-th
gradients are taken: e_k = ||z_bar_k - z*|| / ||z*|| and
R_k = (1/k) sum_{i<=k} ||grad F(z_bar_i)||^2. Both engines also find the first iteration
with e_k <= :data:`TARGET_ERROR` (e_k computed at every iteration until then, not only at the
logged ones): ``SyntheticResult.first_hit``.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Mapping

import numpy as np
import torch

from dadam3.errors.config import ConfigError, named_as
from dadam3.errors.stops import Diverged, RunStopped
from dadam3.games.synthetic import SyntheticGame, log_iterations
from dadam3.games.synthetic_kernels import Kernel, kernel_for
from dadam3.mixing import LocalMixer
from dadam3.optim import build_optimizer, mixer_for, optimizer_spec

log = logging.getLogger(__name__)

ENGINES = ("numba", "torch", "eager")    # eager: the torch optimizers on their eager engine (dadam3.optim.engines)
CHUNK = 1 << 18
TARGET_ERROR = 1e-2        # first_hit: the first iteration k with e_k <= this


@dataclass
class SyntheticResult:
    iteration: np.ndarray          # logged iterations
    error: np.ndarray              # e_k at those iterations
    avg_grad_sq_norm: np.ndarray   # R_k at those iterations
    final_point: np.ndarray        # [M, 2] gradient point after the last step (params)
    seconds: float
    first_hit: int | None = None   # the first iteration k with e_k <= TARGET_ERROR (None: none so far)
    final_scale: np.ndarray | None = None   # [M, 2] each node's adaptive scale at the end (the class's step_scale)

    def rows(self):
        return zip(self.iteration.tolist(), self.error.tolist(), self.avg_grad_sq_norm.tolist())


class SyntheticDiverged(Diverged):
    """The iterates left the finite numbers; ``result`` holds what was logged before."""

    def __init__(self, message: str, iteration: int, result: SyntheticResult):
        super().__init__(message)
        self.iteration, self.result = iteration, result


class SyntheticInterrupted(RunStopped):
    """``stop()`` became true (SIGINT/SIGTERM): ``result`` holds what was logged before."""

    prefix = "stopped"

    def __init__(self, message: str, iteration: int, result: SyntheticResult, exit_code: int = 130):
        super().__init__(message)
        self.iteration, self.result, self.exit_code = iteration, result, exit_code


def estimate_bytes(nodes: int, iterations: int) -> tuple[int, str]:
    """A lower estimate of what :func:`run_synthetic` allocates, and its largest part: the
    topology's dense ``M x M`` matrices (the graph and W, 8 bytes an entry each) and one chunk
    of samples (:data:`CHUNK` iterations x M nodes: a float64 draw and its boolean)."""
    matrices, draws = 2 * 8 * nodes * nodes, min(CHUNK, iterations) * nodes * 9
    what = (f"the topology's {nodes}x{nodes} matrices" if matrices >= draws
            else f"{min(CHUNK, iterations):,} iterations x {nodes} nodes of samples drawn at once")
    return matrices + draws, what


def run_synthetic(game: SyntheticGame, optimizer: str, hparams: Mapping[str, float], nodes: int, iterations: int,
                  seed: int = 0, topology: str | Mapping[str, Any] = "ring", engine: str = "numba",
                  log_its: np.ndarray | None = None, stop: Callable[[], bool] | None = None) -> SyntheticResult:
    """Run ``iterations`` steps of ``optimizer`` from zero on ``nodes`` nodes.

    ``topology``: a topology's name, or its config group (``name``, ``rounds`` and the
    topology's options). The numba engine draws the samples and checks ``stop`` every
    :data:`CHUNK` iterations.

    Raises :class:`SyntheticDiverged` (naming the first iteration whose point is not
    finite, with the records logged up to there) if the iterates overflow, and
    :class:`SyntheticInterrupted` (the same) once ``stop()`` is true (checked between chunks
    of the numba engine, every iteration of the torch one)."""
    if int(iterations) != iterations or iterations < 1:
        raise ConfigError("iterations", iterations, "must be an integer >= 1")
    if engine not in ENGINES:
        raise ConfigError("engine", engine, f"allowed: {', '.join(ENGINES)}")
    iterations = int(iterations)
    topology_kw = {"name": topology} if isinstance(topology, str) else dict(topology)
    with named_as({"name": "optimizer"}):
        hp = optimizer_spec(optimizer).check_hparams(hparams)
        mixer = mixer_for(optimizer, nodes, topology_kw.pop("name"), topology_kw.pop("rounds", 1), **topology_kw)
    log_its = log_iterations(iterations) if log_its is None else np.asarray(log_its, dtype=np.int64)
    kernel = kernel_for(optimizer_spec(optimizer).cls) if engine == "numba" else None
    if engine == "numba" and kernel is None:
        log.info("optimizer=%s: no compiled loop (numba cannot compile its math); running the torch optimizer "
                 "(engine=torch)", optimizer)
    run = partial(_run_kernel, kernel) if kernel is not None else partial(_run_torch, optimizer,
                                                                          "eager" if engine == "eager" else "auto")
    t0 = time.perf_counter()
    stop = stop or (lambda: False)
    err, r, final, done, hit, scale = run(game, hp, mixer, nodes, iterations, np.random.default_rng(seed), log_its,
                                          stop)
    if done < iterations:
        logged = log_its < done + 1
        so_far = SyntheticResult(log_its[logged], err[logged], r[logged], final, time.perf_counter() - t0, hit, scale)
        if stop() and np.isfinite(final).all():
            raise SyntheticInterrupted(f"after iteration {done} of {iterations}", done, so_far)
        raise SyntheticDiverged(f"the iterates are not finite after iteration {done} "
                                f"(optimizer={optimizer}, lr={hp['lr']:g})", done, so_far)
    return SyntheticResult(log_its, err, r, final, time.perf_counter() - t0, hit, scale)


def node_scale(cls: type, hp: Mapping[str, float], own: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray],
               nodes: int) -> np.ndarray | None:
    """Each node's adaptive scale ``[M, 2]`` (theta, alpha) from the flat buffers, by the optimizer
    class's ``step_scale`` (None for a class without one)."""
    if not hasattr(cls, "step_scale"):
        return None
    h = cls.Hyper(**{name: float(hp[name]) for name in cls.HPARAMS})
    return np.asarray(cls.step_scale(h, own, state), dtype=np.float64).reshape(nodes, 2).copy()


def _mixing_operators(mixer: LocalMixer | None, nodes: int) -> np.ndarray:
    """ops[(k-1) % P] is the iteration-k operator W_k^t, as the LocalMixer applies it."""
    if mixer is None:
        return np.ones((1, 1, 1))
    topo = mixer.topology
    period = topo.period if topo.time_varying else 1
    return np.stack([topo.operator(k) for k in range(1, period + 1)])


def sparse_operators(ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ops, cols, count): ``cols[p, i, :count[p, i]]`` are the columns of row i of ``ops[p]``
    that are not zero, ascending (the compiled loop's mixing sums those only)."""
    P, M, _ = ops.shape
    cols, count = np.zeros((P, M, M), dtype=np.int64), np.zeros((P, M), dtype=np.int64)
    for p in range(P):
        for i in range(M):
            nz = np.flatnonzero(ops[p, i])
            cols[p, i, :len(nz)], count[p, i] = nz, len(nz)
    return np.ascontiguousarray(ops), cols, count


def _run_kernel(kernel: Kernel, game, hp, mixer, nodes, iterations, rng, log_its, stop):
    cls = kernel.cls
    ops = sparse_operators(_mixing_operators(mixer, nodes))
    err, r = np.full(len(log_its), np.nan), np.full(len(log_its), np.nan)
    hit = np.array([TARGET_ERROR, 0.0])                  # (e*, first iteration with e_k <= e*; 0: none yet)
    rec = (game.fne(), np.zeros(1), log_its, err, r, hit)
    h = cls.Hyper(**{name: float(hp[name]) for name in cls.HPARAMS})
    state = tuple(np.full(nodes * 2, float(hp[init]) if isinstance(init, str) else float(init))
                  for init in cls.STATE.values())
    points = tuple(np.zeros(nodes * 2) for _ in range(1 + len(cls.OWN)))   # the params, then the skeleton's
    li, k0 = 0, 0
    while k0 < iterations:
        n = min(CHUNK, iterations - k0)
        is_c = game.draw(rng, n, nodes)
        li, done = kernel.run(h, k0, points, state, is_c, ops, (float(game.c), float(game.k)), rec, li)
        k0 += done
        if done < n or stop():
            break
    scale = node_scale(cls, hp, dict(zip(cls.OWN, points[1:])), dict(zip(cls.STATE, state)), nodes)
    return err, r, points[0].reshape(nodes, 2).copy(), k0, int(hit[1]) or None, scale


def _run_torch(optimizer, engine, game, hp, mixer, nodes, iterations, rng, log_its, stop):
    theta = torch.zeros(nodes, 1, dtype=torch.float64, requires_grad=True)
    alpha = torch.zeros(nodes, 1, dtype=torch.float64, requires_grad=True)
    opt = build_optimizer(optimizer, [{"params": [theta]}, {"params": [alpha], "maximize": True}], mixer,
                          engine=engine, **hp)
    zstar = game.fne()
    err, r = np.full(len(log_its), np.nan), np.full(len(log_its), np.nan)
    acc, li, k, hit = 0.0, 0, 0, None

    def end():
        """(err, r, the final point, k, hit, each node's scale): what the run returns."""
        buffers = {name: torch.cat([f.state[name] for f in opt.flat], dim=1).numpy() for name in opt.flat[0].state}
        scale = node_scale(type(opt), hp, {n: buffers[n] for n in opt.OWN}, {n: buffers[n] for n in opt.STATE}, nodes)
        return err, r, torch.cat([theta, alpha], dim=1).detach().numpy().copy(), k, hit, scale
    while k < iterations:
        is_c = torch.from_numpy(game.draw(rng, min(CHUNK, iterations - k), nodes))
        for row in is_c:
            if stop():
                return end()
            k += 1
            zbar = torch.cat([theta, alpha], dim=1).detach().mean(dim=0).numpy()
            acc += float(np.sum(game.mean_operator(zbar) ** 2))
            e = np.linalg.norm(zbar - zstar) / np.linalg.norm(zstar)
            if hit is None and e <= TARGET_ERROR:
                hit = k
            if li < len(log_its) and log_its[li] == k:
                err[li] = e
                r[li] = acc / k
                li += 1
            opt.step(partial(_set_gradients, game, theta, alpha, row))    # once, or twice (extra-gradient)
            if not (torch.isfinite(theta).all() and torch.isfinite(alpha).all()):
                return end()
    return end()


def _set_gradients(game, theta, alpha, row) -> None:
    """The game's gradient at (theta, alpha) for the sample ``row``, into their ``.grad``."""
    theta.grad, alpha.grad = torch.autograd.grad(game.loss(theta, alpha, row), [theta, alpha])
