"""ExtraAdam (dadam3/optim/extra_adam.py) on its extra-gradient skeleton, float64.

* Its first two steps against a hand computation in numpy (the paper's equations written out
  here, not the class), on one node and on three nodes mixed by the star's W (written out too),
  with a minimising and a maximising player; the gradient callback is called exactly twice per
  step, the second time at the extrapolated point.
* Engine against engine (eager, numba, torch.compile), both players stepped together against one
  by one, and the batched GAN iteration (dadam3/gan/iteration.py) against the loop over M modules.
"""
import csv
import json

import numpy as np
import pytest
import torch

from dadam3.gan import build_stacked_nets
from dadam3.gan.iteration import simultaneous_iteration
from dadam3.mixing import LocalMixer
from dadam3.optim import build_optimizer, mixer_for, step_together
from dadam3.optim.base import gradients_per_step
from dadam3.optim.extra_adam import ExtraAdam
from dadam3.topologies import build_topology
from loop_reference import LoopReference
from trainer_runs import SMALL, TOY, cli, train

HP = dict(lr=0.1, beta1=0.5, beta2=0.9, eps=1e-3)
A, K, C = 0.5, 1.5, 0.7           # f(x, y) = sum A/2 x^2 + K x.y - A/2 y^2 + C x, per node (2-vectors)
STAR3 = np.array([[1 / 3, 1 / 3, 1 / 3], [1 / 3, 2 / 3, 0.0], [1 / 3, 0.0, 2 / 3]])   # W of the star, M = 3


def operator(x, y):
    """G = [grad_x f, -grad_y f] of the game above (numpy, per node)."""
    return A * x + K * y + C, -(K * x - A * y)


def hand_steps(x, y, steps, W):
    """ExtraAdam by hand (module docstring of dadam3.optim.extra_adam): the iterates after each
    step and the extrapolated points, as numpy arrays."""
    b1, b2, eps, lr = HP["beta1"], HP["beta2"], HP["eps"], HP["lr"]
    m = [np.zeros_like(x), np.zeros_like(y)]
    v = [np.zeros_like(x), np.zeros_like(y)]
    xs, halves = [], []
    for k in range(1, steps + 1):
        z = [x, y]
        half = []
        for player, g in enumerate(operator(x, y)):                     # extrapolation, tick 2k - 1
            m[player] = b1 * m[player] + (1 - b1) * g
            v[player] = b2 * v[player] + (1 - b2) * g * g
            d = (m[player] / (1 - b1 ** (2 * k - 1))) / (np.sqrt(v[player] / (1 - b2 ** (2 * k - 1))) + eps)
            half.append(z[player] - lr * d)
        new = []
        for player, g in enumerate(operator(*half)):                     # update from X_{k-1}, tick 2k
            m[player] = b1 * m[player] + (1 - b1) * g
            v[player] = b2 * v[player] + (1 - b2) * g * g
            d = (m[player] / (1 - b1 ** (2 * k))) / (np.sqrt(v[player] / (1 - b2 ** (2 * k))) + eps)
            new.append(W @ (z[player] - lr * d))
        x, y = new
        halves.append(half)
        xs.append((x, y))
    return xs, halves


def start(nodes, seed=0):
    gen = np.random.default_rng(seed)
    return gen.normal(size=(nodes, 2)), gen.normal(size=(nodes, 2))


def players(x0, y0):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(y0, dtype=torch.float64, requires_grad=True)
    return x, y


def set_gradients(x, y, seen=None):
    """The game's gradients by autograd (f written in torch), into .grad; notes the point."""
    if seen is not None:
        seen.append((x.detach().clone().numpy(), y.detach().clone().numpy()))
    f = (A / 2 * x * x + K * x * y - A / 2 * y * y + C * x).sum()
    x.grad, y.grad = torch.autograd.grad(f, [x, y])


def build(x, y, mixer, engine="auto", compile=None):
    return build_optimizer("extra_adam", [{"params": [x]}, {"params": [y], "maximize": True}], mixer,
                           engine=engine, compile=compile, **HP)


