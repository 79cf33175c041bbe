"""The run directory (:mod:`dadam3.run.directory`): a resume continues only a checkpoint in its own
run's checkpoints/ (run ids); one run per directory (a live writer's lock; overwrite=true, which
deletes nothing unless it can delete everything); every check before any write (a refused run
leaves the directory as it was, and no directory of its own); stray temporaries and file modes."""
import fcntl
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dadam3.metrics.spec import FidelitySpec
from dadam3.run import hydra_dirs
from dadam3.run.command_line import check_command_line
from dadam3.run.checkpoint import atomic_save, checkpoint_path, load, read_run_id
from dadam3.run.checkpoint.files import checksum_path
from dadam3.errors.config import ConfigError
from dadam3.run.directory import LOCK_FILE, check_run_dir
from dadam3.run.loggers import read_jsonl
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer

from trainer_runs import ROOT, SMALL, TOY, cli, config, one_line, train

FAST = ["experiment=toy_gaussians", "loop.n_critic=1", "model.hidden=16", "loop.batch_size=8", "loop.progress=false",
        "loop.log_every=2", "metrics.every=0"]


def no_wandb_login(tmp_path):
    """An environment in which W&B has no login."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "c"), WANDB_DIR=str(tmp_path / "d"),
               WANDB_SILENT="true", NETRC=str(tmp_path / "netrc"))
    return env


def snapshot(run):
    """Every file of a directory (but the lock) and its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def copy_checkpoint(src: Path, dst: Path) -> None:
    """A copy of a checkpoint as a user makes one that resumes: the file and its checksum file."""
    shutil.copy(src, dst)
    shutil.copy(checksum_path(src), checksum_path(dst))


def run_cli(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "dadam3.train", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env=env)


def resume(overrides, run_dir, dir_named=False):
    return build_trainer(train_settings(config(overrides)), Path(run_dir), dir_named)


# ---------------------------------------------------------------- 1: only a run's own checkpoint continues it

def test_a_checkpoint_that_is_not_its_runs_own_is_refused_and_touches_nothing(tmp_path):
    a, b, scratch = tmp_path / "a", tmp_path / "b", tmp_path / "scratch"
    train(TOY + ["loop.iterations=5"], a)
    train(TOY + ["loop.iterations=4", "seed=1"], b)
    assert read_run_id(a) and read_run_id(a) != read_run_id(b)
    assert load(checkpoint_path(a))["run_id"] == read_run_id(a)
    (a / "backup").mkdir()
    copy_checkpoint(checkpoint_path(a), a / "backup" / "it5.pt")          # a copy outside a/checkpoints/
    b_other = b / "checkpoints" / "from_a.pt"
    copy_checkpoint(checkpoint_path(a), b_other)                           # another run's checkpoint under b
    scratch.mkdir()
    copy_checkpoint(checkpoint_path(a), scratch / "last.pt")               # a scratch directory
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


