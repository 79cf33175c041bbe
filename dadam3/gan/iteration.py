"""One iteration of the GAN game, apart from the run (no run directory, logs or stops): draw
the batch -> gradients -> clip -> step, both forms. :class:`GANStep` is a run's iteration k -> k + 1
(what the trainer's loop calls): the step-size warm-up, then the simultaneous form (replayed as a
CUDA graph where ``graphs`` allows it) or the alternating one. Iteration k of the simultaneous
game (the paper's, ``n_critic = 1``; :func:`simultaneous_iteration`)::

    x, z, eps  <- the batch: each node's data, noise z ~ N(0, I), weights eps ~ U[0, 1]   ([M, B, ...])
    gradients  <- [grad_theta L_G, grad_alpha L_D] at the parameters (Z_k)   (wgan_gp_step)
    norm       <- per node ||[grad_theta L_G, grad_alpha L_D]||_2            (before clipping)
    clip       <- each node's gradients of each player to norm <= bound     (0: off)
    step_together(optimizers, again)       (the gossip step, params <- the next gradient point)

``again`` (:func:`again`) is the gradient callback: gradients and clip at the current parameters,
on the same batch. A skeleton whose round takes a fresh gradient calls it inside the step
(extra-gradient, :mod:`dadam3.optim.skeletons.extragradient`: two gradients per step); the
others never do.

With ``n_critic > 1`` the critic takes ``n_critic`` steps (fresh batches), then the generator
one (the alternating form, for users who want it; not the paper's). ``bf16`` runs the gradient
evaluation (forward passes, penalty, backward) under ``torch.autocast``; parameters, gradients,
optimizer state and gossip stay float32. The loop, the stops, the checkpoints and the logs are
:class:`dadam3.run.trainer.WGANTrainer`'s.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Protocol, Sequence

import torch

from dadam3.gan.clipping import clip_node_grads_
from dadam3.gan.cuda_graph import GraphedGradients, IterationGraph, iteration_obstacle
from dadam3.gan.finiteness import FinitenessWatch
from dadam3.gan.wgan_gp import GP_LAMBDA, critic_step, generator_step, wgan_gp_step
from dadam3.optim import NodeOptimizer, step_together
from dadam3.optim.base import gradients_per_step


def simultaneous_iteration(G, D, optimizers: Sequence[NodeOptimizer], batch: tuple, gp_lambda: float = GP_LAMBDA,
                           clip_grad_norm: float = 0.0, autocast=contextlib.nullcontext) -> dict[str, torch.Tensor]:
    """One simultaneous iteration on ``batch`` = (real, z, eps): the module docstring's steps, both
    players' ``optimizers`` (the critic's first) stepped together. ``autocast()``: the context the
    gradients are evaluated in. Returns the per-node values [M] (losses, ``operator_norm``)."""
    return gradient_step(partial(batch_gradients, G, D, batch, gp_lambda, autocast), (G, D), optimizers,
                         clip_grad_norm)


def batch_gradients(G, D, batch: tuple, gp_lambda: float = GP_LAMBDA,
                    autocast=contextlib.nullcontext) -> dict[str, torch.Tensor]:
    """Both players' WGAN-GP gradients on ``batch`` at the current parameters (into ``.grad``)."""
    with autocast():
        return wgan_gp_step(G, D, *batch, gp_lambda=gp_lambda)


def gradient_step(gradients: Callable[[], dict], nets, optimizers: Sequence[NodeOptimizer],
                  clip_grad_norm: float = 0.0) -> dict[str, torch.Tensor]:
    """``gradients()`` (sets the players' gradients, returns the per-node values) -> the operator
    norm of ``nets`` -> clip -> the optimizers' step together, with :func:`again` as its callback."""
    out = gradients()
    out["operator_norm"] = operator_norm(nets)
    clip_(nets, clip_grad_norm)
    step_together(optimizers, partial(again, gradients, nets, clip_grad_norm))
    return out


def again(gradients: Callable[[], dict], nets, clip_grad_norm: float = 0.0) -> None:
    """The step's gradient callback: ``gradients()`` at the current parameters, then clip (``nets``)."""
    gradients()
    clip_(nets, clip_grad_norm)


def clip_(nets, bound: float) -> None:
    """``loop.clip_grad_norm`` (0: off): each node's gradients of each net to norm <= ``bound``."""
    if bound:
        for net in nets:
            clip_node_grads_(net, bound)


def operator_norm(nets) -> torch.Tensor:
    """Per node ||[grad of each net]||_2 at the current point: [M]."""
    m = next(iter(nets[0].parameters())).shape[0]
    norms = [torch.linalg.vector_norm(p.grad.detach().reshape(m, -1), dim=1)
             for net in nets for p in net.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(norms), dim=0)


# ------------------------------------------------------------------ a run's step, both forms

@dataclass(frozen=True)
class StepSettings:
    """What a run's step reads (the ``loop`` group's; ``graphs``: ``cuda.graphs``)."""

    batch_size: int
    n_critic: int = 1
    gp_lambda: float = GP_LAMBDA
    clip_grad_norm: float = 0.0
    lr_warmup: int = 0
    bf16: bool = False
    graphs: bool = False


class Players(Protocol):
    """What a run's step plays with (:class:`dadam3.run.state.TrainState` is one)."""

    G: Any
    D: Any
    opt_g: NodeOptimizer
    opt_d: NodeOptimizer
    sampler: Any                    # dadam3.data.NodeSampler: next_batch() -> every node's data
    noise: Any                      # dadam3.data.node_sampler.NodeNoise: each node's z and eps
    mixer: Any


