"""``python -m dadam3.synthetic``: config keys and defaults, metrics.csv, sweeps, and a
one-line error with non-zero exit for every kind of bad input."""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dadam3.optim import OPTIMIZERS
from dadam3.run.schema import compose
from dadam3.topologies import TOPOLOGIES

from names import allowed_names, unused_name
from trainer_runs import one_line

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
    [entry] = json.loads((tmp_path / "provenance.json").read_text())     # the report's evidence needs it
    assert entry["from_iteration"] == 0 and entry["code_commit"] and entry["device"] == "cpu"
    assert "provenance.json" in (tmp_path / "manifest.txt").read_text().split()


@pytest.mark.slow
def test_multirun_sweep(tmp_path):
    r = synthetic("-m", "optimizer=dadam3,dosg", "optimizer.lr=1e-2,1e-3", "iterations=200",
                  f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=${hydra.job.num}")
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.glob("*/metrics.csv"))) == 4


def test_multirun_flag_between_the_overrides_sweeps(tmp_path):
    """``seed=0 -m lr=...``: Hydra's argparse alone refuses the overrides after the flag (usage text)."""
    r = synthetic("iterations=20", "-m", "optimizer.lr=1e-2,1e-3", f"hydra.sweep.dir={tmp_path}",
                  "hydra.sweep.subdir=${hydra.job.num}")
    assert r.returncode == 0, r.stderr
    assert sorted(p.parent.name for p in tmp_path.glob("*/metrics.csv")) == ["0", "1"]


@pytest.mark.parametrize("args, key", [
    (["optimizer.beta1=1.0"], "optimizer.beta1=1.0: must be in [0, 1)"),
    (["optimizer.beta3=-0.5"], "optimizer.beta3=-0.5: must be in [0, 1)"),
    (["optimizer.lr=0"], "optimizer.lr=0: must be in (0, inf)"),
    (["nodes=0"], "nodes=0: must be an integer >= 1"),
    (["topology=explicit", "nodes=2", "topology.matrix=[[0.5,0.4],[0.5,0.5]]"],
     "topology.matrix=row 0 sums to 0.9: mixing matrix must be doubly stochastic"),
    (["optimizer=adam3"], "nodes=5: optimizer=adam3 is the single-node algorithm"),
    (["backend=torch"], "backend=torch: unknown key"),          # the engine's name before engine=: no longer known
    (["engine=kernel"], "engine=kernel: unknown value; allowed: numba, torch"),
])
def test_bad_input_is_one_line_and_nonzero_exit(args, key, tmp_path):
    r = synthetic(*args, "iterations=10", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + key), r.stderr
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.parametrize("group", ["optimizer", "topology"])
def test_an_unknown_optimizer_or_topology_is_one_line_listing_the_registry(group, tmp_path):
    """A name no registry holds (made up: never one a user may add) is one line that lists every
    registered name, in whatever order."""
    registry = {"optimizer": OPTIMIZERS, "topology": TOPOLOGIES}[group]
    name = unused_name(registry)
    r = synthetic(f"{group}={name}", "iterations=10", f"hydra.run.dir={tmp_path}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {group}={name}: unknown {group}; allowed: "), lines
    assert set(registry) <= allowed_names(lines[0])


