"""Comparing a node-stacked net with the M ordinary modules it was built from (or that
:class:`dadam3.gan.loop_reference.LoopReference` trains): their tensors by name, and the largest
difference per tensor."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from dadam3.gan.stacked import StackedNet


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
