"""dadam3.gan: the paper's nets, node-stacked execution vs the per-node loop, WGAN-GP."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from dadam3.errors.config import ConfigError
from dadam3.gan import (SequentialNet, StackedNet, build_nets, build_stacked_nets, critic_step,
                        generator_step, wgan_gp_step)
from loop_reference import wgan_gp_step_loop
from stacked_compare import max_abs_differences, named_tensors, stack_module_tensors
from dadam3.gan.nets import image_size_of

M, B = 3, 4
F64 = torch.float64
# (arch, channels, width): the two image sizes, both channel counts, and the 2-D MLP.
CASES = [("dcgan32", 3, 1 / 16), ("dcgan32", 1, 1 / 16), ("dcgan64", 3, 1 / 32), ("mlp", 2, 1 / 4)]


def node_pairs(arch, channels, width, dtype=F64, num_nodes=M, seed=0):
    """M independently initialised ordinary (G_i, D_i) pairs: the loop reference."""
    torch.manual_seed(seed)
    pairs = [build_nets(arch, channels, width) for _ in range(num_nodes)]
    return [g.to(dtype) for g, _ in pairs], [d.to(dtype) for _, d in pairs]


def stacked_and_loop(arch, channels, width, dtype=F64):
    Gs, Ds = node_pairs(arch, channels, width, dtype)
    return StackedNet(Gs), StackedNet(Ds), Gs, Ds


def sample_shape(G: SequentialNet | StackedNet) -> tuple[int, ...]:
    return G.out_shape


def draw(G, nz, step, dtype=F64, batch=B):
    """Real data, noise and interpolation weights for one step, from a fixed seed."""
    gen = torch.Generator().manual_seed(1000 + step)
    real = torch.rand(M, batch, *sample_shape(G), generator=gen, dtype=dtype) * 2 - 1
    z = torch.randn(M, batch, nz, generator=gen, dtype=dtype)
    eps = torch.rand(M, batch, generator=gen, dtype=dtype)
    return real, z, eps


def assert_match(stacked, nets, kinds=("params", "grads", "buffers"), tol=1e-10):
    """Every tensor of the stacked net equals the loop's to ``tol`` relative to max(1, its size)."""
    diffs = max_abs_differences(stacked, nets, kinds)
    scale = {f"{kind}:{k}": max(1.0, v.double().abs().max().item() if v.numel() else 0.0)
             for kind in kinds for k, v in named_tensors(stacked, kind).items()}
    bad = {k: v for k, v in diffs.items() if not v <= tol * scale.get(k, 1.0)}
    assert not bad, bad


def sgd_(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad


# ---------------------------------------------------------------- nets

@pytest.mark.parametrize("arch,channels,width", CASES[:3])
def test_image_net_shapes(arch, channels, width):
    G, D = build_nets(arch, channels, width)
    size = image_size_of(arch)
    x = G(torch.randn(B, 100))
    assert x.shape == (B, channels, size, size)
    assert x.abs().max() <= 1  # tanh output
    assert D(x).shape == (B,)


@pytest.mark.parametrize("arch,g_table,d_table", [
    ("dcgan32",
     [(100, 1024, 1, 0), (1024, 512, 2, 1), (512, 256, 2, 1), (256, 3, 2, 1)],
     [(3, 256, 2, 1), (256, 512, 2, 1), (512, 1024, 2, 1), (1024, 1, 1, 0)]),
    ("dcgan64",
     [(100, 512, 1, 0), (512, 256, 2, 1), (256, 128, 2, 1), (128, 64, 2, 1), (64, 3, 2, 1)],
     [(3, 64, 2, 1), (64, 128, 2, 1), (128, 256, 2, 1), (256, 512, 2, 1), (512, 1, 1, 0)]),
])
def test_full_width_layers_match_paper_tables(arch, g_table, d_table):
    with torch.device("meta"):
        G, D = build_nets(arch, channels=3)

    def convs(net, kind):
        return [(m.in_channels, m.out_channels, m.stride[0], m.padding[0])
                for m in net.modules() if type(m) is kind and m.kernel_size == (4, 4)]
    assert convs(G, nn.ConvTranspose2d) == g_table
    assert convs(D, nn.Conv2d) == d_table
    kinds = [type(m) for m in G.layers]
    assert kinds.count(nn.BatchNorm2d) == len(g_table) - 1 and kinds[-1] is nn.Tanh
    kinds = [type(m) for m in D.layers]
    assert kinds.count(nn.InstanceNorm2d) == len(d_table) - 1
    assert [m.negative_slope for m in D.layers if isinstance(m, nn.LeakyReLU)] == [0.2] * (len(d_table) - 1)


def test_mlp_shapes_and_width():
    G, D = build_nets("mlp", width=0.5, hidden=32, nz=2)
    assert G(torch.randn(B, 2)).shape == (B, 2) and D(torch.randn(B, 2)).shape == (B,)
    assert G.layers[0].out_features == 16


@pytest.mark.parametrize("kwargs,key", [
    (dict(arch="wgan"), "arch"),
    (dict(arch="dcgan32", image_size=64), "image_size"),
    (dict(arch="dcgan64", image_size=28), "image_size"),
    (dict(arch="dcgan32", width=0), "width"),
    (dict(arch="dcgan32", init="xavier"), "init"),
])
def test_bad_config_is_one_line_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError) as info:
        build_nets(**kwargs)
    msg = str(info.value)
    assert msg.startswith(f"{key}=") and "\n" not in msg


