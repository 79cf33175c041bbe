"""Issue 60, the files' mechanisms, each table-driven through the real command line: no write follows
a link (symbolic or hard: the link's target keeps its bytes), a directory the run writes into that
is a link is refused, every file whole or unchanged, nothing deleted on a list's word, small files
read small (docs/run_contract.md, "Writing: never through a link, always whole")."""
from __future__ import annotations

import hashlib
import os
import resource
import shutil
from pathlib import Path

import pytest

from test_run_contract import ENTRY, cli, said
from trainer_runs import SMALL

TRAIN = ENTRY["train"][1]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-iteration training run, copied (``cp -r``) by each case."""
    run = tmp_path_factory.mktemp("finished") / "run"
    r = cli("dadam3.train", *TRAIN, f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    return run


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def thesis(tmp_path: Path) -> Path:
    t = tmp_path / "thesis.tex"
    t.write_text("my thesis\n")
    return t


def _lock_symlink(run, tmp_path):
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(thesis(tmp_path))
    return [tmp_path / "thesis.tex"]


def _lock_hardlink(run, tmp_path):
    (run / ".lock").unlink()
    os.link(thesis(tmp_path), run / ".lock")
    return [tmp_path / "thesis.tex"]


def _logs_hardlinked(run, tmp_path):
    """A ``cp -al`` backup of the logs and the lock: hard links to the run's own files."""
    for name in ("train.log", "metrics.jsonl", ".lock", "manifest.txt"):
        os.link(run / name, tmp_path / f"backup.{name}")
    return [tmp_path / f"backup.{n}" for n in ("train.log", "metrics.jsonl", ".lock", "manifest.txt")]


