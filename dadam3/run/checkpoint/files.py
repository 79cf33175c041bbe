"""Checkpoint files: where they live, written atomically with their checksum, read back as
data (never code) with one-line errors.

Layout of a run directory (what :func:`resolve_resume_path` understands)::

    <run_dir>/
        metrics.jsonl            # run records, see dadam3.run.loggers
        checkpoints/
            last.pt              # newest checkpoint, replaced atomically at each save
            last.pt.sha256       # its SHA-256 (``sha256sum -c`` reads it), written with it

Loading (:func:`load`) runs nothing stored in the file: the checksum is verified first (a
changed byte anywhere: the file is named corrupt, nothing of it is read), then
``torch.load(weights_only=True)`` rebuilds only tensors, plain Python containers and numbers,
numpy arrays and the project's own :data:`SAFE_TYPES`; any other object in the file (a class, a
function, a ``__reduce__`` payload) is refused before it is built. A checkpoint without its
``.sha256`` (an earlier format's, or the file was removed) is refused: nothing of it is read.

What a training checkpoint holds is :mod:`dadam3.run.checkpoint.contents`'s concern.
"""
from __future__ import annotations

import errno
import hashlib
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dadam3.errors.config import ConfigError
from dadam3.errors.files import DataFileError, WriteFailed, is_temporary_of, new_temporary, write_failure_reason, \
    write_whole
from dadam3.errors.small_files import read_small
from dadam3.errors.stops import RunStopped
from dadam3.run.stamps import remember

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.pt"
CHECKSUM_SUFFIX = ".sha256"          # last.pt -> last.pt.sha256


class NodeList(list):
    """A list with one item per node (e.g. the nodes' generator states): a checkpoint's own type."""


# what a checkpoint may hold beyond torch's plain types (tensors, dicts, lists, numbers, strings):
# the project's per-node list and numpy arrays (the mixer's byte counts), under both of numpy's
# module names (numpy 2 pickles numpy._core, numpy 1 numpy.core)
SAFE_TYPES: tuple = (NodeList, np.ndarray, np.dtype, np.dtypes.Float64DType, np._core.multiarray._reconstruct,
                     (np._core.multiarray._reconstruct, "numpy.core.multiarray._reconstruct"))


class CheckpointNotWritten(RunStopped):
    """The checkpoint could not be written (disk full, file-size limit): the previous ``last.pt``
    stays, the log ends with an ``interrupted`` record giving the reason."""

    prefix = "error: checkpoint not written"


