"""The report's and the plots' readers' checks, written once: every file they read from a run
directory (``metrics.jsonl``, ``metrics.csv``, ``provenance.json``, the YAML of its config, a
reference-values JSON) is decoded here, read small (:mod:`dadam3.errors.small_files`: a regular
file, under a size and a nesting cap), and anything that is not what the writer writes is
:class:`dadam3.errors.files.DataFileError`: one line naming the file (and line) and what is wrong,
never a traceback from deep inside a section, a hang on a FIFO or a ``MemoryError``."""
from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import yaml

from dadam3.errors.files import DataFileError
from dadam3.errors.small_files import LOG, json_value, read_small, yaml_value
from dadam3.run.rewind import parse_record

TEXT_KEYS = ("status", "reason", "message", "signal", "changed")    # a record's keys that hold no number
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
ADVICE = "the file is damaged or was edited by hand: restore it from the run, or remove the run from the results"


def text(path: Path) -> str:
    """``path`` as UTF-8 text (a byte that is none: the line it is on), read small (a log's cap)."""
    try:
        data = read_small(path, LOG)
    except FileNotFoundError:
        raise DataFileError(path, f"a link to {os.readlink(path)}, which does not exist" if os.path.islink(path)
                            else "it is gone", None, ADVICE) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(path, f"byte {e.start} is not UTF-8 ({data[e.start:e.start + 1]!r})",
                            data.count(b"\n", 0, e.start) + 1, ADVICE) from None


def json_file(path: Path, kind: type, default: Any = None) -> Any:
    """The JSON value in ``path`` (``default`` when there is no such file), which must be a ``kind``."""
    if not os.path.lexists(path):
        return default
    try:
        value = json_value(text(path), path)
    except json.JSONDecodeError as e:
        raise DataFileError(path, f"not JSON ({e.msg}, column {e.colno}; truncated?)", e.lineno, ADVICE) from None
    if not isinstance(value, kind):
        raise DataFileError(path, f"holds {_what(value)} where {_what(kind())} belongs", None, ADVICE)
    return value


def yaml_file(path: Path, default: Any = None) -> Any:
    """The YAML mapping or list in ``path`` (``default`` when there is none, or it is empty)."""
    if not os.path.lexists(path):
        return default
    try:
        value = yaml_value(text(path), path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise DataFileError(path, f"not YAML ({getattr(e, 'problem', None) or type(e).__name__})",
                            None if mark is None else mark.line + 1, ADVICE) from None
    if value is None:
        return default
    if not isinstance(value, (dict, list)):
        raise DataFileError(path, f"holds {_what(value)} where a mapping or a list belongs", None, ADVICE)
    return value


def records(path: Path) -> list[dict]:
    """The records of a ``metrics.jsonl`` (:func:`numbered_records` without the line numbers)."""
    return [r for _, r in numbered_records(path)]


def numbered_records(path: Path) -> list[tuple[int, dict]]:
    """(line number, record) of a ``metrics.jsonl``: a torn last line is left out (a killed
    writer), every other line must be a record whose ``iteration`` is an integer >= 0 and whose
    values are numbers (``null`` too; ``*_nodes`` (``*_nodes_<scorer>``): lists of numbers; the writer's non-finite
    spellings become floats) but for :data:`TEXT_KEYS`."""
    out = []
    lines = text(path).split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip() or (n == len(lines) and parse_record(line) is None):
            continue                     # blank, or the torn last line a killed writer leaves
        record = parse_record(line)
        if record is None:
            raise DataFileError(path, "not a record (a JSON object with an integer iteration)", n, ADVICE)
        for key, value in record.items():
            if key in TEXT_KEYS or key == "iteration":
                continue
            value = record[key] = _finite_or_spelled(value)
            values = value if ("_nodes" in key) and isinstance(value, list) else [value]
            if not all(v is None or _number(v) for v in values):
                raise DataFileError(path, f"{key}={json.dumps(value)[:40]} where a number belongs", n, ADVICE)
        out.append((n, record))
    return out


def csv_columns(path: Path) -> dict[str, list[float]]:
    """A ``metrics.csv`` as columns of numbers (a cell that is none: its line and column)."""
    rows = list(csv.reader(io.StringIO(text(path), newline="")))
    if not rows:
        return {}
    header, out = rows[0], {name: [] for name in rows[0]}
    for n, row in enumerate(rows[1:], 2):
        if len(row) != len(header):
            raise DataFileError(path, f"{len(row)} cells where the header has {len(header)}", n, ADVICE)
        for name, cell in zip(header, row):
            try:
                out[name].append(float(cell))
            except ValueError:
                raise DataFileError(path, f"column {name}: {cell[:40]!r} is not a number", n, ADVICE) from None
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite_or_spelled(value: Any) -> Any:
    """The non-finite spellings the writer uses (``"NaN"``, ``"Infinity"``, ``"-Infinity"``:
    :mod:`dadam3.run.loggers`) as floats."""
    if isinstance(value, list):
        return [_finite_or_spelled(v) for v in value]
    return NONFINITE.get(value, value) if isinstance(value, str) else value


def _what(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)