def test_a_checkpoint_written_before_run_ids_is_refused_in_one_line_before_anything_is_written(tmp_path):
    """The format before run ids (no ``run_id`` in the checkpoint): one line naming it, its run untouched."""
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    ckpt = load(checkpoint_path(run))
    del ckpt["run_id"]
    atomic_save(ckpt, checkpoint_path(run))
    before = snapshot(run)
    with pytest.raises(ConfigError) as e:
        resume(TOY + ["loop.iterations=5", f"resume={run}"], tmp_path / "x")
    assert str(e.value) == (f"resume={checkpoint_path(run)}: a checkpoint of an earlier format (before run ids: it "
                            "names no run): resume it with the version that wrote it, or start a new run")
    assert snapshot(run) == before and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_the_cli_refuses_a_backup_checkpoint_and_continues_it_only_where_named(tmp_path):
    run = tmp_path / "run"
    assert run_cli(*FAST, "loop.iterations=3", f"hydra.run.dir={run}").returncode == 0
    (run / "backup").mkdir()
    copy_checkpoint(checkpoint_path(run), run / "backup" / "it3.pt")
    before = snapshot(run)
    r = run_cli("loop.iterations=5", f"resume={run / 'backup' / 'it3.pt'}", cwd=tmp_path)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and last.startswith(f"error: resume={run}/backup/it3.pt: "), r.stderr
    assert "Traceback" not in r.stderr and snapshot(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]          # no outputs/ left behind
    r = run_cli("loop.iterations=5", f"resume={run / 'backup' / 'it3.pt'}", f"hydra.run.dir={tmp_path / 'new'}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert snapshot(run) == before and read_jsonl(tmp_path / "new" / "metrics.jsonl")[-1]["iteration"] == 5


# ---------------------------------------------------------------- 3: overwrite=true checks before deleting

def test_overwrite_deletes_nothing_when_a_subdirectory_is_a_symlink(tmp_path):
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
def test_overwrite_deletes_nothing_when_a_subdirectory_is_read_only(tmp_path):
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

def test_overwrite_deletes_the_old_runs_provenance_and_job_log(tmp_path):
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
def test_refused_and_resumed_runs_leave_no_directory_of_their_own(tmp_path):
    r = run_cli(*FAST, "loop.iterations=2", "resume=/nonexistent/run", f"hydra.run.dir={tmp_path / 'new' / 'deep'}")
    assert r.returncode == 2 and "error: resume=/nonexistent/run: no checkpoint" in r.stderr, r.stderr
    assert not (tmp_path / "new").exists()                  # Hydra made it; the refusal removed it again
    kept = tmp_path / "kept"
    kept.mkdir()
    r = run_cli(*FAST, "loop.iterations=2", "resume=/nonexistent/run", f"hydra.run.dir={kept}")
    assert r.returncode == 2 and kept.is_dir()              # a directory that existed stays
    r = run_cli(*FAST, "loop.iterations=2", "hydra.run.dir=")
    assert r.returncode == 2 and r.stderr.strip() == "error: hydra.run.dir=: is empty (it would write into the " \
                                                     "current directory); name a directory or file", r.stderr
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
def test_a_failed_wandb_start_leaves_no_directory_and_no_lock(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "c"), WANDB_DIR=str(tmp_path / "d"),
               WANDB_SILENT="true", NETRC=str(tmp_path / "netrc"), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    fresh = tmp_path / "fresh"
    r = subprocess.run([sys.executable, "-m", "dadam3.train", *FAST, "loop.iterations=2", "logger=wandb",
                        f"hydra.run.dir={fresh}"], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert r.returncode == 2 and "wandb cannot start" in r.stderr, r.stderr[-2000:]
    assert not fresh.exists(), sorted(fresh.rglob("*"))        # was: a directory holding only .lock


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
            check_run_dir(tmp_path, None, {}).commit()
    rd = check_run_dir(tmp_path, None, {}).commit()                  # released: free again
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


@pytest.mark.slow
def test_a_failed_wandb_start_touches_nothing(tmp_path):
    """1: a resume whose W&B cannot log in left the log rewound (finished record and the last
    off-grid record gone); 4: a fresh run's failed W&B start left an empty metrics.jsonl."""
    run = tmp_path / "a"
    base = ["experiment=toy_gaussians", "metrics.every=0", "loop.progress=false", "loop.log_every=20"]
    assert cli(*base, "loop.iterations=30", f"hydra.run.dir={run}").returncode == 0
    before = snapshot(run)
    env = no_wandb_login(tmp_path)
    r = cli(*base, "loop.iterations=40", "logger=wandb", f"resume={run}", env=env)
    assert r.returncode == 2, r.stderr
    one_line(r.stderr, "error: logger.mode=online: wandb cannot start")
    assert snapshot(run) == before                      # the log still ends "finished" at 30
    fresh = tmp_path / "fresh"
    r = cli(*base, "loop.iterations=2", "logger=wandb", f"hydra.run.dir={fresh}", env=env)
    assert r.returncode == 2 and not fresh.exists() or snapshot(fresh) == {}, sorted(fresh.rglob("*"))
    assert cli(*base, "loop.iterations=2", f"hydra.run.dir={fresh}").returncode == 0    # the corrected re-run


def test_overwrite_deletes_nothing_before_the_config_is_checked(tmp_path):
    run = tmp_path / "b"
    assert cli(*SMALL, f"hydra.run.dir={run}").returncode == 0
    before = snapshot(run)
    r = cli(*SMALL, "overwrite=true", "dataset.partition=spilt",
            f"hydra.run.dir={run}")
    assert r.returncode == 2
    one_line(r.stderr, "error: dataset.partition=spilt: unknown value")
    assert snapshot(run) == before


@pytest.mark.slow
def test_a_refused_run_leaves_the_runs_provenance_and_log(tmp_path):
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
    assert cli(*SMALL, "loop.iterations=5", f"resume={run}").returncode == 0     # (hydra.run.dir=OTHER branches)
    assert (run / ".hydra" / "config.yaml").read_bytes() == before[".hydra/config.yaml"]
    assert (run / ".hydra" / "resumed_00000003" / "overrides.yaml").is_file()


def test_unusable_paths_are_one_line_before_anything(tmp_path):
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


# ---------------------------------------------------------------- 4: overwrite deletes only what a run wrote

WRITES = ("metrics.jsonl", "checkpoints", "samples", "run_id")


def fake_run(run, writes=WRITES):
    """A run directory as a run leaves it: claimed (its manifest written), then its files."""
    rd = check_run_dir(run, None, {}, writes=writes).commit()
    rd.release()
    for name in writes:
        if name in ("checkpoints", "samples"):
            (run / name).mkdir(exist_ok=True)
            (run / name / "x").write_text("run's")
        elif name != "run_id":
            (run / name).write_text("run's\n")
    return rd


def test_a_run_lists_what_it_writes_before_it_writes_it(tmp_path):
    rd = check_run_dir(tmp_path / "r", None, {"logger": {"kind": "jsonl"}, "dataset": {"name": "gaussians"}}).commit()
    rd.release()
    listed = (tmp_path / "r" / "manifest.txt").read_text().splitlines()
    assert listed[0].startswith("# ") and "wandb" not in listed and "images" not in listed
    assert set(listed[1:]) == {"metrics.jsonl", "checkpoints", "samples", "config_resolved.yaml", "provenance.json",
                               "run_id", ".hydra", "train.log", "code.diff"}


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_directory_that_holds_no_run_is_refused_and_nothing_deleted(tmp_path, overwrite):
    """The issue's reproducer: a user's images/ (a name a run writes) in a folder without run."""
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "cat.png").write_bytes(b"png")
    (tmp_path / "manifest.txt").write_text("images\n")          # a user's file of that name: no run's manifest
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError) as e:
        check_run_dir(tmp_path, None, {}, overwrite=overwrite)
    msg = str(e.value)
    assert msg == (f"hydra.run.dir={tmp_path}: holds images but no run (no manifest.txt, run_id or metrics.jsonl): "
                   "not a run directory, so nothing in it is deleted or written over; choose another directory or "
                   "move them away")
    assert "resume=" not in msg and snapshot(tmp_path) == before


