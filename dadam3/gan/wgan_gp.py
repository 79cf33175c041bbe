"""WGAN-GP (Gulrajani et al. 2017) as the paper's min-max game, one player gradient each.

For node i with generator θ_i and critic α_i, real batch x, noise z and fake G(z)::

    x̂   = ε·x + (1 − ε)·G(z),   ε ~ U[0, 1] per sample
    L_D = mean D(G(z)) − mean D(x) + λ · mean (‖∇_x̂ D(x̂)‖₂ − 1)²,    λ = 10
    L_G = −mean D(G(z))

The game is played SIMULTANEOUSLY: both gradients are taken at the same point
(θ, α) from one draw (x, z, ε) — the operator [∇_θ L_G, ∇_α L_D] that the
optimizers treat as [∇_θ F, −∇_α F] of min_θ max_α F.  Each player's gradient
is taken with its own ``torch.autograd.grad`` so L_G never reaches α's ``.grad``
and L_D never reaches θ's.  ``players="critic"`` / ``"generator"`` give the
single-player halves for alternating (n_critic) schedules.

:func:`wgan_gp_step` runs a node-stacked pair (:class:`~dadam3.gan.stacked.StackedNet` or
:class:`~dadam3.gan.vmapped.VmapNet`, all M nodes at once); the obvious per-node loop over lists
of ordinary modules, the reference the tests compare against and the benchmark's baseline, is
``tests/loop_reference.py`` (``wgan_gp_step_loop``, ``LoopReference``).  Both take the
randomness (z, ε) from the caller and both OVERWRITE ``.grad`` of the active
players' parameters (other parameters are left alone).
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

GP_LAMBDA = 10.0          # the penalty weight of Gulrajani et al. (2017); loop.gp_lambda's default
PLAYERS = ("both", "critic", "generator")


def interpolate(real: torch.Tensor, fake: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """x̂ = ε·x + (1 − ε)·x_fake with ε of shape ``real.shape[:eps.dim()]`` (one per sample)."""
    eps = eps.reshape(*eps.shape, *([1] * (real.dim() - eps.dim())))
    return eps * real + (1 - eps) * fake


def gradient_penalty(grad_interp: torch.Tensor, batch_dims: int = 2) -> torch.Tensor:
    """mean over the batch of (‖∇_x̂ D(x̂)‖₂ − 1)², the norm taken over each sample.

    ``grad_interp`` is ``[M, B, *sample]`` (``batch_dims=2``) → ``[M]``.
    """
    norms = grad_interp.flatten(start_dim=batch_dims).norm(2, dim=-1)
    return ((norms - 1) ** 2).mean(dim=-1)


def wgan_gp_objectives(d_real: torch.Tensor, d_fake: torch.Tensor, grad_interp: torch.Tensor,
                       gp_lambda: float = GP_LAMBDA) -> dict[str, torch.Tensor]:
    """Per-node L_D, L_G and their parts from critic scores ``[M, B]`` and ∇_x̂ D(x̂) ``[M, B, ...]``."""
    d_real_mean, d_fake_mean = d_real.mean(dim=-1), d_fake.mean(dim=-1)
    gp = gradient_penalty(grad_interp)
    return {
        "loss_d": d_fake_mean - d_real_mean + gp_lambda * gp,
        "loss_g": -d_fake_mean,
        "gp": gp,
        "d_real": d_real_mean,
        "d_fake": d_fake_mean,
        "wasserstein": d_real_mean - d_fake_mean,
    }


def _trainable(net: nn.Module) -> list[torch.Tensor]:
    return [p for p in net.parameters() if p.requires_grad]


def _set_grads(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]) -> None:
    for p, g in zip(params, grads):
        if p.grad is None or p.grad.shape != g.shape:
            p.grad = g.detach()
        else:
            p.grad.copy_(g)


def _grad(output: torch.Tensor, inputs: Sequence[torch.Tensor], **kwargs):
    return torch.autograd.grad(output, inputs, allow_unused=True, materialize_grads=True, **kwargs)


def _check_players(players: str) -> tuple[bool, bool]:
    if players not in PLAYERS:
        raise ValueError(f"players={players!r}: must be one of {', '.join(PLAYERS)}")
    return players in ("both", "generator"), players in ("both", "critic")


def _detached(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in values.items()}


def wgan_gp_step(G, D, real: torch.Tensor | None, z: torch.Tensor, eps: torch.Tensor | None,
                 gp_lambda: float = GP_LAMBDA, players: str = "both") -> dict[str, torch.Tensor]:
    """One WGAN-GP gradient evaluation for all M nodes; sets ``.grad`` and returns per-node values.

    G, D: :class:`StackedNet` or :class:`VmapNet`.
    real ``[M, B, ...]``, z ``[M, B, nz]``, eps ``[M, B]`` (real/eps unused for
    ``players="generator"``).  Returns detached ``[M]`` tensors: ``loss_d, loss_g, gp,
    d_real, d_fake, wasserstein`` (``loss_g, d_fake`` only for ``players="generator"``).

    The critic must score samples independently (no BatchNorm in D): real and fake go
    through it as one batch, and the per-sample ∇_x̂ D(x̂) is taken as ∇ of the summed
    scores.
    """
    want_g, want_d = _check_players(players)
    g_params, d_params = _trainable(G), _trainable(D)

    # under torch.autocast the nets compute in bf16; scores and losses are kept in the inputs' dtype
    if not want_d:
        d_fake = D(G(z)).to(z.dtype)
        loss_g = -d_fake.mean(dim=-1)
        _set_grads(g_params, _grad(loss_g.sum(), g_params))
        return _detached({"loss_g": loss_g, "d_fake": d_fake.mean(dim=-1)})

    if want_g:
        fake = G(z)
    else:
        with torch.no_grad():
            fake = G(z)
    x_hat = interpolate(real, fake.detach(), eps).requires_grad_(True)
    # real and fake share one critic pass; x̂ gets its own, so the penalty's double
    # backward runs over B rows per node instead of 3B
    d_real, d_fake = D(torch.cat([real, fake.to(real.dtype)], dim=1)).to(real.dtype).split(real.shape[1], dim=1)
    d_hat = D(x_hat).to(x_hat.dtype)
    (grad_hat,) = torch.autograd.grad(d_hat.sum(), x_hat, create_graph=True)
    out = wgan_gp_objectives(d_real, d_fake, grad_hat, gp_lambda)

    inputs = d_params + [fake] if want_g else d_params
    grads = _grad(out["loss_d"].sum(), inputs)
    _set_grads(d_params, grads[:len(d_params)])
    if want_g:
        # L_D depends on the fake batch only through +mean D(fake) (x̂ uses fake.detach()),
        # so ∂L_G/∂fake = −∂L_D/∂fake: L_G's gradient needs just one more pass, through G.
        _set_grads(g_params, _grad(fake, g_params, grad_outputs=-grads[-1]))
    return _detached(out)


def critic_step(G, D, real, z, eps, gp_lambda: float = GP_LAMBDA) -> dict[str, torch.Tensor]:
    """Only ∇_α L_D into the critic's ``.grad`` (the generator runs without a graph)."""
    return wgan_gp_step(G, D, real, z, eps, gp_lambda, players="critic")


def generator_step(G, D, z) -> dict[str, torch.Tensor]:
    """Only ∇_θ L_G = −∇_θ mean D(G(z)) into the generator's ``.grad``."""
    return wgan_gp_step(G, D, None, z, None, players="generator")
