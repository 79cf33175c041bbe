"""Resuming (:mod:`dadam3.run.checkpoint.resume`): ``resume=DIR`` alone is enough (the run's configuration
comes from its checkpoint; the printed command is quoted), and a resume never continues silently from a
damaged state (a deleted log, a torn record at the checkpoint, an empty resume=, an impossible
iteration, an earlier failed attempt). Each test failed before its fix."""
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser

from dadam3.run import resume_config
from dadam3.run.checkpoint import atomic_save, checkpoint_path, load, resume_command, resume_override
from dadam3.errors.config import ConfigError
from dadam3.run.loggers import read_jsonl
from dadam3.run.resume_config import resume_argv
from dadam3.train import main as train_main

from test_run_dir import FAST, resume, run_cli
from trainer_runs import ROOT, TOY, train


# ---------------------------------------------------------------- 9: resume=DIR alone

@pytest.mark.parametrize("path", ["/tmp/a b", "/tmp/a,b", "/tmp/it's [1]", '/tmp/q"x', "/tmp/plain_dir-1.x"])
def test_the_continue_command_is_quoted_for_the_shell_and_hydra(path):
    words = shlex.split(resume_command(path))
    assert words[:3] == ["python", "-m", "dadam3.train"] and len(words) == 4
    override = OverridesParser.create().parse_overrides([words[3]])[0]
    assert override.key_or_group == "resume" and override.value() == path


@pytest.mark.slow
def test_resume_dir_alone_continues_a_run_made_with_overrides(tmp_path):
    run = tmp_path / "a run, with overrides"
    r = run_cli(*FAST, "loop.iterations=3", "dataset.radius=3", "optimizer.lr=1e-3", f'hydra.run.dir="{run}"')
    assert r.returncode == 0, r.stderr[-2000:]
    # exactly the printed command (python -> this interpreter), plus the one change
    command = resume_command(run).replace("python", shlex.quote(sys.executable), 1) + " loop.iterations=5"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    resumed = [x for x in read_jsonl(run / "metrics.jsonl") if x["status"] == "resumed"]
    assert resumed == [{"iteration": 3, "status": "resumed", "changed": {"loop.iterations": [3, 5]},
                        "time": resumed[0]["time"]}]
    assert read_jsonl(run / "metrics.jsonl")[-1] == {**read_jsonl(run / "metrics.jsonl")[-1], "iteration": 5,
                                                      "status": "finished"}
    # a key that fixes the run is still refused, naming the run's own value (not a default)
    r = run_cli(resume_override(run), "loop.iterations=7", "dataset.radius=2")
    assert r.returncode == 2 and "error: dataset.radius=2.0: cannot change on resume" in r.stderr, r.stderr
    assert "dataset.radius=3.0" in r.stderr


# ---------------------------------------------------------------- 10: damaged states are not continued silently

