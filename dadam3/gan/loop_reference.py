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

from dadam3.gan.stacked import StackedNet
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


# ---------------------------------------------------------------- comparing the two paths

def named_tensors(net: nn.Module, kind: str = "params") -> dict[str, torch.Tensor]:
    """``{name: tensor}`` of ``kind`` ``"params"``, ``"grads"`` or ``"buffers"`` (``[M, ...]`` for a
    stacked net)."""
    if kind == "params":
        return {k: p.detach() for k, p in net.named_parameters()}
    if kind == "grads":
        return {k: p.grad for k, p in net.named_parameters() if p.grad is not None}
    if kind == "buffers":
        return dict(net.named_buffers())
    raise ValueError(f"kind={kind!r}: must be params, grads or buffers")


def stack_module_tensors(nets: Sequence[nn.Module], kind: str = "params") -> dict[str, torch.Tensor]:
    """The stacked net's ``{name: [M, ...]}`` built from M ordinary modules."""
    per_node = [named_tensors(net, kind) for net in nets]
    return {k: torch.stack([d[k] for d in per_node]) for k in per_node[0]}


def max_abs_differences(stacked: StackedNet, nets: Sequence[nn.Module],
                        kinds: Sequence[str] = ("params", "grads", "buffers")) -> dict[str, float]:
    """``{"kind:name": max |stacked − loop|}`` over every tensor of the given kinds.

    A name present on one side only maps to ``inf`` (e.g. a gradient set on one side only).
    """
    out: dict[str, float] = {}
    for kind in kinds:
        a, b = named_tensors(stacked, kind), stack_module_tensors(nets, kind)
        for name in a.keys() | b.keys():
            if name not in a or name not in b or a[name].shape != b[name].shape:
                out[f"{kind}:{name}"] = float("inf")
            else:
                out[f"{kind}:{name}"] = (a[name].double() - b[name].double()).abs().max().item() \
                    if a[name].numel() else 0.0
    return out
