"""One iteration of the GAN game, apart from the run (no run directory, logs or stops): draw
the batch -> gradients -> clip -> step. Iteration k of the simultaneous game (the paper's,
``n_critic = 1``; :func:`simultaneous_iteration`)::

    x, z, eps  <- the batch: each node's data, noise z ~ N(0, I), weights eps ~ U[0, 1]   ([M, B, ...])
    gradients  <- [grad_theta L_G, grad_alpha L_D] at the parameters (Z_k)   (wgan_gp_step)
    norm       <- per node ||[grad_theta L_G, grad_alpha L_D]||_2            (before clipping)
    clip       <- each node's gradients of each player to norm <= bound     (0: off)
    step_together(optimizers, again)       (the gossip step, params <- the next gradient point)

``again`` (:func:`again`) is the gradient callback: gradients and clip at the current parameters,
on the same batch. A skeleton whose round takes a fresh gradient calls it inside the step
(extra-gradient, :mod:`dadam3.optim.skeletons.extragradient`: two gradients per step); the
others never do. The loop, the stops, the checkpoints and the logs are
:class:`dadam3.run.trainer.WGANTrainer`'s.
"""
from __future__ import annotations

import contextlib
from functools import partial
from typing import Callable, Sequence

import torch

from dadam3.gan.clipping import clip_node_grads_
from dadam3.gan.wgan_gp import GP_LAMBDA, wgan_gp_step
from dadam3.optim import NodeOptimizer, step_together


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
