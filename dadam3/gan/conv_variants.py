"""Ways to run a node-stacked (transposed) convolution, for measuring which is fastest per layer.

Every variant computes, for node i = 0..M−1 of the channel-grouped activation
``x [B, M·C_in, H, W]`` and the stacked weight ``W [M, C_out, C_in, k, k]``
(transposed: ``[M, C_in, C_out, k, k]``), exactly node i's own layer

    y[:, i·C_out:(i+1)·C_out] = conv(x[:, i·C_in:(i+1)·C_in], W_i) + b_i

(the same sums in another order: float64 equal to rounding) and supports the gradient
penalty's double backward:

* ``grouped_nchw`` — one grouped call, ``groups = M`` (today's default; the forward
  convolution uses :func:`~dadam3.gan.grouped_conv.grouped_conv2d`);
* ``grouped_nhwc`` — the same call on channels-last activations and weights (cuDNN's
  tensor-core kernels are NHWC; the weight is converted here, as a weight stored NHWC in
  the flat optimizer buffer would not need);
* ``separate`` — M ordinary convolutions, one per node (on CUDA, streams or a CUDA graph
  would overlap them);
* ``unfold_bmm`` — ``unfold`` (im2col) and one batched matmul over nodes,
  ``Y_i = W_i · cols(x_i)`` (transposed: ``fold(W_iᵀ · x_i)``), for the small 4×4 kernels.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dadam3.gan.grouped_conv import grouped_conv2d

VARIANTS = ("grouped_nchw", "grouped_nhwc", "separate", "unfold_bmm")


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"conv variant {variant!r}: must be one of {', '.join(VARIANTS)}")
    return variant


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _out_size(size: int, k: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _nodes_of(x: torch.Tensor, m: int) -> list[torch.Tensor]:
    return list(x.chunk(m, dim=1))


def stacked_conv2d(variant: str, x, weight, bias, stride, padding, dilation=1) -> torch.Tensor:
    """Node-stacked ``conv2d``: ``x [B, M·C_in, H, W]``, ``weight [M, C_out, C_in, kh, kw]``,
    ``bias [M, C_out]`` or None → ``[B, M·C_out, H', W']``."""
    m, c_out = weight.shape[:2]
    flat_bias = None if bias is None else bias.reshape(-1)
    if variant == "grouped_nchw":
        return grouped_conv2d(x, weight.reshape(m * c_out, *weight.shape[2:]), flat_bias, stride, padding,
                              dilation, m)
    if variant == "grouped_nhwc":
        cl = torch.channels_last
        w = weight.reshape(m * c_out, *weight.shape[2:]).contiguous(memory_format=cl)
        return grouped_conv2d(x.contiguous(memory_format=cl), w, flat_bias, stride, padding, dilation, m)
    if variant == "separate":
        return torch.cat([F.conv2d(xi, weight[i], None if bias is None else bias[i], stride, padding, dilation)
                          for i, xi in enumerate(_nodes_of(x, m))], dim=1)
    check_variant(variant)
    return _conv2d_unfold_bmm(x, weight, bias, _pair(stride), _pair(padding), _pair(dilation))


def _conv2d_unfold_bmm(x, weight, bias, stride, padding, dilation) -> torch.Tensor:
    b, _, h, w = x.shape
    m, c_out, c_in, kh, kw = weight.shape
    oh = _out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = _out_size(w, kw, stride[1], padding[1], dilation[1])
    cols = F.unfold(x, (kh, kw), dilation, padding, stride)               # [B, M·C_in·kh·kw, L]
    cols = cols.view(b, m, c_in * kh * kw, oh * ow).permute(1, 2, 0, 3).reshape(m, c_in * kh * kw, b * oh * ow)
    w2 = weight.reshape(m, c_out, c_in * kh * kw)
    y = torch.bmm(w2, cols) if bias is None else torch.baddbmm(bias.unsqueeze(-1), w2, cols)   # [M, C_out, B·L]
    return y.view(m, c_out, b, oh, ow).permute(2, 0, 1, 3, 4).reshape(b, m * c_out, oh, ow)


def stacked_conv_transpose2d(variant: str, x, weight, bias, stride, padding, output_padding=0,
                             dilation=1) -> torch.Tensor:
    """Node-stacked ``conv_transpose2d``: ``x [B, M·C_in, H, W]``, ``weight [M, C_in, C_out, kh, kw]``,
    ``bias [M, C_out]`` or None → ``[B, M·C_out, H', W']``."""
    m, c_in = weight.shape[:2]
    flat_bias = None if bias is None else bias.reshape(-1)
    flat_w = weight.reshape(m * c_in, *weight.shape[2:])
    if variant == "grouped_nchw":
        return F.conv_transpose2d(x, flat_w, flat_bias, stride, padding, output_padding, m, dilation)
    if variant == "grouped_nhwc":
        cl = torch.channels_last
        return F.conv_transpose2d(x.contiguous(memory_format=cl), flat_w.contiguous(memory_format=cl), flat_bias,
                                  stride, padding, output_padding, m, dilation)
    if variant == "separate":
        return torch.cat([F.conv_transpose2d(xi, weight[i], None if bias is None else bias[i], stride, padding,
                                             output_padding, 1, dilation)
                          for i, xi in enumerate(_nodes_of(x, m))], dim=1)
    check_variant(variant)
    return _conv_transpose2d_unfold_bmm(x, weight, bias, *map(_pair, (stride, padding, output_padding, dilation)))


def _conv_transpose2d_unfold_bmm(x, weight, bias, stride, padding, output_padding, dilation) -> torch.Tensor:
    b, _, h, w = x.shape
    m, c_in, c_out, kh, kw = weight.shape
    oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (w - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1
    xs = x.view(b, m, c_in, h * w).permute(1, 2, 0, 3).reshape(m, c_in, b * h * w)
    cols = torch.bmm(weight.reshape(m, c_in, c_out * kh * kw).transpose(1, 2), xs)   # [M, C_out·kh·kw, B·HW]
    cols = cols.view(m, c_out * kh * kw, b, h * w).permute(2, 0, 1, 3).reshape(b, m * c_out * kh * kw, h * w)
    y = F.fold(cols, (oh, ow), (kh, kw), dilation, padding, stride)             # col2im: the scatter-add
    return y if bias is None else y + bias.reshape(1, -1, 1, 1)
