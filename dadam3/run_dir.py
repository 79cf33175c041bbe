"""A run directory belongs to one run: claiming it, and resuming the run that wrote it.

* A fresh run refuses a directory that already holds another run's files
  (:data:`RUN_FILES`) unless ``overwrite=true`` (which deletes them first); ``resume=PATH``
  continues the run that wrote PATH, in ITS directory.
* A lock (``.lock``, ``flock``-ed for the life of the process, so it is released when the
  process dies) refuses a second live writer.
* Stray temporary files of a killed checkpoint write (``checkpoints/.last.pt.*.tmp``) are
  deleted when a run claims its directory.
* Resuming: the checkpoint is checked against the run's config by
  :func:`dadam3.checkpoint.resume.check_resume` (its kind; which keys may change).
"""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dadam3.checkpoint import CHECKPOINT_DIR, load, remove_stray_temporaries, resolve_resume_path
from dadam3.checkpoint.resume import check_resume
from dadam3.errors import ConfigError, check_usable_dir

log = logging.getLogger(__name__)

RUN_FILES = ("metrics.jsonl", CHECKPOINT_DIR, "samples", "images", "config_resolved.yaml", "provenance.json", "wandb")
LOCK_FILE = ".lock"


@dataclass
class RunDir:
    """The directory a run writes into, the lock it holds, and what it resumes from.

    :func:`check_run_dir` fills it without writing anything; :meth:`commit` then creates the
    directory, takes the lock and deletes what ``overwrite=true`` replaces (rank 0 only)."""

    path: Path
    checkpoint: dict | None = None
    changed: dict[str, list] = field(default_factory=dict)   # key -> [checkpoint's value, now]
    _lock: Any = field(default=None, repr=False)
    replace: tuple[str, ...] = ()        # another run's files that overwrite=true deletes at commit
    created: bool = False                # commit created the directory (undo() may remove it)
    committed: bool = False

    def commit(self) -> "RunDir":
        """Create the directory, hold its lock, delete the files ``overwrite=true`` replaces and
        stray temporaries of a killed checkpoint write. Only after every check passed."""
        self.created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        if self._lock is None:
            self._lock = _lock(self.path)
        _write_pid(self._lock)
        for name in self.replace:
            target = self.path / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
        removed = remove_stray_temporaries(self.path / CHECKPOINT_DIR)
        if removed:
            log.info("removed %d temporary file(s) of an interrupted checkpoint write", len(removed))
        if self.checkpoint is not None:
            log.info("resuming from iteration %d in %s%s", self.checkpoint["iteration"], self.path,
                     "".join(f"; {k}: {a} -> {b}" for k, (a, b) in self.changed.items()))
        self.committed = True
        return self

    def undo(self, new_files: tuple[str, ...] = ()) -> None:
        """After a failure right after :meth:`commit` (a service that would not start): remove
        ``new_files`` this process made and the directory if commit created it and it is empty."""
        for name in new_files:
            target = self.path / name
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
        if self.created:
            (self.path / LOCK_FILE).unlink(missing_ok=True)
            self.release()
            try:
                self.path.rmdir()
            except OSError:
                pass

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()          # closing the file drops the flock
            self._lock = None


def check_run_dir(run_dir: Path, resume: str | None, config: Mapping[str, Any], overwrite: bool = False) -> RunDir:
    """Every check of the directory a run would write into (see the module docstring), creating,
    changing and deleting nothing; a live writer's lock is refused here (a free existing lock
    is taken, without touching the file)."""
    if resume is not None and overwrite:
        raise ConfigError("overwrite", True, "cannot be combined with resume=; a resume continues the run")
    ckpt, changed = None, {}
    if resume is not None:
        path = resolve_resume_path(resume)
        ckpt = load(path, map_location="cpu", key="resume")
        changed = check_resume(ckpt, path, config)
        run_dir = path.parent.parent       # continue in the original run directory
    run_dir = Path(run_dir)
    check_usable_dir("hydra.run.dir" if resume is None else "resume", run_dir)
    lock = _lock(run_dir) if (run_dir / LOCK_FILE).exists() else None
    try:
        existing = ()
        if resume is None:
            existing = tuple(name for name in RUN_FILES if (run_dir / name).exists())
            if existing and not overwrite:
                raise ConfigError("hydra.run.dir", str(run_dir),
                                  f"holds another run's files ({', '.join(existing)}); continue it with "
                                  f"resume={run_dir}, choose a new directory, or set overwrite=true to delete them")
    except BaseException:
        if lock is not None:
            lock.close()
        raise
    return RunDir(run_dir, ckpt, changed, lock, replace=existing)


def open_run_dir(run_dir: Path, resume: str | None, config: Mapping[str, Any], overwrite: bool = False) -> RunDir:
    """Check, then claim, the directory a run writes into (see the module docstring)."""
    return check_run_dir(run_dir, resume, config, overwrite).commit()


def _lock(run_dir: Path):
    """The directory's lock file, ``flock``-ed (refused, one line, while another process holds it)."""
    f = open(run_dir / LOCK_FILE, "a+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        pid = f.read().strip() or "?"
        f.close()
        raise ConfigError("hydra.run.dir", str(run_dir),
                          f"another run (pid {pid}) is writing into this directory; wait for it to end "
                          "or choose another directory") from None
    return f


def _write_pid(f) -> None:
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()


def claim_run_dir(run_dir: Path, resume: str | None, config: Mapping[str, Any], overwrite: bool,
                  placement) -> RunDir:
    """:func:`check_run_dir` on rank 0 (the one writer); under torch.distributed the other ranks
    receive its directory, checkpoint and changes, or its error, so every rank stops alike.
    Nothing is written: rank 0 calls :meth:`RunDir.commit` once every other check has passed."""
    rd, error = None, None
    if placement.is_main:
        try:
            rd = check_run_dir(run_dir, resume, config, overwrite)
        except ConfigError as e:
            error = e
    if placement.distributed:
        payload = None if not placement.is_main else error if error is not None else (rd.path, rd.checkpoint, rd.changed)
        shared = placement.from_main(payload)
        if isinstance(shared, ConfigError):
            error = shared
            error.echo = placement.is_main
        elif not placement.is_main:
            rd = RunDir(*shared, committed=True)       # only rank 0 writes into the directory
    if error is not None:
        raise error
    return rd
