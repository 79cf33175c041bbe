"""Issue 26 items 1, 3 and the run-directory part of 14: a resume continues only a checkpoint in
its own run's checkpoints/ (run ids), overwrite=true deletes nothing unless it can delete
everything, and a refused or resumed run leaves no directory of its own behind. Each test
failed before its fix."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dadam3.checkpoint import RUN_ID_FILE, atomic_save, checkpoint_path, load, read_run_id
from dadam3.errors import ConfigError
from dadam3.run_logging import read_jsonl
from dadam3.schema import train_settings
from dadam3.train import build_trainer

from trainer_runs import ROOT, TOY, config, train

FAST = ["experiment=toy_gaussians", "loop.n_critic=1", "model.hidden=16", "loop.batch_size=8", "loop.progress=false",
        "loop.log_every=2", "metrics.every=0"]


def snapshot(run):
    """Every file of a directory (but the lock) and its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"}


def run_cli(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "dadam3.train", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env=env)


def resume(overrides, run_dir, dir_named=False):
    return build_trainer(train_settings(config(overrides)), Path(run_dir), dir_named)


# ---------------------------------------------------------------- 1: only a run's own checkpoint continues it

def test_1_a_checkpoint_that_is_not_its_runs_own_is_refused_and_touches_nothing(tmp_path):
    a, b, scratch = tmp_path / "a", tmp_path / "b", tmp_path / "scratch"
    train(TOY + ["loop.iterations=5"], a)
    train(TOY + ["loop.iterations=4", "seed=1"], b)
    assert read_run_id(a) and read_run_id(a) != read_run_id(b)
    assert load(checkpoint_path(a))["run_id"] == read_run_id(a)
    (a / "backup").mkdir()
    shutil.copy(checkpoint_path(a), a / "backup" / "it5.pt")              # a copy outside a/checkpoints/
    b_other = b / "checkpoints" / "from_a.pt"
    shutil.copy(checkpoint_path(a), b_other)                               # another run's checkpoint under b
    scratch.mkdir()
    shutil.copy(checkpoint_path(a), scratch / "last.pt")                   # a scratch directory
    before = {d: snapshot(d) for d in (a, b, scratch)}
    cases = [(a / "backup" / "it5.pt", "is not in a run's checkpoints/ directory"),
             (b_other, f"the checkpoint belongs to another run (run id {read_run_id(a)}), not to {b}"),
             (scratch, "is not in a run's checkpoints/ directory")]
    for path, why in cases:
        with pytest.raises(ConfigError) as e:
            resume(TOY + ["loop.iterations=7", f"resume={path}"], tmp_path / "x")
        assert e.value.key == "resume" and why in str(e.value) and "hydra.run.dir=NEW" in str(e.value), str(e.value)
    assert {d: snapshot(d) for d in (a, b, scratch)} == before
    assert not (tmp_path / "x").exists()

    # named explicitly: the copy continues in a new directory of its own, a's files untouched
    t = resume(TOY + ["loop.iterations=7", f"resume={a / 'backup' / 'it5.pt'}"], tmp_path / "new", dir_named=True)
    t.fit()
    t.finish()
    assert t.run_dir == tmp_path / "new" and snapshot(a) == before[a]
    records = read_jsonl(tmp_path / "new" / "metrics.jsonl")
    assert records[0]["status"] == "resumed" and records[0]["iteration"] == 5 and records[-1]["iteration"] == 7
    assert read_run_id(tmp_path / "new") not in (None, read_run_id(a))
    assert load(checkpoint_path(tmp_path / "new"))["run_id"] == read_run_id(tmp_path / "new")


def test_1_a_checkpoint_written_before_run_ids_continues_only_in_its_own_run(tmp_path):
    """Decided for old checkpoints (no run id): accepted in <run>/checkpoints/ of a run without an
    id whose metrics.jsonl is there and whose config_resolved.yaml is the checkpoint's config."""
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    ckpt = load(checkpoint_path(run))
    del ckpt["run_id"]
    atomic_save(ckpt, checkpoint_path(run))
    (run / RUN_ID_FILE).unlink()
    (run / "config_resolved.yaml").write_text("seed: 99\n")               # not the checkpoint's run
    with pytest.raises(ConfigError, match="no run id .an older version's."):
        resume(TOY + ["loop.iterations=5", f"resume={run}"], tmp_path / "x")
    from omegaconf import OmegaConf
    (run / "config_resolved.yaml").write_text(OmegaConf.to_yaml(ckpt["config"]))
    t = resume(TOY + ["loop.iterations=5", f"resume={run}"], tmp_path / "x")
    t.fit()
    t.finish()
    assert read_run_id(run) is not None and load(checkpoint_path(run))["run_id"] == read_run_id(run)


