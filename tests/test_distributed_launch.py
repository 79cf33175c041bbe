"""``python -m dadam3.launch`` (torchrun's agent, :mod:`dadam3.launch`):
clean stops of a distributed training run under the launcher, real processes and signals."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dadam3.run.checkpoint import checkpoint_path, load
from dadam3.run.loggers import read_jsonl

from test_ordered_mix import TOY

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, "-m", "dadam3.launch", "--standalone", "--nproc-per-node=2", "-m", "dadam3.train"]
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
    """``python -m dadam3.launch`` (torchrun's agent): a clean stop exits with the
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


@pytest.fixture
def launcher(monkeypatch):
    """:mod:`dadam3.launch` with a fresh signal record, this process's handlers restored after."""
    from dadam3 import launch
    saved = {sig: signal.getsignal(sig) for sig in launch.STOP_SIGNALS}
    monkeypatch.setattr(launch, "_received", [])
    monkeypatch.setattr(launch, "_closing", [False])
    yield launch
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_that_lands_inside_the_agent_s_metrics_wrapper_is_its_exit_status(launcher, monkeypatch, sig, code):
    """torch's handler raises where the agent happens to be; in ``metrics.api.prof``'s wrapper
    that becomes an UnboundLocalError (issue 33): the launcher still exits 128 + signal, silently
    (the ranks say their line), and the agent's shutdown sends the ranks that signal, not SIGTERM."""
    import torch.distributed.elastic.multiprocessing.api as mp_api
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    sent = []

    def agent_run(args):
        try:
            mp_api._terminate_process_handler(sig, None)          # as installed by the agent: noted, then raises
        finally:
            LocalElasticAgent._shutdown(agent, timeout=1)           # the agent's clean-up after any exception
            raise UnboundLocalError("cannot access local variable 'start' where it is not associated with a value")

    agent = LocalElasticAgent.__new__(LocalElasticAgent)
    monkeypatch.setattr(LocalElasticAgent, "_shutdown", lambda self, death_sig=signal.SIGTERM, timeout=30:
                        sent.append(death_sig))
    monkeypatch.setattr(mp_api, "_terminate_process_handler", mp_api._terminate_process_handler)
    monkeypatch.setattr(torchrun, "parse_args", lambda argv: argv)
    monkeypatch.setattr(torchrun, "run", agent_run)
    assert launcher.main(["x"]) == code
    assert sent == [sig]


def test_a_signal_before_the_agent_starts_is_its_exit_status(launcher, monkeypatch):
    """A signal while torch loads or the rendezvous runs (the launcher's own handler): 143, no traceback."""
    import torch.distributed.run as torchrun
    monkeypatch.setattr(torchrun, "parse_args", lambda argv: argv)
    monkeypatch.setattr(torchrun, "run", lambda args: signal.raise_signal(signal.SIGTERM))
    assert launcher.main(["x"]) == 143


def test_a_failure_without_a_signal_is_not_hidden(launcher, monkeypatch):
    import torch.distributed.run as torchrun
    monkeypatch.setattr(torchrun, "parse_args", lambda argv: argv)
    monkeypatch.setattr(torchrun, "run", lambda args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        launcher.main(["x"])


def test_the_launchers_port_in_use_is_one_line(tmp_path):
    """``--master-port`` held by another program: torchrun's store traceback before; one line, exit 2."""
    import socket
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "dadam3.launch", "--nnodes=1", "--nproc-per-node=1",
                            "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "dadam3.train", *TOY,
                            "placement=distributed", f"hydra.run.dir={tmp_path / 'run'}"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr == (f"error: --master-port={port}: the launcher cannot listen on it: it is in use by another "
                        "program; choose a free port (--master-port=P) or use --standalone\n")
    assert not (tmp_path / "run").exists()
