"""Paths a run or a command will write into, checked before anything is written (the run
contract): a directory it can write into or create (:func:`check_usable_dir`), a file it can
write (:func:`check_writable_file`). Each refusal is one :class:`~dadam3.errors.config.ConfigError`
naming the key and the path; nothing is created.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from dadam3.errors.config import ConfigError


def check_usable_dir(key: str, path: Any) -> Path:
    """``path`` as a directory this process can write into: an existing writable directory, or
    one it could create (its nearest existing ancestor is a writable directory). Creates nothing."""
    p = Path(os.path.expanduser(str(path)))
    if p.exists():
        if not p.is_dir():
            raise ConfigError(key, str(path), "exists and is not a directory; choose a directory path")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(key, str(path), "is not writable by this user; choose another directory")
        return p
    ancestor = next(a for a in p.absolute().parents if a.exists())
    if not ancestor.is_dir():
        raise ConfigError(key, str(path), f"cannot be created: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(key, str(path), f"cannot be created: {ancestor} is not writable by this user")
    return p


def check_writable_file(key: str, path: Any) -> Path:
    """``path`` as a file this process can write (its directory usable, see
    :func:`check_usable_dir`; an existing ``path`` a writable file). Creates nothing."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_dir():
        raise ConfigError(key, str(path), "is a directory; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(key, str(path), "exists and is not writable by this user")
    try:
        check_usable_dir(key, p.parent)
    except ConfigError as e:
        raise ConfigError(key, str(path), f"its directory {e.template}", e.refs) from None
    return p


def mkstemp_umask(path: Path) -> tuple[int, str]:
    """A temporary file ``.<name>.<random>.tmp`` beside ``path``, with the mode an ordinary
    ``open`` would give it (0666 less the umask; ``mkstemp`` alone makes it 0600)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    return fd, tmp
