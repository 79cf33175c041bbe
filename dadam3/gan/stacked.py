"""Node-stacked execution: M copies of one :class:`~dadam3.gan.nets.SequentialNet` as ONE computation.

Every parameter and buffer of node i's net is row i of a tensor with a leading node
axis, ``[M, ...]``; the optimizers see exactly these leaf tensors (``.grad`` has the
same shape) and mix them along dim 0.  ``StackedNet.forward`` maps ``[M, B, *in]``
to ``[M, B, *out]`` with one kernel per layer, never a Python loop over nodes:

* convolutions run as grouped convolutions: activations are kept *channel-grouped*,
  ``[B, M·C, H, W]`` (node i owns channels ``i·C … (i+1)·C−1``), and the stacked
  weight ``[M, C_out, C_in, k, k]`` is viewed as ``[M·C_out, C_in, k, k]`` with
  ``groups = M`` (transposed: ``[M, C_in, C_out, k, k] → [M·C_in, C_out, k, k]``);
* BatchNorm / InstanceNorm act per channel, so on the channel-grouped layout they
  compute exactly each node's statistics (:mod:`dadam3.gan.stacked_norms`);
* linear layers use the *node-major* layout ``[M, B, F]`` and one ``baddbmm``;
* element-wise activations work on either layout.

Layouts are switched only where consecutive layers disagree.  All ops support double
backward (needed by the gradient penalty), float32/float64 and any device.
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from dadam3.gan.conv_variants import check_variant, stacked_conv2d, stacked_conv_transpose2d
from dadam3.gan.grouped_conv import grouped_conv2d
from dadam3.gan.nets import SequentialNet, build_nets
from dadam3.gan.stacked_norms import (CHANNEL_GROUPED, StackedBatchNorm, StackedInstanceNorm2d,
                                      same_hyperparameters, stack_tensors)

NODE_MAJOR = "node_major"          # [M, B, C, ...]

ELEMENTWISE = (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.Sigmoid, nn.Identity, nn.ELU, nn.GELU,
               nn.SiLU, nn.Softplus)


def to_channel_grouped(h: torch.Tensor) -> torch.Tensor:
    """``[M, B, C, *S] → [B, M·C, *S]``."""
    m, b, c = h.shape[:3]
    return h.transpose(0, 1).reshape(b, m * c, *h.shape[3:])


def to_node_major(h: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """``[B, M·C, *S] → [M, B, C, *S]`` (a view)."""
    b, mc = h.shape[:2]
    return h.reshape(b, num_nodes, mc // num_nodes, *h.shape[2:]).transpose(0, 1)


class _StackedConv(nn.Module):
    """Shared part of the stacked (transposed) convolutions: M layers' hyper-parameters
    (which must agree) and their weights/biases stacked on a leading node axis.

    ``channels_last``: run on NHWC activations and weights (cuDNN's tensor-core kernels are
    NHWC; with NCHW tensors it converts both ways around every call)."""

    layout = CHANNEL_GROUPED
    channels_last = False
    variant = "grouped_nchw"        # dadam3.gan.conv_variants: how the M nodes' convolutions run
    hyper = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
             "groups", "padding_mode")

    def __init__(self, convs: Sequence[nn.Module]):
        super().__init__()
        same_hyperparameters(convs, self.hyper)
        if convs[0].padding_mode != "zeros":
            raise NotImplementedError(f"{type(self).__name__} supports padding_mode='zeros' only")
        for name in self.hyper:
            if name not in ("kernel_size", "padding_mode"):
                setattr(self, name, getattr(convs[0], name))
        self.num_nodes = len(convs)
        self.weight = stack_tensors((c.weight for c in convs), True)
        self.bias = stack_tensors((c.bias for c in convs), True)

    def _format(self, weight: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.channels_last:
            return weight, h
        return (weight.contiguous(memory_format=torch.channels_last),
                h.contiguous(memory_format=torch.channels_last))


class StackedConv2d(_StackedConv):
    """M ``nn.Conv2d``s: ``weight [M, C_out, C_in/g, k, k]``, ``bias [M, C_out]``; one grouped conv.

    ``first_order_backward`` (default True): run it as :func:`~dadam3.gan.grouped_conv.grouped_conv2d`,
    whose backward is made of first-order grouped ops, so the gradient penalty's double backward
    never reaches torch's per-group loop; False: the stock ``F.conv2d`` (the reference)."""

    first_order_backward = True

    def forward(self, h):
        if self.variant != "grouped_nchw":
            return stacked_conv2d(self.variant, h, self.weight, self.bias, self.stride, self.padding, self.dilation)
        m = self.num_nodes
        weight, h = self._format(self.weight.reshape(m * self.out_channels, *self.weight.shape[2:]), h)
        bias = None if self.bias is None else self.bias.reshape(-1)
        conv = grouped_conv2d if self.first_order_backward else F.conv2d
        return conv(h, weight, bias, self.stride, self.padding, self.dilation, m * self.groups)


