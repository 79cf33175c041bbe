"""Mixing matrices: each topology's properties and each validation error."""
import numpy as np
import pytest

from dadam3 import topologies as T
from dadam3.errors.config import ConfigError
from dadam3.topologies import checks as C
from dadam3.topologies.complete import complete
from dadam3.topologies.erdos_renyi import erdos_renyi
from dadam3.topologies.exponential import exponential
from dadam3.topologies.ring import ring
from dadam3.topologies.star import star
from dadam3.topologies.torus import torus
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer

from names import allowed_names, unused_name
from trainer_runs import TOY, config


def assert_doubly_stochastic(W):
    assert np.all(W >= 0)
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)


def test_ring_matches_paper_definition():
    W = ring(5)
    expected = np.array([[1, 1, 0, 0, 1], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [1, 0, 0, 1, 1]]) / 3
    np.testing.assert_array_equal(W, expected)
    # eigenvalues (1 + 2 cos(2 pi j / 5)) / 3  ->  rho = (1 + 2 cos(72 deg)) / 3
    assert C.spectral_gap_rho(W) == pytest.approx((1 + 2 * np.cos(2 * np.pi / 5)) / 3)


def test_ring_small_m():
    np.testing.assert_array_equal(ring(1), [[1.0]])
    np.testing.assert_array_equal(ring(2), [[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_allclose(ring(3), np.full((3, 3), 1 / 3))
    for M in (1, 2, 3, 4, 7):
        assert_doubly_stochastic(ring(M))


def test_complete_is_exact_averaging():
    W = complete(4)
    np.testing.assert_allclose(W, 0.25)
    assert C.spectral_gap_rho(W) == pytest.approx(0.0, abs=1e-12)


def test_torus_3x3_has_weight_one_fifth():
    W = torus(9)
    assert_doubly_stochastic(W)
    np.testing.assert_allclose(W, W.T)
    for i in range(9):
        nz = np.nonzero(W[i])[0]
        assert len(nz) == 5 and np.allclose(W[i, nz], 0.2)
    # 2 x 3 torus: vertical neighbours coincide, MH weights still valid
    W23 = torus(6, rows=2)
    assert_doubly_stochastic(W23)
    with pytest.raises(ConfigError, match=r"^rows=4: must be an integer divisor of nodes=6$"):
        torus(6, rows=4)


def test_star_exponential_erdos_renyi_are_symmetric_doubly_stochastic_connected():
    for W in (star(6), exponential(8), erdos_renyi(10, p=0.3, seed=1)):
        assert_doubly_stochastic(W)
        np.testing.assert_allclose(W, W.T)
        assert C.spectral_gap_rho(W) < 1
    S = star(5)
    assert S[0, 1] == pytest.approx(1 / 5) and S[1, 1] == pytest.approx(4 / 5) and S[1, 2] == 0
    E = exponential(8)
    assert set(np.nonzero(E[0])[0]) == {0, 1, 2, 4, 7, 6}  # 0 +- 1, 2, 4
    np.testing.assert_array_equal(erdos_renyi(10, p=0.3, seed=1), erdos_renyi(10, p=0.3, seed=1))
    assert not np.array_equal(erdos_renyi(10, p=0.3, seed=1), erdos_renyi(10, p=0.3, seed=2))


def test_one_peer_exponential_period_product_is_exact_average():
    topo = T.build_topology("one_peer_exponential", 8)
    assert topo.period == 3
    P = np.eye(8)
    for k in range(1, 4):
        Wk = topo.operator(k)
        assert_doubly_stochastic(Wk)
        assert np.count_nonzero(Wk[0]) == 2  # itself and one peer
        P = Wk @ P
    np.testing.assert_allclose(P, np.full((8, 8), 1 / 8), atol=1e-15)
    assert topo.rho == pytest.approx(0.0, abs=1e-12)


def test_rounds_give_matrix_power_and_rho_t():
    topo = T.build_topology("ring", 6, rounds=3)
    W = ring(6)
    np.testing.assert_allclose(topo.operator(1), W @ W @ W)
    assert C.spectral_gap_rho(topo.operator(1)) == pytest.approx(topo.rho ** 3)


def test_explicit_from_list_and_files(tmp_path):
    W = [[0.75, 0.25], [0.25, 0.75]]
    np.testing.assert_array_equal(T.build_topology("explicit", 2, matrix=W).static_W, W)
    np.save(tmp_path / "W.npy", np.array(W))
    (tmp_path / "W.csv").write_text("0.75,0.25\n0.25,0.75\n")
    for f in ("W.npy", "W.csv"):
        np.testing.assert_array_equal(T.build_topology("explicit", 2, file=str(tmp_path / f)).static_W, W)



def test_an_explicit_file_under_home_is_read_as_every_path_key_is(tmp_path, monkeypatch):
    """``topology.file=~/W.csv``: the ``~`` is the user's home, as for the other path keys."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "W.csv").write_text("0.75,0.25\n0.25,0.75\n")
    np.testing.assert_array_equal(T.build_topology("explicit", 2, file="~/W.csv").static_W,
                                  [[0.75, 0.25], [0.25, 0.75]])


@pytest.mark.parametrize("matrix, match", [
    ([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]], r"matrix=2x3 matrix: must be 2x2|square"),
    ([[0.5, float("nan")], [0.5, 0.5]], r"finite"),
    ([[1.5, -0.5], [-0.5, 1.5]], r"W\[0,1\]=-0.5: mixing matrix entries must be >= 0"),
    ([[0.5, 0.4], [0.5, 0.5]], r"row 0 sums to 0.9: mixing matrix must be doubly stochastic"),
    ([[0.6, 0.4], [0.5, 0.5]], r"column 0 sums to 1.1: mixing matrix must be doubly stochastic"),
    ([[1.0, 0.0], [0.0, 1.0]], r"rho=1: graph must be connected"),
])
def test_explicit_validation_errors(matrix, match):
    with pytest.raises(ConfigError, match=match) as e:
        T.build_topology("explicit", 2, matrix=matrix)
    assert "\n" not in str(e.value) and str(e.value).startswith("matrix=")


def test_non_symmetric_rejected_unless_allowed():
    W = [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]]
    with pytest.raises(ConfigError, match=r"must be symmetric"):
        T.build_topology("explicit", 3, matrix=W)
    assert T.build_topology("explicit", 3, matrix=W, require_symmetric=False).rho < 1


def test_bad_names_and_values():
    name = unused_name(T.TOPOLOGIES)
    with pytest.raises(ConfigError, match=rf"^name={name}: unknown topology \(not in "
                                              r"dadam3.topologies.TOPOLOGIES\); allowed: ") as e:
        T.build_topology(name, 4)
    assert allowed_names(str(e.value)) == set(T.TOPOLOGIES)
    with pytest.raises(ConfigError, match=r"^nodes=0: must be an integer >= 1"):
        T.build_topology("ring", 0)
    with pytest.raises(ConfigError, match=r"^rounds=0"):
        T.build_topology("ring", 4, rounds=0)
    with pytest.raises(ConfigError, match=r"^p=0"):
        T.build_topology("erdos_renyi", 4, p=0)
    with pytest.raises(ConfigError, match=r"^file=/nonexistent/W.npy: no such file"):
        T.build_topology("explicit", 4, file="/nonexistent/W.npy")


def _ring_off_by(delta):
    """The 5-node ring with every row and column summing to 1 + delta (within TOLERANCE)."""
    return (ring(5) * (1 + delta)).tolist()


@pytest.mark.parametrize("source", ["matrix", "csv7", "npy"])
def test_nearly_stochastic_w_is_made_exactly_doubly_stochastic(tmp_path, caplog, source):
    """Every source of an explicit W: within the tolerance it is scaled to doubly stochastic
    (node average kept to rounding at every mixing round) and the log says so in one line."""
    W = np.array(_ring_off_by(5e-7))
    W[0, 0] += 4e-7                       # not a pure scaling: Sinkhorn has to work
    kw = {"matrix": W.tolist()}
    if source == "csv7":                   # a CSV of 7 significant digits
        (tmp_path / "W.csv").write_text("\n".join(",".join(f"{v:.7g}" for v in row) for row in ring(5)) + "\n")
        kw = {"file": str(tmp_path / "W.csv")}
    elif source == "npy":
        np.save(tmp_path / "W.npy", W)
        kw = {"file": str(tmp_path / "W.npy")}
    assert C.stochastic_deviation(np.asarray(W)) > C.EXACT
    with caplog.at_level("INFO", logger="dadam3.topologies.checks"):
        P = T.build_topology("explicit", 5, **kw).static_W
    assert C.stochastic_deviation(P) <= 1e-14 and np.array_equal(P, P.T) and np.all(P >= 0)
    assert np.array_equal(P > 0, ring(5) > 0)                  # the graph is kept
    lines = [r.getMessage() for r in caplog.records if "doubly stochastic scaling" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and lines[0].startswith(next(iter(kw)))
    x = np.random.default_rng(0).standard_normal((5, 3))
    y = x.copy()
    for _ in range(100_000):               # the node average after many mixing rounds
        y = P @ y
    # rounding only (~1e-16 a round); the unprojected W moves it by ~1e-7 a round, 1e-2 in all
    np.testing.assert_allclose(y.mean(axis=0), x.mean(axis=0), rtol=0, atol=1e-9)


def test_exact_builders_are_used_as_built(caplog):
    """W of every builder is already doubly stochastic to rounding: used bit for bit, no log line."""
    with caplog.at_level("INFO", logger="dadam3.topologies.checks"):
        np.testing.assert_array_equal(T.build_topology("ring", 5).static_W, ring(5))
        for name in ("complete", "star", "exponential", "erdos_renyi", "torus"):
            assert C.stochastic_deviation(T.build_topology(name, 9).static_W) <= C.EXACT
    assert not caplog.records


def test_nearly_stochastic_w_gives_the_exact_w_fig1_result():
    """Fig. 1's game: rows summing to 1 + 9e-7 give the exact ring's result (before the fix the
    node average was scaled by 1 + 9e-7 every round and e_k drifted)."""
    from dadam3.games.synthetic import SyntheticGame
    from dadam3.games.synthetic_run import run_synthetic
    from dadam3.optim import optimizer_spec
    game = SyntheticGame(c=1010.0, k=0.01)
    hp = {"lr": 1e-3, "beta1": 0.9, "beta2": 1.0 / (1.0 + 1010.0 ** 2)}
    hp = {k: v for k, v in hp.items() if k in optimizer_spec("dadam3").check_hparams({})}
    exact = run_synthetic(game, "dadam3", hp, 5, 3000, topology="ring", engine="torch")
    near = run_synthetic(game, "dadam3", hp, 5, 3000, topology={"name": "explicit", "matrix": _ring_off_by(9e-7)},
                         engine="torch")
    np.testing.assert_allclose(near.error, exact.error, rtol=1e-12, atol=0)


def test_a_topology_file_that_is_no_matrix_is_one_line_before_any_training(tmp_path):
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"\x00\x01garbage" * 10)
    garbage_csv = tmp_path / "garbage.csv"
    garbage_csv.write_text("a,b\nc,d\n")
    for path, says in ((garbage, "not a numeric"), (garbage_csv, "not a")):
        with pytest.raises(ConfigError) as e:
            overrides = ["loop.iterations=5", "topology=explicit", f"topology.file={path}", "nodes=2"]
            build_trainer(train_settings(config(TOY + overrides)), tmp_path / "fresh")
        assert str(e.value).startswith(f"topology.file={path}: {says}") and "\n" not in str(e.value), str(e.value)
        assert not (tmp_path / "fresh" / "metrics.jsonl").exists()


@pytest.mark.parametrize("name", sorted(T.TOPOLOGIES))
def test_every_registered_topology_has_its_config_and_schema(name):
    """One registry: each name of dadam3.topologies.TOPOLOGIES is a config topology=NAME (made from
    the registry: no YAML file), has a schema that allows it (dadam3/run/schema/groups.py reads
    the registry) and composes."""
    from dadam3.run.schema.presets import group_choices
    from dadam3.run.schema import compose
    from dadam3.run.schema.groups import option_schema
    assert name in group_choices("topology")
    assert option_schema("topology", name) is not None
    extra = ["topology.matrix=[[0.5,0.5],[0.5,0.5]]", "nodes=2"] if T.TOPOLOGIES[name].given else []
    assert train_settings(compose("train", ["device=cpu", f"topology={name}", *extra])).topology.name == name


def test_every_topology_yaml_names_a_registered_topology():
    from dadam3.run.schema.presets import group_choices
    assert set(group_choices("topology")) == set(T.TOPOLOGIES)


def test_the_gossip_phase_is_written_once():
    """Round r of iteration k uses schedule matrix ((k - 1) t + r) mod period: Topology.phase,
    which the mixers and Topology.operator read."""
    topo = T.build_topology("one_peer_exponential", 8, 2)
    assert topo.period == 3
    assert [[topo.phase(k, r) for r in range(2)] for k in (1, 2, 3, 4)] == [[0, 1], [2, 0], [1, 2], [0, 1]]
    W = topo.schedule(topo.phase(2, 1)) @ topo.schedule(topo.phase(2, 0))
    np.testing.assert_array_equal(topo.operator(2), W)
    assert T.build_topology("ring", 5, 3).phase(7, 2) == 0