def checkpoint_path(run_dir: str | os.PathLike) -> Path:
    """``<run_dir>/checkpoints/last.pt``."""
    return Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` ``obj`` so that ``path`` always holds either the old or the new checkpoint,
    and ``path.sha256`` (:func:`checksum_path`) a SHA-256 that verifies it.

    The object is written to a temporary file in the same directory (``.<name>.<random>.tmp``),
    flushed and fsynced and hashed; the checksum file is then replaced (atomically, like the
    checkpoint) by one listing the new hash and the old file's, the checkpoint moved over
    ``path`` with :func:`os.replace` (atomic on POSIX and Windows within one file system), and
    the checksum file rewritten with the new hash alone: whenever the process stops, the
    ``path`` on disk verifies. The directory is fsynced so the renames survive a power loss. If
    writing fails the temporary files are removed and the error propagates. A SIGKILL mid-write
    can leave a stray ``.tmp`` file but never a damaged ``path``.

    Any failure to write is an ``OSError`` whose ``strerror`` says why
    (:func:`dadam3.errors.files.write_failure_reason`): on a full disk or past the file-size limit
    torch's zip writer raises ``RuntimeError: ... unexpected pos`` after the ``OSError``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = new_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        digest = file_sha256(Path(tmp))
        _write_checksums(path, [digest, *_earlier(path)[:2]])     # both the old and the new file verify
        os.replace(tmp, path)
        remember(path, digest)          # its manifest stamp (dadam3.run.stamps) without reading it again
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, Exception) and not isinstance(e, OSError):
            raise OSError(errno.EIO, write_failure_reason(e, tmp)) from None
        raise
    try:
        _write_checksums(path, [digest])
    except WriteFailed:     # the file on disk still lists the new hash (and the old): it verifies
        pass
    _fsync_dir(path.parent)
    return path


def checksum_path(path: str | os.PathLike) -> Path:
    """``<path>.sha256``: the checksum file written with the checkpoint ``path``."""
    path = Path(path)
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file's bytes, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_checksums(path: Path, key: str = "resume") -> list[str]:
    """The hashes (lower case) ``path``'s checksum file lists in a format ``sha256sum`` writes
    (GNU ``HASH  NAME`` or ``HASH *NAME``, BSD ``SHA256 (NAME) = HASH`` from ``--tag``; upper-case
    hex too), [] when there is no such file. A checksum file that is there but holds no such line
    (empty, garbage, not text, unreadable) is a one-line ConfigError naming ``key``: a damaged
    checksum never counts as "no checksum"."""
    target = checksum_path(path)
    try:
        text = read_small(target, 1 << 16).decode("ascii")
    except FileNotFoundError:
        return []
    except DataFileError as e:
        raise _unreadable(key, path, target, e.reason) from None
    except (OSError, UnicodeError) as e:
        raise _unreadable(key, path, target, getattr(e, "strerror", None) or "not text") from None
    lines = [line for line in text.splitlines() if line.strip()]
    found = [m.group("gnu") or m.group("bsd") for m in map(_CHECKSUM_LINE.fullmatch, lines) if m]
    if not lines or len(found) != len(lines):
        bad = next((i + 1 for i, line in enumerate(text.splitlines()) if line.strip()
                    and not _CHECKSUM_LINE.fullmatch(line)), None)
        raise _unreadable(key, path, target, "empty" if not lines else f"line {bad} is not a sha256sum line")
    return [h.lower() for h in found]


# a line of sha256sum's output, GNU or BSD (--tag); a name with a backslash or newline starts with "\"
_CHECKSUM_LINE = re.compile(r"\\?(?:(?P<gnu>[0-9a-fA-F]{64}) [ *].+|SHA256 \(.+\) = (?P<bsd>[0-9a-fA-F]{64}))")


def _unreadable(key: str, path: Path, target: Path, why: str) -> ConfigError:
    return ConfigError(key, str(path), f"unreadable checksum file {target.name} ({why}; sha256sum writes "
                                       "'HASH  NAME' or, with --tag, 'SHA256 (NAME) = HASH'): the checkpoint cannot be "
                                       f"verified; nothing was loaded: restore {target.name} from a copy")


def _earlier(path: Path) -> list[str]:
    """The hashes of the checksum file a new checkpoint replaces ([] when it is unreadable: replaced all the same)."""
    try:
        return read_checksums(path)
    except ConfigError:
        return []


def _write_checksums(path: Path, digests: list[str]) -> None:
    """``path``'s checksum file listing ``digests``, written whole (:func:`write_whole`)."""
    text = "".join(f"{d}  {path.name}\n" for d in dict.fromkeys(digests))
    write_whole(checksum_path(path), lambda f: f.write(text.encode("ascii")))


def remove_stray_temporaries(directory: Path) -> list[Path]:
    """Delete the temporary files a killed :func:`atomic_save` left in ``directory`` (the run's own
    ``checkpoints/``): regular files named as :func:`~dadam3.errors.files.new_temporary` names
    those of ``last.pt`` and its checksum, nothing else (a user's ``.notes.tmp`` stays)."""
    ours = (LAST_CHECKPOINT, LAST_CHECKPOINT + CHECKSUM_SUFFIX)
    removed = []
    for tmp in Path(directory).glob(".*.tmp"):
        if is_temporary_of(tmp.name, ours) and tmp.is_file() and not tmp.is_symlink():
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


def load(path: str | os.PathLike, map_location: Any = "cpu", key: str = "resume") -> Any:
    """Load a checkpoint written by :func:`atomic_save` as data: its checksum verified, then
    ``torch.load(weights_only=True)`` with :data:`SAFE_TYPES` allowed (nothing stored in the file
    runs). A corrupt file (its bytes are not the ones its checksum file lists), one that is no
    checkpoint (not torch's zip format, truncated) or that holds other objects is a one-line
    ConfigError naming ``key`` and the path, and so is one without its checksum file (the format
    before checksums, a copy made without it, another program's file)."""
    path = Path(path)
    expected = read_checksums(path, key)
    try:
        actual = file_sha256(path)
    except OSError as e:
        raise ConfigError(key, str(path), f"cannot read the checkpoint ({e.strerror or e})") from None
    if expected and actual not in expected:
        raise ConfigError(key, str(path), f"corrupt checkpoint: its SHA-256 is not the one {checksum_path(path).name} "
                                          "recorded when it was written (damaged or changed since); nothing was "
                                          "loaded: restore it from a copy or start a new run")
    if not zipfile.is_zipfile(path):
        raise ConfigError(key, str(path), "not a readable checkpoint (not torch's zip format: truncated, or another "
                                          "kind of file); nothing in it was run")
    if not expected:
        raise ConfigError(key, str(path), f"no {checksum_path(path).name} beside it, which every checkpoint of this "
                                          "code has: a checkpoint of the format before checksums (resume it with the "
                                          "version that wrote it, or start a new run), a copy made without it (copy it "
                                          "too), or another program's file; nothing was loaded")
    try:
        with torch.serialization.safe_globals(list(SAFE_TYPES)):
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:      # weights_only refused an object: never built, never run
        found = re.search(r"GLOBAL (\S+)|but got <class '([^']+)'>", str(e))
        found = next(g for g in found.groups() if g) if found else type(e).__name__
        raise ConfigError(key, str(path), f"holds an object a checkpoint never holds ({found}): refused unbuilt, "
                                          "nothing in it was run; it is not a checkpoint of this code") from None
    except Exception as e:   # zip and EOF errors: not a readable checkpoint
        reason = " ".join(str(e).split())[:160] or type(e).__name__
        raise ConfigError(key, str(path), f"not a readable checkpoint (truncated or another kind of "
                                          f"file: {type(e).__name__}: {reason})") from None
    return ckpt


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
