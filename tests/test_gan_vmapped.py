"""VmapNet (any nn.Module over M nodes by vmap + functional_call) against a loop over ordinary
modules, float64: forward, BatchNorm running statistics, WGAN-GP losses and gradients (the
penalty's double backward through a residual LayerNorm critic), Dadam3 steps with gossip, and
the StackedNet interface (node_module, averaged_module, state_dict rows, the trainer)."""
import pytest
import torch
import torch.nn as nn

from dadam3.gan import (StackedNet, VmapNet, build_nets, critic_step, generator_step, stack_nets,
                        wgan_gp_step)
from loop_reference import LoopReference, wgan_gp_step_loop
from dadam3.optim import build_optimizer, mixer_for
from stacked_compare import assert_steps_match_loop, max_abs_differences

M, B, NZ, SAMPLE = 3, 4, 5, (2, 6, 6)
F64 = torch.float64


class ResidualBlock(nn.Module):
    """h + conv(lrelu(LayerNorm(conv(h)))) on [B, C, H, W]."""

    def __init__(self, channels, size):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.LayerNorm([channels, size, size])
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, h):
        return h + self.conv2(nn.functional.leaky_relu(self.norm(self.conv1(h)), 0.2))


class ResidualCritic(nn.Module):
    """[B, 2, 6, 6] → [B]: conv stem, one residual LayerNorm block, a linear head."""

    def __init__(self):
        super().__init__()
        self.in_shape, self.out_shape = SAMPLE, ()
        self.stem = nn.Conv2d(SAMPLE[0], 4, 3, padding=1)
        self.block = ResidualBlock(4, SAMPLE[1])
        # no bias: ∂L_D/∂bias is 0 exactly (D(fake) − D(real)), and Adam-type steps would turn its
        # 1e-16 rounding into 1e-10 differences from the loop (as for a bias before BatchNorm)
        self.head = nn.Linear(4 * SAMPLE[1] * SAMPLE[2], 1, bias=False)

    def forward(self, x):
        # a nonlinearity after the block: conv2's bias would otherwise only shift the score, a
        # direction L_D and the penalty do not see (as the head's bias, hence none)
        h = nn.functional.leaky_relu(self.block(nn.functional.leaky_relu(self.stem(x), 0.2)), 0.2)
        return self.head(h.flatten(1)).squeeze(-1)


class SmallGenerator(nn.Module):
    """[B, nz] → [B, 2, 6, 6]: Linear+BatchNorm1d+ReLU, a residual LayerNorm MLP block, Linear+Tanh."""

    def __init__(self):
        super().__init__()
        self.in_shape, self.out_shape = (NZ,), SAMPLE
        self.inp = nn.Sequential(nn.Linear(NZ, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU())
        self.res = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 16), nn.GELU())
        self.out = nn.Linear(16, 2 * 6 * 6)
        self.scale = nn.Parameter(torch.ones(()))   # a root-level parameter

    def forward(self, z):
        h = self.inp(z)
        h = h + self.res(h)
        return torch.tanh(self.scale * self.out(h)).reshape(-1, *SAMPLE)


def perturb_(module, gen, scale=0.1):
    """Move every floating-point parameter and buffer off its default init (LayerNorm's 1 and 0,
    BatchNorm's running statistics included)."""
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.is_floating_point():
                noise = scale * torch.randn(t.shape, generator=gen, dtype=t.dtype)
                t.mul_(1 + noise.abs()) if name.endswith("running_var") else t.add_(noise)
    return module


