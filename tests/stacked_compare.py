"""Comparing a node-stacked net with the M ordinary modules it was built from (or that
:class:`loop_reference.LoopReference` trains): their tensors by name, the largest
difference per tensor, and steps of the batched WGAN-GP iteration against the loop's."""
from __future__ import annotations

from functools import partial
from typing import Iterable, Sequence

import torch
import torch.nn as nn

from loop_reference import LoopReference
from dadam3.optim import step_together
from dadam3.gan.stacked import StackedNet
from dadam3.gan.wgan_gp import wgan_gp_step


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


def assert_steps_match_loop(G: StackedNet, D: StackedNet, opt_g, opt_d, ref: LoopReference,
                            batches: Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
    """For each ``(real, z, eps)``: the batched step's losses and gradients equal the loop
    reference's, then both sides' optimizers step; at the end their parameters are equal (float64).

    Absolute tolerances on each tensor's scale: the stacked instance norm (group_norm) sums in
    another order than nn.InstanceNorm2d (1e-16 relative), and a first step such as OAdagrad's
    D = g / (|g| + delta) or Dadam3's g / (sqrt(v) + delta) turns that into 1e-11 for entries
    |g| of the order of delta after 2 steps."""
    for real, z, eps in batches:
        out, out_ref = wgan_gp_step(G, D, real, z, eps), ref.gradients(real, z, eps)
        for key in ("loss_d", "loss_g", "gp", "wasserstein"):
            torch.testing.assert_close(out[key], out_ref[key], rtol=1e-10, atol=1e-12)
        for p, q in zip(list(G.parameters()) + list(D.parameters()), ref.g_params + ref.d_params):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-10 * max(1.0, float(q.grad.abs().max())))
        # both players together, with the gradient callback an extra-gradient step calls again
        step_together([opt_d, opt_g], partial(wgan_gp_step, G, D, real, z, eps))
        step_together([ref.opt_d, ref.opt_g], partial(ref.gradients, real, z, eps))
    ref._load()
    for p, q in zip(list(G.parameters()) + list(D.parameters()), ref.g_params + ref.d_params):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-10 * max(1.0, float(q.detach().abs().max())))
