"""Checkpoint files: where they live, written atomically, read back with one-line errors.

Layout of a run directory (what :func:`resolve_resume_path` understands)::

    <run_dir>/
        metrics.jsonl            # run records, see dadam3.run_logging
        checkpoints/
            last.pt              # newest checkpoint, replaced atomically at each save

What a training checkpoint holds is :mod:`dadam3.checkpoint.contents`'s concern.
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from dadam3.errors import ConfigError, RunStopped, write_failure_reason

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.pt"


class CheckpointNotWritten(RunStopped):
    """The checkpoint could not be written (disk full, file-size limit): the previous ``last.pt``
    stays, the log ends with an ``interrupted`` record giving the reason."""

    prefix = "error: checkpoint not written"


def checkpoint_path(run_dir: str | os.PathLike) -> Path:
    """``<run_dir>/checkpoints/last.pt``."""
    return Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` ``obj`` so that ``path`` always holds either the old or the new checkpoint.

    The object is written to a temporary file in the same directory (``.<name>.<random>.tmp``),
    flushed and fsynced, then moved over ``path`` with :func:`os.replace` (atomic on POSIX
    and Windows within one file system); the directory is fsynced so the rename survives a
    power loss. If writing fails the temporary file is removed and the error propagates.
    A SIGKILL mid-write can leave a stray ``.tmp`` file but never a damaged ``path``.

    Any failure to write is an ``OSError`` whose ``strerror`` says why
    (:func:`dadam3.errors.write_failure_reason`): on a full disk or past the file-size limit
    torch's zip writer raises ``RuntimeError: ... unexpected pos`` after the ``OSError``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = mkstemp_umask(path)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, Exception) and not isinstance(e, OSError):
            raise OSError(errno.EIO, write_failure_reason(e, tmp)) from None
        raise
    _fsync_dir(path.parent)
    return path


def mkstemp_umask(path: Path) -> tuple[int, str]:
    """A temporary file ``.<name>.<random>.tmp`` beside ``path``, with the mode an ordinary
    ``open`` would give it (0666 less the umask; ``mkstemp`` alone makes it 0600)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    return fd, tmp


def remove_stray_temporaries(directory: Path) -> list[Path]:
    """Delete ``.<name>.*.tmp`` files that a killed :func:`atomic_save` left in ``directory``."""
    removed = []
    for tmp in Path(directory).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load(path: str | os.PathLike, map_location: Any = "cpu", weights_only: bool = False,
         key: str = "resume") -> Any:
    """Load a checkpoint written by :func:`atomic_save`; a file torch cannot read (truncated,
    not a checkpoint) is a one-line ConfigError naming ``key`` and the path.

    ``weights_only`` defaults to False because checkpoints may hold the trainer's own
    (trusted) objects such as optimizer-state dataclasses; only load files you wrote.
    """
    try:
        return torch.load(Path(path), map_location=map_location, weights_only=weights_only)
    except Exception as e:   # pickle, zip and EOF errors all mean: not a readable checkpoint
        reason = " ".join(str(e).split())[:160] or type(e).__name__
        raise ConfigError(key, str(path), f"not a readable checkpoint (truncated or another kind of "
                                          f"file: {type(e).__name__}: {reason})") from None


def resolve_resume_path(resume: str | os.PathLike) -> Path:
    """Turn the ``resume`` config value into a checkpoint file.

    Accepts a checkpoint file, a run directory (→ ``<dir>/checkpoints/last.pt``) or the
    checkpoints directory itself (→ ``<dir>/last.pt``). Anything else raises
    ``ConfigError("resume", ...)`` naming the places that were looked at.
    """
    p = Path(os.path.expanduser(str(resume)))
    if p.is_file():
        return p
    candidates = [p / CHECKPOINT_DIR / LAST_CHECKPOINT, p / LAST_CHECKPOINT]
    if p.is_dir():
        for c in candidates:
            if c.is_file():
                return c
        raise ConfigError("resume", str(resume),
                          f"no checkpoint at {candidates[0]} or {candidates[1]}")
    raise ConfigError("resume", str(resume),
                      "no checkpoint at this path (give a checkpoint file or a run directory "
                      f"containing {CHECKPOINT_DIR}/{LAST_CHECKPOINT})")
