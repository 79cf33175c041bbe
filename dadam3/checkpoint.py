"""Crash-safe checkpoints and the random state that makes a resumed run continue exactly.

Layout of a run directory (what :func:`resolve_resume_path` understands)::

    <run_dir>/
        metrics.jsonl            # run records, see dadam3.run_logging
        checkpoints/
            last.pt              # newest checkpoint, replaced atomically at each save

A checkpoint is whatever dict the trainer passes to :func:`atomic_save`; the RNG part
comes from :func:`capture_rng_state` and holds only tensors, ints, floats, strings,
lists and dicts, so it also loads with ``torch.load(..., weights_only=True)``.
"""
from __future__ import annotations

import os
import random
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dadam3.errors import ConfigError

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.pt"


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
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
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


def capture_rng_state() -> dict[str, Any]:
    """Snapshot every global random generator a run draws from.

    Keys: ``torch`` (CPU generator, uint8 tensor), ``cuda`` (one uint8 tensor per visible
    CUDA device; empty list without CUDA), ``numpy`` (legacy global ``np.random`` state) and
    ``python`` (``random`` module state). All values are plain tensors/ints/floats/lists.
    """
    np_name, np_key, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    py_version, py_internal, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": str(np_name), "key": torch.from_numpy(np_key.astype(np.int64)),
                  "pos": int(np_pos), "has_gauss": int(np_has_gauss),
                  "cached_gaussian": float(np_gauss)},
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`.

    CUDA states are restored on ``min(saved, visible)`` devices; a different device count
    (or no CUDA now) gives a warning rather than an error, since resuming on other
    hardware is legitimate but no longer bit-reproducible.
    """
    torch.set_rng_state(state["torch"].cpu())
    cuda_states = list(state.get("cuda", []))
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if len(cuda_states) != visible and (cuda_states or visible):
        warnings.warn(f"checkpoint has CUDA RNG states for {len(cuda_states)} device(s), "
                      f"{visible} visible now; restoring the first {min(len(cuda_states), visible)}",
                      stacklevel=2)
    for i, s in enumerate(cuda_states[:visible]):
        torch.cuda.set_rng_state(s.cpu(), device=i)
    n = state["numpy"]
    np.random.set_state((n["name"], n["key"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
