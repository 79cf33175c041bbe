"""The directories Hydra makes for a run or a sweep (and their parents) before the run's checks:
noted first (:func:`note_existing`), and removed again when this process made them and they
stay empty (:func:`discard_if_unused`: a refused run, a resume that continues elsewhere).
Nothing is removed that existed before or holds a file."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dadam3.run.checkpoint import CHECKPOINT_DIR
from dadam3.run.manifest import LOCK_FILE

_NOTED: dict[str, Any] = {}    # what existed before Hydra made its directory: see note_existing


def note_existing(root: str | os.PathLike) -> None:
    """Before Hydra creates ``root`` (a run's or a sweep's directory) and the job directories in
    it: remember which of them exist, so that what this process made can be removed again when
    it stays empty (a refused run, a resume that continues elsewhere). Runs are not descended."""
    root = Path(os.path.abspath(root))
    anchor = root
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    existing = set()
    if root.is_dir():
        for d, dirnames, files in os.walk(root):
            existing.add(Path(d))
            if {"metrics.jsonl", LOCK_FILE, CHECKPOINT_DIR} & {*files, *dirnames}:
                dirnames[:] = []
    _NOTED.update(root=root, anchor=anchor, existing=existing)


def created_by_this_process(path: Path) -> bool:
    """Whether ``path`` is a directory Hydra created for this process (see :func:`note_existing`)."""
    if not _NOTED:
        return False
    path, root, anchor = Path(os.path.abspath(path)), _NOTED["root"], _NOTED["anchor"]
    inside = path == root or root in path.parents or (anchor in path.parents and path in root.parents)
    return inside and path not in _NOTED["existing"]


def discard_if_unused(path: Path) -> None:
    """Remove ``path`` and its parents that this process created while they are empty (nothing else)."""
    path = Path(os.path.abspath(path))
    while created_by_this_process(path):
        try:
            path.rmdir()
        except FileNotFoundError:      # gone already (a claim undone: RunDir.undo), its parents not
            pass
        except OSError:                # not empty
            return
        path = path.parent
