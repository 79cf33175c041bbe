"""placement=distributed against the simulator: real ranks (gloo on CPU) under torchrun, float64,
the toy WGAN-GP on M = 5 nodes. Every node's parameters and optimizer state equal the
simulator's within 1e-10 and metrics.jsonl holds the same records (wall times aside), for
R in {1, 2, 3}, three optimizers and three topologies; checkpoints written by R = 2 resume
under R = 3 and in the simulator; a rank that dies makes the other stop with one line."""
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dadam3.run.checkpoint import checkpoint_path, load
from dadam3.run.loggers import read_jsonl

from trainer_runs import train

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).parent / "torchrun"
TOY = ["experiment=toy_gaussians", "loop.n_critic=1", "model.hidden=16", "loop.batch_size=8", "loop.progress=false",
       "loop.log_every=2", "metrics.every=4", "metrics.samples=200", "loop.sample_every=4", "loop.checkpoint_every=3",
       "dtype=float64"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def simulator(run_dir, *args):
    """The reference: the same run in the simulator (placement=local), in this process (build, fit,
    finish, as ``python -m dadam3.train`` does; the CLI itself is tested in test_train.py,
    test_run_dir.py and test_signals.py, and the ranks here all go through it)."""
    train([*TOY, *args], run_dir)


def ranks(R, run_dir, *args, timeout=300):
    r = subprocess.run([str(TORCHRUN), "--standalone", f"--nproc-per-node={R}", "-m", "dadam3.train", *TOY, *args,
                        "placement=distributed", "distributed.timeout_s=60", f"hydra.run.dir={run_dir}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]


def close(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-10, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def assert_same_run(dir_a, dir_b):
    a, b = read_jsonl(dir_a / "metrics.jsonl"), read_jsonl(dir_b / "metrics.jsonl")
    strip = lambda recs: [{k: v for k, v in r.items() if k != "time"} for r in recs]
    assert len(a) == len(b)
    for x, y in zip(strip(a), strip(b)):
        assert close(x, y), (x, y)
    ca, cb = load(checkpoint_path(dir_a)), load(checkpoint_path(dir_b))
    assert ca["iteration"] == cb["iteration"]
    for net in ("G", "D"):
        for name, t in ca[net].items():
            torch.testing.assert_close(t, cb[net][name], rtol=1e-10, atol=1e-12, msg=f"{net}.{name}")
    for opt in ("opt_g", "opt_d"):
        assert ca[opt]["k"] == cb[opt]["k"]
        for i, state in ca[opt]["state"].items():
            for key, t in state.items():
                torch.testing.assert_close(t, cb[opt]["state"][i][key], rtol=1e-10, atol=1e-12, msg=f"{opt}.{key}")
    assert ca["sampler"]["streams"].keys() == cb["sampler"]["streams"].keys()
    assert all(torch.equal(x, y) for x, y in zip(ca["noise"], cb["noise"]))


@pytest.mark.slow
@pytest.mark.parametrize("R, optimizer, topology", [
    (2, "dadam3", "ring"),
    (3, "dosg", "erdos_renyi"),
    (2, "dp_oadam", "one_peer_exponential"),
    (3, "dadam3", "one_peer_exponential"),
    (1, "dadam3", "erdos_renyi"),
])
def test_ranks_equal_the_simulator(tmp_path, R, optimizer, topology):
    args = [f"optimizer={optimizer}", f"topology={topology}", "loop.iterations=6"]
    simulator(tmp_path / "sim", *args)
    ranks(R, tmp_path / "dist", *args)
    assert_same_run(tmp_path / "sim", tmp_path / "dist")
    assert sorted(p.name for p in (tmp_path / "dist" / "samples").iterdir()) == ["iter_000004.png", "iter_000006.png"]


@pytest.mark.slow
def test_checkpoint_of_two_ranks_resumes_under_three_and_in_the_simulator(tmp_path):
    simulator(tmp_path / "full", "loop.iterations=7")
    ranks(2, tmp_path / "r2", "loop.iterations=3")
    for name in ("r3", "sim"):
        run = tmp_path / name
        run.mkdir()
        for f in ("metrics.jsonl", "checkpoints", "run_id"):     # a copy of the run, its id too
            subprocess.run(["cp", "-r", str(tmp_path / "r2" / f), str(run / f)], check=True)
    ranks(3, tmp_path / "r3", "loop.iterations=7", f"resume={tmp_path / 'r3'}")     # in place (elsewhere: a branch)
    simulator(tmp_path / "y", "loop.iterations=7", f"resume={tmp_path / 'sim'}")
    for name in ("r3", "sim"):
        resumed = tmp_path / name
        recs = read_jsonl(resumed / "metrics.jsonl")
        assert [r for r in recs if r["status"] == "resumed"][0]["changed"]["loop.iterations"] == [3, 7]
        kept = [r for r in recs if r["status"] != "resumed"]
        (resumed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
        assert_same_run(tmp_path / "full", resumed)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_rank_that_dies_stops_the_other_with_one_line(tmp_path):
    """Two ranks started by hand (torchrun's agent would stop the survivor itself): rank 1 is
    killed mid-run; rank 0 must exit with status 3 and one line within timeout_s + margin."""
    port, timeout_s = _free_port(), 5
    procs = []
    for rank in (0, 1):
        env = {**ENV, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "dadam3.train", *TOY, "loop.iterations=100000", "placement=distributed",
             f"distributed.timeout_s={timeout_s}", f"hydra.run.dir={tmp_path / 'run'}"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not metrics.exists() or len(read_jsonl(metrics)) < 2):
        assert all(p.poll() is None for p in procs), procs[0].stderr.read()[-2000:]
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGKILL)
    killed = time.time()
    _, err = procs[0].communicate(timeout=timeout_s + 60)
    took = time.time() - killed
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert procs[0].returncode == 3, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: rank 0: "), err[-2000:]
    # the gossip exchange (its peer's connection closed) or a collective (the group's timeout) notices first
    assert ("died or hung" in lines[0] or "exited or crashed" in lines[0]) and f"timeout_s={timeout_s}" in lines[0]
    assert took < timeout_s + 30


# Each rank runs `python -m dadam3.train`; on rank 1 the WGAN-GP step of its 5th call first
# sets the critic's first parameter of its first node (node 3 of 0..4) to NaN.
POISON_RANK_1 = """
import os, runpy, sys, torch
import dadam3.gan.iteration as iteration
real, calls = iteration.wgan_gp_step, [0]
def poisoned(G, D, *args, **kw):
    calls[0] += 1
    if calls[0] == 5:
        with torch.no_grad():
            next(iter(D.parameters()))[0].fill_(float("nan"))
    return real(G, D, *args, **kw)
if os.environ["RANK"] == "1":
    iteration.wgan_gp_step = poisoned
runpy.run_module("dadam3.train", run_name="__main__", alter_sys=True)
"""


def _start_two_ranks(run_dir, *args, code=None):
    """Ranks 0 and 1 started by hand (no torchrun agent between the test and the ranks)."""
    port, procs = _free_port(), []
    for rank in (0, 1):
        env = {**ENV, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        entry = ["-c", code] if code else ["-m", "dadam3.train"]
        procs.append(subprocess.Popen([sys.executable, *entry, *TOY, *args, "placement=distributed",
                                       "distributed.timeout_s=60", f"hydra.run.dir={run_dir}"],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def _error_lines(err):
    return [line for line in err.strip().splitlines() if line.strip()]


@pytest.mark.slow
def test_nan_on_another_rank_stops_both_naming_node_and_iteration(tmp_path):
    run = tmp_path / "run"
    procs = _start_two_ranks(run, "loop.iterations=8", code=POISON_RANK_1)
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [3, 3], errs
    lines = _error_lines(errs[0])
    assert len(lines) == 1 and lines[0].startswith("error: training diverged: "), errs[0][-2000:]
    assert "node 3 at iteration 5; last good checkpoint: " in lines[0], lines[0]
    assert _error_lines(errs[1]) == [], errs[1][-2000:]          # said once, by rank 0
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert (last["status"], last["node"], last["iteration"]) == ("diverged", 3, 5)
    ckpt = load(checkpoint_path(run))
    assert ckpt["iteration"] == 3 and all(torch.isfinite(v).all() for v in ckpt["D"].values())


@pytest.mark.slow
def test_sigterm_to_one_rank_stops_both_and_resumes_like_the_simulator(tmp_path):
    """SIGTERM reaches rank 1 only: both ranks finish the same iteration, rank 0 saves the
    checkpoint and says so once, both exit 143; resumed (by the simulator) to k + 3, the
    run equals an uninterrupted simulator run."""
    run = tmp_path / "run"
    procs = _start_two_ranks(run, "loop.iterations=100000", "loop.checkpoint_every=1000")
    deadline = time.time() + 120
    while time.time() < deadline and (not (run / "metrics.jsonl").exists()
                                      or len(read_jsonl(run / "metrics.jsonl")) < 2):
        assert all(p.poll() is None for p in procs), procs[0].stderr.read()[-2000:]
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [143, 143], errs
    lines = _error_lines(errs[0])
    assert len(lines) == 1 and lines[0].startswith("stopped: SIGTERM after iteration "), errs[0][-2000:]
    assert _error_lines(errs[1]) == [], errs[1][-2000:]
    k = int(lines[0].split("after iteration ")[1].split(";")[0])
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert (last["status"], last["iteration"]) == ("interrupted", k)
    assert load(checkpoint_path(run))["iteration"] == k

    simulator(tmp_path / "x", f"loop.iterations={k + 3}", "loop.checkpoint_every=1000", f"resume={run}")
    simulator(tmp_path / "full", f"loop.iterations={k + 3}", "loop.checkpoint_every=1000")
    kept = [r for r in read_jsonl(run / "metrics.jsonl") if r["status"] != "resumed"]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert_same_run(tmp_path / "full", run)
