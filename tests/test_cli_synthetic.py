"""``python -m dadam3.synthetic``: config keys and defaults, metrics.csv, sweeps, and a
one-line error with non-zero exit for every kind of bad input."""
import csv
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dadam3.schema import compose

ROOT = Path(__file__).resolve().parent.parent


def synthetic(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "dadam3.synthetic", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=300)


def compose_synthetic(overrides=()):
    return compose("synthetic", overrides)


def test_defaults_are_the_papers():
    cfg = compose_synthetic()
    assert cfg.optimizer.name == "dadam3" and cfg.topology.name == "ring"
    assert cfg.nodes == 5 and cfg.iterations == 10 ** 7 and cfg.seed == 0
    assert cfg.game.c == 1010 and cfg.game.k == 0.01
    o = cfg.optimizer
    assert (o.lr, o.beta1, o.beta3, o.lambda0) == (1e-2, 0.0, 0.1, 0.0)
    assert o.beta2 == pytest.approx(1 / (1 + 1010 ** 2))
    assert compose_synthetic(["game.c=10"]).optimizer.beta2 == pytest.approx(1 / 101)


@pytest.mark.parametrize("name", ["adam3", "cadam3", "dadam3", "dosg", "cosg", "oadagrad", "dp_oadam", "dadam",
                                  "dsgd"])
def test_every_optimizer_composes_with_every_documented_key(name):
    cfg = compose_synthetic([f"optimizer={name}", "optimizer.lr=0.5", "nodes=3", "topology=torus",
                             "iterations=10", "seed=4", "game.c=2", "game.k=0.5"])
    assert cfg.optimizer.name == name and cfg.optimizer.lr == 0.5
    assert (cfg.nodes, cfg.iterations, cfg.seed, cfg.game.c, cfg.game.k) == (3, 10, 4, 2, 0.5)
    OmegaConf.to_container(cfg, resolve=True)
    if "beta1" in cfg.optimizer:
        for key in ("beta1", "beta2", "eps"):
            assert key in cfg.optimizer


def test_run_writes_metrics_csv(tmp_path):
    r = synthetic("iterations=3000", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["iteration", "error", "avg_grad_sq_norm"]
    its = [int(r[0]) for r in rows[1:]]
    assert its[0] == 1 and its[-1] == 3000 and len(its) >= 25
    assert float(rows[-1][1]) < float(rows[1][1])
    assert (tmp_path / ".hydra" / "config.yaml").is_file()


def test_multirun_sweep(tmp_path):
    r = synthetic("-m", "optimizer=dadam3,dosg", "optimizer.lr=1e-2,1e-3", "iterations=200",
                  f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=${hydra.job.num}")
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.glob("*/metrics.csv"))) == 4


@pytest.mark.parametrize("args, key", [
    (["optimizer.beta1=1.0"], "optimizer.beta1=1.0: must be in [0, 1)"),
    (["optimizer.beta3=-0.5"], "optimizer.beta3=-0.5: must be in [0, 1)"),
    (["optimizer.lr=0"], "optimizer.lr=0: must be in (0, inf)"),
    (["nodes=0"], "nodes=0: must be an integer >= 1"),
    (["optimizer=adamw"], "optimizer=adamw: unknown optimizer; allowed: adam3, cadam3"),
    (["topology=hypercube"], "topology=hypercube: unknown topology; allowed: complete, erdos_renyi"),
    (["topology=explicit", "nodes=2", "topology.matrix=[[0.5,0.4],[0.5,0.5]]"],
     "topology.matrix=row 0 sums to 0.9: mixing matrix must be doubly stochastic"),
    (["optimizer=adam3"], "nodes=5: optimizer=adam3 is the single-node algorithm"),
])
def test_bad_input_is_one_line_and_nonzero_exit(args, key, tmp_path):
    r = synthetic(*args, "iterations=10", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + key), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
