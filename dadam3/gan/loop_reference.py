"""The obvious M-node trainer: a Python loop over M ordinary (G_i, D_i) modules.

Kept as the reference the batched path is tested against (float64) and benchmarked
against. The models run node by node; the optimizer, which is not what is compared,
acts on node-stacked copies of the parameters exactly as in the batched path:

    copy stacked params into the M modules -> per-node WGAN-GP gradients (loop)
    -> stack the gradients -> optimizer.step() (updates + gossip on the stacked copies)
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn

from dadam3.gan.wgan_gp import GP_LAMBDA, wgan_gp_step_loop


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
