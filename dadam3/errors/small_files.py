"""The one reader of the files a run, a sweep or the report reads back (``run_id``, the manifests,
the checksum file, ``provenance.json``, the config's YAML, ``status.json``, the logs): each must
be a regular file (never a FIFO, a device or a directory: opened without blocking, checked on the
open descriptor), at most a size cap (:data:`SMALL`; a log :data:`LOG`), and its JSON or YAML
nested at most :data:`NESTING` deep. Anything else is :class:`~dadam3.errors.files.DataFileError`:
one line naming the file, never a hang, a ``RecursionError`` or a ``MemoryError``.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from dadam3.errors.files import DataFileError

SMALL = 16 << 20           # a run's own small file: run_id, a manifest, a checksum, provenance, a config
LOG = 2 << 30              # a log: metrics.jsonl, metrics.csv, train.log
NESTING = 64               # what the writers nest: a record's per-node lists, a config's groups
ADVICE = "a run never writes such a file there: restore it from the run, or move it away"
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_small(path: Any, cap: int = SMALL) -> bytes:
    """The bytes of the regular file ``path`` (a link is followed to its target, which must be
    one), at most ``cap`` of them; :class:`FileNotFoundError` when there is none."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except IsADirectoryError:
        raise DataFileError(path, "is a directory, not a regular file", None, ADVICE) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        kind = next((name for test, name in _KINDS if test(st.st_mode)), None)
        if kind is not None or not stat.S_ISREG(st.st_mode):
            raise DataFileError(path, f"is {kind or 'not a regular file'}, not a regular file", None, ADVICE)
        data = f.read(cap + 1)
    if len(data) > cap:
        raise DataFileError(path, f"holds more than {_size(cap)}, far more than a run writes there", None, ADVICE)
    return data


def read_small_text(path: Any, cap: int = SMALL) -> str:
    """:func:`read_small` as UTF-8 text (a byte that is none: its line)."""
    data = read_small(path, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(path, f"byte {e.start} is not UTF-8 ({data[e.start:e.start + 1]!r})",
                            data.count(b"\n", 0, e.start) + 1, ADVICE) from None


def nested_too_deep(value: Any, limit: int = NESTING, items: int = 1 << 24) -> bool:
    """``value`` (JSON or YAML, parsed) nests lists and mappings deeper than ``limit``, or holds
    more than ``items`` values counted through its aliases (YAML's ``*a`` repeats a whole node)."""
    level, seen = [value], 0
    for _ in range(limit + 1):
        level = [v for x in level if isinstance(x, (dict, list))
                 for v in (x.values() if isinstance(x, dict) else x)]
        seen += len(level)
        if not level:
            return False
        if seen > items:
            return True
    return True


def json_value(text: str, path: Any, line: int | None = None) -> Any:
    """``text`` as JSON, nested at most :data:`NESTING` deep; a ``json.JSONDecodeError`` is the caller's."""
    return _loaded(json.loads, text, path, line)


def yaml_value(text: str, path: Any) -> Any:
    """``text`` as YAML (safe loader), nested at most :data:`NESTING` deep; a ``yaml.YAMLError`` is the caller's."""
    import yaml
    return _loaded(yaml.safe_load, text, path, None)


def _loaded(load: Any, text: str, path: Any, line: int | None) -> Any:
    """``load(text)``, refused by name when nested deeper than :data:`NESTING`."""
    try:
        value = load(text)
    except RecursionError:
        raise _too_deep(path, line) from None
    if nested_too_deep(value):
        raise _too_deep(path, line)
    return value


def _too_deep(path: Any, line: int | None) -> DataFileError:
    return DataFileError(path, f"nested deeper than {NESTING} levels (or made huge by YAML aliases): not what a run "
                               "writes", line, ADVICE)


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"