class StackedConvTranspose2d(_StackedConv):
    """M ``nn.ConvTranspose2d``s: ``weight [M, C_in, C_out/g, k, k]``, ``bias [M, C_out]``."""

    hyper = _StackedConv.hyper + ("output_padding",)

    def forward(self, h):
        if self.variant != "grouped_nchw":
            return stacked_conv_transpose2d(self.variant, h, self.weight, self.bias, self.stride, self.padding,
                                            self.output_padding, self.dilation)
        m = self.num_nodes
        weight, h = self._format(self.weight.reshape(m * self.in_channels, *self.weight.shape[2:]), h)
        bias = None if self.bias is None else self.bias.reshape(-1)
        return F.conv_transpose2d(h, weight, bias, self.stride, self.padding, self.output_padding,
                                  m * self.groups, self.dilation)


class StackedLinear(nn.Module):
    """M ``nn.Linear``s: ``weight [M, out, in]``, ``bias [M, out]``; ``y_i = x_i W_iᵀ + b_i`` by one ``baddbmm``."""

    layout = NODE_MAJOR
    hyper = ("in_features", "out_features")

    def __init__(self, linears: Sequence[nn.Linear]):
        super().__init__()
        same_hyperparameters(linears, self.hyper)
        self.num_nodes = len(linears)
        self.weight = stack_tensors((lin.weight for lin in linears), True)
        self.bias = stack_tensors((lin.bias for lin in linears), True)

    def forward(self, h):
        shape = h.shape
        x = h.reshape(shape[0], -1, shape[-1])
        wt = self.weight.transpose(1, 2)
        y = torch.bmm(x, wt) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), x, wt)
        return y.reshape(*shape[:-1], y.shape[-1])


STACKED_LAYERS: dict[type, type] = {
    nn.Conv2d: StackedConv2d,
    nn.ConvTranspose2d: StackedConvTranspose2d,
    nn.BatchNorm1d: StackedBatchNorm,
    nn.BatchNorm2d: StackedBatchNorm,
    nn.InstanceNorm2d: StackedInstanceNorm2d,
    nn.Linear: StackedLinear,
}


def stack_layer(layers: Sequence[nn.Module]) -> nn.Module:
    """The stacked version of the M same-position layers ``layers`` (activations are shared)."""
    kind = type(layers[0])
    if kind in STACKED_LAYERS:
        return STACKED_LAYERS[kind](layers)
    if isinstance(layers[0], ELEMENTWISE):
        same_hyperparameters(layers, ())
        return copy.deepcopy(layers[0])
    raise TypeError(f"no stacked version of {kind.__name__}; known: "
                    f"{', '.join(k.__name__ for k in STACKED_LAYERS)} and element-wise activations")


