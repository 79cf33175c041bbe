"""The run contract under misuse: resume honours changed settings and refuses fixed ones, the
log reads as if the run never stopped, one run per directory (lock, overwrite), stray
temporaries, file modes, SIGINT/SIGTERM save and stop, bad files and services are one line,
and silently accepted values are refused. Each test failed before its fix."""
import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import torch

import dadam3.gan.trainer as trainer_mod
from dadam3.checkpoint import checkpoint_path, load
from dadam3.errors import ConfigError
from dadam3.gan.finiteness import TrainingDiverged
from dadam3.run_dir import LOCK_FILE, open_run_dir
from dadam3.run_logging import read_jsonl
from dadam3.schema import train_settings
from dadam3.train import build_trainer

from trainer_runs import ROOT, TOY, cli, config, train


def without_time(records):
    return [{k: v for k, v in r.items() if k != "time"} for r in records]


# ---------------------------------------------------------------- resume

def test_resume_applies_a_changed_learning_rate_and_records_it(tmp_path):
    train(TOY + ["loop.iterations=3"], tmp_path / "run")
    t = train(TOY + ["loop.iterations=5", "optimizer.lr=1e-5", f"resume={tmp_path / 'run'}"], tmp_path / "x")
    assert all(g["lr"] == 1e-5 for opt in (t.opt_g, t.opt_d) for g in opt.param_groups)
    recs = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    (resumed,) = [r for r in recs if r["status"] == "resumed"]
    assert resumed["iteration"] == 3
    assert resumed["changed"] == {"loop.iterations": [3, 5], "optimizer.lr": [1e-3, 1e-5]}


@pytest.mark.parametrize("change, key, old", [("topology=complete", "topology.name", "ring"),
                                              ("dtype=float64", "dtype", "float32"),
                                              ("seed=1", "seed", "0"),
                                              ("optimizer=dosg", "optimizer.name", "dadam3")])
def test_resume_refuses_keys_that_fix_the_run(tmp_path, change, key, old):
    train(TOY + ["loop.iterations=3"], tmp_path / "run")
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(TOY + ["loop.iterations=5", change, f"resume={tmp_path / 'run'}"])), tmp_path)
    msg = str(e.value)
    assert e.value.key == key and f"was made with {key}={old}" in msg and "\n" not in msg


def test_resumed_log_reads_as_if_the_run_never_stopped(tmp_path):
    full = tmp_path / "full"
    train(TOY + ["loop.iterations=9"], full)
    cut = tmp_path / "cut"
    train(TOY + ["loop.iterations=5"], cut)                     # finished at 5, off the logging grid
    train(TOY + ["loop.iterations=9", f"resume={cut}"], tmp_path / "x")
    resumed = read_jsonl(cut / "metrics.jsonl")
    assert [r["status"] for r in resumed].count("finished") == 1 and resumed[-1]["status"] == "finished"
    assert without_time([r for r in resumed if r["status"] != "resumed"]) == without_time(read_jsonl(full / "metrics.jsonl"))


def test_resumed_log_with_an_evaluation_period_but_no_metric_on(tmp_path):
    """metrics.every=4 with every image metric off: the trainer logs nothing at 4, so the
    record a run ending at 4 wrote there must go when it is resumed (it stayed: the rewind
    judged the grid from the config)."""
    images = ["dataset=fake", "dataset.length=64", "model=dcgan32", "model.width=0.03125", "nodes=2",
              "loop.batch_size=2", "device=cpu", "loop.progress=false", "loop.log_every=3", "loop.sample_every=100",
              "loop.checkpoint_every=100", "metrics.every=4", "metrics.inception=false", "metrics.fid=false",
              "metrics.kid=false"]
    train(images + ["loop.iterations=8"], tmp_path / "full")
    cut = tmp_path / "cut"
    train(images + ["loop.iterations=4"], cut)
    train(images + ["loop.iterations=8", f"resume={cut}"], tmp_path / "x")
    resumed = [r for r in read_jsonl(cut / "metrics.jsonl") if r["status"] != "resumed"]
    assert [r["iteration"] for r in resumed] == [3, 6, 8, 8]
    assert without_time(resumed) == without_time(read_jsonl(tmp_path / "full" / "metrics.jsonl"))


def test_figure_script_decides_finished_from_the_last_record_only(tmp_path):
    run = tmp_path / "figX" / "fake" / "dadam3"
    run.mkdir(parents=True)
    records = [{"iteration": 80, "status": "finished"}, {"iteration": 80, "status": "resumed"},
               {"iteration": 100, "status": "running"}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    script = ROOT / "scripts" / "runs.sh"             # the figure drivers' train_or_resume
    line = next(x for x in script.read_text().splitlines() if "the last record decides" in x)
    test = line.strip().removeprefix("if ").split("; then")[0].replace('"$dir', f'"{run}')
    assert subprocess.run(["bash", "-c", test]).returncode == 1           # not finished
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"iteration": 120, "status": "finished"}) + "\n")
    assert subprocess.run(["bash", "-c", test]).returncode == 0


