"""dadam3.gan.conv_variants: every way of running a stacked (transposed) convolution equals grouped
NCHW in float64 — forward, first derivatives and the penalty's double backward — and a
StackedNet with a per-layer table of variants equals the default one in a whole wgan_gp_step."""
from __future__ import annotations

import pytest
import torch

from dadam3.gan.conv_variants import VARIANTS, stacked_conv2d, stacked_conv_transpose2d
from op_census import ConvCensus
from dadam3.gan.stacked import StackedConv2d, StackedConvTranspose2d, build_stacked_nets
from dadam3.gan.wgan_gp import wgan_gp_step

F64 = torch.float64
M, B = 3, 2
# (C_in, C_out, H, kernel, stride, padding, bias): the dcgan layers' shapes, small
CONV = [(3, 4, 8, 4, 2, 1, False), (4, 5, 4, 4, 1, 0, True), (2, 3, 7, 3, 2, 1, True)]
CONV_T = [(5, 4, 1, 4, 1, 0, False), (4, 3, 4, 4, 2, 1, True)]


def _tensors(c_in, c_out, h, k, bias, transposed, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, M * c_in, h, h, dtype=F64, generator=gen, requires_grad=True)
    shape = (M, c_in, c_out, k, k) if transposed else (M, c_out, c_in, k, k)
    w = torch.randn(shape, dtype=F64, generator=gen, requires_grad=True)
    b = torch.randn(M, c_out, dtype=F64, generator=gen, requires_grad=True) if bias else None
    return x, w, b


def _penalty_grads(y, x, params):
    """The gradient penalty's pattern: ∇_x of a score, then gradients of its squared norm."""
    (gx,) = torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), dtype=F64).view_as(y)).sum(), x,
                                create_graph=True)
    return [gx] + list(torch.autograd.grad(gx.square().sum() + y.square().sum(), [x] + params))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", CONV)
def test_conv_variant_equals_grouped_nchw_with_double_backward(variant, case):
    c_in, c_out, h, k, stride, padding, bias = case
    x, w, b = _tensors(c_in, c_out, h, k, bias, False)
    params = [w] + ([b] if bias else [])
    ref_y = stacked_conv2d("grouped_nchw", x, w, b, stride, padding)
    y = stacked_conv2d(variant, x, w, b, stride, padding)
    torch.testing.assert_close(y, ref_y, rtol=1e-12, atol=1e-12)
    for got, want in zip(_penalty_grads(y, x, params), _penalty_grads(ref_y, x, params)):
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", CONV_T)
def test_conv_transpose_variant_equals_grouped_nchw(variant, case):
    c_in, c_out, h, k, stride, padding, bias = case
    x, w, b = _tensors(c_in, c_out, h, k, bias, True)
    params = [x, w] + ([b] if bias else [])
    ref_y = stacked_conv_transpose2d("grouped_nchw", x, w, b, stride, padding)
    y = stacked_conv_transpose2d(variant, x, w, b, stride, padding)
    torch.testing.assert_close(y, ref_y, rtol=1e-12, atol=1e-12)
    r = torch.randn(y.shape, dtype=F64, generator=torch.Generator().manual_seed(1))
    for got, want in zip(torch.autograd.grad((y * r).sum(), params), torch.autograd.grad((ref_y * r).sum(), params)):
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-11)


def test_unknown_variant_is_refused():
    x, w, b = _tensors(3, 4, 8, 4, False, False)
    with pytest.raises(ValueError, match="conv variant 'nchw4'"):
        stacked_conv2d("nchw4", x, w, b, 2, 1)


@pytest.mark.parametrize("arch,size", [("dcgan32", 32), ("dcgan64", 64)])
def test_stacked_net_with_a_variant_table_equals_the_default_in_a_wgan_gp_step(arch, size):
    grads = []
    for table in ({}, "alternate"):
        torch.manual_seed(0)
        G, D = build_stacked_nets(arch, M, width=1 / 32, identical_init=False)
        G, D = G.double(), D.double()
        if table:
            for net in (G, D):
                convs = [j for j, layer in enumerate(net.layers)
                         if isinstance(layer, (StackedConv2d, StackedConvTranspose2d))]
                net.use_conv_variants({j: VARIANTS[1 + i % 3] for i, j in enumerate(convs)})
        gen = torch.Generator().manual_seed(5)
        wgan_gp_step(G, D, torch.rand(M, B, 3, size, size, generator=gen, dtype=F64),
                     torch.randn(M, B, 100, generator=gen, dtype=F64), torch.rand(M, B, generator=gen, dtype=F64))
        grads.append({f"{n}.{k}": p.grad for n, net in (("G", G), ("D", D)) for k, p in net.named_parameters()})
    for k, g in grads[0].items():
        torch.testing.assert_close(grads[1][k], g, rtol=1e-10, atol=1e-12, msg=k)
    with pytest.raises(ValueError, match="layer 1 is not a stacked convolution"):
        D.use_conv_variants({1: "separate"})


@pytest.mark.parametrize("arch,size", [("dcgan32", 32), ("dcgan64", 64)])
def test_critic_in_nhwc_runs_every_convolution_on_nhwc_activations_and_equals_nchw(arch, size):
    """The critic NHWC end to end (grouped NHWC at every layer, or the whole net channels-last):
    in its forward pass, the penalty's ∇_x and the gradients of the penalty, every convolution
    call (forward and backward) gets NHWC activations — the instance norm and the activations
    between keep them NHWC, so nothing converts between layers — and the values equal NCHW's
    in float64. The default critic, for contrast, is NCHW throughout."""
    results = {}
    for mode in ("nchw", "variants", "channels_last"):
        torch.manual_seed(0)
        _, D = build_stacked_nets(arch, M, width=1 / 32, identical_init=False)
        D = D.double()
        if mode == "variants":
            D.use_conv_variants({j: "grouped_nhwc" for j, layer in enumerate(D.layers)
                                 if isinstance(layer, StackedConv2d)})
        elif mode == "channels_last":
            D.use_channels_last()
        x = torch.rand(M, B, 3, size, size, generator=torch.Generator().manual_seed(5), dtype=F64,
                       requires_grad=True)
        with ConvCensus() as census:
            y = D(x)
            (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            grads = torch.autograd.grad(gx.square().sum() + y.square().sum(), list(D.parameters()))
        results[mode] = (y, gx, grads)
        layouts = census.by_layout
        if mode == "nchw":
            assert layouts["nchw"] > 0 and layouts["nhwc"] == 0, layouts
        else:
            assert layouts["nchw"] == 0 and layouts["strided"] == 0 and layouts["nhwc"] >= 8, layouts
    for mode in ("variants", "channels_last"):
        for a, b in zip(results["nchw"][:2] + results["nchw"][2], results[mode][:2] + results[mode][2]):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
