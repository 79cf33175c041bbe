"""A grouped convolution whose backward is written with first-order ops, for the penalty's double backward.

The gradient penalty differentiates ∇_x̂ D(x̂) again, so every critic convolution
``y = conv(x, W, groups=g)`` is differentiated twice. Torch's own formula for that
(``_convolution_double_backward``) computes the weight term with, for ``g > 1``, one
dilated ``groups = 1`` convolution per group on non-contiguous copies, then a ``cat``:
for the node-stacked critic (``g = M``) that is M badly shaped calls per layer.

:class:`GroupedConv2dFunction` gives the convolution a backward built from ordinary
first-order ops, each a single grouped call::

    ∂L/∂x = conv_transpose2d(∂L/∂y, W, groups=g)      (same weight, same groups)
    ∂L/∂W = convolution_backward(∂L/∂y, x, W)[weight]  (one grouped call)
    ∂L/∂b = Σ_{n,h,w} ∂L/∂y

Differentiating that backward again (``create_graph=True``) is then differentiating a
``conv_transpose2d`` — its first-order backward, a grouped ``conv2d`` and a grouped weight
gradient — and no per-group loop is ever reached. The values are those of the stock
formulas (the same sums; float64 equal to rounding). Gradients the engine will not use
(the weight's, in the penalty's inner ``autograd.grad`` over x̂ only) are not computed.

Under ``torch.autocast`` the operands are cast as autocast would cast them for
``conv2d`` (to its lower-precision dtype) before the function is applied, so the casts'
own backward returns gradients in the parameters' dtype, as with the stock op.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def _will_run(ctx, index: int) -> bool:
    """Whether the engine will use the gradient of the function's input ``index`` in this backward."""
    if not ctx.needs_input_grad[index]:
        return False
    edges = getattr(ctx, "next_functions", None)
    if edges is None:       # inside torch.func's generated vmap rule: no graph to ask
        return True
    node = edges[index][0]
    if node is None:
        return False
    try:
        return torch._C._will_engine_execute_node(node)
    except RuntimeError:    # a leaf's accumulator inside autograd.grad: torch cannot say, so compute it
        return True


def _output_padding(x_shape, y_shape, weight_shape, stride, padding, dilation) -> list[int]:
    """conv_transpose2d's output_padding that maps ``y``'s size back onto ``x``'s exactly."""
    pads = []
    for i in range(2):
        size = (y_shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (weight_shape[2 + i] - 1) + 1
        pads.append(x_shape[2 + i] - size)
    return pads


class GroupedConv2dFunction(torch.autograd.Function):
    """``F.conv2d(x, weight, bias, stride, padding, dilation, groups)`` with a first-order backward.

    ``stride``, ``padding``, ``dilation``: pairs of ints (``padding`` numeric, not a string).
    ``torch.vmap`` works through it (the rule is generated: a vmapped call over per-node
    weights becomes one grouped convolution, forward and backward), so :class:`VmapNet`'s
    convolutions can use it too."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, weight, bias, stride, padding, dilation, groups):
        return F.conv2d(x, weight, bias, stride, padding, dilation, groups)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias, stride, padding, dilation, groups = inputs
        ctx.save_for_backward(x, weight)
        ctx.conf = (stride, padding, dilation, groups)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.conf
        grad_x = grad_w = grad_b = None
        if _will_run(ctx, 0):
            out_pad = _output_padding(x.shape, grad_y.shape, weight.shape, stride, padding, dilation)
            grad_x = F.conv_transpose2d(grad_y, weight, None, stride, padding, out_pad, groups, dilation)
        if _will_run(ctx, 1):
            grad_w = torch.ops.aten.convolution_backward(
                grad_y, x, weight, None, list(stride), list(padding), list(dilation), False, [0, 0],
                groups, [False, True, False])[1]
        if ctx.has_bias and _will_run(ctx, 2):
            grad_b = grad_y.sum(dim=(0, 2, 3))
        return grad_x, grad_w, grad_b, None, None, None, None


def _autocast_cast(tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """The operands as autocast would hand them to ``conv2d`` (unchanged outside autocast)."""
    device = tensors[0].device.type
    if not torch.amp.is_autocast_available(device) or not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return [t if t is None or not t.is_floating_point() else t.to(dtype) for t in tensors]


def grouped_conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> torch.Tensor:
    """``F.conv2d``'s signature and values, run as :class:`GroupedConv2dFunction` with autocast's
    casts; an unbatched (3-D) input or a string ``padding`` goes to ``F.conv2d`` itself."""
    if x.dim() != 4 or isinstance(padding, str):
        return F.conv2d(x, weight, bias, stride, padding, dilation, groups)
    pair = (lambda v: (v, v) if isinstance(v, int) else tuple(v))
    x, weight, bias = _autocast_cast([x, weight, bias])
    return GroupedConv2dFunction.apply(x, weight, bias, pair(stride), pair(padding), pair(dilation), groups)


class FirstOrderConvMode(TorchFunctionMode):
    """Inside it, every ``F.conv2d`` call (``nn.Conv2d``'s included) runs as :func:`grouped_conv2d`.
    :class:`~dadam3.gan.vmapped.VmapNet` runs its module under it, so torch.func's batched
    convolutions get the first-order backward too."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.conv2d or func is torch.conv2d:
            return grouped_conv2d(*args, **kwargs)
        return func(*args, **kwargs)
