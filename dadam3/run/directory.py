"""A run directory belongs to one run: claiming it, and resuming the run that wrote it.

* A run's files are listed in its manifest (:mod:`dadam3.run.manifest`, ``manifest.txt``): when
  it claims the directory the run writes there every top-level name it will create (its log,
  checkpoints, samples, ...; extended by each resume), before it creates any of them.
* A directory is a run's by its own marker: its manifest, or (a run of an earlier version,
  written before manifests) its ``run_id`` or its log. A fresh run refuses a directory that
  holds a run unless ``overwrite=true``, which deletes what the manifest lists and is still what
  its run wrote (:func:`dadam3.run.manifest.deletable`), once it can delete every one. Names a run
  writes in a directory without a run, or that its manifest does not list, are refused whatever
  ``overwrite`` says. A claimed directory gets a new run id (``run_id``) its checkpoints carry.
* ``resume=PATH`` continues the run that wrote PATH in ITS directory, but only when PATH lies
  in ``<run>/checkpoints/`` and its run id is ``<run>``'s (a checkpoint without an id, written
  before ids existed, only when ``<run>`` has no id either and its ``config_resolved.yaml``
  is the checkpoint's config), and ``<run>/metrics.jsonl`` is there. Any other checkpoint (a
  copy, a backup, another run's) is refused with one line, or continues in a new directory the
  user names with ``hydra.run.dir`` (its log starts at the checkpoint's iteration).
* ``resume=RUN hydra.run.dir=OTHER`` (OTHER not RUN) **branches**: a new run in OTHER starts from
  RUN's checkpoint (a new run id, its log from the checkpoint's iteration); RUN is not touched.
* What the run writes that is there already must be of its kind (a file, a directory) and writable.
* A lock (``.lock``, ``flock``-ed while the process lives) refuses a second live writer.
* Stray temporaries of a killed checkpoint write (``checkpoints/.last.pt.*.tmp``) are deleted at claim.
* Resuming: :func:`dadam3.run.checkpoint.resume.check_resume` checks the checkpoint against the config.
"""
from __future__ import annotations

import logging
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
import uuid

from omegaconf import OmegaConf

from dadam3.run.checkpoint import CHECKPOINT_DIR, RUN_ID_FILE, read_run_id, remove_stray_temporaries, resume_override
from dadam3.run.checkpoint.files import LAST_CHECKPOINT
from dadam3.run.checkpoint.resume import check_resume
from dadam3.errors.config import ConfigError
from dadam3.errors.files import write_whole, write_text_whole
from dadam3.errors.small_files import read_small_text, yaml_value
from dadam3.run.hydra_dirs import created_by_this_process
from dadam3.run.job_log import earlier_segments
from dadam3.run.lock import hold_lock, take_lock
from dadam3.run.paths import check_no_link, check_usable_dir
from dadam3.run.resume_config import read_resume, release_resume
from dadam3.run.rewind import check_log_not_ahead
from dadam3.run.manifest import (LOCK_FILE, MANIFEST, RUN_DIRS, deletable, manifest_bytes, read_stamps, run_files,
                                 train_writes, write_manifest)
from dadam3.run.schema import may_change_on_resume

log = logging.getLogger(__name__)

