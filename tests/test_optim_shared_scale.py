"""Dadam3 with one adaptive scale for every node (dadam3/optim/adam3_shared.py): ``dadam3_shared``
(the scale tracked by gossip), ``cadam3_shared`` (on the complete graph) and ``dadam3_shared_exact``
(the ideal reference: one exact node average of the tracked scale per step).

* its first two steps by hand, M = 3 (float64);
* batched (every node at once, flat buffers) against a loop over the M nodes written from the
  equations, on both engines of the CPU (eager, numba), the synthetic game's compiled loop against
  the torch optimizer, and torch.compile (slow);
* exact resume from a state dict; on identical nodes equal to Dadam3 to 1e-12; the tracking
  invariant (node average of Lambda_0 + U = node average of Lambda) for doubly stochastic W;
* the bytes its mixer counts: one buffer more per step for the tracked scale, a ring all-reduce
  for the exact average;
* on the heterogeneous synthetic game (spread 1) it rests at z*, where Dadam3 does not.
"""
import math

import numpy as np
import pytest
import torch

from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_kernels import kernel_for
from dadam3.games.synthetic_run import run_synthetic
from dadam3.mixing import LocalMixer
from dadam3.optim import OPTIMIZERS, build_optimizer, mixer_for
from dadam3.topologies import build_topology

W3 = [[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]]
TINY_EPS = 1e-300          # sqrt(v) + 1e-300 == sqrt(v) in float64 for every v reached here
NAMES = ("dadam3_shared", "dadam3_shared_exact", "cadam3_shared")


def values(t):
    return t.detach().reshape(-1).tolist()


def three_nodes(name):
    p = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).reshape(3, 1).requires_grad_()
    opt = build_optimizer(name, [p], LocalMixer(build_topology("explicit", 3, matrix=W3)), lr=0.1, beta1=0.5,
                          beta2=0.5, beta3=0.5, eps=TINY_EPS)
    return p, opt


def feed(opt, p, g):
    p.grad = torch.tensor(g, dtype=torch.float64).reshape(-1, 1)
    opt.step()


@pytest.mark.parametrize("name", ["dadam3_shared", "dadam3_shared_exact"])
def test_two_steps_by_hand(name):
    p, opt = three_nodes(name)
    assert values(p) == pytest.approx([1.75, 2.0, 2.25])                   # Z_1 = W X_0
    feed(opt, p, [1.0, -2.0, 2.0])
    st = opt.state[p]
    # M_1 = (0.5, -1, 1), V_1 = (0.5, 2, 2), Lambda_1 = 0.5 max(0, V_1) = (0.25, 1, 1);
    # U_1 = W U_0 + Lambda_1 - Lambda_0 = (0.25, 1, 1) (U_0 = 0), D_1 = M_1 / sqrt(U_1) = (1, -1, 1)
    assert values(st["lam"]) == pytest.approx([0.25, 1.0, 1.0])
    assert values(st["u"]) == pytest.approx([0.25, 1.0, 1.0])
    assert values(st["d"]) == pytest.approx([1.0, -1.0, 1.0])
    assert values(st["x"]) == pytest.approx([1.7, 2.0, 2.2])               # X_1 = W (0.9, 2.1, 2.9)
    assert values(p) == pytest.approx([1.85, 1.975, 1.975])                # Z_2 = W (1.6, 2.1, 2.1)
    feed(opt, p, [2.0, 1.0, 0.0])
    # M_2 = (1.25, 0, 0.5), V_2 = (2.25, 1.5, 1), Lambda_2 = 0.5 Lambda_1 + 0.5 max(Lambda_1, V_2) = (1.25, 1.25, 1)
    assert values(st["lam"]) == pytest.approx([1.25, 1.25, 1.0])
    if name == "dadam3_shared":
        # W U_1 = (0.625, 0.8125, 0.8125); U_2 = W U_1 + Lambda_2 - Lambda_1 = (1.625, 1.0625, 0.8125)
        u2 = [1.625, 1.0625, 0.8125]
    else:
        # 11^T/3 U_1 = 0.75 each; U_2 = (1.75, 1.0, 0.75)
        u2 = [1.75, 1.0, 0.75]
    assert values(st["u"]) == pytest.approx(u2)
    assert sum(u2) == pytest.approx(sum([1.25, 1.25, 1.0]))                 # the tracking invariant
    d2 = [1.25 / math.sqrt(u2[0]), 0.0, 0.5 / math.sqrt(u2[2])]
    assert values(st["d"]) == pytest.approx(d2)
    x2 = np.array(W3) @ (np.array([1.7, 2.0, 2.2]) - 0.1 * np.array(d2))
    assert values(st["x"]) == pytest.approx(x2.tolist())
    assert values(p) == pytest.approx((np.array(W3) @ (x2 - 0.1 * np.array(d2))).tolist())
    assert opt.k == 2


