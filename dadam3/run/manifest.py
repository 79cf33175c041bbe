"""What a run writes into its directory, listed in its manifest (``<run_dir>/manifest.txt``), so
that ``overwrite=true`` deletes exactly that (:mod:`dadam3.run.directory`).

When a run claims its directory it lists there every top-level name it will create (its log,
checkpoints, samples, ...; :func:`train_writes`), before it creates any; a resume adds what it
writes. A directory holds a run when it has such a manifest or, for a run of an earlier version,
its ``run_id`` or a log (:data:`LOGS`): :func:`run_files`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from dadam3.run.checkpoint import CHECKPOINT_DIR, RUN_ID_FILE, read_run_id
from dadam3.run.paths import mkstemp_umask

# the names a training run writes (.hydra/ and train.log too: the run writes them once it holds the
# directory); what overwrite=true deletes of a run written before manifests
RUN_FILES = ("metrics.jsonl", CHECKPOINT_DIR, "samples", "images", "config_resolved.yaml", "provenance.json", "wandb",
             RUN_ID_FILE, ".hydra", "train.log", "code.diff")
LOCK_FILE = ".lock"
LOGS = ("metrics.jsonl", "metrics.csv", "status.json")     # a run's log: a training's, a synthetic run's
MANIFEST = "manifest.txt"       # <run_dir>/manifest.txt: the top-level names the run writes, one a line
MANIFEST_HEADER = "# what this run writes here (dadam3): overwrite=true deletes these names and nothing else\n"


def train_writes(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The top-level names a training run of ``config`` (nested, as ``TrainConfig.config``)
    creates in its directory: ``wandb/`` only with ``logger.kind=wandb``, ``images/`` (the
    logged sample grids) only for image data."""
    logger, dataset = config.get("logger") or {}, config.get("dataset") or {}
    return tuple(name for name in RUN_FILES if (name != "wandb" or logger.get("kind") == "wandb")
                 and (name != "images" or dataset.get("name") != "gaussians"))


def read_manifest(run_dir: Path) -> tuple[str, ...] | None:
    """The names ``run_dir``'s manifest lists (plain names in ``run_dir``: a line naming a path
    elsewhere, ``..``, the lock or the manifest is ignored), or None without one (no file, not
    readable, or not starting with :data:`MANIFEST_HEADER`: a file of that name no run wrote)."""
    try:
        text = (Path(run_dir) / MANIFEST).read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        return None
    if not text.startswith(MANIFEST_HEADER):        # a file of that name that no run wrote
        return None
    lines = text.splitlines()
    names = (line.strip() for line in lines if not line.startswith("#"))
    return tuple(dict.fromkeys(n for n in names if n and n == Path(n).name and n not in (".", "..", MANIFEST,
                                                                                         LOCK_FILE)))


def write_manifest(run_dir: Path, names: Sequence[str]) -> None:
    """``run_dir``/:data:`MANIFEST` listing ``names``, replaced whole (a temporary file renamed)."""
    target = Path(run_dir) / MANIFEST
    fd, tmp = mkstemp_umask(target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(MANIFEST_HEADER + "".join(f"{n}\n" for n in dict.fromkeys(names)))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_files(run_dir: Path, writes: Sequence[str] = RUN_FILES) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(the names a run writes that are in ``run_dir`` (``writes``, :data:`RUN_FILES` and what its
    manifest lists), the names of them its run wrote): the latter are its manifest's, or for a
    run of an earlier version (no manifest, but its ``run_id`` or a log, :data:`LOGS`) all of
    the former; None when the directory holds no run."""
    listed = read_manifest(run_dir)
    names = dict.fromkeys((*writes, *RUN_FILES, *(listed or ())))
    present = tuple(n for n in names if os.path.lexists(run_dir / n))
    if listed is not None:
        return present, tuple(n for n in present if n in listed)
    if read_run_id(run_dir) is not None or any((run_dir / log).is_file() for log in LOGS):
        return present, present
    return present, None
