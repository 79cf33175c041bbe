"""dadam3.gan.grouped_conv: the stacked critic's convolution with a first-order backward.

The penalty's double backward must contain no per-group loop (no dilated groups = 1
convolution), and every gradient of both players must equal the stock path's in float64.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dadam3.gan.grouped_conv import GroupedConv2dFunction, grouped_conv2d
from op_census import ConvCensus
from dadam3.gan.stacked import build_stacked_nets
from dadam3.gan.vmapped import VmapNet
from dadam3.gan.wgan_gp import wgan_gp_step

F64 = torch.float64
ARCHS = [("dcgan32", 32, 1 / 16), ("dcgan64", 64, 1 / 32)]


def _pair(arch, M, width, first_order, dtype=F64):
    torch.manual_seed(0)
    G, D = build_stacked_nets(arch, M, width=width, identical_init=False)
    G, D = G.to(dtype), D.to(dtype)
    return G.use_first_order_backward(first_order), D.use_first_order_backward(first_order)


def _draw(M, B, size, dtype=F64):
    gen = torch.Generator().manual_seed(7)
    return (torch.rand(M, B, 3, size, size, generator=gen, dtype=dtype) * 2 - 1,
            torch.randn(M, B, 100, generator=gen, dtype=dtype), torch.rand(M, B, generator=gen, dtype=dtype))


def _step(arch, size, width, first_order, M=3, B=2, dtype=F64, players="both"):
    G, D = _pair(arch, M, width, first_order, dtype)
    out = wgan_gp_step(G, D, *_draw(M, B, size, dtype), players=players)
    grads = {f"{name}.{k}": p.grad for name, net in (("G", G), ("D", D)) for k, p in net.named_parameters()
             if p.grad is not None}
    return out, grads


@pytest.mark.parametrize("arch,size,width", ARCHS)
def test_no_per_group_loop_is_left_in_one_wgan_gp_step(arch, size, width):
    M = 5
    counts = {}
    for first_order in (False, True):
        G, D = _pair(arch, M, width, first_order, torch.float32)
        with ConvCensus() as census:
            wgan_gp_step(G, D, *_draw(M, 2, size, torch.float32))
        counts[first_order] = census
    stock, fixed = counts[False], counts[True]
    assert stock.dilated_ungrouped > 0                        # today's path has the loop ...
    assert fixed.dilated_ungrouped == 0                       # ... the first-order backward has none
    assert set(fixed.by_groups) == {M}                        # every convolution is one grouped call
    assert fixed.calls < stock.calls


@pytest.mark.parametrize("arch,size,width", ARCHS)
@pytest.mark.parametrize("players", ["both", "critic", "generator"])
def test_every_gradient_equals_the_stock_path_in_float64(arch, size, width, players):
    out_ref, grads_ref = _step(arch, size, width, False, players=players)
    out, grads = _step(arch, size, width, True, players=players)
    assert grads.keys() == grads_ref.keys() and grads
    for k in grads_ref:
        torch.testing.assert_close(grads[k], grads_ref[k], rtol=1e-11, atol=1e-13, msg=k)
    for k in out_ref:
        torch.testing.assert_close(out[k], out_ref[k], rtol=1e-12, atol=1e-13, msg=k)


CONFIGS = [  # (in shape, weight shape, stride, padding, dilation, groups, bias)
    ((2, 6, 9, 9), (9, 2, 4, 4), (2, 2), (1, 1), (1, 1), 3, True),     # odd size: output_padding 1
    ((2, 4, 8, 7), (4, 2, 3, 2), (1, 2), (0, 1), (2, 1), 2, False),
    ((1, 3, 6, 6), (2, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, True),
]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,groups,bias", CONFIGS)
def test_function_has_exact_first_and_second_derivatives(x_shape, w_shape, stride, padding, dilation,
                                                         groups, bias):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(x_shape, dtype=F64, generator=gen, requires_grad=True)
    w = torch.randn(w_shape, dtype=F64, generator=gen, requires_grad=True)
    b = torch.randn(w_shape[0], dtype=F64, generator=gen, requires_grad=True) if bias else None
    args = (stride, padding, dilation, groups)
    torch.testing.assert_close(grouped_conv2d(x, w, b, *args), F.conv2d(x, w, b, *args), rtol=1e-13, atol=1e-13)
    inputs = (x, w) if b is None else (x, w, b)

    def fn(*t):
        return GroupedConv2dFunction.apply(t[0], t[1], t[2] if len(t) > 2 else None, *args)
    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradgradcheck(fn, inputs)
    # a leaf input inside autograd.grad(create_graph=True), as the penalty's x̂ can be
    (gx,) = torch.autograd.grad(fn(*inputs).square().sum(), x, create_graph=True)
    (gx_ref,) = torch.autograd.grad(F.conv2d(x, w, b, *args).square().sum(), x, create_graph=True)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-12, atol=1e-12)
    gw, gw_ref = (torch.autograd.grad(g.square().sum(), w)[0] for g in (gx, gx_ref))
    torch.testing.assert_close(gw, gw_ref, rtol=1e-12, atol=1e-12)


def test_bf16_autocast_runs_and_agrees_with_the_stock_path():
    results = []
    for first_order in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results.append(_step("dcgan32", 32, 1 / 16, first_order, dtype=torch.float32))
    (out_ref, grads_ref), (out, grads) = results
    for k, g in grads.items():
        assert g.dtype == torch.float32 and torch.isfinite(g).all(), k
        # both paths run the same bf16 convolutions; only bf16 rounding may differ
        torch.testing.assert_close(g, grads_ref[k], rtol=0.05, atol=0.05 * float(grads_ref[k].abs().max()), msg=k)
    torch.testing.assert_close(out["loss_d"], out_ref["loss_d"], rtol=0.02, atol=0.02)


def _vmapped_step(first_order, M=3, B=2, dtype=F64):
    G, D = _pair("dcgan32", M, 1 / 16, True, dtype)
    G = VmapNet(G.to_modules()).use_first_order_backward(first_order)
    D = VmapNet(D.to_modules()).use_first_order_backward(first_order)
    with ConvCensus() as census:
        wgan_gp_step(G, D, *_draw(M, B, 32, dtype))
    grads = {f"{name}.{k}": p.grad for name, net in (("G", G), ("D", D)) for k, p in net.named_parameters()}
    return census, grads


def test_vmapnet_path_has_no_per_group_loop_and_equal_gradients():
    stock, grads_ref = _vmapped_step(False)
    fixed, grads = _vmapped_step(True)
    assert stock.dilated_ungrouped > 0 and fixed.dilated_ungrouped == 0
    assert set(fixed.by_groups) == {3}
    for k in grads_ref:
        torch.testing.assert_close(grads[k], grads_ref[k], rtol=1e-11, atol=1e-13, msg=k)
    # and equal to the StackedNet path's
    _, grads_stacked = _step("dcgan32", 32, 1 / 16, True)
    for k in grads_stacked:
        torch.testing.assert_close(grads[k], grads_stacked[k], rtol=1e-11, atol=1e-13, msg=k)