def node_pairs(seed=0):
    """M distinct float64 (G, D) pairs of ordinary modules and the vmapped pair built from them."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 100)
    Gs = [perturb_(SmallGenerator().double(), gen) for _ in range(M)]
    Ds = [perturb_(ResidualCritic().double(), gen) for _ in range(M)]
    return stack_nets(Gs), stack_nets(Ds), Gs, Ds


def draw(seed):
    gen = torch.Generator().manual_seed(seed)
    real = torch.rand(M, B, *SAMPLE, generator=gen, dtype=F64) * 2 - 1
    z = torch.randn(M, B, NZ, generator=gen, dtype=F64)
    eps = torch.rand(M, B, generator=gen, dtype=F64)
    return real, z, eps


def assert_match(stacked, nets, kinds=("params", "grads", "buffers"), tol=1e-12):
    diffs = max_abs_differences(stacked, nets, kinds)
    assert diffs, "nothing compared"
    bad = {k: v for k, v in diffs.items() if not v <= tol}
    assert not bad, bad


def test_stack_nets_picks_the_grouped_path_for_the_paper_nets_and_vmap_otherwise():
    G, D = build_nets("mlp", hidden=8)
    assert isinstance(stack_nets([G] * M), StackedNet) and isinstance(stack_nets(D, M), StackedNet)
    Gv, Dv, Gs, Ds = node_pairs()
    assert isinstance(Gv, VmapNet) and isinstance(Dv, VmapNet)
    assert Gv.num_nodes == Dv.num_nodes == M
    assert (Gv.in_shape, Gv.out_shape, Dv.in_shape, Dv.out_shape) == ((NZ,), SAMPLE, SAMPLE, ())
    for v, single in ((Gv, Gs[0]), (Dv, Ds[0])):   # names equal the single module's, rows are nodes
        assert [k for k, _ in v.named_parameters()] == [k for k, _ in single.named_parameters()]
        assert list(v.state_dict()) == list(single.state_dict())
        for k, t in v.state_dict().items():
            assert t.shape == (M, *single.state_dict()[k].shape)
    assert "scale" in dict(Gv.named_parameters()) and "inp.1.running_mean" in dict(Gv.named_buffers())
    # a paper net with a layer setting the grouped path lacks falls back to vmap
    conv = build_nets("dcgan32", channels=1, width=1 / 32)[1]
    conv.layers[0].padding_mode = "reflect"
    assert isinstance(stack_nets(conv, 2), VmapNet)


def test_architectures_must_agree():
    with pytest.raises(ValueError, match="different architectures"):
        VmapNet([SmallGenerator(), ResidualCritic()])
    other = ResidualCritic()
    other.head = nn.Linear(4 * 36, 1, bias=True)
    with pytest.raises(ValueError, match="different architectures"):
        VmapNet([ResidualCritic(), other])
    with pytest.raises(ValueError, match="node rows"):
        VmapNet.replicate(ResidualCritic(), M)(torch.zeros(M + 1, B, *SAMPLE))


@pytest.mark.parametrize("train_mode", [True, False])
def test_forward_equals_loop_over_modules(train_mode):
    G, D, Gs, Ds = node_pairs()
    for net in [G, D] + Gs + Ds:
        net.train(train_mode)
    real, z, _ = draw(1)
    fake = G(z)
    assert fake.shape == (M, B, *SAMPLE)
    torch.testing.assert_close(fake, torch.stack([g(z[i]) for i, g in enumerate(Gs)]), rtol=1e-12, atol=1e-13)
    scores = D(real)
    assert scores.shape == (M, B)
    torch.testing.assert_close(scores, torch.stack([d(real[i]) for i, d in enumerate(Ds)]), rtol=1e-12, atol=1e-13)
    # BatchNorm: batch statistics and running-stat updates per node in train mode, running stats in eval
    assert_match(G, Gs, ("params", "buffers"), tol=1e-14)
    counts = G.state_dict()["inp.1.num_batches_tracked"]
    assert counts.tolist() == ([1] * M if train_mode else [0] * M)


@pytest.mark.parametrize("players", ["both", "critic", "generator"])
def test_wgan_gp_step_equals_loop(players):
    G, D, Gs, Ds = node_pairs(seed=2)
    for k in range(2):                                  # twice: .grad overwritten, buffers moved again
        real, z, eps = draw(10 + k)
        if players == "both":
            out, ref = wgan_gp_step(G, D, real, z, eps), wgan_gp_step_loop(Gs, Ds, real, z, eps)
        elif players == "critic":
            out, ref = critic_step(G, D, real, z, eps), wgan_gp_step_loop(Gs, Ds, real, z, eps, players="critic")
        else:
            out, ref = generator_step(G, D, z), wgan_gp_step_loop(Gs, Ds, None, z, None, players="generator")
        assert out.keys() == ref.keys()
        for key in out:
            torch.testing.assert_close(out[key], ref[key], rtol=1e-11, atol=1e-12)
        if players != "generator":
            assert (out["gp"] > 1e-3).all()                 # the penalty is really there
        want_g, want_d = players in ("both", "generator"), players in ("both", "critic")
        kinds = ("params", "grads", "buffers")
        if want_g:
            assert_match(G, Gs, kinds, tol=1e-11)
        else:
            assert_match(G, Gs, ("params", "buffers"), tol=1e-11)
            assert all(p.grad is None for p in G.parameters())
        if want_d:
            assert_match(D, Ds, kinds, tol=1e-11)
            assert all(p.grad.abs().max() > 0 for p in D.parameters())
        else:
            assert all(p.grad is None for p in D.parameters())


def test_dadam3_gossip_steps_equal_loop_reference():
    G, D, Gs, Ds = node_pairs(seed=3)
    hp = {"lr": 1e-2, "beta1": 0.5, "beta2": 0.9, "beta3": 0.5}
    ref = LoopReference(Gs, Ds, lambda ps: build_optimizer("dadam3", ps, mixer_for("dadam3", M, "ring"), **hp))
    mixer = mixer_for("dadam3", M, "ring")
    opt_g = build_optimizer("dadam3", G.parameters(), mixer, **hp)
    opt_d = build_optimizer("dadam3", D.parameters(), mixer, **hp)
    # the optimizers made every parameter a strided view of their flat [M, P] buffer
    assert not all(p.is_contiguous() for p in D.parameters())
    start = {k: v.clone() for k, v in D.state_dict().items()}
    assert_steps_match_loop(G, D, opt_g, opt_d, ref, (draw(20 + k) for k in range(3)))
    assert_match(G, ref.Gs, ("buffers",), tol=1e-10)
    assert not torch.allclose(D.state_dict()["head.weight"], start["head.weight"])    # it moved


def test_node_module_averaged_module_and_state_dict_rows():
    G, D, Gs, Ds = node_pairs(seed=4)
    G.eval()
    _, z, _ = draw(5)
    for i in range(M):
        node = G.node_module(i)
        assert isinstance(node, SmallGenerator) and not node.training
        for k, v in node.state_dict().items():
            assert torch.equal(v, Gs[i].state_dict()[k]) and v.dtype == Gs[i].state_dict()[k].dtype
        torch.testing.assert_close(node(z[i]), Gs[i].eval()(z[i]), rtol=0, atol=0)
    assert [type(m) for m in D.to_modules()] == [ResidualCritic] * M
    avg = G.averaged_module()
    for k, v in avg.state_dict().items():
        rows = torch.stack([g.state_dict()[k] for g in Gs])
        expected = rows.mean(0) if rows.is_floating_point() else rows[0]
        torch.testing.assert_close(v, expected, rtol=1e-15, atol=1e-15)
    same = VmapNet.replicate(Gs[1], M).averaged_module()
    for k, v in same.state_dict().items():      # the mean of M equal rows (to rounding)
        torch.testing.assert_close(v, Gs[1].state_dict()[k], rtol=1e-15, atol=1e-16)
    # a checkpoint round trip: load_state_dict into a fresh stacked net of other values
    other = stack_nets([SmallGenerator().double() for _ in range(M)])
    other.load_state_dict(G.state_dict())
    assert all(torch.equal(v, G.state_dict()[k]) for k, v in other.state_dict().items())
    assert torch.equal(other.eval()(z), G(z))


def test_random_ops_follow_the_randomness_policy():
    net = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5)).double()
    x = torch.ones(M, B, 3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="randomness"):
        VmapNet.replicate(net, M)(x)
    out = VmapNet.replicate(net, M, randomness="different")(x)
    # each node its own dropout mask: the zero patterns differ (a property of the draw, not of rounding)
    assert not torch.equal(out[0] == 0, out[1] == 0)
    # without dropout (eval) the vmapped path is the plain module's: float64, to rounding
    torch.testing.assert_close(VmapNet.replicate(net, M).eval()(x)[0], net.eval()(x[0]),
                               rtol=1e-12, atol=1e-12)


def test_trainer_runs_vmapped_nets_with_checkpoint_and_resume(tmp_path, monkeypatch):
    """The toy-Gaussian run with VmapNet pairs of the same MLPs: the trainer, samplers, metrics,
    gossip and checkpoints unchanged; the result equals the StackedNet run's."""
    import dadam3.run.start as build_mod
    from trainer_runs import TOY, train

    stacked_build = build_mod.build_stacked_nets

    def vmapped_build(*args, **kwargs):
        G, D = stacked_build(*args, **kwargs)
        return VmapNet(G.to_modules()), VmapNet(D.to_modules())

    overrides = TOY + ["loop.iterations=6", "nodes=3"]
    reference = train(overrides, tmp_path / "stacked")
    monkeypatch.setattr(build_mod, "build_stacked_nets", vmapped_build)
    t = train(overrides[:-2] + ["loop.iterations=3", "nodes=3"], tmp_path / "vmapped")
    assert isinstance(t.G, VmapNet) and isinstance(t.D, VmapNet)
    t = train(overrides + [f"resume={tmp_path / 'vmapped'}"], tmp_path / "ignored")
    assert t.run_dir == tmp_path / "vmapped"
    assert isinstance(t.G, VmapNet) and t.opt_g.k == 6
    for net, ref in ((t.G, reference.G), (t.D, reference.D)):
        for k, v in net.state_dict().items():
            torch.testing.assert_close(v, ref.state_dict()[k], rtol=1e-5, atol=1e-6)


class TiedNet(nn.Module):
    """Two linear layers sharing one weight (tied, as in weight-tied autoencoders)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(torch.tanh(self.a(x))).sum(-1)


def test_tied_weights_stay_one_leaf():
    torch.manual_seed(6)
    nets = [TiedNet().double() for _ in range(M)]
    v = VmapNet(nets)
    assert [k for k, _ in v.named_parameters()] == ["a.weight", "a.bias", "b.bias"] and v.a.weight is v.b.weight
    x = torch.randn(M, B, 4, dtype=F64)
    torch.testing.assert_close(v(x), torch.stack([n(x[i]) for i, n in enumerate(nets)]), rtol=1e-13, atol=1e-14)
    v(x).sum().backward()
    for n in nets:
        n(x[nets.index(n)]).sum().backward()
    assert_match(v, nets, ("grads",), tol=1e-13)       # both uses of the weight in one gradient
    node = v.node_module(2)
    assert node.a.weight is node.b.weight and torch.equal(node.a.weight, nets[2].a.weight)