@pytest.mark.slow
def test_1_the_cli_refuses_a_backup_checkpoint_and_continues_it_only_where_named(tmp_path):
    run = tmp_path / "run"
    assert run_cli(*FAST, "loop.iterations=3", f"hydra.run.dir={run}").returncode == 0
    (run / "backup").mkdir()
    shutil.copy(checkpoint_path(run), run / "backup" / "it3.pt")
    before = snapshot(run)
    r = run_cli("loop.iterations=5", f"resume={run / 'backup' / 'it3.pt'}", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(f"error: resume={run}/backup/it3.pt: "), r.stderr
    assert "Traceback" not in r.stderr and snapshot(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]          # no outputs/ left behind
    r = run_cli("loop.iterations=5", f"resume={run / 'backup' / 'it3.pt'}", f"hydra.run.dir={tmp_path / 'new'}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert snapshot(run) == before and read_jsonl(tmp_path / "new" / "metrics.jsonl")[-1]["iteration"] == 5


# ---------------------------------------------------------------- 3: overwrite=true checks before deleting

def test_3_overwrite_deletes_nothing_when_a_subdirectory_is_a_symlink(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "other_disk"
    train(TOY + ["loop.iterations=3"], run)
    shutil.move(run / "checkpoints", elsewhere)
    (run / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    before, kept = snapshot(run), snapshot(elsewhere)
    with pytest.raises(ConfigError) as e:
        resume(TOY + ["loop.iterations=3", "overwrite=true"], run)
    assert e.value.key == "overwrite" and "symbolic link" in str(e.value) and "nothing was deleted" in str(e.value)
    assert snapshot(run) == before and snapshot(elsewhere) == kept


@pytest.mark.skipif(os.geteuid() == 0, reason="root may delete in any directory")
def test_3_overwrite_deletes_nothing_when_a_subdirectory_is_read_only(tmp_path):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    os.chmod(run / "samples", 0o555)
    try:
        before = snapshot(run)
        with pytest.raises(ConfigError, match="permission denied"):
            resume(TOY + ["loop.iterations=3", "overwrite=true"], run)
        assert snapshot(run) == before
    finally:
        os.chmod(run / "samples", 0o755)


# ---------------------------------------------------------------- 14: directories left behind

def test_14_overwrite_deletes_the_old_runs_provenance_and_job_log(tmp_path):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    (run / ".hydra" / "resumed_00000003").mkdir(parents=True)
    (run / ".hydra" / "resumed_00000003" / "overrides.yaml").write_text("- seed=7\n")
    (run / "train.log").write_text("[old run] a line\n")
    t = resume(TOY + ["loop.iterations=2", "overwrite=true"], run)
    assert not (run / ".hydra").exists() and not (run / "train.log").exists()
    t.fit()
    t.finish()


@pytest.mark.slow
def test_14_refused_and_resumed_runs_leave_no_directory_of_their_own(tmp_path):
    r = run_cli(*FAST, "loop.iterations=2", "resume=/nonexistent/run", f"hydra.run.dir={tmp_path / 'new' / 'deep'}")
    assert r.returncode == 2 and "error: resume=/nonexistent/run: no checkpoint" in r.stderr, r.stderr
    assert not (tmp_path / "new").exists()                  # Hydra made it; the refusal removed it again
    kept = tmp_path / "kept"
    kept.mkdir()
    r = run_cli(*FAST, "loop.iterations=2", "resume=/nonexistent/run", f"hydra.run.dir={kept}")
    assert r.returncode == 2 and kept.is_dir()              # a directory that existed stays
    r = run_cli(*FAST, "loop.iterations=2", "hydra.run.dir=")
    assert r.returncode == 2 and r.stderr.strip() == "error: hydra.run.dir=: is empty (it would write into the " \
                                                     "current directory); name a directory", r.stderr
    work = tmp_path / "work"
    work.mkdir()
    assert run_cli(*FAST, "loop.iterations=2", cwd=work).returncode == 0        # outputs/train/gaussians/...
    made = [p for p in (work / "outputs").rglob("metrics.jsonl")]
    assert len(made) == 1
    r = run_cli(f"resume={made[0].parent}", "loop.iterations=4", cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [p.parent for p in (work / "outputs").rglob("*") if p.is_dir() and not any(p.iterdir())] == []
    assert len([p for p in (work / "outputs").rglob("metrics.jsonl")]) == 1


@pytest.mark.slow
def test_14_a_failed_wandb_start_leaves_no_directory_and_no_lock(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "c"), WANDB_DIR=str(tmp_path / "d"),
               WANDB_SILENT="true", NETRC=str(tmp_path / "netrc"), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    fresh = tmp_path / "fresh"
    r = subprocess.run([sys.executable, "-m", "dadam3.train", *FAST, "loop.iterations=2", "logger=wandb",
                        f"hydra.run.dir={fresh}"], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert r.returncode == 2 and "wandb cannot start" in r.stderr, r.stderr[-2000:]
    assert not fresh.exists(), sorted(fresh.rglob("*"))        # was: a directory holding only .lock