# ---------------------------------------------------------------- stacked execution

def test_stacked_params_are_node_axis_leaves_and_round_trip():
    G, D, Gs, Ds = stacked_and_loop("dcgan32", 3, 1 / 16)
    for stacked, nets in ((G, Gs), (D, Ds)):
        single = dict(nets[0].named_parameters())
        named = dict(stacked.named_parameters())
        assert named.keys() == single.keys()
        for name, p in named.items():
            assert p.is_leaf and p.shape == (M, *single[name].shape)
        assert_match(stacked, stacked.to_modules(), ("params", "buffers"), tol=0)
        assert_match(stacked, nets, ("params", "buffers"), tol=0)
    # stacking copies: changing the stacked net leaves the modules alone
    with torch.no_grad():
        next(G.parameters()).add_(1)
    assert max_abs_differences(G, Gs, ("params",))["params:layers.0.weight"] == pytest.approx(1)


@pytest.mark.parametrize("identical", [True, False])
def test_build_stacked_nets(identical):
    G, D = build_stacked_nets("dcgan32", M, identical_init=identical, channels=1, width=1 / 16)
    assert G.num_nodes == D.num_nodes == M and D.in_shape == (1, 32, 32)
    w = D.layers[0].weight
    assert bool((w[1:] == w[0]).all()) == identical


@pytest.mark.parametrize("arch,channels,width", CASES)
def test_stacked_forward_matches_loop(arch, channels, width):
    G, D, Gs, Ds = stacked_and_loop(arch, channels, width)
    real, z, _ = draw(G, Gs[0].in_shape[0], 0)
    fake = G(z)
    assert fake.shape == (M, B, *G.out_shape)
    fake_loop = torch.stack([g(z[i]) for i, g in enumerate(Gs)])
    torch.testing.assert_close(fake, fake_loop, rtol=0, atol=1e-12)
    scores = D(real)
    assert scores.shape == (M, B)
    torch.testing.assert_close(scores, torch.stack([d(real[i]) for i, d in enumerate(Ds)]),
                               rtol=0, atol=1e-12)
    assert_match(G, Gs, ("buffers",))  # BatchNorm running stats after one train-mode pass


