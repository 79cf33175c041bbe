"""Results that do not depend on the number of ranks, in float32 too (issue 26 item 7).

Each gossip round sums every node's terms in ascending node index, one rounding per product
and per sum (:mod:`dadam3.ordered_mix`), in the simulator and in every rank alike; so the
mixed rows are equal bit for bit, not merely close (a BLAS matmul over a rank's block rounds
differently from one over all M rows). Real ranks: spawned processes on gloo (the mixer), and
``torchrun --standalone`` (a training run against the simulator).
"""
from __future__ import annotations

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

from dadam3.checkpoint import checkpoint_path, load
from dadam3.distributed import DistributedMixer, node_blocks
from dadam3.errors import ConfigError
from dadam3.mixing import LocalMixer
from dadam3.run_logging import read_jsonl
from dadam3.schema import train_settings
from dadam3.topology import build_topology
from dadam3.train import build_trainer

from test_distributed_mixing import _free_port, _launch, _node_rows
from trainer_runs import SMALL, config, one_line, train

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).parent / "torchrun"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CASES = [(M, name, kw, t) for M in (5, 7) for name, kw in (("ring", {}), ("erdos_renyi", {"p": 0.5, "seed": 1}),
                                                          ("one_peer_exponential", {})) for t in (1, 2)]
SHAPES = [(), (3, 5), (33,)]


def _inputs(nodes, case, k):
    M, name, _, t = case
    return [_node_rows(nodes, s, M, name, t, k, j).to(torch.float32) for j, s in enumerate(SHAPES)]


def _float32_job(info, out: Path) -> None:
    """Every case, iterations 1..3, float32: this rank's mixed rows, saved for the test."""
    got = {}
    for case in CASES:
        M, name, kw, t = case
        mixer = DistributedMixer(build_topology(name, M, t, **kw), timeout_s=30)
        got[(M, name, t)] = [mixer.mix(_inputs(mixer.block, case, k), k) for k in (1, 2, 3)]
    torch.save(got, out / f"rank{info.rank}.pt")


@pytest.mark.parametrize("R", [2, 3])
def test_float32_mixing_is_bit_identical_to_the_simulator_for_any_number_of_ranks(tmp_path, R):
    codes, _ = _launch(_float32_job, R, tmp_path)
    assert codes == [0] * R, " | ".join((tmp_path / f"stderr{r}.txt").read_text()[-400:] for r in range(R))
    recs = [torch.load(tmp_path / f"rank{r}.pt") for r in range(R)]
    for case in CASES:
        M, name, kw, t = case
        local = LocalMixer(build_topology(name, M, t, **kw))
        for i, k in enumerate((1, 2, 3)):
            ref = local.mix(_inputs(range(M), case, k), k)
            for rank, block in enumerate(node_blocks(M, R)):
                for x, x_ref in zip(recs[rank][(M, name, t)][i], ref):
                    assert x.dtype == torch.float32
                    assert torch.equal(x, x_ref[block.start:block.stop]), (case, k, rank)


TOY = ["experiment=toy_gaussians", "nodes=4", "loop.n_critic=1", "model.hidden=16", "loop.batch_size=8",
       "loop.progress=false", "loop.log_every=1", "metrics.every=0", "loop.sample_every=100",
       "loop.checkpoint_every=0", "loop.iterations=3", "dtype=float32"]


