"""Signals at awkward moments (:mod:`dadam3.run.signals`): real processes, real signals. Ctrl-C while
the entry point is still importing; two signals a few milliseconds apart (a terminal's Ctrl-C
under torchrun or ``timeout``); a second signal later, which stops at once; a long iteration
(many critic steps) that must stay interruptible."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dadam3.run.checkpoint import checkpoint_path, load
from dadam3.run.loggers import read_jsonl

from trainer_runs import ROOT, TOY, cli, train, without_time

LONG = [*TOY, "metrics.every=0", "loop.sample_every=100000", "loop.checkpoint_every=100000", "loop.log_every=1",
        "loop.iterations=100000"]


def start(*args):
    return subprocess.Popen([sys.executable, "-m", "dadam3.train", *args], cwd=ROOT, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_records(run: Path, n: int, proc, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if (run / "metrics.jsonl").is_file() and len(read_jsonl(run / "metrics.jsonl")) >= n:
            return
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the run did not start logging")


SLOW_ITERATION = ["loop.n_critic=1000", "loop.batch_size=1024", "model.hidden=128"]   # one iteration: >20 s here


def wait_for_training(run: Path, proc, limit_s: float = 120) -> None:
    """Until the first iteration is under way (config_resolved.yaml is written just before)."""
    deadline = time.monotonic() + limit_s
    while not (run / "config_resolved.yaml").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.05)
    time.sleep(1.0)
    assert not read_jsonl(run / "metrics.jsonl"), "the iteration was too short for this test"


def finished(proc, limit_s: float = 120) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run did not stop")
    return proc.returncode, err


def one_line(stderr: str, start: str) -> str:
    lines = [x for x in stderr.strip().splitlines() if x.startswith(("error", "stopped")) or "Traceback" in x
             or "KeyboardInterrupt" in x]
    assert len(lines) == 1 and lines[0].startswith(start), stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


def test_ctrl_c_while_importing_is_one_line_and_the_interrupted_status(tmp_path):
    proc = start(*TOY, f"hydra.run.dir={tmp_path / 'run'}")
    time.sleep(0.4)                                     # torch and Hydra are still loading
    proc.send_signal(signal.SIGINT)
    code, err = finished(proc)
    assert code == 130, err[-2000:]
    one_line(err, "stopped: SIGINT")


def test_two_signals_milliseconds_apart_are_one_clean_checkpointed_stop(tmp_path):
    run = tmp_path / "run"
    proc = start(*LONG, f"hydra.run.dir={run}")
    wait_for_records(run, 2, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)                    # what torchrun forwards after a terminal's Ctrl-C
    code, err = finished(proc)
    assert code == 130, err[-2000:]
    one_line(err, "stopped: SIGINT after iteration")
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and checkpoint_path(run).is_file()


@pytest.mark.slow
def test_a_long_iteration_is_interrupted_within_one_critic_step_after_the_grace(tmp_path):
    """n_critic=1000 critic steps on a large batch: one iteration takes far longer than the
    grace a signal gives it; the run stops unfinished, in one line, with its terminal record."""
    run = tmp_path / "run"
    proc = start(*LONG, *SLOW_ITERATION, f"hydra.run.dir={run}")
    wait_for_training(run, proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, err = finished(proc)
    assert code == 143, err[-2000:]
    line = one_line(err, "stopped: SIGTERM 10 s ago and iteration")
    assert "n_critic=1000" in line and time.monotonic() - sent < 60
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and "still running" in last["reason"]


@pytest.mark.slow
def test_a_second_signal_later_stops_at_once_with_a_record(tmp_path):
    run = tmp_path / "run"
    proc = start(*LONG, *SLOW_ITERATION, f"hydra.run.dir={run}")
    wait_for_training(run, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(2.0)                                     # the iteration is still running
    proc.send_signal(signal.SIGINT)
    code, err = finished(proc)
    assert code == 130, err[-2000:]
    one_line(err, "stopped: second SIGINT: stopped at once")
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and "second SIGINT" in last["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_stops_and_resumes_bit_identically(tmp_path, signum):
    run = tmp_path / "run"
    args = [*TOY, "loop.checkpoint_every=1000", "threads=1"]
    p = subprocess.Popen([sys.executable, "-m", "dadam3.train", *args, "loop.iterations=100000",
                          f"hydra.run.dir={run}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
    assert cli(*args, f"loop.iterations={total}", f"resume={run}").returncode == 0
    train([*args, f"loop.iterations={total}"], tmp_path / "full")   # the uninterrupted reference, in this process
    a, b = load(checkpoint_path(run)), load(checkpoint_path(tmp_path / "full"))
    for net in ("G", "D"):
        for name in a[net]:
            assert torch.equal(a[net][name], b[net][name]), name
    resumed = [r for r in read_jsonl(run / "metrics.jsonl") if r["status"] != "resumed"]
    assert without_time(resumed) == without_time(read_jsonl(tmp_path / "full" / "metrics.jsonl"))
