"""The heterogeneous variant of the Section 5.1 game (``game.spread``): each node's own
a-distribution, the average game's FNE unchanged, the paper's stream at spread 0, and the
compiled loop equal to the torch optimizers on it (float64)."""
import numpy as np
import pytest

from dadam3.errors.config import ConfigError
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_run import run_synthetic
from dadam3.run.schema import compose, synthetic_settings

C, K = 1010.0, 0.01
PAPER = dict(lr=1e-2, beta1=0.0, beta2=1 / (1 + C ** 2), beta3=0.1)


@pytest.mark.parametrize("nodes", [1, 2, 5, 16, 64])
@pytest.mark.parametrize("spread", [0.0, 0.3, 1.0])
def test_average_game_has_the_papers_fne(nodes, spread):
    """(1/M) sum_i E G_i(z) = F's operator: its root, solved from the nodes' own expected games,
    is the paper's z* = -(c+2)/(3k^2+12) (2-k, 2+k)."""
    game = SyntheticGame(C, K, spread)
    p = game.probabilities(nodes)
    assert p.mean() == pytest.approx(1 / 3, rel=1e-14) and (p >= 0).all() and (p <= 2 / 3 + 1e-15).all()
    a_bar = np.mean(1.0 + (C - 1.0) * p)                   # E over nodes and draws of a
    A = np.array([[2.0, K], [-K, 2.0]])                    # G(z) = a (1, 1) + A z
    zstar = np.linalg.solve(A, -a_bar * np.ones(2))
    paper = -(C + 2) / (3 * K ** 2 + 12) * np.array([2 - K, 2 + K])
    np.testing.assert_allclose(zstar, paper, rtol=1e-13)
    np.testing.assert_allclose(game.fne(), paper, rtol=1e-15)
    np.testing.assert_allclose(game.node_mean_a(nodes), 1.0 + (C - 1.0) * p)


def test_probabilities_are_spread_evenly_and_drawn():
    game = SyntheticGame(C, K, 0.6)
    np.testing.assert_allclose(game.probabilities(5), (1 + 0.6 * np.array([-1, -0.5, 0, 0.5, 1])) / 3, rtol=1e-15)
    draws = game.draw(np.random.default_rng(0), 200_000, 5)
    np.testing.assert_allclose(draws.mean(axis=0), game.probabilities(5), atol=4e-3)
    np.testing.assert_array_equal(SyntheticGame(C, K, 1.0).draw(np.random.default_rng(1), 1000, 4)[:, 0], False)


def test_spread_zero_is_the_papers_stream():
    """spread = 0 draws exactly the booleans of the paper's game (uniform < 1/3), so the iid study's
    runs stay reproducible."""
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    np.testing.assert_array_equal(SyntheticGame(C, K).draw(rng_a, 5000, 16), rng_b.random((5000, 16)) < (1.0 / 3.0))


@pytest.mark.parametrize("nodes, topology, rounds", [(5, "ring", 1), (4, "complete", 2), (6, "ring", 3)])
def test_kernel_equals_torch_on_the_heterogeneous_game(nodes, topology, rounds):
    game = SyntheticGame(C, K, 0.8)
    every = np.arange(1, 301)
    kw = dict(nodes=nodes, iterations=300, seed=5, topology={"name": topology, "rounds": rounds}, log_its=every)
    ref = run_synthetic(game, "dadam3", PAPER, engine="torch", **kw)
    fast = run_synthetic(game, "dadam3", PAPER, engine="numba", **kw)
    np.testing.assert_allclose(fast.error, ref.error, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(fast.avg_grad_sq_norm, ref.avg_grad_sq_norm, rtol=1e-10)
    np.testing.assert_allclose(fast.final_point, ref.final_point, rtol=1e-10, atol=1e-12)
    iid = run_synthetic(SyntheticGame(C, K), "dadam3", PAPER, engine="numba", **kw)
    assert not np.allclose(iid.final_point, fast.final_point)          # the spread changed the run


def test_spread_is_checked_in_the_configs_keys():
    with pytest.raises(ConfigError, match=r"^spread=1.5: must be in \[0, 1\]"):
        SyntheticGame(spread=1.5)
    with pytest.raises(ConfigError, match=r"^game.spread=-0.1: must be in \[0, 1\]"):
        synthetic_settings(compose("synthetic", ["game.spread=-0.1"]))
    assert synthetic_settings(compose("synthetic", ["game.spread=0.5"])).game.spread == 0.5


def _dadam3_rest(spread, topology, c=10.0, k=0.5, nodes=5, n=4000):
    """Dadam3 (torch) on a small heterogeneous game: z_bar averaged over the second half of the run,
    the 1/sqrt(Lambda)-weighted rest point predicted from the final scales, z*, and the scales."""
    import torch

    from dadam3.optim import build_optimizer, mixer_for
    game = SyntheticGame(c, k, spread)
    th, al = (torch.zeros(nodes, 1, dtype=torch.float64, requires_grad=True) for _ in range(2))
    opt = build_optimizer("dadam3", [{"params": [th]}, {"params": [al], "maximize": True}],
                          mixer_for("dadam3", nodes, topology, 1), lr=0.02, beta1=0.0, beta2=1 / (1 + c ** 2),
                          beta3=0.1)
    zs = []
    for row in torch.from_numpy(game.draw(np.random.default_rng(0), n, nodes)):
        th.grad, al.grad = torch.autograd.grad(game.loss(th, al, row), [th, al])
        opt.step()
        zs.append(torch.cat([th, al], 1).detach().mean(0).numpy())
    scale = np.sqrt(np.concatenate([opt.state[th]["lam"].numpy(), opt.state[al]["lam"].numpy()], 1))   # [M, 2]
    w, a = 1 / scale, game.node_mean_a(nodes)
    rest = np.linalg.solve(np.array([[2, k], [-k, 2]]), -(w * a[:, None]).sum(0) / w.sum(0))
    return np.mean(zs[n // 2:], axis=0), rest, game.fne(), scale


@pytest.mark.parametrize("topology", ["ring", "complete"])
def test_the_bias_is_the_scales_weighted_rest_point_whatever_the_graph(topology):
    """Why t cannot help on the heterogeneous game (docs/topology.md): gossip mixes the iterates, not
    the nodes' adaptive scales Lambda_i; z_bar rests where sum_i E[G_i(z_bar)]/sqrt(Lambda_i) = 0. At
    s = 1 node 0 never draws a = c, its scale stays small, and z_bar sits at that weighted point, far
    from z*, on the ring as on the complete graph; at s = 0.5 the scales agree and z_bar is near z*."""
    zbar, rest, zstar, scale = _dadam3_rest(1.0, topology)
    assert scale[0, 0] < 0.3 * scale[1:, 0].min()
    assert np.linalg.norm(zbar - rest) < 0.05 * np.linalg.norm(rest - zstar)
    zbar, rest, zstar, scale = _dadam3_rest(0.5, topology)
    assert scale[:, 0].max() < 1.05 * scale[:, 0].min()
    assert np.linalg.norm(zbar - zstar) < 0.05 * np.linalg.norm(zstar)
