"""The obvious M-node trainer: a Python loop over M ordinary (G_i, D_i) modules (a test and
benchmark helper, not part of the package: ``tests/`` imports it as ``loop_reference``, ``scripts/``
put ``tests/`` on ``sys.path`` for it).

Kept as the reference the batched path is tested against (float64) and benchmarked
against: :func:`wgan_gp_step_loop` is :func:`dadam3.gan.wgan_gp.wgan_gp_step` node by node.
The models run node by node; the optimizer, which is not what is compared, acts on node-stacked
copies of the parameters exactly as in the batched path:

    copy stacked params into the M modules -> per-node WGAN-GP gradients (loop)
    -> stack the gradients -> optimizer.step() (updates + gossip on the stacked copies)
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn

from dadam3.gan.wgan_gp import (GP_LAMBDA, _check_players, _detached, _grad, _set_grads, _trainable, interpolate,
                                wgan_gp_objectives)


def wgan_gp_step_loop(Gs: Sequence[nn.Module], Ds: Sequence[nn.Module], real, z, eps,
                      gp_lambda: float = GP_LAMBDA, players: str = "both") -> dict[str, torch.Tensor]:
    """Reference for :func:`wgan_gp_step`: node by node, three critic passes, one autograd.grad per player."""
    want_g, want_d = _check_players(players)
    per_node: list[dict[str, torch.Tensor]] = []
    for i, (G, D) in enumerate(zip(Gs, Ds)):
        g_params, d_params = _trainable(G), _trainable(D)
        if not want_d:
            d_fake = D(G(z[i]))
            loss_g = -d_fake.mean()
            _set_grads(g_params, _grad(loss_g, g_params))
            per_node.append({"loss_g": loss_g, "d_fake": d_fake.mean()})
            continue
        if want_g:
            fake = G(z[i])
        else:
            with torch.no_grad():
                fake = G(z[i])
        x_hat = interpolate(real[i], fake.detach(), eps[i]).requires_grad_(True)
        d_real, d_fake, d_hat = D(real[i]), D(fake), D(x_hat)
        (grad_hat,) = torch.autograd.grad(d_hat.sum(), x_hat, create_graph=True)
        out = {k: v[0] for k, v in
               wgan_gp_objectives(d_real[None], d_fake[None], grad_hat[None], gp_lambda).items()}
        _set_grads(d_params, _grad(out["loss_d"], d_params, retain_graph=want_g))
        if want_g:
            _set_grads(g_params, _grad(out["loss_g"], g_params))
        per_node.append(out)
    return _detached({k: torch.stack([o[k] for o in per_node]) for k in per_node[0]})


class LoopReference:
    """M ordinary generator/critic pairs trained through stacked parameter copies.

    ``make_optimizer(params) -> optimizer`` builds an optimizer over a list of [M, ...] leaves.
    """

    def __init__(self, Gs: Sequence[nn.Module], Ds: Sequence[nn.Module],
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer]):
        self.Gs, self.Ds = list(Gs), list(Ds)
        self.g_params = self._stack_params(self.Gs)
        self.d_params = self._stack_params(self.Ds)
        self.opt_g = make_optimizer(self.g_params)
        self.opt_d = make_optimizer(self.d_params)

    @staticmethod
    def _stack_params(nets) -> list[torch.Tensor]:
        per_node = [list(net.parameters()) for net in nets]
        return [torch.stack([p[j].detach() for p in per_node]).requires_grad_()
                for j in range(len(per_node[0]))]

    @torch.no_grad()
    def _load(self) -> None:
        for stacked, nets in ((self.g_params, self.Gs), (self.d_params, self.Ds)):
            for i, net in enumerate(nets):
                for s, p in zip(stacked, net.parameters()):
                    p.copy_(s[i])

    def _gather_grads(self) -> None:
        for stacked, nets in ((self.g_params, self.Gs), (self.d_params, self.Ds)):
            for j, s in enumerate(stacked):
                s.grad = torch.stack([list(net.parameters())[j].grad for net in nets])

    def gradients(self, real, z, eps, gp_lambda: float = GP_LAMBDA) -> dict[str, torch.Tensor]:
        """Per-node WGAN-GP values and gradients (into the stacked copies), at the current point."""
        self._load()
        out = wgan_gp_step_loop(self.Gs, self.Ds, real, z, eps, gp_lambda)
        self._gather_grads()
        return out

    def step(self, real, z, eps, gp_lambda: float = GP_LAMBDA) -> dict[str, torch.Tensor]:
        """One simultaneous iteration: gradients at the current point, then both optimizer steps."""
        out = self.gradients(real, z, eps, gp_lambda)
        self.opt_d.step()
        self.opt_g.step()
        self._load()
        return out
