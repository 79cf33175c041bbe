"""Node-stacked execution of ANY ``nn.Module``: M copies run by ``torch.vmap`` over the node axis.

:class:`~dadam3.gan.stacked.StackedNet` runs the paper's nets (a flat sequence of six layer
types) as grouped convolutions; :class:`VmapNet` runs any other architecture — residual
blocks, LayerNorm, attention, whatever ``torch.func`` supports — with the same interface:

* every parameter and buffer of node i is row i of an ``[M, ...]`` leaf tensor (built by
  ``torch.func.stack_module_state``), named exactly as in the single module, so
  ``state_dict`` rows are nodes and checkpoints, optimizers and gossip work unchanged;
* ``forward([M, B, *in]) -> [M, B, *out]`` is ``vmap(functional_call)`` of a parameter-free
  copy of the module (on the meta device) over the node axis of inputs, parameters and
  buffers — one batched kernel per op, never a Python loop over nodes;
* ``node_module(i)``, ``to_modules()``, ``averaged_module()``, ``train``/``eval``,
  ``num_nodes``, ``in_shape``/``out_shape`` as on ``StackedNet``.

Buffers are per node (``[M, ...]``); in-place updates inside the module (BatchNorm's running
statistics) land in node i's row, as vmap updates batched tensors in place.  All ops keep
ordinary autograd, so the gradient penalty's double backward works through the vmapped
critic.  Limits (those of ``torch.func``): the module's state must be its parameters and
buffers (a plain tensor attribute stays on the meta device and fails), random ops need
``randomness="different"`` or ``"same"``, and data-dependent Python control flow on tensor
values (``if x.sum() > 0``) is not vmappable.

:func:`stack_nets` picks the grouped-convolution path when every layer has a stacked
version and this one otherwise.
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state

from dadam3.gan.grouped_conv import FirstOrderConvMode
from dadam3.gan.nets import SequentialNet
from dadam3.gan.stacked import ELEMENTWISE, STACKED_LAYERS, StackedNet

RANDOMNESS = ("error", "different", "same")


def _signature(module: nn.Module) -> list[tuple]:
    """What two nodes must share: module types, and every parameter's and buffer's name, shape, dtype."""
    return ([(name, type(m)) for name, m in module.named_modules()]
            + [(k, tuple(t.shape), t.dtype) for k, t in module.named_parameters()]
            + [(k, tuple(t.shape), t.dtype) for k, t in module.named_buffers()])


def _aliases(module: nn.Module) -> dict[str, str]:
    """Every parameter/buffer name → the name ``named_parameters()``/``named_buffers()`` list it
    under (tied weights: several names, one tensor)."""
    out = {}
    for named in (module.named_parameters, module.named_buffers):
        first_name = {id(t): k for k, t in named()}
        out.update({k: first_name[id(t)] for k, t in named(remove_duplicate=False)})
    return out


def _shape(modules: Sequence[nn.Module], given, attr: str) -> tuple[int, ...] | None:
    value = given if given is not None else getattr(modules[0], attr, None)
    return None if value is None else tuple(int(s) for s in value)


class VmapNet(nn.Module):
    """M copies of one architecture, parameters ``[M, ...]``, forward ``[M, B, *in] → [M, B, *out]``.

    ``modules``: M modules of the same architecture (distinct objects or one repeated; see
    :meth:`replicate`).  ``in_shape``/``out_shape`` default to the modules' own attributes
    of that name (a :class:`SequentialNet` has them); the trainer reads ``G.in_shape[0]``
    as the noise size nz.  ``randomness``: vmap's policy for random ops (dropout):
    ``"error"`` (default), ``"different"`` (each node its own draw) or ``"same"``.
    """

    def __init__(self, modules: Sequence[nn.Module], in_shape: Sequence[int] | None = None,
                 out_shape: Sequence[int] | None = None, randomness: str = "error"):
        super().__init__()
        modules = list(modules)
        if not modules:
            raise ValueError("need at least one node")
        if randomness not in RANDOMNESS:
            raise ValueError(f"randomness={randomness!r}: must be one of {', '.join(RANDOMNESS)}")
        first = modules[0]
        if any(_signature(m) != _signature(first) for m in modules[1:]):
            raise ValueError("cannot stack modules of different architectures")
        if any(m.training != first.training for m in modules[1:]):
            raise ValueError("cannot stack modules in different train/eval modes")
        self.num_nodes = len(modules)
        self.in_shape = _shape(modules, in_shape, "in_shape")
        self.out_shape = _shape(modules, out_shape, "out_shape")
        self.randomness = randomness
        self.first_order_backward = True
        params, buffers = stack_module_state(modules)
        # The parameter-free copy the forward pass and node_module start from; kept outside the
        # module tree, so it is neither a parameter nor moved by .to().
        template = copy.deepcopy(first).to("meta")
        object.__setattr__(self, "_template", template)
        # Another meta copy holds the stacked leaves under the single module's names: its
        # children become this module's, so ``layers.0.weight`` is ``self.layers[0].weight``.
        # (.to("meta") unties tied weights; every alias gets its name's one stacked leaf again.)
        holder = copy.deepcopy(template)
        leaves = {k: nn.Parameter(t.detach(), requires_grad=t.requires_grad) for k, t in params.items()}
        leaves.update(buffers)
        aliases = _aliases(first)
        for prefix, mod in holder.named_modules():
            prefix = f"{prefix}." if prefix else ""
            for name, _ in list(mod.named_parameters(recurse=False)):
                mod.register_parameter(name, leaves[aliases[prefix + name]])
            for name, _ in list(mod.named_buffers(recurse=False)):
                mod.register_buffer(name, leaves[aliases[prefix + name]],
                                    persistent=name not in mod._non_persistent_buffers_set)
        object.__setattr__(self, "_aliases", aliases)
        own = [(name, "module", c) for name, c in holder.named_children()] \
            + [(name, "parameter", p) for name, p in holder.named_parameters(recurse=False)] \
            + [(name, "buffer", b) for name, b in holder.named_buffers(recurse=False)]
        for name, kind, value in own:
            if hasattr(self, name):
                raise ValueError(f"the module's attribute {name!r} clashes with VmapNet's own")
            if kind == "module":
                self.add_module(name, value)
            elif kind == "parameter":
                self.register_parameter(name, value)
            else:
                self.register_buffer(name, value, persistent=name not in holder._non_persistent_buffers_set)
        self.train(first.training)

    @classmethod
    def replicate(cls, module: nn.Module, num_nodes: int, **kwargs) -> "VmapNet":
        """``num_nodes`` identical copies of ``module``."""
        return cls([module] * num_nodes, **kwargs)

    def train(self, mode: bool = True) -> "VmapNet":
        super().train(mode)
        self._template.train(mode)
        return self

    def use_first_order_backward(self, enabled: bool = True) -> "VmapNet":
        """The module's ``F.conv2d`` calls with the first-order backward (:mod:`dadam3.gan.grouped_conv`,
        the default: no per-group loop in the penalty's double backward) or stock (``enabled=False``)."""
        self.first_order_backward = enabled
        return self

    def extra_repr(self) -> str:
        return f"num_nodes={self.num_nodes}, in_shape={self.in_shape}, out_shape={self.out_shape}"

    def _node_forward(self, params, buffers, x):
        return functional_call(self._template, (params, buffers), (x,), tie_weights=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.num_nodes
        if x.shape[0] != m:
            raise ValueError(f"input has {x.shape[0]} node rows, the net has {m} nodes")
        # every alias by name: the meta template's tied weights are untied (see __init__)
        params = dict(self.named_parameters(remove_duplicate=False))
        buffers = dict(self.named_buffers(remove_duplicate=False))
        if not self.first_order_backward:
            return torch.vmap(self._node_forward, randomness=self.randomness)(params, buffers, x)
        with FirstOrderConvMode():
            return torch.vmap(self._node_forward, randomness=self.randomness)(params, buffers, x)

    def _node_tensors(self) -> dict[str, torch.Tensor]:
        return {**dict(self.named_parameters()), **dict(self.named_buffers())}

    @torch.no_grad()
    def _module_from(self, pick) -> nn.Module:
        """A new ordinary module whose every parameter and buffer is ``pick([M, ...] tensor)``."""
        ref = next(iter(self.parameters()))
        module = copy.deepcopy(self._template).to_empty(device=ref.device)
        stacked = self._node_tensors()
        tensors = dict(module.named_parameters(remove_duplicate=False))
        tensors.update(module.named_buffers(remove_duplicate=False))
        for name, t in tensors.items():
            canonical = self._aliases[name]
            if canonical != name:                # a tied weight: the same tensor as its first name
                owner, _, leaf = name.rpartition(".")
                sub = module.get_submodule(owner)
                store = sub._parameters if leaf in sub._parameters else sub._buffers
                store[leaf] = tensors[canonical]
                continue
            value = pick(stacked[name])
            t.data = torch.empty_like(value)     # dtype follows the stacked net's (.double() etc.)
            t.copy_(value)
        return module.train(self.training)

    def node_module(self, i: int) -> nn.Module:
        """Node i as an ordinary module (a copy), in this net's train/eval mode."""
        return self._module_from(lambda t: t[i])

    def to_modules(self) -> list[nn.Module]:
        """All M nodes as ordinary modules (copies)."""
        return [self.node_module(i) for i in range(self.num_nodes)]

    def averaged_module(self) -> nn.Module:
        """The node-average model x̄ = (1/M) Σ_i x_i as an ordinary module; floating-point
        buffers are averaged too, integer ones (``num_batches_tracked``) are node 0's."""
        return self._module_from(lambda t: t.mean(0) if t.is_floating_point() else t[0])


def has_stacked_version(module: nn.Module) -> bool:
    """Whether :class:`StackedNet` knows every layer of ``module`` (a :class:`SequentialNet`)."""
    return isinstance(module, SequentialNet) and all(
        type(layer) in STACKED_LAYERS or isinstance(layer, ELEMENTWISE) for layer in module.layers)


def stack_nets(modules: Sequence[nn.Module] | nn.Module, num_nodes: int | None = None,
               **vmap_kwargs) -> StackedNet | VmapNet:
    """M node copies as one stacked net: :class:`StackedNet` (grouped convolutions) when every
    layer has a stacked version, :class:`VmapNet` otherwise.

    ``modules``: M modules, or one module and ``num_nodes`` (identical copies).
    ``vmap_kwargs`` (``in_shape``, ``out_shape``, ``randomness``) go to :class:`VmapNet`.
    """
    if isinstance(modules, nn.Module):
        if num_nodes is None:
            raise ValueError("stack_nets(module, num_nodes): give the number of nodes")
        modules = [modules] * num_nodes
    modules = list(modules)
    if all(has_stacked_version(m) for m in modules):
        try:
            return StackedNet(modules)
        except NotImplementedError:   # a known layer in an unsupported setting (e.g. padding_mode)
            pass
    return VmapNet(modules, **vmap_kwargs)