# ---- a loop over the M nodes, written from the equations (docs/choices.md) -----------------------
def loop_reference(name, x0, grads, W, hp, rounds=1, maximize=False):
    """Every node in a Python loop, float64: Z, X, M, V, Lambda, U node by node (t rounds of W per mix)."""
    M, n = x0.shape
    Wt = np.linalg.matrix_power(np.asarray(W), rounds)
    J = np.full((M, M), 1.0 / M)
    sign = -1.0 if maximize else 1.0
    x = [x0[i].copy() for i in range(M)]
    d = [np.zeros(n) for _ in range(M)]
    m = [np.zeros(n) for _ in range(M)]
    v = [np.zeros(n) for _ in range(M)]
    lam = [np.full(n, hp["lambda0"]) for _ in range(M)]
    u = [np.zeros(n) for _ in range(M)]

    def mix(op, vecs):
        return [sum(op[i, j] * vecs[j] for j in range(M)) for i in range(M)]
    z = mix(Wt, x)
    for k, g in enumerate(grads, start=1):
        b1 = hp["beta1"] * hp["beta1_decay"] ** (k - 1)
        u = mix(J if name == "dadam3_shared_exact" else Wt, u)                # W^t U_{k-1}
        for i in range(M):
            gi = sign * g[i]
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = hp["beta2"] * v[i] + (1 - hp["beta2"]) * gi * gi
            new = hp["beta3"] * lam[i] + (1 - hp["beta3"]) * np.maximum(lam[i], v[i])
            u[i] = u[i] + new - lam[i]                                         # U_k
            lam[i] = new
            d[i] = m[i] / (np.sqrt(hp["lambda0"] + u[i]) + hp["eps"])
        x = mix(Wt, [x[i] - hp["lr"] * d[i] for i in range(M)])
        z = mix(Wt, [x[i] - hp["lr"] * d[i] for i in range(M)])
    return np.array(z), np.array(u), np.array(lam)


HP = dict(lr=0.05, beta1=0.6, beta2=0.9, beta3=0.3, eps=1e-3, beta1_decay=0.9, lambda0=0.01)