class StackedNet(nn.Module):
    """M copies of one :class:`SequentialNet`, parameters ``[M, ...]``, forward ``[M, B, *in] → [M, B, *out]``.

    Parameter and buffer names equal the single net's (``layers.3.weight``), so node i's
    ``state_dict`` is row i of every entry of this one's.
    """

    def __init__(self, nets: Sequence[SequentialNet]):
        super().__init__()
        nets = list(nets)
        if not nets:
            raise ValueError("need at least one node")
        first = nets[0]
        for net in nets[1:]:
            if (net.in_shape, net.out_shape, len(net.layers)) != \
                    (first.in_shape, first.out_shape, len(first.layers)):
                raise ValueError("cannot stack nets of different architectures")
        self.num_nodes = len(nets)
        self.in_shape, self.out_shape = first.in_shape, first.out_shape
        self.layers = nn.ModuleList(stack_layer([net.layers[j] for net in nets])
                                    for j in range(len(first.layers)))
        # A parameter-free copy (on the meta device) from which node modules are rebuilt;
        # kept outside the module tree so it is neither a parameter nor moved by .to().
        object.__setattr__(self, "_template", copy.deepcopy(first).to("meta"))
        self.train(first.training)

    def use_channels_last(self, enabled: bool = True) -> "StackedNet":
        """Run the convolutions (and so the layers between them) on NHWC activations."""
        for layer in self.layers:
            if isinstance(layer, _StackedConv):
                layer.channels_last = enabled
        return self

    def use_first_order_backward(self, enabled: bool = True) -> "StackedNet":
        """Convolutions with the first-order backward (:mod:`dadam3.gan.grouped_conv`, the default)
        or the stock ``F.conv2d`` (``enabled=False``, the reference path)."""
        for layer in self.layers:
            if isinstance(layer, StackedConv2d):
                layer.first_order_backward = enabled
        return self

    def use_conv_variants(self, table: dict[int, str]) -> "StackedNet":
        """Run convolution layer ``j`` (its index in ``layers``) as variant ``table[j]`` of
        :mod:`dadam3.gan.conv_variants` (the layers not named keep grouped NCHW); the table is
        what ``scripts/bench_layers.py`` prints as each layer's winner."""
        for j, variant in table.items():
            layer = self.layers[j] if 0 <= j < len(self.layers) else None
            if not isinstance(layer, _StackedConv) or layer.groups != 1:
                raise ValueError(f"layer {j} is not a stacked convolution with groups=1: {layer!r}")
            layer.variant = check_variant(variant)
        return self

    @classmethod
    def replicate(cls, net: SequentialNet, num_nodes: int) -> "StackedNet":
        """``num_nodes`` identical copies of ``net``."""
        return cls([net] * num_nodes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.num_nodes
        if x.shape[0] != m:
            raise ValueError(f"input has {x.shape[0]} node rows, the net has {m} nodes")
        batch = x.shape[1]
        h, layout = x.reshape(m, batch, *self.in_shape), NODE_MAJOR
        for layer in self.layers:
            wanted = getattr(layer, "layout", layout)
            if wanted != layout:
                h = to_channel_grouped(h) if wanted == CHANNEL_GROUPED else to_node_major(h, m)
                layout = wanted
            h = layer(h)
        if layout == CHANNEL_GROUPED:
            h = to_node_major(h, m)
        return h.reshape(m, batch, *self.out_shape)

    @torch.no_grad()
    def _module_from(self, pick) -> SequentialNet:
        """A new ordinary module whose every parameter and buffer is ``pick([M, ...] tensor)``."""
        ref = next(iter(self.parameters()))
        # the dtype is set on the meta device, so the tensors are allocated once, on ref's device
        net = copy.deepcopy(self._template).to(dtype=ref.dtype).to_empty(device=ref.device)
        net.load_state_dict({k: pick(v) for k, v in self.state_dict().items()})
        return net.train(self.training)

    def node_module(self, i: int) -> SequentialNet:
        """Node i as an ordinary module (a copy), in this net's train/eval mode."""
        return self._module_from(lambda t: t[i])

    def to_modules(self) -> list[SequentialNet]:
        """All M nodes as ordinary modules (copies)."""
        return [self.node_module(i) for i in range(self.num_nodes)]

    def averaged_module(self) -> SequentialNet:
        """The node-average model x̄ = (1/M) Σ_i x_i as an ordinary module; floating-point
        buffers (BatchNorm running mean/var) are averaged too, integer ones (``num_batches_tracked``) are node 0's."""
        return self._module_from(lambda t: t.mean(0) if t.is_floating_point() else t[0])


def build_stacked_nets(arch: str, num_nodes: int, *, identical_init: bool = True,
                       **build_kwargs) -> tuple[StackedNet, StackedNet]:
    """(G, D) as :class:`StackedNet`s over ``num_nodes`` nodes; ``build_kwargs`` go to :func:`build_nets`.

    ``identical_init``: every node starts from the same draw (x_{i,0} equal for all i);
    otherwise each node draws its own initialisation (global torch RNG, node by node).
    """
    if identical_init:
        G, D = build_nets(arch, **build_kwargs)
        return StackedNet.replicate(G, num_nodes), StackedNet.replicate(D, num_nodes)
    pairs = [build_nets(arch, **build_kwargs) for _ in range(num_nodes)]
    return StackedNet([g for g, _ in pairs]), StackedNet([d for _, d in pairs])