def test_a_directory_of_other_files_is_a_plain_start_and_keeps_them(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    rd = check_run_dir(tmp_path, None, {}, overwrite=True, writes=WRITES)
    assert rd.replace == ()
    rd.commit().release()
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "manifest.txt").is_file()


def test_overwrite_deletes_exactly_what_the_manifest_lists(tmp_path):
    fake_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "samples" / "mine.png").write_text("in a folder the run made: the run's")
    with pytest.raises(ConfigError) as e:            # without overwrite: no checkpoint, so no resume= hint
        check_run_dir(tmp_path, None, {}, writes=WRITES)
    assert "resume=" not in str(e.value) and "overwrite=true" in str(e.value)
    rd = check_run_dir(tmp_path, None, {}, overwrite=True, writes=WRITES)
    assert {name.split('/')[0] for name in rd.replace} == set(WRITES) and set(WRITES) <= set(rd.replace)
    rd.commit().release()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "manifest.txt", "notes.txt", "run_id"]


def test_names_a_run_writes_but_its_manifest_does_not_list_are_refused(tmp_path):
    fake_run(tmp_path, ("metrics.jsonl", "run_id"))
    (tmp_path / "images").mkdir()                   # the user's, put into the run's directory later
    (tmp_path / "images" / "cat.png").write_bytes(b"png")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match="holds images, which its run did not write .not in its manifest.txt."):
        check_run_dir(tmp_path, None, {}, overwrite=True, writes=WRITES)
    assert snapshot(tmp_path) == before