@pytest.mark.parametrize("arch,channels,width", CASES)
def test_wgan_gp_step_and_sgd_match_loop(arch, channels, width):
    """Losses, every gradient, BN running stats and SGD-updated params: stacked == loop."""
    G, D, Gs, Ds = stacked_and_loop(arch, channels, width)
    nz = Gs[0].in_shape[0]
    for step in range(3):
        real, z, eps = draw(G, nz, step)
        out = wgan_gp_step(G, D, real, z, eps)
        ref = wgan_gp_step_loop(Gs, Ds, real, z, eps)
        assert out.keys() == ref.keys() >= {"loss_d", "loss_g", "gp", "d_real", "d_fake"}
        for k in out:
            assert out[k].shape == (M,) and not out[k].requires_grad
            torch.testing.assert_close(out[k], ref[k], rtol=0, atol=1e-10)
        assert_match(G, Gs)
        assert_match(D, Ds)
        sgd_(list(G.parameters()) + list(D.parameters()), lr=1e-3)
        sgd_([p for net in Gs + Ds for p in net.parameters()], lr=1e-3)
    assert_match(G, Gs, ("params", "buffers"))
    assert_match(D, Ds, ("params",))
    if arch != "mlp":
        assert int(G.layers[1].num_batches_tracked[0]) == 3
    # eval mode uses the running statistics: still the same nets
    G.eval()
    for g in Gs:
        g.eval()
    _, z, _ = draw(G, nz, 99)
    torch.testing.assert_close(G(z), torch.stack([g(z[i]) for i, g in enumerate(Gs)]),
                               rtol=0, atol=1e-10)


@pytest.mark.parametrize("players", ["critic", "generator"])
def test_single_player_steps_match_loop(players):
    G, D, Gs, Ds = stacked_and_loop("dcgan32", 1, 1 / 16)
    real, z, eps = draw(G, 100, 0)
    out = wgan_gp_step(G, D, real, z, eps, players=players)
    ref = wgan_gp_step_loop(Gs, Ds, real, z, eps, players=players)
    assert out.keys() == ref.keys()
    for k in out:
        torch.testing.assert_close(out[k], ref[k], rtol=0, atol=1e-10)
    assert_match(G, Gs)
    assert_match(D, Ds)


def test_float32_stacked_matches_loop():
    G, D, Gs, Ds = stacked_and_loop("dcgan32", 3, 1 / 16, dtype=torch.float32)
    real, z, eps = draw(G, 100, 0, dtype=torch.float32)
    out = wgan_gp_step(G, D, real, z, eps)
    ref = wgan_gp_step_loop(Gs, Ds, real, z, eps)
    torch.testing.assert_close(out["loss_d"], ref["loss_d"], rtol=1e-4, atol=1e-5)
    assert next(G.parameters()).grad.dtype == torch.float32
    assert_match(D, Ds, ("grads",), tol=1e-3)