@pytest.mark.parametrize("nodes", [1, 3])
@pytest.mark.parametrize("engine", ["eager", "auto"])
def test_first_two_steps_equal_the_hand_computation(nodes, engine):
    x0, y0 = start(nodes)
    mixer = None if nodes == 1 else LocalMixer(build_topology("star", 3, 1))
    W = np.eye(1) if nodes == 1 else STAR3
    if mixer is not None:
        np.testing.assert_allclose(mixer.topology.operator(1), STAR3, rtol=1e-15, atol=0)
    x, y = players(x0, y0)
    opt = build(x, y, mixer, engine)
    seen = []
    for k in range(2):
        opt.step(lambda: set_gradients(x, y, seen))
        assert len(seen) == 2 * (k + 1)                      # the callback: exactly twice per step
    expected, halves = hand_steps(x0, y0, 2, W)
    np.testing.assert_allclose(x.detach().numpy(), expected[-1][0], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(y.detach().numpy(), expected[-1][1], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(seen[1][0], halves[0][0], rtol=1e-13, atol=1e-14)   # 2nd gradient: at X_{1/2}
    np.testing.assert_allclose(seen[3][1], halves[1][1], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(seen[2][0], expected[0][0], rtol=1e-13, atol=1e-14)  # 1st of step 2: at X_1
    assert (opt.engine.name == "numba") == (engine == "auto")
    assert gradients_per_step(ExtraAdam) == 2


def test_a_step_without_a_gradient_callback_is_refused_before_anything_moves():
    x, y = players(*start(3))
    opt = build(x, y, mixer_for("extra_adam", 3, "star"))
    set_gradients(x, y)
    before = x.detach().clone()
    with pytest.raises(RuntimeError, match=r"^ExtraAdam takes 2 gradients per step: step all players together, "
                                           r"with a gradient callback"):
        opt.step()
    assert opt.k == 0 and torch.equal(x.detach(), before)


def run(engine, joint, compile=None, steps=3):
    x, y = players(*start(3, seed=1))
    mixer = LocalMixer(build_topology("one_peer_exponential", 3, 1))
    if joint:                                                  # two optimizers, one exchange per round
        opt_x = build_optimizer("extra_adam", [x], mixer, engine=engine, compile=compile, **HP)
        opt_y = build_optimizer("extra_adam", [y], mixer, engine=engine, compile=compile, maximize=True, **HP)
        for _ in range(steps):
            set_gradients(x, y)
            step_together([opt_y, opt_x], lambda: set_gradients(x, y))
        opts = (opt_x, opt_y)
    else:
        opt = build(x, y, mixer, engine, compile)
        for _ in range(steps):
            opt.step(lambda: set_gradients(x, y))
        opts = (opt, opt)
    return (x, y), opts


@pytest.mark.parametrize("engine, joint, compile", [("auto", False, None), ("eager", True, None),
                                                    ("auto", True, None),
                                                    pytest.param("auto", False, True, marks=pytest.mark.slow)])
def test_engines_and_joint_steps_equal_the_eager_step(engine, joint, compile):
    (x0, y0), (ref, _) = run("eager", joint=False)
    (x, y), opts = run(engine, joint, compile)
    assert opts[0].engine.name == {"eager": "eager", "auto": "compiled" if compile else "numba"}[engine]
    torch.testing.assert_close(x, x0, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(y, y0, rtol=1e-14, atol=1e-15)
    for p, q, opt in ((x, x0, opts[0]), (y, y0, opts[1])):
        for key in ("m", "v"):
            torch.testing.assert_close(opt.state[p][key], ref.state[q][key], rtol=1e-14, atol=1e-15)


def test_batched_gan_iteration_equals_loop_reference(monkeypatch):
    """dadam3/gan/iteration.py's iteration (stacked nets, two gradients per step) against the loop
    over M ordinary modules, whose stacked copies the same optimizer steps with its own callback."""
    import dadam3.gan.iteration as iteration
    M, B = 3, 4
    torch.manual_seed(0)
    G, D = build_stacked_nets("mlp", M, identical_init=False, hidden=8)
    G, D = G.double(), D.double()
    hp = {"lr": 1e-2, "beta1": 0.5, "beta2": 0.9}
    ref_mixer = mixer_for("extra_adam", M, "star")            # one mixer: the players step together
    ref = LoopReference(G.to_modules(), D.to_modules(), lambda ps: build_optimizer("extra_adam", ps, ref_mixer, **hp))
    mixer = mixer_for("extra_adam", M, "star")
    opt_g = build_optimizer("extra_adam", G.parameters(), mixer, **hp)
    opt_d = build_optimizer("extra_adam", D.parameters(), mixer, **hp)
    calls = []
    evaluate = iteration.wgan_gp_step
    monkeypatch.setattr(iteration, "wgan_gp_step", lambda *a, **kw: (calls.append(1), evaluate(*a, **kw))[1])
    gen = torch.Generator().manual_seed(1)
    for k in range(3):
        batch = (torch.rand(M, B, 2, generator=gen, dtype=torch.float64) * 2 - 1,
                 torch.randn(M, B, G.in_shape[0], generator=gen, dtype=torch.float64),
                 torch.rand(M, B, generator=gen, dtype=torch.float64))
        out = simultaneous_iteration(G, D, (opt_d, opt_g), batch)
        assert len(calls) == 2 * (k + 1)                         # two gradients per iteration
        ref_out = ref.gradients(*batch)
        step_together([ref.opt_d, ref.opt_g], lambda b=batch: ref.gradients(*b))
        for key in ("loss_d", "loss_g"):
            torch.testing.assert_close(out[key], ref_out[key], rtol=1e-10, atol=1e-12)
    for mine, theirs in ((G, ref.g_params), (D, ref.d_params)):
        for p, q in zip(mine.parameters(), theirs):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-10, atol=1e-12)


def test_the_synthetic_runner_runs_it_from_the_command_line(tmp_path):
    r = cli("optimizer=extra_adam", "nodes=3", "topology=star", "iterations=100", f"hydra.run.dir={tmp_path}",
            module="dadam3.synthetic")
    assert r.returncode == 0, r.stderr[-3000:]
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["iteration", "error", "avg_grad_sq_norm"] and rows[-1][0] == "100"
    assert all(np.isfinite(float(v)) for v in rows[-1])


def test_the_gan_trainer_runs_it_from_the_command_line(tmp_path):
    run = tmp_path / "run"
    r = cli("experiment=toy_gaussians", "optimizer=extra_adam", "loop.iterations=3", "model.hidden=8",
            "loop.batch_size=4", "metrics.samples=20", "loop.progress=false", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["status"] == "finished" and records[-1]["iteration"] == 3


def test_the_alternating_form_calls_each_players_gradient_twice_per_step(tmp_path, monkeypatch):
    """loop.n_critic=2: each critic step and the generator step take their second gradient on their batch."""
    import dadam3.gan.iteration as step
    seen = {"critic": 0, "generator": 0}
    critic, generator = step.critic_step, step.generator_step
    monkeypatch.setattr(step, "critic_step", lambda *a, **kw: (seen.__setitem__("critic", seen["critic"] + 1),
                                                                  critic(*a, **kw))[1])
    monkeypatch.setattr(step, "generator_step", lambda *a, **kw: (
        seen.__setitem__("generator", seen["generator"] + 1), generator(*a, **kw))[1])
    t = train([*SMALL, "optimizer=extra_adam", "loop.n_critic=2", "nodes=2"], tmp_path / "run")
    assert t.state.iteration == 3 and seen == {"critic": 3 * 2 * 2, "generator": 3 * 2}


def test_a_resumed_run_ends_where_an_uninterrupted_run_does(tmp_path):
    """The checkpoint holds what a step needs (moments, step counter; the kept X_{k-1} is rewritten)."""
    from test_lr_warmup import F64, _params, stopped_after
    base = [*TOY, *F64, "optimizer=extra_adam", "loop.iterations=4", "nodes=3", "topology=star"]
    whole = train(base, tmp_path / "whole")
    stopped_after(base, tmp_path / "run", 2)
    resumed = train([*base, f"resume={tmp_path / 'run'}"], tmp_path / "x")
    assert resumed.opt_d.k == whole.opt_d.k == 4
    for a, b in zip(_params(whole), _params(resumed)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