def _files(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.mark.slow
def test_an_earlier_runs_directory_is_refused_unless_overwrite(tmp_path):
    """Like the trainer: a directory holding an earlier run's results is refused with one line,
    nothing in it changed (.hydra/ and the log too); overwrite=true replaces them."""
    assert synthetic("iterations=200", f"hydra.run.dir={tmp_path}").returncode == 0
    before = _files(tmp_path)
    assert {"metrics.csv", "status.json", "synthetic.log", ".hydra/config.yaml"} <= set(before)
    r = synthetic("iterations=300", "seed=1", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: hydra.run.dir={tmp_path}: holds an earlier run's results (metrics.csv, status.json, synthetic.log); "
        "choose a new directory, or set overwrite=true to replace them"], r.stderr
    assert _files(tmp_path) == before
    r = synthetic("iterations=300", "overwrite=true", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(open(tmp_path / "metrics.csv")))
    assert rows[-1][0] == "300" and json.loads((tmp_path / "status.json").read_text())["iteration"] == 300
    assert (tmp_path / "synthetic.log").read_text().count("iterations on 5 nodes") == 1   # the old log replaced
    assert "overwrite=true" in (tmp_path / ".hydra" / "overrides.yaml").read_text()
    assert len(json.loads((tmp_path / "provenance.json").read_text())) == 1     # the new run's, not appended


@pytest.mark.slow
def test_a_refused_run_leaves_no_directory_of_its_own(tmp_path):
    """Hydra makes the run directory before the checks: a refused run removes it again (issue 26
    item 14), and a directory that existed before is kept."""
    new = tmp_path / "new" / "run"
    r = synthetic("optimizer=cadam3", "topology=ring", "iterations=10", f"hydra.run.dir={new}")
    assert r.returncode == 2 and "topology=ring" in r.stderr
    assert not new.exists()
    r = synthetic("optimizer=cadam3", "topology=ring", "iterations=10", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and tmp_path.is_dir()


def test_a_training_runs_directory_is_refused_even_with_overwrite(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1, "status": "running"}\n')
    r = synthetic("iterations=10", "overwrite=true", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: hydra.run.dir={tmp_path}: holds a training run's files (metrics.jsonl); choose another directory"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


@pytest.mark.slow
def test_sweep_runs_every_job_past_a_diverged_one(tmp_path):
    """A diverged job is recorded and the sweep goes on; one summary line, exit status 1."""
    r = synthetic("-m", "optimizer=dsgd", "optimizer.lr=10,1e-3", "iterations=500", f"hydra.sweep.dir={tmp_path}",
                  "hydra.sweep.subdir=${hydra.job.num}")
    assert r.returncode == 1, r.stderr
    jobs = [json.loads(line) for line in (tmp_path / "sweep_status.jsonl").read_text().splitlines()]
    assert [(j["job"], j["status"], j["exit"]) for j in jobs] == [(0, "diverged", 3), (1, "finished", 0)]
    assert json.loads((tmp_path / "0" / "status.json").read_text())["status"] == "diverged"
    assert json.loads((tmp_path / "1" / "status.json").read_text())["status"] == "finished"
    assert r.stderr.strip().splitlines()[-1].startswith("error: sweep: 1 of 2 jobs did not finish (#0 ")
    assert "Traceback" not in r.stderr


def _start(tmp_path, *args):
    return subprocess.Popen([sys.executable, "-m", "dadam3.synthetic", *args, f"hydra.run.dir={tmp_path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_sigterm_mid_run_is_143_and_interrupted(tmp_path):
    p = _start(tmp_path, "iterations=100000000")
    deadline = time.monotonic() + 120
    while not (tmp_path / "synthetic.log").exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    status = json.loads((tmp_path / "status.json").read_text())
    assert p.returncode == 143 and status["status"] == "interrupted" and status["signal"] == "SIGTERM", err
    assert len(err.strip().splitlines()) == 1 and err.startswith("stopped: SIGTERM after iteration"), err


def test_sigterm_after_the_last_iteration_leaves_a_finished_run_with_exit_0(tmp_path):
    """The exit status matches status.json: a signal after it says finished does not make it 143."""
    p = _start(tmp_path, "iterations=100")
    deadline = time.monotonic() + 120
    while not (tmp_path / "status.json").exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    status = json.loads((tmp_path / "status.json").read_text())
    assert (status["status"], p.returncode) == ("finished", 0), err


def test_synthetic_divergence_is_one_line_with_a_status(tmp_path):
    r = synthetic("optimizer=dsgd", "optimizer.lr=5", "iterations=1000", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: training diverged: the iterates are not finite after iteration ")
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["status"] == "diverged" and f"iteration {status['iteration']}" in r.stderr
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == "iteration,error,avg_grad_sq_norm" and all("nan" not in row for row in rows)


def test_synthetic_huge_c_is_one_line(tmp_path):
    r = synthetic("game.c=1e200", "iterations=10", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and r.stderr.strip() == "error: game.c=1e+200: must be in [1, 1e+100]"


@pytest.mark.slow
def test_ctrl_c_in_the_synthetic_runner_writes_what_it_has(tmp_path):
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "dadam3.synthetic", "iterations=100000000000", "engine=torch",
                          f"hydra.run.dir={run}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.time() + 120
    while not run.exists() and time.time() < deadline:     # Hydra made it: the task starts now
        time.sleep(0.1)
    time.sleep(5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130
    one_line(err.replace("stopped:", "error-stopped:"), "error-stopped: SIGINT after iteration ")
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "interrupted" and status["signal"] == "SIGINT"
    assert (run / "metrics.csv").read_text().startswith("iteration,error,avg_grad_sq_norm\n")


def _fig1_script(tmp_path, *args):
    env = {**os.environ, "PYTHON": sys.executable, "FIG1_OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", "scripts/fig1_synthetic.sh", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def test_fig1_script_runs_both_methods_and_shows_each_output_whole(tmp_path):
    r = _fig1_script(tmp_path, "iterations=3000")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert [line.split(" - ")[1].split(":")[0] for line in lines] == ["dadam3", "dp_oadam"], r.stderr
    for opt in ("dadam3", "dp_oadam"):
        assert json.loads((tmp_path / opt / "status.json").read_text())["status"] == "finished"
    assert (tmp_path / "fig1_synthetic.png").stat().st_size > 0


def test_fig1_script_fails_with_the_failed_runs_status_and_draws_nothing(tmp_path):
    """The two runs go side by side: one refused (a key DP-OAdam does not have) makes the script
    fail with its exit status after the other finished; no figure."""
    r = _fig1_script(tmp_path, "iterations=3000", "optimizer.beta3=0.2")
    assert r.returncode == 2, r.stderr
    assert json.loads((tmp_path / "dadam3" / "status.json").read_text())["status"] == "finished"
    assert not (tmp_path / "dp_oadam").exists() and not (tmp_path / "fig1_synthetic.png").exists()
    lines = r.stderr.strip().splitlines()
    assert " - dadam3: 3000 iterations" in lines[0], r.stderr
    assert len(lines) == 3 and lines[1].startswith("error: optimizer.beta3=0.2: "), r.stderr
    assert lines[2] == "fig1_synthetic.sh: optimizer=dp_oadam failed (exit status 2); see its output above"


def test_a_users_folder_is_never_a_training_runs_and_nothing_in_it_is_deleted(tmp_path):
    """overwrite=true into a folder with a user's images/ (no run), or into a synthetic run's
    directory with an images/ its manifest does not list: refused, nothing deleted."""
    from dadam3.errors.config import ConfigError
    from dadam3.synthetic import check_synthetic_dir
    (tmp_path / "images").mkdir()
    with pytest.raises(ConfigError, match="holds images but no run"):
        check_synthetic_dir(tmp_path, overwrite=True)
    (tmp_path / "images").rmdir()
    check_synthetic_dir(tmp_path, overwrite=True).commit().release()      # a run claims it: its manifest
    (tmp_path / "metrics.csv").write_text("iteration\n")
    (tmp_path / "images").mkdir()
    with pytest.raises(ConfigError, match="holds images, which its run did not write"):
        check_synthetic_dir(tmp_path, overwrite=True)
    (tmp_path / "images").rmdir()
    rd = check_synthetic_dir(tmp_path, overwrite=True)
    assert set(rd.replace) == {"metrics.csv", "run_id"}
    rd.release()


def test_a_file_size_limit_is_one_line_naming_the_file_and_a_status(tmp_path):
    """``ulimit -f`` in the synthetic runner: a traceback before; now the boundary's one line
    naming the file, exit 1, and status.json ``interrupted`` with that line where it fits."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500))
    run = tmp_path / "s"
    r = subprocess.run([sys.executable, "-m", "dadam3.synthetic", "iterations=1000", f"hydra.run.dir={run}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, preexec_fn=limit)
    assert r.returncode == 1, r.stderr[-2000:]
    # the file itself (.hydra/hydra.yaml, the one past 1500 bytes), not its directory
    one_line(r.stderr, f"error: write failed: {run / '.hydra' / 'hydra.yaml'}: File too large (EFBIG)")
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "interrupted" and "File too large" in status["reason"]
    assert not list(run.glob(".*.tmp"))