def test_a_deleted_log_is_refused(tmp_path):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    (run / "metrics.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"metrics.jsonl is missing \(the run's log up to iteration 3 is gone\)"):
        resume(TOY + ["loop.iterations=5", f"resume={run}"], tmp_path / "x")
    assert not (run / "metrics.jsonl").exists()


def test_a_torn_record_at_the_checkpoint_is_named(tmp_path, caplog):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=4"], run)              # checkpoint at 4, on the logging grid
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    assert '"iteration": 4' in lines[-2] and '"finished"' in lines[-1]
    (run / "metrics.jsonl").write_text("".join(lines[:-2]) + lines[-2][:40])        # killed mid-record
    with caplog.at_level(logging.WARNING, logger="dadam3.run.rewind"):
        t = resume(TOY + ["loop.iterations=6", f"resume={run}"], tmp_path / "x")
    said = [r.getMessage() for r in caplog.records]
    assert any("dropped the torn last line" in m for m in said), said
    assert any("the record at iteration 4 (the checkpoint's) is missing or was torn" in m for m in said), said
    t.fit()
    t.finish()
    assert [r["iteration"] for r in read_jsonl(run / "metrics.jsonl") if r["status"] == "running"] == [2, 6]


def test_an_empty_resume_is_refused(tmp_path):
    with pytest.raises(ConfigError) as e:
        resume(TOY + ["loop.iterations=3", "resume="], tmp_path / "x")
    assert e.value.key == "resume" and "is empty" in str(e.value)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("iteration", [-5, 2.5, "3"])
def test_an_impossible_iteration_is_refused(tmp_path, iteration):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    ckpt = load(checkpoint_path(run))
    ckpt["iteration"] = iteration
    atomic_save(ckpt, checkpoint_path(run))
    with pytest.raises(ConfigError, match=f"the checkpoint claims iteration {iteration!r}"):
        resume(TOY + ["loop.iterations=5", f"resume={run}"], tmp_path / "x")


def test_a_failed_resume_attempt_leaves_no_resumed_record(tmp_path):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    attempt = resume(TOY + ["loop.iterations=5", f"resume={run}"], tmp_path / "x")     # then the process died
    attempt.records.logger.finish()
    attempt.run.lock.release()
    t = resume(TOY + ["loop.iterations=5", f"resume={run}"], tmp_path / "x")
    t.fit()
    t.finish()
    statuses = [r["status"] for r in read_jsonl(run / "metrics.jsonl")]
    assert statuses.count("resumed") == 1 and statuses[-1] == "finished", statuses


# ---------------------------------------------------------------- issue 33: the config comes from the run itself

@pytest.mark.slow
def test_a_resume_takes_the_config_from_the_checkpoint_and_a_new_directory_branches(tmp_path):
    """A copied last.pt into a new hydra.run.dir (the documented branch path) used to fail naming
    dataset.alpha whatever key was given; the same after .hydra/ is lost; resume=RUN
    hydra.run.dir=OTHER silently extended RUN."""
    import shutil
    run = tmp_path / "run"
    assert run_cli(*FAST, "loop.iterations=3", "dataset.radius=3", "seed=2", f"hydra.run.dir={run}").returncode == 0
    copy = tmp_path / "backup" / "last.pt"
    copy.parent.mkdir()
    shutil.copy(checkpoint_path(run), copy)
    shutil.copy(checkpoint_path(run).with_name("last.pt.sha256"), copy.with_name("last.pt.sha256"))   # with it
    r = run_cli(f"resume={copy}", "loop.iterations=5", "optimizer.lr=2e-3", f"hydra.run.dir={tmp_path / 'b'}")
    assert r.returncode == 0, r.stderr[-2000:]
    (resumed,) = [x for x in read_jsonl(tmp_path / "b" / "metrics.jsonl") if x["status"] == "resumed"]
    assert resumed["changed"] == {"loop.iterations": [3, 5], "optimizer.lr": [1e-3, 2e-3]}
    r = run_cli(f"resume={copy}", "loop.iterations=5", "nodes=3", "seed=4", f"hydra.run.dir={tmp_path / 'c'}")
    assert r.returncode == 2 and not (tmp_path / "c").exists()
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: nodes=3: cannot change on resume: {copy} was made with nodes=5; nor can seed "
                           "(made with 2, now 4)"), r.stderr
    shutil.rmtree(run / ".hydra")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    r = run_cli(f"resume={run}", "loop.iterations=4", f"hydra.run.dir={tmp_path / 'branch'}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"} == before   # untouched
    assert read_jsonl(tmp_path / "branch" / "metrics.jsonl")[-1]["iteration"] == 4
    assert (tmp_path / "branch" / "run_id").read_text() != (run / "run_id").read_text()
    r = run_cli(f"resume={run}", "loop.iterations=4")                  # .hydra/ lost: in place
    assert r.returncode == 0, r.stderr[-2000:]
    assert [x["changed"] for x in read_jsonl(run / "metrics.jsonl") if x["status"] == "resumed"] == [
        {"loop.iterations": [3, 4]}]


def test_a_resume_reads_its_checkpoint_once_and_the_run_does_not_hold_it(tmp_path, monkeypatch):
    """The resume's config and its run directory's checks share one load (checksum and
    ``torch.load`` of a file of the nets and optimizer states); once loaded into the state, the
    checkpoint is let go (the run would otherwise hold a second copy of its state on the host)."""
    run = tmp_path / "run"
    train([*TOY, "loop.iterations=3"], run)
    reads = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda f, *a, **k: reads.append(Path(f)) or real(f, *a, **k))
    monkeypatch.chdir(tmp_path)      # Hydra's own directory for the job: here
    monkeypatch.setattr(sys, "argv", ["dadam3.train", *resume_argv([resume_override(run), "loop.iterations=4"])])
    train_main()                      # as python -m dadam3.train does, in this process
    assert reads == [checkpoint_path(run)]
    assert read_jsonl(run / "metrics.jsonl")[-1]["status"] == "finished"
    assert resume_config._READ == {}
    t = resume([*TOY, resume_override(run), "loop.iterations=6"], run)     # the API's resume
    assert t.run.lock.checkpoint is None and resume_config._READ == {} and t.state.iteration == 4
    t.finish()
