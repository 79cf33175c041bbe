"""``python -m dadam3.distributed.launch`` (torchrun's agent, :mod:`dadam3.distributed.launch`):
clean stops of a distributed training run under the launcher, real processes and signals."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dadam3.checkpoint import checkpoint_path, load
from dadam3.run_logging import read_jsonl

from test_ordered_mix import TOY

ROOT = Path(__file__).resolve().parent.parent
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


def test_the_launchers_port_in_use_is_one_line(tmp_path):
    """``--master-port`` held by another program: torchrun's store traceback before; one line, exit 2."""
    import socket
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "dadam3.distributed.launch", "--nnodes=1", "--nproc-per-node=1",
                            "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "dadam3.train", *TOY,
                            "placement=distributed", f"hydra.run.dir={tmp_path / 'run'}"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr == (f"error: --master-port={port}: the launcher cannot listen on it: it is in use by another "
                        "program; choose a free port (--master-port=P) or use --standalone\n")
    assert not (tmp_path / "run").exists()
