"""The synthetic game of Section 5.1: its FNE, the compiled kernels against the torch
optimizers step by step, and the paper's claim at reduced N."""
import numpy as np
import pytest

from dadam3.errors.config import ConfigError
from dadam3.games.synthetic import SyntheticGame, log_iterations
from dadam3.games import synthetic_run
from dadam3.games.synthetic_run import TARGET_ERROR, run_synthetic
from dadam3.optim import OPTIMIZERS
from dadam3.run.schema import compose, synthetic_settings

GAME = SyntheticGame(c=1010.0, k=0.01)
PAPER = dict(lr=1e-2, beta1=0.0, beta2=1 / (1 + 1010.0 ** 2), beta3=0.1)


def test_fne_formula():
    c, k = 1010.0, 0.01
    zstar = GAME.fne()
    np.testing.assert_allclose(zstar, [-(c + 2) / (3 * k ** 2 + 12) * (2 - k), -(c + 2) / (3 * k ** 2 + 12) * (2 + k)])
    np.testing.assert_allclose(GAME.mean_operator(zstar), 0.0, atol=1e-10)
    # the mean operator is the expectation of the sampled one: a = c w.p. 1/3, 1 w.p. 2/3
    z = np.array([0.3, -1.2])
    a_c = np.array([c + 2 * z[0] + k * z[1], c + 2 * z[1] - k * z[0]])
    a_1 = np.array([1 + 2 * z[0] + k * z[1], 1 + 2 * z[1] - k * z[0]])
    np.testing.assert_allclose(GAME.mean_operator(z), a_c / 3 + 2 * a_1 / 3)
    draws = GAME.draw(np.random.default_rng(0), 200_000, 5)
    assert draws.mean() == pytest.approx(1 / 3, abs=3e-3)


def test_log_iterations():
    its = log_iterations(10_000_000)
    assert 45 <= len(its) <= 51 and its[0] == 1 and its[-1] == 10_000_000
    assert np.all(np.diff(its) > 0)
    assert log_iterations(7).tolist() == [1, 2, 3, 4, 5, 6, 7]


CASES = [
    ("dadam3", {**PAPER, "beta1": 0.5, "beta1_decay": 0.999, "lambda0": 1.0}, 5, "ring", 1),
    ("dadam3", PAPER, 4, "one_peer_exponential", 2),
    ("cadam3", PAPER, 3, "ring", 1),
    ("adam3", PAPER, 1, "ring", 1),
    ("dosg", {"lr": 1e-3}, 6, "torus", 1),
    ("cosg", {"lr": 1e-3}, 5, "ring", 1),
    ("oadagrad", {"lr": 1.0, "delta": 1e-3}, 5, "star", 1),
    ("dp_oadam", {"lr": 1e-2, "beta1": 0.3, "beta2": 0.9}, 5, "ring", 1),
    ("dadam", {"lr": 1e-2, "beta1": 0.3, "beta2": 0.9}, 6, "exponential", 1),
    ("dsgd", {"lr": 1e-3}, 5, "ring", 3),
    ("extra_adam", {"lr": 1e-2, "beta1": 0.3, "beta2": 0.9}, 5, "ring", 1),        # two gradients per step
    ("extra_adam", {"lr": 1e-2, "beta1": 0.3, "beta2": 0.9}, 4, "one_peer_exponential", 2),
]


