"""Downloads into a data root, made under a temporary name and moved into place only when
complete: a download or extraction that fails or is killed leaves nothing a later run would trust.
(Compressed idx files are read as they lie, :func:`dadam3.data.idx.read_idx`: never decompressed
beside themselves.)"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable


def fetch(download: Callable[[str], Any], root: Path) -> None:
    """``download(folder)`` (torchvision's download and extraction) into a temporary folder in
    ``root`` (``.download-<random>``), whose files are moved into ``root`` only when it returned:
    a download or extraction that fails or is killed leaves no partial file where a run reads."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=root))
    try:
        download(str(tmp))
        move_into(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def move_into(src: Path, dst: Path) -> None:
    """Every file under ``src`` renamed to its place under ``dst`` (folders merged)."""
    for item in sorted(src.iterdir()):
        target = dst / item.name
        if item.is_dir() and not item.is_symlink():
            target.mkdir(exist_ok=True)
            move_into(item, target)
        else:
            os.replace(item, target)
