"""Issue 16 (reliability, round 3): every check before any write, ranks that agree on their
config, sweeps that survive a diverging job, no traceback on a bad input. Each test failed
before its fix (real processes and signals where the item is about them)."""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dadam3.checkpoint import checkpoint_path, load
from dadam3.errors import ConfigError
from dadam3.run_logging import JsonlLogger, read_jsonl
from dadam3.schema import train_settings
from dadam3.train import build_trainer

from trainer_runs import ROOT, TOY, cli, config, train

TORCHRUN = Path(sys.executable).parent / "torchrun"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SMALL = [*TOY, "loop.iterations=3"]
FAKE = ["dataset=fake", "dataset.length=64", "model=dcgan32", "model.width=0.03125", "nodes=2", "loop.batch_size=2",
        "device=cpu", "loop.progress=false"]


def no_wandb_login(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "c"), WANDB_DIR=str(tmp_path / "d"),
               WANDB_SILENT="true", NETRC=str(tmp_path / "netrc"))
    return env


def snapshot(run):
    """Every file of a run directory (but the lock) and its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"}


def one_line(stderr, start):
    lines = [x for x in stderr.strip().splitlines() if x.startswith("error") or "Traceback" in x]
    assert len(lines) == 1 and lines[0].startswith(start), stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]


# ---------------------------------------------------------------- 1-4: data lost or overwritten

@pytest.mark.slow
def test_1_4_a_failed_wandb_start_touches_nothing(tmp_path):
    """1: a resume whose W&B cannot log in left the log rewound (finished record and the last
    off-grid record gone); 4: a fresh run's failed W&B start left an empty metrics.jsonl."""
    run = tmp_path / "a"
    base = ["experiment=toy_gaussians", "metrics.every=0", "loop.progress=false", "loop.log_every=20"]
    assert cli(*base, "loop.iterations=30", f"hydra.run.dir={run}").returncode == 0
    before = snapshot(run)
    env = no_wandb_login(tmp_path)
    r = cli(*base, "loop.iterations=40", "logger=wandb", f"resume={run}", f"hydra.run.dir={tmp_path / 'x'}", env=env)
    assert r.returncode == 2, r.stderr
    one_line(r.stderr, "error: logger.mode=online: wandb cannot start")
    assert snapshot(run) == before                      # the log still ends "finished" at 30
    fresh = tmp_path / "fresh"
    r = cli(*base, "loop.iterations=2", "logger=wandb", f"hydra.run.dir={fresh}", env=env)
    assert r.returncode == 2 and not fresh.exists() or snapshot(fresh) == {}, sorted(fresh.rglob("*"))
    assert cli(*base, "loop.iterations=2", f"hydra.run.dir={fresh}").returncode == 0    # the corrected re-run


@pytest.mark.parametrize("damage", ["sampler", "param_groups", "shape"])
def test_1_a_checkpoint_that_does_not_fit_leaves_the_log_alone(tmp_path, damage):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=5"], run)                  # ends off the logging grid
    ckpt = load(checkpoint_path(run))
    if damage == "sampler":
        del ckpt["sampler"]
    elif damage == "param_groups":
        ckpt["opt_g"]["param_groups"] = []
    else:
        ckpt["G"] = {k: torch.zeros(*v.shape[:-1], v.shape[-1] + 1) if v.dim() else v for k, v in ckpt["G"].items()}
    torch.save(ckpt, checkpoint_path(run))
    before = snapshot(run)
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(TOY + ["loop.iterations=9", f"resume={run}"])), tmp_path / "x")
    assert e.value.key == "resume" and "does not fit this run" in str(e.value) and "\n" not in str(e.value)
    assert snapshot(run) == before


def test_2_overwrite_deletes_nothing_before_the_config_is_checked(tmp_path):
    run = tmp_path / "b"
    assert cli(*SMALL, f"hydra.run.dir={run}").returncode == 0
    before = snapshot(run)
    r = cli(*SMALL, "overwrite=true", "dataset.partition=spilt",
            f"hydra.run.dir={run}")
    assert r.returncode == 2
    one_line(r.stderr, "error: dataset.partition=spilt: unknown value")
    assert snapshot(run) == before