@pytest.mark.parametrize("engine", ["eager", "auto"])
@pytest.mark.parametrize("name", ["dadam3_shared", "dadam3_shared_exact"])
def test_batched_equals_a_loop_over_the_nodes(name, engine):
    M, n, steps = 5, 3, 6
    topo = build_topology("erdos_renyi", M, 2, p=0.7, seed=3)             # two gossip rounds per mix
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=(M, n))
    grads = [rng.normal(size=(M, n)) for _ in range(steps)]
    theta = torch.tensor(x0[:, :2], requires_grad=True)
    alpha = torch.tensor(x0[:, 2:], requires_grad=True)
    opt = build_optimizer(name, [{"params": [theta]}, {"params": [alpha], "maximize": True}], LocalMixer(topo),
                          engine=engine, **HP)
    assert opt.engine.name == ("eager" if engine == "eager" else "numba")
    for g in grads:
        theta.grad, alpha.grad = torch.tensor(g[:, :2]), torch.tensor(g[:, 2:])
        opt.step()
    z_t, u_t, lam_t = loop_reference(name, x0[:, :2], [g[:, :2] for g in grads], topo.static_W, HP, rounds=2)
    z_a, u_a, lam_a = loop_reference(name, x0[:, 2:], [g[:, 2:] for g in grads], topo.static_W, HP, rounds=2,
                                     maximize=True)
    np.testing.assert_allclose(theta.detach().numpy(), z_t, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(alpha.detach().numpy(), z_a, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(opt.state[theta]["u"].numpy(), u_t, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(opt.state[alpha]["lam"].numpy(), lam_a, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", NAMES)
def test_the_tracking_invariant_holds_for_a_doubly_stochastic_w(name):
    """mean_i (Lambda_0 + U_i,k) = mean_i Lambda_i,k at every k (W: ring, a time-varying one-peer
    exponential graph, the complete graph), while the nodes' own scales differ."""
    M = 6
    theta = torch.zeros(M, 4, dtype=torch.float64, requires_grad=True)
    topology = "one_peer_exponential" if name == "dadam3_shared" else "ring"
    opt = build_optimizer(name, [theta], mixer_for(name, M, topology), lr=0.01, lambda0=0.2)
    rng = np.random.default_rng(1)
    spread = torch.arange(1, M + 1, dtype=torch.float64).reshape(M, 1)      # node i's gradients ~ i
    for _ in range(30):
        theta.grad = torch.tensor(rng.normal(size=(M, 4))) * spread
        opt.step()
        lam, u = opt.state[theta]["lam"], opt.state[theta]["u"]
        torch.testing.assert_close((0.2 + u).mean(0), lam.mean(0), rtol=1e-13, atol=0.0)
    assert (lam.std(0) > 0.1 * lam.mean(0)).all()                            # the nodes' own scales differ


@pytest.mark.parametrize("name", ["dadam3_shared", "dadam3_shared_exact"])
def test_on_identical_nodes_it_is_dadam3(name):
    M = 5
    rng = np.random.default_rng(2)
    g = [np.repeat(rng.normal(size=(1, 3)), M, axis=0) * (1 + k % 3) for k in range(25)]
    out = {}
    for opt_name in ("dadam3", name):
        theta = torch.ones(M, 3, dtype=torch.float64, requires_grad=True)
        opt = build_optimizer(opt_name, [theta], mixer_for(opt_name, M, "ring"), lr=0.05, lambda0=0.3)
        for gk in g:
            theta.grad = torch.tensor(gk)
            opt.step()
        out[opt_name] = theta.detach().clone()
    torch.testing.assert_close(out[name], out["dadam3"], rtol=0.0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_resume_from_a_state_dict_is_exact(name):
    M = 4
    rng = np.random.default_rng(3)
    grads = [torch.tensor(rng.normal(size=(M, 2))) for _ in range(8)]

    def fresh():
        theta = torch.zeros(M, 2, dtype=torch.float64, requires_grad=True)
        return theta, build_optimizer(name, [theta], mixer_for(name, M, "ring"), lr=0.05, start=False)
    theta, opt = fresh()
    opt.start()
    for g in grads:
        theta.grad = g.clone()
        opt.step()
    theta_a, opt_a = fresh()                        # the first half again, saved, then resumed in a new optimizer
    opt_a.start()
    for g in grads[:4]:
        theta_a.grad = g.clone()
        opt_a.step()
    state, point = opt_a.state_dict(), theta_a.detach().clone()
    theta_b, opt_b = fresh()
    with torch.no_grad():
        theta_b.copy_(point)
    opt_b.load_state_dict(state)
    for g in grads[4:]:
        theta_b.grad = g.clone()
        opt_b.step()
    assert torch.equal(theta_b, theta) and torch.equal(opt_b.state[theta_b]["u"], opt.state[theta]["u"])


def test_the_mixer_counts_the_scales_gossip_and_charges_the_exact_average_as_an_all_reduce():
    """Per step Dadam3 mixes X and Z (2 buffers); the tracked scale adds U (3 buffers); the exact
    reference averages U by an all-reduce, 2 (M - 1) / M of a buffer per node."""
    M, P = 5, 3
    sent = {}
    for name in ("dadam3", "dadam3_shared", "dadam3_shared_exact"):
        theta = torch.zeros(M, P, dtype=torch.float64, requires_grad=True)
        opt = build_optimizer(name, [theta], mixer_for(name, M, "ring"), lr=0.1)
        before = opt.mixer.bytes_sent.copy()
        theta.grad = torch.ones(M, P, dtype=torch.float64)
        opt.step()
        sent[name] = opt.mixer.bytes_sent - before
    buffer = P * 8                                                        # one node's rows, float64
    np.testing.assert_array_equal(sent["dadam3"], 2 * 2 * buffer)        # 2 mixes x 2 ring neighbours
    np.testing.assert_array_equal(sent["dadam3_shared"], 3 * 2 * buffer)
    np.testing.assert_allclose(sent["dadam3_shared_exact"], 2 * 2 * buffer + 2 * (M - 1) / M * buffer)


@pytest.mark.parametrize("name", ["dadam3_shared", "dadam3_shared_exact"])
def test_the_games_compiled_loop_equals_the_torch_optimizer(name):
    assert kernel_for(OPTIMIZERS[name].cls) is not None
    every = np.arange(1, 301)
    kw = dict(nodes=5, iterations=300, seed=1, topology={"name": "ring"}, log_its=every)
    game = SyntheticGame(spread=1.0)
    hp = {"lr": 1e-2, "beta1": 0.0, "beta2": 1.0 / (1.0 + game.c ** 2), "beta3": 0.1}
    ref = run_synthetic(game, name, hp, engine="torch", **kw)
    fast = run_synthetic(game, name, hp, engine="numba", **kw)
    np.testing.assert_allclose(fast.error, ref.error, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(fast.final_point, ref.final_point, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fast.final_scale, ref.final_scale, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dadam3_shared", "dadam3_shared_exact"])
def test_torch_compile_equals_the_eager_engine(name):
    M = 4
    rng = np.random.default_rng(4)
    grads = [rng.normal(size=(M, 5)) for _ in range(5)]
    out = []
    for compile_ in (False, True):
        theta = torch.zeros(M, 5, dtype=torch.float64, requires_grad=True)
        opt = build_optimizer(name, [theta], mixer_for(name, M, "ring"), lr=0.05, compile=compile_,
                              engine="auto" if compile_ else "eager")
        for g in grads:
            theta.grad = torch.tensor(g)
            opt.step()
        out.append(theta.detach().clone())
    torch.testing.assert_close(out[1], out[0], rtol=1e-14, atol=1e-15)


def test_on_the_heterogeneous_game_the_shared_scale_rests_at_the_fne_and_dadam3_does_not():
    """Spread s = 1, M = 5 ring, the paper's Section 5.1 settings: Dadam3's node average rests off z*
    (the nodes' own scales weight their games), the shared scale's and the exact reference's at it."""
    game = SyntheticGame(spread=1.0)
    hp = {"lr": 1e-2, "beta1": 0.0, "beta2": 1.0 / (1.0 + game.c ** 2), "beta3": 0.1}
    runs = {name: run_synthetic(game, name, hp, nodes=5, iterations=1_000_000, seed=0)
            for name in ("dadam3", "dadam3_shared", "dadam3_shared_exact")}
    final = {name: r.error[-1] for name, r in runs.items()}
    assert final["dadam3"] > 0.4 and runs["dadam3"].first_hit is None, final          # e_N = 0.496
    assert final["dadam3_shared"] < 1e-3 and final["dadam3_shared_exact"] < 1e-3, final   # 5e-4 both
    spread = {name: r.final_scale.std(0) / r.final_scale.mean(0) for name, r in runs.items()}
    assert (spread["dadam3"] > 0.3).all() and (spread["dadam3_shared"] < 1e-12).all(), spread