def test_divergence_message_and_record_name_the_same_iteration(tmp_path, monkeypatch):
    real_step = trainer_mod.WGANTrainer.train_step

    def poisoned(self):
        out = real_step(self)
        if self.state.iteration + 1 == 3:               # the step of iteration 3 leaves a NaN parameter
            with torch.no_grad():
                next(iter(self.G.parameters()))[1].fill_(float("nan"))
        return out

    monkeypatch.setattr(trainer_mod.WGANTrainer, "train_step", poisoned)
    with pytest.raises(TrainingDiverged) as e:
        train(TOY + ["loop.iterations=8"], tmp_path)
    last = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert last["status"] == "diverged" and last["node"] == 1
    assert f"after iteration {last['iteration']}" in str(e.value) and last["iteration"] == 3   # checked before its checkpoint


# ---------------------------------------------------------------- run directories

def test_second_fresh_run_into_a_directory_is_refused_then_overwrite_allows_it(tmp_path):
    run = tmp_path / "run"
    assert cli(*TOY, "loop.iterations=2", "seed=0", f"hydra.run.dir={run}").returncode == 0
    before = (run / "metrics.jsonl").read_bytes()
    r = cli(*TOY, "loop.iterations=2", "seed=1", f"hydra.run.dir={run}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith(f"error: hydra.run.dir={run}: holds another run's files (metrics.jsonl, checkpoints")
    assert "resume=" in r.stderr and "overwrite=true" in r.stderr
    assert (run / "metrics.jsonl").read_bytes() == before              # nothing lost
    assert cli(*TOY, "loop.iterations=2", "seed=1", "overwrite=true", f"hydra.run.dir={run}").returncode == 0
    assert load(checkpoint_path(run))["config"]["seed"] == 1
    assert len(read_jsonl(run / "metrics.jsonl")) == 2


def test_a_live_writer_holds_the_directory(tmp_path):
    (tmp_path / LOCK_FILE).write_text("4242\n")
    with open(tmp_path / LOCK_FILE, "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)        # as a running process does
        with pytest.raises(ConfigError, match=r"another run \(pid 4242\) is writing into this directory"):
            open_run_dir(tmp_path, None, {})
    rd = open_run_dir(tmp_path, None, {})                               # released: free again
    assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    rd.release()


def test_stray_checkpoint_temporaries_are_removed_and_modes_follow_the_umask(tmp_path):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    stray = run / "checkpoints" / ".last.pt.abc123.tmp"
    stray.write_bytes(b"x" * 1000)
    old = os.umask(0o022)
    try:
        train(TOY + ["loop.iterations=4", f"resume={run}"], tmp_path / "x")
    finally:
        os.umask(old)
    assert not stray.exists()
    for f in (checkpoint_path(run), run / "metrics.jsonl"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f


# ---------------------------------------------------------------- signals

@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_stops_and_resumes_bit_identically(tmp_path, signum):
    run = tmp_path / "run"
    args = [*TOY, "loop.checkpoint_every=1000", "threads=1"]
    p = subprocess.Popen([sys.executable, "-m", "dadam3.train", *args, "loop.iterations=100000", f"hydra.run.dir={run}"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "metrics.jsonl").exists() or \
            len(read_jsonl(run / "metrics.jsonl")) < 3:
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.05)
    p.send_signal(signum)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signum, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stopped: {signal.Signals(signum).name} after iteration ")
    assert f"resume={run}" in lines[0]
    k = int(lines[0].split("after iteration ")[1].split(";")[0])
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and last["iteration"] == k
    assert load(checkpoint_path(run))["iteration"] == k

    total = k + 5
    assert cli(*args, f"loop.iterations={total}", f"resume={run}", f"hydra.run.dir={tmp_path / 'x'}").returncode == 0
    train([*args, f"loop.iterations={total}"], tmp_path / "full")   # the uninterrupted reference, in this process
    a, b = load(checkpoint_path(run)), load(checkpoint_path(tmp_path / "full"))
    for net in ("G", "D"):
        for name in a[net]:
            assert torch.equal(a[net][name], b[net][name]), name
    resumed = [r for r in read_jsonl(run / "metrics.jsonl") if r["status"] != "resumed"]
    assert without_time(resumed) == without_time(read_jsonl(tmp_path / "full" / "metrics.jsonl"))


# ---------------------------------------------------------------- bad files and services

def _bad_files(tmp_path):
    not_ckpt = tmp_path / "notes.txt"
    not_ckpt.write_text("hello")
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(checkpoint_path(run).read_bytes()[:2000])
    other = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, other)
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"\x00\x01garbage" * 10)
    garbage_csv = tmp_path / "garbage.csv"
    garbage_csv.write_text("a,b\nc,d\n")
    return not_ckpt, truncated, other, garbage, garbage_csv


def test_bad_files_are_one_line_before_any_training(tmp_path):
    not_ckpt, truncated, other, garbage, garbage_csv = _bad_files(tmp_path)
    cases = [([f"resume={not_ckpt}"], f"resume={not_ckpt}: not a readable checkpoint"),
             ([f"resume={truncated}"], f"resume={truncated}: not a readable checkpoint"),
             ([f"resume={other}"], f"resume={other}: not a checkpoint of python -m dadam3.train"),
             (["topology=explicit", f"topology.file={garbage}", "nodes=2"], f"topology.file={garbage}: not a numeric"),
             (["topology=explicit", f"topology.file={garbage_csv}", "nodes=2"], f"topology.file={garbage_csv}: not a"),
             ]
    for extra, start in cases:
        with pytest.raises(ConfigError) as e:
            build_trainer(train_settings(config(TOY + ["loop.iterations=5", *extra])), tmp_path / "fresh")
        assert str(e.value).startswith(start) and "\n" not in str(e.value), str(e.value)
        assert not (tmp_path / "fresh" / "metrics.jsonl").exists()


def test_garbage_inception_weights_stop_the_run_at_start(tmp_path):
    garbage = tmp_path / "inception.pth"
    garbage.write_bytes(b"not weights" * 100)
    r = cli("dataset=fake", "dataset.length=64", "model.width=0.03125", "nodes=2", "loop.batch_size=2", "device=cpu",
            "metrics.inception=true", "metrics.every=2", f"metrics.inception_weights={garbage}", "loop.iterations=2",
            "loop.progress=false", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith(f"error: metrics.inception_weights={garbage}: not torch-fidelity's Inception weights")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_wandb_mode_comes_from_the_environment_unless_the_config_sets_it(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert train_settings(config(TOY + ["logger=wandb"])).logger.mode == "offline"
    assert train_settings(config(TOY + ["logger=wandb", "logger.mode=disabled"])).logger.mode == "disabled"
    monkeypatch.delenv("WANDB_MODE")
    assert train_settings(config(TOY + ["logger=wandb"])).logger.mode == "online"


@pytest.mark.slow
def test_wandb_without_login_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "c"), WANDB_DIR=str(tmp_path / "d"),
               WANDB_SILENT="true", NETRC=str(tmp_path / "netrc"))
    r = cli(*TOY, "loop.iterations=2", "logger=wandb", f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: logger.mode=online: wandb cannot start") and "wandb login" in r.stderr


# ---------------------------------------------------------------- values that were accepted silently

@pytest.mark.parametrize("args, start", [
    (["model.hidden=0"], "model.hidden=0: must be an integer >= 1"),
    (["model.hidden=-1"], "model.hidden=-1: must be an integer >= 1"),
    (["model.hidden=1.5"], "model.hidden=1.5: must be an integer >= 1"),
    (["topology=torus", "nodes=7"], "topology=torus: nodes=7 has no factorisation"),
    (["topology=torus", "nodes=6", "topology.rows=1.5"], "topology.rows=1.5: must be an integer divisor of nodes=6"),
    (["optimizer.lr=inf"], "optimizer.lr=inf: must be a finite number"),
])
def test_values_that_were_accepted_silently(tmp_path, args, start):
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(TOY + ["loop.iterations=2", *args])), tmp_path)
    assert str(e.value).startswith(start), str(e.value)


def test_synthetic_divergence_is_one_line_with_a_status(tmp_path):
    r = cli("optimizer=dsgd", "optimizer.lr=5", "iterations=1000", f"hydra.run.dir={tmp_path}",
            module="dadam3.synthetic")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: training diverged: the iterates are not finite after iteration ")
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["status"] == "diverged" and f"iteration {status['iteration']}" in r.stderr
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == "iteration,error,avg_grad_sq_norm" and all("nan" not in row for row in rows)


def test_synthetic_huge_c_is_one_line(tmp_path):
    r = cli("game.c=1e200", "iterations=10", f"hydra.run.dir={tmp_path}", module="dadam3.synthetic")
    assert r.returncode == 2 and r.stderr.strip() == "error: game.c=1e+200: must be in [1, 1e+100]"