def test_3_a_refused_run_leaves_the_runs_provenance_and_log(tmp_path):
    run = tmp_path / "run"
    assert cli(*SMALL, "seed=0", f"hydra.run.dir={run}").returncode == 0
    assert (run / ".hydra" / "config.yaml").is_file() and (run / "train.log").is_file()
    before = snapshot(run)
    r = cli(*SMALL, "seed=1", f"hydra.run.dir={run}")            # refused: holds another run's files
    assert r.returncode == 2 and snapshot(run) == before
    held = subprocess.Popen([sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'a+'); "
                             "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                             str(run / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline().strip() == "held"
        r = cli(*SMALL, "seed=2", "overwrite=true", f"hydra.run.dir={run}")   # refused by a live lock
        assert r.returncode == 2 and "is writing into this directory" in r.stderr
    finally:
        held.kill()
        held.wait()
    assert snapshot(run) == before
    assert cli(*SMALL, "loop.iterations=5", f"resume={run}", f"hydra.run.dir={tmp_path / 'y'}").returncode == 0
    assert (run / ".hydra" / "config.yaml").read_bytes() == before[".hydra/config.yaml"]
    assert (run / ".hydra" / "resumed_00000003" / "overrides.yaml").is_file()


# ---------------------------------------------------------------- 5-7: ranks and sweeps

@pytest.mark.slow
def test_5_ranks_with_different_configs_stop_before_training(tmp_path):
    run = tmp_path / "run"
    r = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node=2", "-m", "dadam3.train", *SMALL,
                        "seed='${oc.decode:${oc.env:RANK}}'", "placement=distributed", "distributed.timeout_s=60",
                        f"hydra.run.dir={run}"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert lines == ["error: seed=1: rank 1 was started with this but rank 0 with seed=0: every rank must run "
                     "the same config"], r.stderr[-3000:]
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()


@pytest.mark.slow
def test_7_an_occupied_master_port_is_named_and_the_timeout_is_the_real_one(tmp_path):
    with socket.socket() as held:                      # another program listens on MASTER_PORT
        held.bind(("127.0.0.1", 0))
        held.listen(8)
        port = held.getsockname()[1]
        env = {**ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
        args = [sys.executable, "-m", "dadam3.train", *SMALL, "placement=distributed", "distributed.timeout_s=5"]
        procs, start = [], time.monotonic()
        for rank in (0, 1):
            procs.append(subprocess.Popen(args + [f"hydra.run.dir={tmp_path / str(rank)}"], cwd=ROOT, text=True,
                                          env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        outs, ends = [], []
        for p in procs:
            outs.append(p.communicate(timeout=120)[1])
            ends.append(time.monotonic() - start)
    assert procs[0].returncode == 2
    one_line(outs[0], f"error: MASTER_PORT={port}: rank 0 cannot listen on 127.0.0.1:{port}: it is in use")
    assert procs[1].returncode == 3 and "did not form within timeout_s=5" in outs[1], outs[1]
    # rank 0 fails as the rendezvous starts; rank 1 gives up after timeout_s (+ the watchdog's 1 s slack)
    assert ends[1] - ends[0] < 5 + 4, ends


@pytest.mark.slow
def test_6_a_sweep_runs_every_job_and_sums_up(tmp_path):
    r = cli("-m", *SMALL, "loop.gp_lambda=1e308,10", f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=${hydra.job.num}")
    assert r.returncode == 1, r.stderr[-3000:]
    jobs = [json.loads(x) for x in (tmp_path / "sweep_status.jsonl").read_text().splitlines()]
    assert [(j["job"], j["status"], j["exit"]) for j in jobs] == [(0, "diverged", 3), (1, "finished", 0)]
    assert jobs[0]["message"].startswith("error: training diverged: NaN/Inf")
    assert read_jsonl(tmp_path / "1" / "metrics.jsonl")[-1]["status"] == "finished"
    assert read_jsonl(tmp_path / "0" / "metrics.jsonl")[-1]["status"] == "diverged"
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sweep: 1 of 2 jobs did not finish (#0 ") and "loop.gp_lambda=1e+308" in last, r.stderr
    assert ": diverged); see " in last and "sweep_status.jsonl" in last


# ---------------------------------------------------------------- 8-10: paths, plots, checkpoint writes

def test_8_unusable_paths_are_one_line_before_anything(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = cli(*SMALL, f"hydra.run.dir={afile}/sub")
    assert r.returncode == 2
    one_line(r.stderr, f"error: hydra.run.dir={afile}/sub: cannot be created: {afile} is not a directory")
    images = ["dataset=fake", "dataset.length=64", "model.width=0.03125", "nodes=2", "loop.batch_size=2", "device=cpu",
              "loop.progress=false", "loop.iterations=2", "metrics.every=1", "metrics.fid=true", "metrics.samples=10"]
    r = cli(*images, f"metrics.cache_dir={afile}", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2
    one_line(r.stderr, f"error: metrics.cache_dir={afile}: exists and is not a directory")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def _plot(*args):
    return cli(*args, module="dadam3.plot")


def test_9_plot_refuses_bad_inputs_an_unwritable_out_and_a_missing_metric(tmp_path):
    empty, header, corrupt, good = (tmp_path / n for n in ("empty", "header", "corrupt", "good"))
    for d in (empty, header, corrupt, good):
        d.mkdir()
    (empty / "metrics.csv").write_text("")
    (header / "metrics.csv").write_text("iteration,error,avg_grad_sq_norm\n")
    (corrupt / "metrics.jsonl").write_text('{"iteration": 1}\nnot json\n')
    (good / "metrics.jsonl").write_text('{"iteration": 1, "loss_d": 0.5, "status": "running"}\n')
    out = tmp_path / "o.png"
    cases = [(("fig1", "--run", f"a={empty}"), f"error: {empty / 'metrics.csv'}: no rows"),
             (("fig1", "--run", f"a={header}"), f"error: {header / 'metrics.csv'}: no rows"),
             (("toy", "--run", f"a={corrupt}"), f"error: {corrupt / 'metrics.jsonl'}: not a metrics.jsonl"),
             (("toy", "--run", f"a={good}"), f"error: {good / 'metrics.jsonl'} (--run a): no record has modes_covered"),
             (("is", "--run", f"a={good}", "--out", str(tmp_path / "afile" / "x.png")), None)]
    (tmp_path / "afile").write_text("x")
    for args, start in cases:
        r = _plot(*args, *(() if "--out" in args else ("--out", str(out))))
        assert r.returncode == 2, (args, r.stderr)
        one_line(r.stderr, start or f"error: --out={tmp_path / 'afile' / 'x.png'}: its directory exists and is not a directory")
        assert not out.exists()


@pytest.mark.slow
def test_10_a_failed_checkpoint_write_is_one_line_and_a_terminal_record(tmp_path):
    run = tmp_path / "run"
    assert cli(*SMALL, "loop.checkpoint_every=1000", f"hydra.run.dir={run}").returncode == 0
    kept = checkpoint_path(run).read_bytes()
    limit = len(kept) // 2                            # a checkpoint no longer fits; the log does

    def fsize_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = cli(*SMALL, "loop.checkpoint_every=1000", "loop.iterations=6", f"resume={run}", f"hydra.run.dir={tmp_path / 'x'}",
            preexec_fn=fsize_limit)
    assert r.returncode == 1, r.stderr[-2000:]
    one_line(r.stderr, f"error: checkpoint not written: {checkpoint_path(run)} after iteration 6 (checkpoint "
                       "write failed: File too large); the previous checkpoint is kept")
    assert checkpoint_path(run).read_bytes() == kept
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and last["iteration"] == 6 and "File too large" in last["reason"]


# ---------------------------------------------------------------- 11-12: values, and smaller ones

@pytest.mark.parametrize("args, start", [
    (["+topology.p=0.3"], "topology.p=0.3: means nothing for topology=ring (its keys: name, rounds)"),
    (["+topology.foo=1"], "topology.foo=1: means nothing for topology=ring"),
    (["+model.foo=1"], "model.foo=1: means nothing for model=mlp"),
    (["+dataset.alpha=0.1"], "dataset.alpha=0.1: means nothing for dataset=gaussians"),
    ([*FAKE, "dataset.alpha=0.1"], "dataset.alpha=0.1: only used with dataset.partition=dirichlet"),
    (["distributed.timeout_s=60"], "distributed.timeout_s=60.0: only used with placement=distributed"),
    (["+metrics.evry=5"], "metrics.evry=5: unknown key; did you mean every?"),
    (["+optimzer.lr=1"], "optimzer={'lr': 1}: unknown key; did you mean optimizer?"),
    (["+foo=1"], "foo=1: unknown key"),
    (["topology=explicit", "nodes=2", "topology.matrix=[[0.5,0.5],[0.5,0.5]]", "topology.require_symmetric=yes"],
     "topology.require_symmetric=yes: must be true or false"),
    ([*FAKE, "+model.bias_before_norm=yes"], "model.bias_before_norm=yes: must be true or false"),
    (["model.nz=true"], "model.nz=True: must be an integer >= 1"),
    (["optimizer.lr=true"], "optimizer.lr=True: must be a number"),
    (["seed=18446744073709551616"], "seed=18446744073709551616: must be an integer in [0, 4294967295]"),
    (["topology=erdos_renyi", "topology.seed=-1"], "topology.seed=-1: must be an integer in [0, 4294967295]"),
    (["topology=erdos_renyi", "topology.seed=1.5"], "topology.seed=1.5: must be an integer"),
    (["placement=distributed", "distributed.timeout_s=1e300"], "distributed.timeout_s=1e+300: must be in (0, 3.1536e+07]"),
    (["threads=100000"], "threads=100000: must be an integer in [1, 1024]"),
    ([*FAKE, "metrics.inception=true", "metrics.samples=5"],
     "metrics.samples=5: must be >= 10"),
    (["optimizer.eps=0"], "optimizer.eps=0: must be in (0, inf): the first step divides a zero gradient"),
])
def test_11_12_values_that_crashed_or_were_accepted(tmp_path, args, start):
    base = [] if args[:len(FAKE)] == FAKE else TOY
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(base + ["loop.iterations=2", *args])), tmp_path / "run")
    assert str(e.value).startswith(start) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "run").exists()


def test_12_too_many_nodes_for_the_data_names_nodes(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(["dataset=fake", "dataset.length=4", "dataset.partition=split",
                                             "model.width=0.03125", "nodes=5", "loop.batch_size=1", "device=cpu"])),
                      tmp_path / "run")
    assert str(e.value).startswith("nodes=5: the data set has 4 samples and dataset.partition=split") and \
        "batch_size" not in str(e.value)


def test_12_torchrun_without_backend_distributed_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match=r"^placement=local: this process is rank 1 of WORLD_SIZE=2 \(started by "
                                          r"torchrun\): set placement=distributed"):
        build_trainer(train_settings(config(SMALL)), tmp_path / "run")


def test_12_resume_warns_about_dropped_garbage_lines(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1}\ngarbage\n{"iteration": 2}\n[1, 2\n{"iteration": 3}\n')
    with caplog.at_level("WARNING"):
        JsonlLogger(path, resume_from_iteration=2).finish()
    assert [r["iteration"] for r in read_jsonl(path)] == [1, 2]
    (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert msg == f"{path}: dropped 2 unreadable line(s) (line 2, 4) while rewinding to iteration 2"


@pytest.mark.slow
def test_12_toy_gaussians_script_resumes_instead_of_deleting(tmp_path):
    env = {**ENV, "PYTHON": sys.executable, "TOY_OUT": str(tmp_path)}
    args = ["loop.n_critic=1", "model.hidden=8", "loop.batch_size=8", "loop.iterations=4", "loop.log_every=2", "metrics.every=4",
            "metrics.samples=100", "loop.sample_every=4", "loop.checkpoint_every=2"]
    r = subprocess.run(["bash", "scripts/toy_gaussians.sh", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    before = {opt: snapshot(tmp_path / opt) for opt in ("dadam3", "dosg", "dp_oadam")}
    r = subprocess.run(["bash", "scripts/toy_gaussians.sh", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.count("finished, skipped") == 3, r.stdout + r.stderr[-2000:]
    assert {opt: snapshot(tmp_path / opt) for opt in before} == before


@pytest.mark.slow
def test_12_ctrl_c_in_the_synthetic_runner_writes_what_it_has(tmp_path):
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "dadam3.synthetic", "iterations=100000000000", "backend=torch",
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