def test_averaged_module_is_node_mean():
    G, _, Gs, _ = stacked_and_loop("dcgan32", 3, 1 / 16)
    avg = G.averaged_module()
    assert isinstance(avg, SequentialNet)
    for name, p in avg.named_parameters():
        torch.testing.assert_close(p, stack_module_tensors(Gs)[name].mean(0))
    avg.eval()
    assert avg(torch.randn(2, 100, dtype=F64)).shape == (2, 3, 32, 32)
    same = StackedNet.replicate(Gs[0], M).averaged_module()
    for a, b in zip(same.parameters(), Gs[0].parameters()):
        torch.testing.assert_close(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_stacked_matches_loop():
    G, D, Gs, Ds = stacked_and_loop("dcgan32", 3, 1 / 16)
    G, D = G.cuda(), D.cuda()
    Gs, Ds = [g.cuda() for g in Gs], [d.cuda() for d in Ds]
    real, z, eps = (t.cuda() for t in draw(G, 100, 0))
    wgan_gp_step(G, D, real, z, eps)
    wgan_gp_step_loop(Gs, Ds, real, z, eps)
    assert_match(G, Gs, tol=1e-8)
    assert_match(D, Ds, tol=1e-8)
    assert G.node_module(1).layers[0].weight.is_cuda


# ---------------------------------------------------------------- the loss itself

def linear_pair(weights: torch.Tensor, data_dim: int):
    """G(z) = A z + b and a linear critic D(x) = w·x + c, one per node."""
    Gs, Ds = [], []
    for w in weights:
        g = SequentialNet([nn.Linear(data_dim, data_dim)], (data_dim,), (data_dim,)).double()
        d = SequentialNet([nn.Linear(data_dim, 1)], (data_dim,), ()).double()
        with torch.no_grad():
            d.layers[0].weight.copy_(w[None])
        Gs.append(g)
        Ds.append(d)
    return StackedNet(Gs), StackedNet(Ds)


def test_gradient_penalty_of_linear_critic_by_hand():
    """D(x) = w·x + c has ∇_x̂ D = w everywhere, so gp = (‖w‖ − 1)² and
    ∇_w L_D = mean x_fake − mean x_real + 2λ(‖w‖ − 1) w/‖w‖,  ∇_b L_G = −w."""
    dim, lam = 5, 10.0
    w = torch.tensor([[0.3, 0.0, 0.4, 0.0, 0.0],     # ‖w‖ = 0.5
                      [1.0, 2.0, 2.0, 0.0, 0.0],     # ‖w‖ = 3
                      [0.6, 0.8, 0.0, 0.0, 0.0]], dtype=F64)  # ‖w‖ = 1: no penalty
    G, D = linear_pair(w, dim)
    gen = torch.Generator().manual_seed(0)
    real = torch.randn(M, B, dim, generator=gen, dtype=F64)
    z = torch.randn(M, B, dim, generator=gen, dtype=F64)
    eps = torch.rand(M, B, generator=gen, dtype=F64)
    out = wgan_gp_step(G, D, real, z, eps, gp_lambda=lam)

    norm = w.norm(dim=1)
    torch.testing.assert_close(out["gp"], (norm - 1) ** 2)
    torch.testing.assert_close(out["gp"], torch.tensor([0.25, 4.0, 0.0], dtype=F64))
    with torch.no_grad():
        fake = G(z)
        c = D.layers[0].bias[:, 0]
    d_real = (real @ w[:, :, None])[..., 0].mean(1) + c
    d_fake = (fake @ w[:, :, None])[..., 0].mean(1) + c
    torch.testing.assert_close(out["loss_d"], d_fake - d_real + lam * (norm - 1) ** 2)
    torch.testing.assert_close(out["loss_g"], -d_fake)
    torch.testing.assert_close(out["wasserstein"], d_real - d_fake)
    grad_w = fake.mean(1) - real.mean(1) + 2 * lam * (norm - 1)[:, None] * w / norm[:, None]
    torch.testing.assert_close(D.layers[0].weight.grad[:, 0], grad_w)
    torch.testing.assert_close(D.layers[0].bias.grad, torch.zeros(M, 1, dtype=F64))
    torch.testing.assert_close(G.layers[0].bias.grad, -w)


def test_players_gradients_do_not_leak():
    """Simultaneous step == the two single-player gradients; neither loss touches the other's .grad."""
    G, D, _, _ = stacked_and_loop("dcgan32", 3, 1 / 16)
    real, z, eps = draw(G, 100, 0)
    G.eval()  # keep BatchNorm fixed so repeated generator passes see the same net
    sentinel = 123.0

    for p in D.parameters():
        p.grad = torch.full_like(p, sentinel)
    generator_step(G, D, z)
    assert all(bool((p.grad == sentinel).all()) for p in D.parameters())
    g_alone = named_tensors(G, "grads")

    for p in G.parameters():
        p.grad = torch.full_like(p, sentinel)
    critic_step(G, D, real, z, eps)
    assert all(bool((p.grad == sentinel).all()) for p in G.parameters())
    d_alone = named_tensors(D, "grads")

    wgan_gp_step(G, D, real, z, eps)
    for name, g in named_tensors(G, "grads").items():
        torch.testing.assert_close(g, g_alone[name], rtol=0, atol=1e-12)
    for name, g in named_tensors(D, "grads").items():
        torch.testing.assert_close(g, d_alone[name], rtol=0, atol=1e-12)

    # a single backward of L_D + L_G would mix them: D's grads would then differ
    for p in list(G.parameters()) + list(D.parameters()):
        p.grad = None
    fake = G(z)
    x_hat = (eps[..., None, None, None] * real + (1 - eps[..., None, None, None]) * fake.detach())
    x_hat.requires_grad_(True)
    (gh,) = torch.autograd.grad(D(x_hat).sum(), x_hat, create_graph=True)
    loss_d = D(fake).mean(1) - D(real).mean(1) + 10 * ((gh.flatten(2).norm(dim=2) - 1) ** 2).mean(1)
    (loss_d - D(fake).mean(1)).sum().backward()
    leaked = named_tensors(D, "grads")
    assert max((leaked[k] - d_alone[k]).abs().max().item() for k in leaked) > 1e-6


def test_unknown_players_rejected():
    G, D, _, _ = stacked_and_loop("mlp", 2, 1 / 4)
    with pytest.raises(ValueError, match="players"):
        wgan_gp_step(G, D, *draw(G, 8, 0), players="gen")


def test_stacked_instance_norm_equals_instance_norm_with_double_backward():
    """StackedInstanceNorm2d (group_norm, one group per channel) against F.instance_norm, the
    implementation it replaced: values, first derivatives and the penalty's second derivatives."""
    from dadam3.gan.stacked import StackedInstanceNorm2d
    gen = torch.Generator().manual_seed(0)
    M, B, C = 3, 4, 5
    norms = [nn.InstanceNorm2d(C, affine=True).double() for _ in range(M)]
    for n in norms:
        with torch.no_grad():
            n.weight.copy_(torch.rand(C, generator=gen, dtype=torch.float64) + 0.5)
            n.bias.copy_(torch.randn(C, generator=gen, dtype=torch.float64))
    stacked = StackedInstanceNorm2d(norms)
    h = torch.randn(B, M * C, 4, 4, generator=gen, dtype=torch.float64).requires_grad_()

    def old(h):
        return F.instance_norm(h, None, None, stacked.weight.reshape(-1), stacked.bias.reshape(-1), True, 0.0,
                               stacked.eps)

    outs = []
    for fn in (stacked, old):
        y = fn(h)
        (gh,) = torch.autograd.grad((y ** 3).sum(), h, create_graph=True)        # a penalty-like 2nd order
        second = torch.autograd.grad(gh.norm(), [h, stacked.weight, stacked.bias])
        outs.append([y, gh, *second])
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("arch", ["dcgan32", "dcgan64"])
def test_channels_last_stacked_step_equals_the_default_layout(arch):
    """use_channels_last(): NHWC convolutions and the written-out instance norm give the same
    losses and gradients (penalty included) as the default layout, in float64."""
    results = []
    for cl in (False, True):
        G, D = build_stacked_nets(arch, M, identical_init=False, channels=3, width=1 / 32)
        G, D = G.double().use_channels_last(cl), D.double().use_channels_last(cl)
        if not cl:
            torch.manual_seed(0)
            state = (G.state_dict(), D.state_dict())
        else:
            G.load_state_dict(state[0])
            D.load_state_dict(state[1])
        gen = torch.Generator().manual_seed(1)
        size = image_size_of(arch)
        real = torch.rand(M, B, 3, size, size, generator=gen, dtype=F64) * 2 - 1
        z = torch.randn(M, B, G.in_shape[0], generator=gen, dtype=F64)
        eps = torch.rand(M, B, generator=gen, dtype=F64)
        out = wgan_gp_step(G, D, real, z, eps)
        results.append((out, [p.grad.clone() for p in list(G.parameters()) + list(D.parameters())]))
    (out_a, g_a), (out_b, g_b) = results
    for key in out_a:
        torch.testing.assert_close(out_a[key], out_b[key], rtol=1e-11, atol=1e-12)
    for a, b in zip(g_a, g_b):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11 * max(1.0, float(a.abs().max())))


@pytest.mark.parametrize("overrides", [[], ["model=dcgan64", "dataset=celeba"], ["model=mlp", "dataset=gaussians"]])
def test_build_nets_without_options_builds_what_the_config_builds(overrides):
    """One source for every default (issue 27 point 4): ``build_nets(arch)`` is ``model=arch``'s nets."""
    from dadam3.run.schema import compose, train_settings
    s = train_settings(compose("train", ["device=cpu", *overrides]))
    images = dict(channels=3) if s.dataset.is_images else {}
    torch.manual_seed(0)
    plain = build_nets(s.model.arch, **images)
    torch.manual_seed(0)
    configured = build_nets(s.model.arch, **images, **s.model.options)
    for a, b in zip(plain, configured):
        shapes = {k: v.shape for k, v in a.state_dict().items()}
        assert shapes == {k: v.shape for k, v in b.state_dict().items()}
        assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