@pytest.mark.parametrize("name, hp, nodes, topology, rounds", CASES)
def test_kernel_equals_torch_optimizer_step_by_step(name, hp, nodes, topology, rounds, monkeypatch):
    n = 400
    every = np.arange(1, n + 1)   # log every iteration: e_k and R_k step by step
    kw = dict(nodes=nodes, iterations=n, seed=3, topology={"name": topology, "rounds": rounds}, log_its=every)
    ref = run_synthetic(GAME, name, hp, engine="torch", **kw)
    monkeypatch.setattr(synthetic_run, "CHUNK", 97)          # chunking must not matter
    assert synthetic_run.kernel_for(OPTIMIZERS[name].cls) is not None        # the compiled loop, every skeleton
    fast = run_synthetic(GAME, name, hp, engine="numba", **kw)
    np.testing.assert_allclose(fast.error, ref.error, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(fast.avg_grad_sq_norm, ref.avg_grad_sq_norm, rtol=1e-10)
    np.testing.assert_allclose(fast.final_point, ref.final_point, rtol=1e-10, atol=1e-12)
    assert fast.first_hit == ref.first_hit
    assert not np.allclose(ref.error, ref.error[0])  # the run moved


@pytest.mark.parametrize("name", sorted(n for n, spec in OPTIMIZERS.items() if not spec.single_node))
def test_every_registered_optimizer_runs_fig_1s_game_compiled_equal_to_torch(name):
    """Every optimizer of the registry (one added in one file too) at the synthetic entry point's
    hyper-parameters: the compiled loop, equal to the torch optimizers in float64."""
    hp = dict(synthetic_settings(compose("synthetic", [f"optimizer={name}"])).optimizer.hparams)
    assert synthetic_run.kernel_for(OPTIMIZERS[name].cls) is not None
    kw = dict(nodes=3, iterations=200, seed=1, topology="ring", log_its=np.arange(1, 201))
    ref, fast = (run_synthetic(GAME, name, hp, engine=engine, **kw) for engine in ("torch", "numba"))
    np.testing.assert_allclose(fast.final_point, ref.final_point, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fast.error, ref.error, rtol=1e-10, atol=1e-13)


def test_first_hit_is_the_first_iteration_with_error_at_most_the_target(monkeypatch):
    """The loop's first iteration with e_k <= 10^-2, found at every iteration (not only at the
    logged ones), against a plain Python loop over every iteration's e_k, and the torch engine's."""
    game, hp = SyntheticGame(c=2.0, k=0.5), dict(PAPER, lr=0.05, beta2=1 / (1 + 2.0 ** 2))
    kw = dict(nodes=3, iterations=200, seed=1, topology={"name": "ring", "rounds": 1})
    every = np.arange(1, 201)
    logged = run_synthetic(game, "dadam3", hp, log_its=every, **kw)
    plain = None
    for k, e in zip(every, logged.error):
        if e <= TARGET_ERROR:
            plain = int(k)
            break
    assert plain is not None and 10 < plain < 200
    monkeypatch.setattr(synthetic_run, "CHUNK", 37)          # the hit lies past a chunk's end
    sparse = run_synthetic(game, "dadam3", hp, **kw)         # ~50 logged iterations, the hit not among them
    assert plain not in sparse.iteration.tolist()
    assert logged.first_hit == sparse.first_hit == plain
    assert run_synthetic(game, "dadam3", hp, engine="torch", **kw).first_hit == plain
    assert run_synthetic(game, "dadam3", hp, **{**kw, "iterations": plain - 1}).first_hit is None


def test_dadam3_finds_the_fne_and_dp_oadam_does_not():
    dadam3 = run_synthetic(GAME, "dadam3", PAPER, nodes=5, iterations=600_000, seed=0)
    dp_oadam = run_synthetic(GAME, "dp_oadam", {k: v for k, v in PAPER.items() if k != "beta3"}, nodes=5,
                             iterations=600_000, seed=0)
    assert dadam3.error[-1] < 1e-2
    assert dadam3.avg_grad_sq_norm[-1] < 0.1 * dadam3.avg_grad_sq_norm[0]
    assert dp_oadam.error[-1] > 0.9
    assert dp_oadam.avg_grad_sq_norm[-1] > 0.9 * dp_oadam.avg_grad_sq_norm[0]


def test_runner_rejects_bad_values():
    with pytest.raises(ConfigError, match=r"^iterations=0"):
        run_synthetic(GAME, "dadam3", PAPER, nodes=5, iterations=0)
    with pytest.raises(ConfigError, match=r"^c=0.5: must be in \[1, 1e\+100\]"):
        SyntheticGame(c=0.5)
    with pytest.raises(ConfigError, match=r"^k=-1"):
        SyntheticGame(k=-1)
    with pytest.raises(ConfigError, match=r"^game.k=-1.0: must be in \[0, 1e\+100\]"):   # said in the config's keys
        synthetic_settings(compose("synthetic", ["game.k=-1"]))
    with pytest.raises(ConfigError, match=r"^rows=2: must be an integer divisor of nodes=5"):
        run_synthetic(GAME, "dadam3", PAPER, nodes=5, iterations=1, topology={"name": "torus", "rows": 2})
    with pytest.raises(ConfigError, match=r"^nodes=5: optimizer=adam3 is the single-node"):
        run_synthetic(GAME, "adam3", PAPER, nodes=5, iterations=1)
