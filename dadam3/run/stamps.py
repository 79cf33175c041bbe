"""What a file a run or the report wrote is, by its content: the stamp its manifest keeps beside its
name (the run's ``manifest.txt``, :mod:`dadam3.run.manifest`; the report's ``report/manifest.txt``,
:mod:`dadam3.report.output`), so that a file is deleted only while it is still what was written.

* a file: ``sha256:<size>:<hex>`` (its size and SHA-256);
* a log the run goes on appending to after its stamp (``growing``): ``log:<size>:<hex>``, the
  size and SHA-256 of what it held then; it still matches while it starts with those bytes;
* a directory: ``dir``.

Content, not inode and device: a copied run (``cp -r``, ``rsync``) matches its stamps and can be
overwritten; a file edited or put in the place of the run's (a link too) does not. Stamps of an
earlier version (``kind:device:inode[:size:mtime]``) still compare the old way.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

_DIGESTS: dict[tuple, str] = {}       # (device, inode, size, mtime, ctime, prefix) -> SHA-256: a file hashed once


def remember(path: Any, digest: str) -> None:
    """``path``'s SHA-256 is ``digest`` (its writer hashed it: a checkpoint), not read again to stamp it."""
    st = os.lstat(path)
    _DIGESTS[_key(st, st.st_size)] = digest


def stamp(path: Any, growing: bool = False) -> str | None:
    """``path``'s stamp (see the module docstring), ``"other"`` for a link or a special file (no
    run writes one: it never matches), None when absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if not stat.S_ISREG(st.st_mode):
        return "other"
    return f"{'log' if growing else 'sha256'}:{st.st_size}:{_digest(Path(path), st, st.st_size)}"


def matches(path: Any, mark: str | None) -> bool:
    """``path`` is still what ``mark`` stamped (a log: it starts with what it held then)."""
    if not mark:
        return False
    kind, _, rest = mark.partition(":")
    if kind == "dir":
        return stamp(path) == "dir"
    if kind not in ("sha256", "log"):
        return _legacy(path, mark) == mark
    size, _, digest = rest.partition(":")
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or not size.isdigit():
        return False
    if kind == "sha256" and st.st_size != int(size) or kind == "log" and st.st_size < int(size):
        return False
    return _digest(Path(path), st, int(size)) == digest


def _key(st: os.stat_result, prefix: int) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, prefix


def _digest(path: Path, st: os.stat_result, prefix: int) -> str:
    """The SHA-256 of the first ``prefix`` bytes of ``path`` (``st``: its ``lstat``), read without following a link."""
    key = _key(st, prefix)
    if key not in _DIGESTS:
        h, left = hashlib.sha256(), prefix
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            while left > 0 and (block := f.read(min(left, 1 << 20))):
                h.update(block)
                left -= len(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def _legacy(path: Any, mark: str) -> str | None:
    """The stamp an earlier version wrote: ``kind:device:inode``, and ``:size:mtime_ns`` for a file written whole."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
    whole = f":{st.st_size}:{st.st_mtime_ns}" if mark.count(":") == 4 else ""
    return f"{kind}:{st.st_dev}:{st.st_ino}{whole}"
