"""A distributed run's start-up (:mod:`dadam3.distributed.startup`, :mod:`dadam3.run.start`):
a rank alone, ranks started with different configs, an occupied MASTER_PORT and torchrun
without ``placement=distributed`` are each one line before training; real processes."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dadam3.errors.config import ConfigError
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer

from test_distributed_mixer import _free_port
from test_ordered_mix import TOY
from trainer_runs import SMALL, config, one_line

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).parent / "torchrun"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


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


def test_torchrun_without_placement_distributed_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match=r"^placement=local: this process is rank 1 of WORLD_SIZE=2 \(started by "
                                          r"torchrun\): set placement=distributed"):
        build_trainer(train_settings(config(SMALL)), tmp_path / "run")


LEAVE = textwrap.dedent('''
    import os
    from dadam3.distributed import init_from_env, shutdown
    from dadam3.gan.memory import net_costs
    init_from_env("gloo", 30.0, cuda=False)
    net_costs("mlp", 2, {}, {})      # the memory check's meta-device forward: torch._dynamo's first import
    shutdown()
    print("threads:", sorted({open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")}))
''')


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the threads' names from /proc")
def test_shutdown_ends_the_groups_threads_even_after_torch_dynamo_loads(tmp_path):
    """A group that outlived shutdown() kept gloo's threads running into the interpreter's exit,
    where they raced it: a rank died with SIGABRT (`terminate called without an active exception`),
    once in CI and in none of 144 repeats here. torch._dynamo, first imported after the group formed,
    kept it alive."""
    script = tmp_path / "leave.py"
    script.write_text(LEAVE)
    r = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node=2", str(script)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={**ENV, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    said = [line for line in r.stdout.splitlines() if line.startswith("threads:")]
    assert len(said) == 2 and not any("gloo" in line for line in said), r.stdout
