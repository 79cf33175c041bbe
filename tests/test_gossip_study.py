"""The gossip-rounds study (``dadam3/gossip_study.py``, ``experiments/gossip_rounds.sh``): its grid,
each cell's config as ``python -m dadam3.synthetic`` composes it, the mixer's byte count, rho per
round, and the script's smoke run (resumable: a finished cell is skipped)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from dadam3 import gossip_study as gs
from dadam3.optim import mixer_for
from dadam3.run.schema import compose
from dadam3.topologies import build_topology
from dadam3.topologies.checks import spectral_gap_rho

ROOT = Path(__file__).resolve().parent.parent


def test_grid_covers_the_issue_and_names_what_cannot_be_built():
    cells, skipped = gs.grid()
    assert [(s["topology"], s["nodes"]) for s in skipped] == [("torus", 5)]
    assert "no factorisation" in skipped[0]["reason"]
    assert {c.optimizer for c in cells} == {"dadam3", "dp_oadam"} and {c.rounds for c in cells} == {1, 2, 3, 5, 8}
    assert {c.nodes for c in cells} == {5, 16, 64}
    er = [c for c in cells if c.topology == "erdos_renyi"]
    assert {c.graph_seed for c in er} == {0, 1, 2} and {c.topology_options()["p"] for c in er} == {0.64, 0.35, 0.13}
    long = {c for c in cells if c.iterations == 10 ** 7}
    assert {(c.topology, c.rounds, c.seed) for c in long} == {("ring", 1, 0)} and len(long) == 6
    assert {c.iterations for c in set(cells) - long} == {10 ** 6}
    assert {c.seed for c in cells if c.optimizer == "dp_oadam" or c.rounds > 1} == {0}
    # 5 graphs x 3 M (no torus at 5) + 2 more Erdos-Renyi seeds; per graph 2 x 5 cells + 2 game seeds
    assert len(cells) == (6 * 3 - 1 + 2 * 3) * 12 == len({c.path for c in cells})


@pytest.mark.parametrize("i", [0, 7])
def test_a_cells_config_is_what_the_synthetic_runner_composes(i):
    cells = [c for c in gs.grid()[0] if c.topology in ("erdos_renyi", "torus")] + gs.grid(smoke=True)[0]
    cell = cells[i] if i < 7 else gs.grid(smoke=True)[0][-1]
    fast = OmegaConf.to_container(gs.cell_config(cell), resolve=True)
    assert fast == OmegaConf.to_container(compose("synthetic", cell.overrides()), resolve=True)


def test_bytes_are_the_mixers_count():
    """Dadam3 on a ring of 5: each iteration's two mixings send theta and alpha (8 bytes each) to 2
    neighbours, t times; one-peer exponential sends to one peer per round."""
    hp = {"lr": 1e-2, "beta1": 0.0, "beta2": 1e-6, "beta3": 0.1}
    for name, rounds, per_round in (("ring", 1, 2), ("ring", 3, 2), ("one_peer_exponential", 2, 1)):
        mixer = mixer_for("dadam3", 5, name, rounds)
        start, period = gs.mixer_bytes("dadam3", hp, mixer, 5)
        per_iteration = 2 * 16 * per_round * rounds
        assert len(period) == (3 if name == "one_peer_exponential" else 1)
        np.testing.assert_array_equal(gs.bytes_after(7, start, period), start + 7 * per_iteration)
        np.testing.assert_array_equal(gs.bytes_after(len(period), start, period), period[-1])


def test_rho_per_round():
    ring = build_topology("ring", 16)
    assert gs.rho_per_round(ring) == spectral_gap_rho(ring.static_W)
    one_peer = build_topology("one_peer_exponential", 5, 1)
    W = np.eye(5)
    for r in range(3):
        W = one_peer.schedule(r) @ W
    assert gs.rho_per_round(one_peer) == pytest.approx(spectral_gap_rho(W) ** (1 / 3), rel=1e-12)
    assert gs.rho_per_round(build_topology("one_peer_exponential", 16)) < 1e-12     # exact average in 4 rounds


def test_smoke_run_of_the_script_writes_every_cell_and_resumes(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "SMOKE": "1", "JOBS": "2",
           "GOSSIP_OUT": str(tmp_path)}
    r = subprocess.run(["bash", "experiments/gossip_rounds.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    cells = gs.grid(smoke=True)[0]
    assert f"{len(cells)} cells, 0 finished, {len(cells)} to run" in r.stdout
    for c in cells:
        d = tmp_path / c.path
        s = json.loads((d / gs.SUMMARY).read_text())
        assert (s["status"], s["nodes"], s["rounds"], s["seed"]) == ("finished", 4, c.rounds, c.seed)
        assert (d / "metrics.csv").is_file() and (d / ".hydra" / "overrides.yaml").is_file()
        assert json.loads((d / "provenance.json").read_text())[0]["code_commit"]
        if c.optimizer == "dadam3":         # the easy game: hit within the run, bytes counted up to the hit
            assert 0 < s["first_hit"] <= c.iterations
            assert s["bytes_to_hit_mean"] == pytest.approx(s["first_hit"] * s["bytes_per_iteration_mean"], rel=0.02)
    assert json.loads((tmp_path / gs.STUDY).read_text())["cells"] == len(cells)
    (tmp_path / cells[0].path / gs.SUMMARY).unlink()                # an unfinished cell: only it runs again
    before = (tmp_path / cells[1].path / "metrics.csv").stat().st_mtime_ns
    assert gs.study(tmp_path, 1, smoke=True) == 1
    assert (tmp_path / cells[0].path / gs.SUMMARY).is_file()
    assert (tmp_path / cells[1].path / "metrics.csv").stat().st_mtime_ns == before


def test_heterogeneous_grid_and_smoke_run(tmp_path):
    """--heterogeneous: Dadam3 on the ring and the complete graph at each spread, every M and t, cells under
    spread<s>/; the smoke run writes each cell with its spread and the nodes' final consensus distance."""
    cells = gs.grid(heterogeneous=True)[0]
    assert {c.optimizer for c in cells} == {"dadam3"} and {c.topology for c in cells} == {"ring", "complete"}
    assert {c.spread for c in cells} == set(gs.SPREADS) and {c.nodes for c in cells} == {5, 16, 64}
    assert {c.rounds for c in cells if c.topology == "complete"} == {1}         # W^t = W on the complete graph
    assert len(cells) == len(gs.SPREADS) * 3 * ((5 + 2) + (1 + 2)) == len({c.path for c in cells})
    assert all(c.path.startswith(f"spread{c.spread:g}/") and f"game.spread={c.spread}" in c.overrides()
               for c in cells)
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "SMOKE": "1", "JOBS": "1",
           "GOSSIP_OUT": str(tmp_path), "HETEROGENEOUS": "1"}
    r = subprocess.run(["bash", "experiments/gossip_rounds.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    smoke = gs.grid(smoke=True, heterogeneous=True)[0]
    for c in smoke:
        s = json.loads((tmp_path / c.path / gs.SUMMARY).read_text())
        assert (s["status"], s["spread"], s["topology"]) == ("finished", 1.0, c.topology)
        cfg = OmegaConf.load(tmp_path / c.path / ".hydra" / "config.yaml")
        assert cfg.game.spread == 1.0
        assert s["final_consensus_distance"] >= 0.0
    ring = [json.loads((tmp_path / c.path / gs.SUMMARY).read_text()) for c in smoke if c.topology == "ring"]
    assert max(s["final_consensus_distance"] for s in ring) > 0.0        # nodes differ on a ring
    assert json.loads((tmp_path / gs.STUDY).read_text())["spreads"] == [1.0]


def test_shared_scale_grid_and_smoke_run(tmp_path):
    """--shared-scale: Dadam3, the tracked shared scale and its exact reference at each spread and M, the
    ring at t = 1 and 3 and the complete graph (no exact reference there: it is the tracked scale); each
    summary holds the nodes' final scales' relative consensus distance, 0 for a shared scale on the
    complete graph, above it for Dadam3's own scales."""
    cells = gs.grid(shared_scale=True)[0]
    assert {c.optimizer for c in cells} == {"dadam3", "dadam3_shared", "dadam3_shared_exact"}
    assert {(c.topology, c.rounds) for c in cells} == {("ring", 1), ("ring", 3), ("complete", 1)}
    assert len(cells) == len(gs.SPREADS) * 3 * (3 * 2 + 2) == len({c.path for c in cells})
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "SMOKE": "1", "JOBS": "1",
           "GOSSIP_OUT": str(tmp_path), "SHARED_SCALE": "1"}
    r = subprocess.run(["bash", "experiments/gossip_rounds.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    summaries = {(c.optimizer, c.topology, c.rounds): json.loads((tmp_path / c.path / gs.SUMMARY).read_text())
                 for c in gs.grid(smoke=True, shared_scale=True)[0]}
    assert all(s["status"] == "finished" and s["spread"] == 1.0 for s in summaries.values())
    assert summaries[("dadam3_shared", "complete", 1)]["final_scale_consensus_rel"] < 1e-20
    assert summaries[("dadam3", "complete", 1)]["final_scale_consensus_rel"] > 1e-6


def test_bad_jobs_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gs.main(["--jobs", "0", "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and capsys.readouterr().err == "error: --jobs=0: must be an integer >= 1\n"
    assert not (tmp_path / "x").exists()