@dataclass
class RunDir:
    """The directory a run writes into, the lock it holds, and what it resumes from.

    :func:`check_run_dir` fills it without writing anything; :meth:`commit` then creates the
    directory, takes the lock and deletes what ``overwrite=true`` replaces (rank 0 only)."""

    path: Path
    checkpoint: dict | None = None
    changed: dict[str, list] = field(default_factory=dict)   # key -> [checkpoint's value, now]
    _lock: Any = field(default=None, repr=False)     # the lock :func:`take_lock` took (a descriptor), then held
    replace: tuple[str, ...] = ()        # another run's files that overwrite=true deletes at commit
    kept: tuple[str, ...] = ()           # names its manifest lists that are no longer what its run wrote: kept
    created: bool = False                # commit created the directory (undo() may remove it)
    new_id: bool = False                 # commit gives the directory a run id (a fresh run or a new home)
    made: list = field(default_factory=list)    # files commit created (undo() removes them)
    writes: tuple[str, ...] = ()         # what the run writes, listed in its manifest at commit
    _manifest_before: bytes | None = field(default=None, repr=False)   # the manifest commit replaced (undo())

    def commit(self) -> "RunDir":
        """Create the directory, hold its lock, delete the files ``overwrite=true`` replaces and
        stray temporaries of a killed checkpoint write, write the run id. Only after every check
        passed. A write that fails here (a full disk) leaves nothing of its own behind (:meth:`undo`)."""
        try:
            return self._commit()
        except BaseException:
            self.undo()
            raise

    def _commit(self) -> "RunDir":
        self.created = not self.path.exists() or created_by_this_process(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(self.path / LOCK_FILE):
            self.made.append(LOCK_FILE)
        if not hasattr(self._lock, "close"):
            self._lock = hold_lock(self.path, self._lock)
        for name in self.replace:
            target = self.path / name
            target.rmdir() if target.is_dir() and not target.is_symlink() else target.unlink(missing_ok=True)
        if self.kept:
            log.warning("overwrite=true kept %s in %s: listed in the old run's %s but not what that run wrote",
                        ", ".join(self.kept), self.path, MANIFEST)
        if self.writes:                 # listed before any of them is created
            self._manifest_before = manifest_bytes(self.path)
            if self._manifest_before is None:
                self.made.append(MANIFEST)
            earlier = () if self.new_id else run_files(self.path)[1] or ()     # a resume: what the run wrote so far
            write_manifest(self.path, (*earlier, *self.writes), {} if self.new_id else read_stamps(self.path))
        if self.new_id or read_run_id(self.path) is None:     # a fresh run; an adopted run written before ids
            write_text_whole(self.path / RUN_ID_FILE, uuid.uuid4().hex + "\n")
            self.made.append(RUN_ID_FILE)
        removed = remove_stray_temporaries(self.path / CHECKPOINT_DIR)
        if removed:
            log.info("removed %d temporary file(s) of an interrupted checkpoint write", len(removed))
        if self.checkpoint is not None:
            log.info("resuming from iteration %d in %s%s", self.checkpoint["iteration"], self.path,
                     "".join(f"; {k}: {a} -> {b}" for k, (a, b) in self.changed.items()))
        return self

    def undo(self, new_files: tuple[str, ...] = ()) -> None:
        """After a failure right after :meth:`commit` (a service that would not start): remove
        ``new_files`` this process made and the directory if commit created it and it is empty."""
        for name in (*new_files, *self.made):
            target = self.path / name
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
        if self._manifest_before is not None:      # a resume's: as it was
            before = self._manifest_before
            write_whole(self.path / MANIFEST, lambda f: f.write(before))
        self.release()
        if self.created:
            try:
                self.path.rmdir()
            except OSError:     # not empty
                pass

    def release(self) -> None:
        if self._lock is not None:
            try:                        # closing the file drops the flock
                self._lock.close() if hasattr(self._lock, "close") else os.close(self._lock)
            except OSError:             # its pid could not be flushed (a full disk): closed all the same
                pass
            self._lock = None


def check_run_dir(run_dir: Path, resume: str | None, config: Mapping[str, Any], overwrite: bool = False,
                  dir_named: bool = False, writes: Sequence[str] | None = None) -> RunDir:
    """Every check of the directory a run would write into (see the module docstring), creating,
    changing and deleting nothing; a live writer's lock is refused here (a free existing lock
    is taken, without touching the file). ``dir_named``: the user named ``run_dir`` (a
    checkpoint that is no run's own may continue there; a run's own checkpoint branches there
    when ``run_dir`` is not the run's). ``writes``: the top-level names the run creates
    (default: a training run's of ``config``, :func:`train_writes`)."""
    run_dir = Path(os.path.expanduser(run_dir))
    if resume is not None and overwrite:
        raise ConfigError("overwrite", True, "cannot be combined with resume=; a resume continues the run")
    ckpt, changed, home = None, {}, None
    if resume is not None:
        path, ckpt = read_resume(resume)
        home, why_not = _run_of(path, ckpt)
        if home is not None and dir_named and os.path.realpath(home) != os.path.realpath(run_dir):
            log.warning("branching: the run %s (untouched) continues from its checkpoint at iteration %d as a new run "
                        "in %s", home, ckpt["iteration"], run_dir)
            home = None
        if home is None and not dir_named:
            raise ConfigError("resume", resume, f"{why_not}; a resume continues only a checkpoint in its own run's "
                                                f"{CHECKPOINT_DIR}/: to continue this one in a new directory, name it "
                                                "with hydra.run.dir=NEW")
        if home is not None:        # a finished log ahead of its checkpoint: named before loop.iterations is
            check_log_not_ahead(home / "metrics.jsonl", ckpt["iteration"], config, resume)
        changed = check_resume(ckpt, path, config, may_change_on_resume)
    run_dir = Path(home or run_dir)
    key, value = ("hydra.run.dir", run_dir) if home is None else ("resume", resume)
    check_no_link(key, value, run_dir)
    check_usable_dir(key, run_dir)
    check_no_link(key, value, run_dir / MANIFEST)       # the run's manifest is read back: its own regular file
    if os.path.lexists(run_dir / MANIFEST) and not (run_dir / MANIFEST).is_file():
        raise ConfigError(key, str(value), f"{run_dir / MANIFEST} is not a regular file: not a run's manifest; move it "
                                           "away")
    if home is not None and not os.path.lexists(home / "metrics.jsonl"):
        raise ConfigError("resume", resume, f"{home / 'metrics.jsonl'} is missing (the run's log up to iteration "
                                            f"{ckpt['iteration']} is gone): restore it, or continue in a new "
                                            "directory named with hydra.run.dir=NEW")
    lock = take_lock(run_dir) if run_dir.is_dir() else None
    try:
        writes = tuple(train_writes(config) if writes is None else writes)
        existing, kept = (), ()
        if home is None:
            existing = _replaced(run_dir, writes, overwrite, resume is None)
            _check_deletable(run_dir, existing)
            existing, kept = deletable(run_dir, existing, writes)
        _check_outputs("hydra.run.dir" if home is None else "resume", run_dir, writes, existing)
        if home is not None:                # the run's earlier segments, kept by the one its resume adds
            earlier_segments(home, "resume", resume)
    except BaseException:
        if lock is not None:
            os.close(lock)
        raise
    if ckpt is not None and home is None:
        log.warning("continuing the checkpoint %s (iteration %d) in the new directory %s: its metrics.jsonl starts "
                    "there", resume, ckpt["iteration"], run_dir)
    return RunDir(run_dir, ckpt, changed, lock, replace=existing, kept=kept, new_id=home is None, writes=writes)


def _replaced(run_dir: Path, writes: Sequence[str], overwrite: bool, fresh: bool) -> tuple[str, ...]:
    """What ``overwrite=true`` deletes in ``run_dir`` before a new run writes ``writes`` there: the
    earlier run's files (:func:`run_files`). Refused (one line, nothing deleted): names a run writes
    but no run, or names its run did not write; a run, without ``overwrite``."""
    present, theirs = run_files(run_dir, writes)
    if not present:
        return ()
    if theirs is None:
        raise ConfigError("hydra.run.dir", str(run_dir),
                          f"holds {', '.join(present)} but no run (no {MANIFEST}, {RUN_ID_FILE} or metrics.jsonl): "
                          "not a run directory, so nothing in it is deleted or written over; choose another "
                          "directory or move them away")
    foreign = [n for n in present if n not in theirs]
    if foreign:
        raise ConfigError("hydra.run.dir", str(run_dir),
                          f"holds {', '.join(foreign)}, which its run did not write (not in its {MANIFEST}); a run "
                          "writes there, so move them away or choose another directory; nothing was deleted")
    if not overwrite:
        resumable = (run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT).is_file() and (run_dir / "metrics.jsonl").is_file()
        # resume=DIR, quoted for the shell and Hydra
        again = f"continue it with {shlex.quote(resume_override(run_dir))}, " if fresh and resumable else ""
        raise ConfigError("hydra.run.dir", str(run_dir),
                          f"holds another run's files ({', '.join(theirs)}); {again}choose a new "
                          "directory, or set overwrite=true to delete them")
    return theirs


def _check_outputs(key: str, run_dir: Path, writes: Sequence[str], keep: Sequence[str]) -> None:
    """Every name the run writes (``writes``) that exists in ``run_dir`` already (a resumed run's, a
    user's file where a directory belongs) is of its kind, no symbolic link (nor a folder below it)
    and writable; ``keep``: what ``overwrite=true`` deletes."""
    for name in writes:
        path, is_dir = run_dir / name, name in RUN_DIRS
        if name in keep or not os.path.lexists(path):
            continue
        check_no_link(key, run_dir, path, below=is_dir)
        if is_dir != path.is_dir():
            raise ConfigError(key, str(run_dir), f"{path} is a {'file' if is_dir else 'directory'} where the run "
                                                 f"writes a {'directory' if is_dir else 'file'}; move it away or "
                                                 "choose another directory")
        if not is_dir and not path.is_file():
            raise ConfigError(key, str(run_dir), f"{path} is not a regular file (a FIFO, a device, ...), where the run "
                                                 "writes its own file; move it away or choose another directory")
        if not os.access(path, os.W_OK | (os.X_OK if is_dir else 0)):
            raise ConfigError(key, str(run_dir), f"{path} is not writable by this user; fix its permissions or "
                                                 "choose another directory")


def _run_of(path: Path, ckpt: Mapping[str, Any]) -> tuple[Path | None, str]:
    """The run directory the checkpoint at ``path`` belongs to, or None and why not."""
    run, theirs = path.parent.parent, ckpt.get("run_id")
    if path.parent.name != CHECKPOINT_DIR:
        return None, f"{path} is not in a run's {CHECKPOINT_DIR}/ directory"
    ours = read_run_id(run)
    if ours is not None and ours == theirs:
        return run, ""
    if theirs is not None:
        return None, (f"the checkpoint belongs to another run (run id {theirs}), not to {run} "
                      f"({'run id ' + ours if ours else f'no {RUN_ID_FILE} file: a copy of a run needs it too'})")
    if ours is not None:
        return None, f"the checkpoint has no run id (an older version's) and {run} has one (run id {ours})"
    if (run / "metrics.jsonl").is_file() and config_on_file(run) == ckpt.get("config"):
        return run, ""          # written before run ids: its run's config_resolved.yaml is the checkpoint's config
    return None, (f"the checkpoint has no run id (an older version's) and {run}'s config_resolved.yaml or "
                  "metrics.jsonl is not its run's")


def config_on_file(run: Path) -> Any:
    """The run's ``config_resolved.yaml`` as a container, or None (missing, unreadable, not YAML)."""
    try:
        return OmegaConf.to_container(OmegaConf.create(yaml_value(read_small_text(run / "config_resolved.yaml"),
                                                                  run / "config_resolved.yaml")))
    except Exception:           # missing, not YAML, no small regular file: not the checkpoint's run
        return None


def _check_deletable(run_dir: Path, names: tuple[str, ...]) -> None:
    """``overwrite=true`` deletes ``names`` only if it can delete every one: refuse (one line,
    nothing deleted) a symbolic link to a directory (``rmtree`` does not follow it; delete or
    replace it yourself) and a directory (``run_dir`` included) the process may not change."""
    def refuse(path: Path, why: str):
        return ConfigError("overwrite", True, f"cannot delete the old run's {path}: {why}; nothing was deleted")

    dirs = [run_dir] if names else []
    for name in names:
        target = run_dir / name
        if target.is_symlink():
            if target.is_dir():
                raise refuse(target, f"a symbolic link to the directory {os.path.realpath(target)} (deleting "
                                     "the link would keep its files; remove or replace it yourself)")
            continue
        if target.is_dir():
            dirs += [Path(d) for d, _, _ in os.walk(target)]
    for d in dirs:
        if not os.access(d, os.W_OK | os.X_OK):
            raise refuse(d, "permission denied (the directory is not writable)")


def claim_run_dir(run_dir: Path, resume: str | None, config: Mapping[str, Any], overwrite: bool,
                  placement, dir_named: bool = False) -> RunDir:
    """:func:`check_run_dir` on rank 0 (the one writer); under torch.distributed the other ranks
    receive its directory, checkpoint and changes, or its error, so every rank stops alike.
    Nothing is written: rank 0 calls :meth:`RunDir.commit` once every other check has passed."""
    rd, error = None, None
    if placement.is_main:
        try:
            rd = check_run_dir(run_dir, resume, config, overwrite, dir_named)
        except ConfigError as e:
            error = e
    if placement.distributed:
        payload = (None if not placement.is_main else error if error is not None
                   else (rd.path, rd.checkpoint, rd.changed))
        shared = placement.from_main(payload)
        if isinstance(shared, ConfigError):
            error = shared
            error.echo = placement.is_main
        elif not placement.is_main:
            rd = RunDir(*shared)        # only rank 0 writes into the directory (commit)
    release_resume()
    if error is not None:
        raise error
    return rd