def test_a_manifest_naming_paths_outside_the_directory_deletes_none_of_them(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "precious"
    outside.mkdir()
    (outside / "f").write_text("keep")
    fake_run(run)
    manifest = run / "manifest.txt"
    manifest.write_text(manifest.read_text() + "../precious\n/tmp\nsamples/../..\n.lock\n")
    rd = check_run_dir(run, None, {}, overwrite=True, writes=WRITES)
    assert {name.split('/')[0] for name in rd.replace} == set(WRITES) and set(WRITES) <= set(rd.replace)
    rd.commit().release()
    assert (outside / "f").read_text() == "keep"


def test_a_run_of_an_earlier_version_is_replaced_by_the_names_such_a_run_writes(tmp_path):
    """No manifest (written before manifests), but its run id: overwrite deletes RUN_FILES' names."""
    fake_run(tmp_path)
    (tmp_path / "manifest.txt").unlink()
    (tmp_path / "notes.txt").write_text("mine")
    rd = check_run_dir(tmp_path, None, {}, overwrite=True, writes=WRITES)
    assert {name.split('/')[0] for name in rd.replace} == set(WRITES) and set(WRITES) <= set(rd.replace)
    rd.commit().release()
    assert (tmp_path / "notes.txt").is_file() and not (tmp_path / "samples").exists()


def test_a_resume_adds_what_it_writes_to_the_runs_manifest(tmp_path):
    """What an earlier segment of the run wrote stays listed (a resume with logger=wandb adds wandb)."""
    rd = fake_run(tmp_path)
    rd.new_id, rd.writes = False, ("metrics.jsonl", "wandb")     # as check_run_dir makes it for a resume
    rd.commit().release()
    assert (tmp_path / "manifest.txt").read_text().splitlines()[1:] == [*WRITES, "wandb"]


def test_a_full_disk_at_the_first_commit_leaves_no_empty_lock(tmp_path, monkeypatch):
    """The pid could not be written into .lock (ENOSPC): one OSError naming it, and neither the
    empty .lock nor the directory the commit created is left behind."""
    import errno
    import dadam3.run.lock as lock_module
    from dadam3.errors.boundary import failure_of

    def full(fd, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr(lock_module, "_write_pid", full)
    run = tmp_path / "run"
    rd = check_run_dir(run, None, {})
    with pytest.raises(OSError) as e:
        rd.commit()
    assert failure_of(e.value)[1].startswith(f"error: {run / LOCK_FILE}: No space left on device (ENOSPC)")
    assert not run.exists()
    run.mkdir()                                  # an existing directory stays, without the lock the commit made
    with pytest.raises(OSError):
        check_run_dir(run, None, {}).commit()
    assert run.is_dir() and not list(run.iterdir())


def test_the_empty_parents_hydra_made_go_even_when_the_run_directory_went_first(tmp_path, monkeypatch):
    """A claim undone (a W&B that would not start) removes the run directory it created; the
    empty parents Hydra made for it (``outputs/train/<data>/``) go after it, nothing else."""
    monkeypatch.setattr(hydra_dirs, "_NOTED", {})
    (tmp_path / "kept").mkdir()
    root = tmp_path / "outputs" / "train"
    hydra_dirs.note_existing(root)
    run = root / "data" / "run"
    run.mkdir(parents=True)
    run.rmdir()                         # RunDir.undo: the directory it created, removed
    hydra_dirs.discard_if_unused(run)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]


def test_a_run_directory_given_with_a_tilde_is_the_one_checked_and_written(tmp_path, monkeypatch):
    """``build_trainer(s, Path("~/run"))``: the directory checked is the one written, in $HOME."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    t = train(SMALL, Path("~") / "run")
    assert t.run_dir == tmp_path / "run" and (tmp_path / "run" / "metrics.jsonl").is_file()
    assert not (tmp_path / "~").exists()


def test_a_run_built_in_python_records_its_config_and_provenance_as_the_command_line_does(tmp_path):
    """``build_trainer`` (the Python entry point) left no ``config_resolved.yaml`` nor
    ``provenance.json``, against the contract ("every run directory gets provenance.json when it
    starts and at every resume"); each resume adds its segment."""
    import json
    from omegaconf import OmegaConf
    from dadam3.run.checkpoint.resume import run_identity
    t = train(SMALL, tmp_path / "run")
    resolved = OmegaConf.to_container(OmegaConf.load(tmp_path / "run" / "config_resolved.yaml"))
    assert resolved == dict(t.checkpointer.config)
    segments = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert [s["from_iteration"] for s in segments] == [0]
    assert segments[0]["config_identity"] == run_identity(resolved)
    assert not (tmp_path / "run" / ".hydra").exists()           # Hydra's files: a Hydra app's only
    again = resume(TOY + ["loop.iterations=5", f"resume={tmp_path / 'run'}"], tmp_path / "run")
    again.fit()
    again.finish()
    segments = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert [s["from_iteration"] for s in segments] == [0, 3]


@pytest.mark.parametrize("damage", ["5\n", '[{"from_iteration": "0"}]\n', "[{\"from_iteration\": 0, \"torch\""])
def test_a_resume_of_a_run_whose_provenance_is_damaged_is_refused_and_touches_nothing(tmp_path, damage):
    """A ``provenance.json`` that is not a list of segments made a resume fail with a traceback after
    its log was rewound (valid JSON of another shape), or dropped the run's earlier segments without
    a word (not JSON)."""
    run = tmp_path / "run"
    train(SMALL, run)
    (run / "provenance.json").write_text(damage)
    before = snapshot(run)
    with pytest.raises(ConfigError) as e:
        resume(TOY + ["loop.iterations=5", f"resume={run}"], run)
    assert str(e.value).startswith(f"resume={run}: {run / 'provenance.json'} is damaged (")
    assert "move it away to continue" in str(e.value) and "\n" not in str(e.value)
    assert snapshot(run) == before


def test_a_resume_of_a_checkpoint_without_its_grid_entry_is_refused_and_touches_nothing(tmp_path):
    run = tmp_path / "run"
    train(SMALL, run)
    ckpt = load(checkpoint_path(run))
    del ckpt["record_on_grid"]
    atomic_save(ckpt, checkpoint_path(run))
    before = snapshot(run)
    with pytest.raises(ConfigError, match="lacks the entry 'record_on_grid'"):
        resume(TOY + ["loop.iterations=5", f"resume={run}"], run)
    assert snapshot(run) == before


def test_a_resume_whose_run_files_failed_leaves_stamps_that_overwrite_trusts(tmp_path, monkeypatch):
    """A resume that rewound the log (a new file) and rewrote ``config_resolved.yaml``, then failed on
    a later run file, left the manifest's old stamps: ``overwrite=true`` then refused the run's own
    files as replaced since."""
    import dadam3.run.start as start
    from dadam3.errors.files import WriteFailed
    run = tmp_path / "run"
    train(SMALL, run)

    def first_then_full(files):
        path, text = next(iter(files.items()))
        path.write_text(text)               # a new file in its place, as a whole write makes
        raise WriteFailed(path.with_name("provenance.json"), "No space left on device (ENOSPC)")
    monkeypatch.setattr(start, "write_files", first_then_full)
    with pytest.raises(WriteFailed):
        resume(TOY + ["loop.iterations=5", f"resume={run}"], run)
    monkeypatch.undo()
    t = resume(TOY + ["loop.iterations=2", "overwrite=true"], run)
    t.fit()
    t.finish()
    assert [r.get("status") for r in read_jsonl(run / "metrics.jsonl")][-1] == "finished"


@pytest.mark.parametrize("key", ["hydra.run.dir", "hydra.sweep.dir"])
def test_a_hydra_directory_starting_with_a_tilde_is_refused_before_hydra_makes_it(key):
    """Hydra does not expand ``~`` (``hydra.run.dir='~/x'`` would write into ./~/x): one line."""
    with pytest.raises(ConfigError, match=f"^{key}=~/x: Hydra does not expand ~"):
        check_command_line("train", ["experiment=toy_gaussians", f"{key}='~/x'"])


def test_a_resume_whose_command_line_hydra_cannot_compose_is_one_line(tmp_path):
    """``resume=RUN ~loop.log_every``: Hydra's own error, many lines, exit 1 (a fresh run's: one line)."""
    with pytest.raises(ConfigError, match=r"^loop.log_every=None: LoopSettings \(DictConfig\) does not support "
                                          r"deletion$"):
        check_command_line("train", ["experiment=toy_gaussians", f"resume={tmp_path / 'run'}", "~loop.log_every"])


@pytest.mark.parametrize("arg, said", [("hydra.run.dri=/tmp/x", "hydra.run.dri=None: Key 'dri' not in 'RunDir'"),
                                       ("hydra.job.chdir=maybe", "hydra.job.chdir=maybe: Value 'maybe' is not a valid "
                                                                 "bool"),
                                       ("hydra.mode=multirun", "hydra.mode=multirun: Invalid value 'multirun'")])
def test_a_hydra_key_hydra_refuses_is_one_line_before_hydra(arg, said):
    """A typo in a ``hydra.*`` key or a value Hydra cannot take: Hydra's own error, many lines, exit 1."""
    with pytest.raises(ConfigError) as e:
        check_command_line("train", ["experiment=toy_gaussians", arg])
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


def test_hydra_writing_its_own_files_into_the_run_directory_is_refused():
    """``hydra.output_subdir=.hydra``: Hydra wrote ``.hydra/`` before the checks, into another run's
    directory too, even when the run was then refused."""
    with pytest.raises(ConfigError, match=r"^hydra.output_subdir=.hydra: the run writes .hydra/ itself"):
        check_command_line("train", ["experiment=toy_gaussians", "hydra.output_subdir=.hydra"])
    check_command_line("train", ["experiment=toy_gaussians", "hydra.output_subdir=null"])


def test_a_link_to_a_missing_directory_on_the_way_is_refused_in_one_line(tmp_path):
    """Taken for a directory that could be made (Hydra's mkdir then failed with a traceback)."""
    from dadam3.run.paths import check_usable_dir
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    for path in (tmp_path / "dangling", tmp_path / "dangling" / "sub"):
        with pytest.raises(ConfigError, match=f"^hydra.run.dir={path}: {tmp_path / 'dangling'} is a link to "
                                              f"{tmp_path / 'missing'}, which does not exist"):
            check_usable_dir("hydra.run.dir", path)
    (tmp_path / "missing").mkdir()
    assert check_usable_dir("hydra.run.dir", tmp_path / "dangling" / "sub") == tmp_path / "dangling" / "sub"


@pytest.mark.parametrize("value, said", [
    ("~/runs/a", "hydra.run.dir=~/runs/a: Hydra does not expand ~"),
    ("/tmp/x" + "a" * 300, "the name xaaa"),
])
def test_hydras_directory_as_resolved_is_checked_as_a_given_one(value, said, capsys):
    """A value made by interpolation (``${oc.env:OUT}``), which the command line's check cannot read:
    a ``~`` was checked as $HOME/... and written as ./~/..., a name too long was a traceback."""
    from dadam3.run.sweep import SweepStatus
    from omegaconf import OmegaConf
    with pytest.raises(SystemExit) as e:
        SweepStatus().on_run_start(OmegaConf.create({"hydra": {"run": {"dir": value}}}))
    assert e.value.code == 2 and said in capsys.readouterr().err


def test_a_sweep_whose_status_file_is_a_directory_is_refused_before_its_jobs(tmp_path, capsys):
    """Every job ran, then the sweep ended in a traceback writing ``sweep_status.jsonl``."""
    from dadam3.run.sweep import SWEEP_STATUS, SweepStatus
    from omegaconf import OmegaConf
    (tmp_path / SWEEP_STATUS).mkdir()
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "launcher": {}}})
    with pytest.raises(SystemExit) as e:
        SweepStatus().on_multirun_start(config)
    assert e.value.code == 2
    assert f"error: hydra.sweep.dir={tmp_path}: its {SWEEP_STATUS} is a directory" in capsys.readouterr().err


def test_the_feature_cache_under_home_is_the_one_checked(tmp_path, monkeypatch):
    """``metrics.cache_dir=~/c``: torch-fidelity is given the directory the run checked ($HOME/c)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert FidelitySpec(batch_size=50, fid=True, cache_root="~/c").cache_dir == str(tmp_path / "c")