class GANStep:
    """A run's iteration k -> k + 1 on ``players`` (read at every call), ``settings``, on
    ``device`` in ``dtype``; the losses' finiteness noted in ``finite`` (on the device). The
    CUDA-graph choice (``settings.graphs``): the whole simultaneous iteration as one graph where
    the gossip allows it (:func:`~dadam3.gan.cuda_graph.iteration_obstacle`), else the gradient
    evaluation alone where a step takes one gradient; the alternating form runs eagerly."""

    def __init__(self, players: Players, settings: StepSettings, device: torch.device, dtype: torch.dtype,
                 finite: FinitenessWatch):
        self.players, self.s, self.device, self.dtype, self.finite = players, settings, device, dtype, finite
        p = players
        self.nz = p.G.in_shape[0]
        whole = settings.graphs and settings.n_critic == 1 and iteration_obstacle(p.mixer) is None
        self.iteration_graph = (IterationGraph(self._iteration, self._draw, (p.G, p.D), (p.opt_d, p.opt_g), p.mixer)
                                if whole else None)
        # the graphed gradients draw their own batch: not for a second gradient on the same one
        once = gradients_per_step(type(p.opt_d)) == 1
        self.graph = (GraphedGradients(p.G, p.D, self._draw, settings.gp_lambda, settings.bf16)
                      if settings.graphs and not whole and once else None)

    def __call__(self, k: int, between: Callable[[str], None] = lambda where: None) -> dict[str, torch.Tensor]:
        """Iteration k: its per-node values [M] (losses, ``operator_norm``). ``between(where)`` is
        called between the alternating form's critic steps (the run's stop check)."""
        configured = self._warm_up(k)                   # lr_warmup: iteration k's lr, the configured one kept
        try:
            if self.s.n_critic > 1:
                return self._alternating(k, between)
            out = self.iteration_graph() if self.iteration_graph is not None else self._iteration()
            self.finite.note(out, k)                    # the losses' finiteness, noted on the device
            return out
        finally:
            for group, lr in configured:                # the optimizers hold the configured lr again
                group["lr"] = lr

    def _iteration(self, inputs: list[torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The simultaneous iteration's device work, on ``inputs`` (real, z, eps: the graph's
        static buffers) or this iteration's draw: what :class:`IterationGraph` captures."""
        p, bound = self.players, self.s.clip_grad_norm
        opts = (p.opt_d, p.opt_g)
        if inputs is not None:                          # capture needs autocast's weight-cast cache off
            return simultaneous_iteration(p.G, p.D, opts, inputs, self.s.gp_lambda, bound,
                                          partial(self._autocast, cache=False))
        if self.graph is not None:                      # cuda.graphs: the replayed gradients, same values
            return gradient_step(self.graph, (p.G, p.D), opts, bound)
        return simultaneous_iteration(p.G, p.D, opts, self._draw(), self.s.gp_lambda, bound, self._autocast)

    def _warm_up(self, k: int) -> list[tuple[dict, float]]:
        """``lr_warmup=N`` (0: off): iteration k's steps use lr_k = lr · k / N while k < N, for
        both players and every optimizer alike. Returns each param group with its configured lr,
        which :meth:`__call__` puts back after the step: a checkpoint holds the configured lr, so a
        resume mid-warm-up continues the same schedule."""
        n = self.s.lr_warmup
        if not n or k >= n:
            return []
        configured = [(g, g["lr"]) for opt in (self.players.opt_d, self.players.opt_g) for g in opt.param_groups]
        for group, lr in configured:
            group["lr"] = lr * k / n
        return configured

    def _alternating(self, k: int, between: Callable[[str], None]) -> dict[str, torch.Tensor]:
        """``n_critic`` critic steps on fresh batches, then one generator step (values of the last)."""
        p, bound = self.players, self.s.clip_grad_norm
        for _ in range(self.s.n_critic):
            between(f"iteration {k} (n_critic={self.s.n_critic})")     # a long iteration stays interruptible
            critic = partial(self._on, critic_step, *self._draw(), gp_lambda=self.s.gp_lambda)
            out = critic()
            self.finite.note(out, k)
            clip_((p.D,), bound)
            step_together([p.opt_d], partial(again, critic, (p.D,), bound))
        generator = partial(self._on, generator_step, p.noise.normal(self.s.batch_size, self.nz, dtype=self.dtype))
        g_out = generator()
        self.finite.note(g_out, k)
        out["loss_g"] = g_out["loss_g"]
        out["operator_norm"] = operator_norm((p.G, p.D))
        clip_((p.G,), bound)
        step_together([p.opt_g], partial(again, generator, (p.G,), bound))
        return out

    def _on(self, gradients, *batch, **kw) -> dict[str, torch.Tensor]:
        """``gradients(G, D, *batch, **kw)`` (one player's: critic_step, generator_step) under autocast."""
        with self._autocast():
            return gradients(self.players.G, self.players.D, *batch, **kw)

    def _draw(self):
        """Iteration k's batch: every node's data, noise z and interpolation weights eps."""
        B, noise = self.s.batch_size, self.players.noise
        real = self.players.sampler.next_batch().to(self.dtype)
        return real, noise.normal(B, self.nz, dtype=self.dtype), noise.uniform(B, dtype=self.dtype)

    def _autocast(self, cache: bool = True):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.s.bf16, cache_enabled=cache)