def test_float32_training_on_two_ranks_equals_the_simulator(tmp_path):
    """M = 4 on R = 2 (two nodes per rank): losses, gradient norms and the final parameters and
    optimizer state equal the simulator's bit for bit. The consensus distances (a float64
    diagnostic whose node sums are all-reduced over the ranks) agree to 1e-14 relative."""
    train(TOY, tmp_path / "sim")
    r = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node=2", "-m", "dadam3.train", *TOY,
                        "placement=distributed", "distributed.timeout_s=60", f"hydra.run.dir={tmp_path / 'r2'}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    sim, ranks = (read_jsonl(tmp_path / d / "metrics.jsonl") for d in ("sim", "r2"))
    assert len(sim) == len(ranks) == 4
    for a, b in zip(sim, ranks):
        assert a.keys() == b.keys()
        for key in a.keys() - {"time"}:
            if key.startswith("consensus_distance"):
                assert math.isclose(a[key], b[key], rel_tol=1e-14), (a["iteration"], key)
            else:
                assert a[key] == b[key], (a["iteration"], key, a[key], b[key])
    ca, cb = (load(checkpoint_path(tmp_path / d)) for d in ("sim", "r2"))
    for net in ("G", "D"):
        assert all(torch.equal(t, cb[net][name]) for name, t in ca[net].items()), net
    for opt in ("opt_g", "opt_d"):
        assert all(torch.equal(t, cb[opt]["state"][i][key]) for i, st in ca[opt]["state"].items()
                   for key, t in st.items() if torch.is_tensor(t)), opt


# ---------------------------------------------------------------- clean stops under a launcher (item 11)

LAUNCH = [sys.executable, "-m", "dadam3.distributed.launch", "--standalone", "--nproc-per-node=2", "-m", "dadam3.train"]
ENDLESS = [*TOY[:-2], "loop.iterations=100000", "loop.checkpoint_every=100000", "dtype=float64",
           "placement=distributed", "distributed.timeout_s=30"]


def _children(pid: int) -> list[int]:
    return [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]


@pytest.mark.slow
@pytest.mark.parametrize("target, sig, code, start", [
    ("launcher", signal.SIGTERM, 143, "stopped: SIGTERM after iteration"),
    ("launcher", signal.SIGINT, 130, "stopped: SIGINT after iteration"),
    ("rank 1", signal.SIGTERM, 143, "stopped: SIGTERM after iteration"),
    ("rank 1", signal.SIGKILL, 3, "error: rank 0: "),
])
def test_a_stop_under_the_launcher_is_one_line_its_status_and_a_terminal_record(tmp_path, target, sig, code, start):
    """``python -m dadam3.distributed.launch`` (torchrun's agent): a clean stop exits with the
    interrupted status and the ranks' one line, not torchrun's failure dump; a rank killed
    outright leaves the survivors' one line and an ``interrupted`` record naming the training
    iteration."""
    run = tmp_path / "run"
    proc = subprocess.Popen([*LAUNCH, *ENDLESS, f"hydra.run.dir={run}"], cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 180
    while not ((run / "metrics.jsonl").is_file() and len(read_jsonl(run / "metrics.jsonl")) >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.1)
    os.kill(proc.pid if target == "launcher" else sorted(_children(proc.pid))[1], sig)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the ranks did not stop")
    assert proc.returncode == code, err[-3000:]
    lines = [x for x in err.splitlines() if x.startswith(("error", "stopped")) or "Traceback" in x or "Error" in x]
    assert len(lines) == 1 and lines[0].startswith(start), err[-3000:]
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted"
    if sig == signal.SIGKILL:
        assert "peer failure" in last["reason"]
        assert f"during training iteration {last['iteration'] + 1}" in last["reason"]
    else:
        assert load(checkpoint_path(run))["iteration"] == last["iteration"]


def test_a_rank_that_starts_alone_says_so_in_one_line_without_cpp_frames(tmp_path):
    """Rank 1 starting after rank 0 has gone (nobody at MASTER_PORT): one line, exit 3."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    r = subprocess.run([sys.executable, "-m", "dadam3.train", *TOY, "placement=distributed", "distributed.timeout_s=3",
                        f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 3, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: rank 1: the process group of 2 ranks did not form"), \
        r.stderr[-2000:]


@pytest.mark.slow
def test_ranks_with_different_configs_stop_before_training(tmp_path):
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
def test_an_occupied_master_port_is_named_and_the_timeout_is_the_real_one(tmp_path):
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


def test_torchrun_without_backend_distributed_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match=r"^placement=local: this process is rank 1 of WORLD_SIZE=2 \(started by "
                                          r"torchrun\): set placement=distributed"):
        build_trainer(train_settings(config(SMALL)), tmp_path / "run")