def _samples_symlinked(run, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("mine\n")
    shutil.rmtree(run / "samples")
    (run / "samples").symlink_to(tmp_path / "mine")
    return [tmp_path / "mine" / "keep.txt"]


def _checkpoints_symlinked(run, tmp_path):
    shutil.move(run / "checkpoints", tmp_path / "elsewhere")
    (run / "checkpoints").symlink_to(tmp_path / "elsewhere")
    return [tmp_path / "elsewhere" / "last.pt"]


def _fresh_into(run, tmp_path):        # a directory holding only a planted .lock
    shutil.rmtree(run)
    run.mkdir()
    (run / ".lock").symlink_to(thesis(tmp_path))
    return [tmp_path / "thesis.tex"]


def _run_dir_symlinked(run, tmp_path):
    shutil.rmtree(run)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep.txt").write_text("mine\n")
    run.symlink_to(tmp_path / "elsewhere")
    return [tmp_path / "elsewhere" / "keep.txt"]


RESUME = ["resume={run}", "loop.iterations=3"]
FRESH = [*TRAIN, "hydra.run.dir={run}"]
OVERWRITE = [*TRAIN, "overwrite=true", "hydra.run.dir={run}"]
LINKS = {   # case: (plant the link, the command, exit status, the one line's start or None)
    ".lock a symlink, resume": (_lock_symlink, RESUME, 2, "error: hydra.run.dir={run}: {run}/.lock is a symbolic link"),
    ".lock a symlink, overwrite=true": (_lock_symlink, OVERWRITE, 2, "error: hydra.run.dir={run}: {run}/.lock is a "
                                                                     "symbolic link"),
    ".lock a symlink, fresh run": (_fresh_into, FRESH, 2, "error: hydra.run.dir={run}: {run}/.lock is a symbolic"),
    ".lock a hard link, resume": (_lock_hardlink, RESUME, 0, None),
    ".lock a hard link, overwrite=true": (_lock_hardlink, OVERWRITE, 0, None),
    "logs hard-linked (cp -al), resume": (_logs_hardlinked, RESUME, 0, None),
    "samples/ a symlink, resume": (_samples_symlinked, [*RESUME[:1], "loop.iterations=4"], 2,
                                   "error: resume={run}: {run}/samples is a symbolic link to"),
    "checkpoints/ a symlink, resume": (_checkpoints_symlinked, RESUME, 2, "error: resume={run}: {run}/checkpoints is "
                                                                         "a symbolic link"),
    "the run directory a symlink, fresh run": (_run_dir_symlinked, FRESH, 2, "error: hydra.run.dir={run}: {run} is a "
                                                                             "symbolic link"),
}


@pytest.mark.parametrize("case", LINKS)
def test_no_write_follows_a_link_and_a_linked_folder_is_refused(finished, tmp_path, case):
    plant, args, status, start = LINKS[case]
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    watched = plant(run, tmp_path)
    before = {p: digest(p) for p in watched}
    r = cli("dadam3.train", *[a.format(run=run) for a in args])
    assert r.returncode == status, r.stderr[-2000:]
    assert {p: digest(p) for p in watched} == before           # the link's target: byte for byte
    if start is not None:
        assert [x for x in r.stderr.splitlines() if x.strip()] == [said(r.stderr)[0]], r.stderr
        assert said(r.stderr)[0].startswith(start.format(run=run)), r.stderr
    else:               # the run's files are its own again: none is a link to the watched ones
        assert not any((run / n).samefile(p) for n in (".lock", "train.log", "metrics.jsonl") for p in watched)


def test_the_synthetic_runner_refuses_a_planted_lock_too(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(thesis(tmp_path))
    r = cli("dadam3.synthetic", "iterations=50", f"hydra.run.dir={run}")
    assert r.returncode == 2 and (tmp_path / "thesis.tex").read_text() == "my thesis\n"
    assert said(r.stderr) == [f"error: hydra.run.dir={run}: {run}/.lock is a symbolic link to {tmp_path}/thesis.tex, "
                              "not a run's lock: nothing is written through it; remove it, then run the command "
                              "again"], r.stderr


# ---------------------------------------------------------------- nothing deleted on a list's word; copies

def test_overwrite_replaces_a_copied_run_whose_stamps_are_content(finished, tmp_path):
    """The docs say: copy a run whole. A copy (new inodes) matches its content stamps, so
    overwrite=true replaces it (an earlier version refused every copy as "replaced since")."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    r = cli("dadam3.train", *TRAIN, "overwrite=true", f"hydra.run.dir={run}")
    assert r.returncode == 0 and not said(r.stderr), r.stderr
    assert (run / "run_id").read_text() != (finished / "run_id").read_text()


def test_stray_temporaries_are_deleted_only_where_the_run_made_them(finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    ours, theirs = run / "checkpoints" / ".last.pt.k3j9x2ab.tmp", run / "checkpoints" / ".notes.tmp"
    ours.write_bytes(b"x" * 100)
    theirs.write_text("mine\n")
    r = cli("dadam3.train", f"resume={run}", "loop.iterations=3")
    assert r.returncode == 0, r.stderr
    assert not ours.exists() and theirs.read_text() == "mine\n"


# ---------------------------------------------------------------- small files read small

def _dev_zero(name):
    def plant(run):
        (run / name).unlink()
        (run / name).symlink_to("/dev/zero")
    return plant


def _fifo(name):
    def plant(run):
        (run / name).unlink()
        os.mkfifo(run / name)
    return plant


SMALL_FILES = {     # case: (plant, the command, exit status, what the one line says)
    "checksum -> /dev/zero, resume": (_dev_zero("checkpoints/last.pt.sha256"), RESUME, 2,
                                      "unreadable checksum file last.pt.sha256 (is a character device"),
    "run_id -> /dev/zero, resume": (_dev_zero("run_id"), RESUME, 1, "run_id: is a character device, not a regular "
                                                                    "file"),
    "run_id a FIFO, resume": (_fifo("run_id"), RESUME, 1, "run_id: is a FIFO, not a regular file"),
    "manifest.txt -> /dev/zero, overwrite=true": (_dev_zero("manifest.txt"), OVERWRITE, 2,
                                                  "manifest.txt is a symbolic link to /dev/zero"),
    "metrics.jsonl a FIFO, resume": (_fifo("metrics.jsonl"), RESUME, 2, "metrics.jsonl is not a regular file"),
}


@pytest.mark.parametrize("case", SMALL_FILES)
def test_a_special_file_where_a_small_run_file_belongs_is_one_line_never_a_hang(finished, tmp_path, case):
    plant, args, status, words = SMALL_FILES[case]
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    plant(run)
    r = cli("dadam3.train", *[a.format(run=run) for a in args], timeout=120)
    assert r.returncode == status, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith(("error", "Traceback"))]
    assert len(lines) == 1 and words in lines[0], r.stderr[-2000:]
    assert "MemoryError" not in r.stderr and "out of memory" not in r.stderr


# ---------------------------------------------------------------- whole or unchanged: messages by errno

def _fsize(limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


def test_a_failed_write_says_what_its_errno_calls_for(finished, tmp_path):
    """EISDIR (a directory where the run's sample grid goes) and EFBIG (the file-size limit): one line
    each, whose advice follows the errno, never "free space"."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "samples" / "iter_000004.png").mkdir()
    r = cli("dadam3.train", f"resume={run}", "loop.iterations=4")
    [line] = [x for x in r.stderr.splitlines() if x.startswith("error")]
    assert r.returncode == 1 and "(EISDIR)" in line and "move away the directory in the file's place" in line, line
    assert "free space" not in line
    big = tmp_path / "big"
    r = cli("dadam3.train", *SMALL, "metrics.every=0", "loop.log_every=1", "loop.sample_every=1000",
            "loop.checkpoint_every=1000", "loop.iterations=200", f"hydra.run.dir={big}", preexec_fn=_fsize(12_000))
    [line] = [x for x in r.stderr.splitlines() if x.startswith("error")]
    assert r.returncode == 1 and "(EFBIG)" in line and "raise the file-size limit (ulimit -f)" in line, line
    assert "free space" not in line
