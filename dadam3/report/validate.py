"""The one validation pass over every run the report reads (issue 44): what the report refuses in
one line naming the file and line (:class:`~dadam3.errors.files.DataFileError`: exit 1, nothing
written), and what it keeps but names as an exclusion (a run whose scores are not finite is
*failed*, with the reason, and counted as such).

Refused: records out of iteration order; an evaluation record (one with any ``fid_``, ``is_`` or
``kid_`` key: an IS without its FID is no earlier FID's licence) without
``fid_mean`` (and, when it carries the second scorer's keys, without ``fid_mean_<scorer>``); a
``status`` the writer never writes; a ``provenance.json`` segment whose fields have the wrong type
(``code_commit`` not 40 hex digits,
``started`` not an ISO time with offset, ...); a config whose ``optimizer.lr`` or ``seed``
disagrees with its ``lr<LR>/`` or ``seed<S>/`` folder, or a seed folder not spelled ``seed<S>``;
two directories that are one run (the same ``run_id``, or the same ``metrics.jsonl`` inode).
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

from dadam3.errors.files import DataFileError
from dadam3.report.plan import parse_time

ADVICE = "the file is damaged or was edited by hand: restore it from the run, or remove the run from the results"
STATUSES = ("running", "finished", "diverged", "interrupted", "resumed")
EVAL_KEYS = ("fid_mean",)                 # what every verdict reads from an evaluation
SCORE_PREFIXES = ("fid_", "is_", "kid_")
SECOND_SUFFIX = "_fmnist_mlp"
COMMIT = re.compile(r"[0-9a-f]{40}(\+dirty)?")
LR_FOLDER = re.compile(r"lr([0-9.]+(e[+-]?[0-9]+)?)")
TEXT_FIELDS = ("torch", "python", "device", "device_model", "machine_session", "config_identity")


def check_records(path: Path, numbered: list[tuple[int, dict]]) -> None:
    """Order, the keys of each record kind, the status words (refusals naming the line)."""
    last = -1
    for n, rec in numbered:
        if rec["iteration"] < last:
            raise DataFileError(path, f"iteration {rec['iteration']} after iteration {last}: records out of order",
                                n, ADVICE)
        last = rec["iteration"]
        status = rec.get("status")
        if status is not None and status not in STATUSES:
            raise DataFileError(path, f"status={status!r}: one of {', '.join(STATUSES)} belongs here", n, ADVICE)
        if any(k.startswith(SCORE_PREFIXES) for k in rec):     # an evaluation: its FID is there
            need = EVAL_KEYS + (("fid_mean" + SECOND_SUFFIX,) if any(k.endswith(SECOND_SUFFIX) for k in rec) else ())
            missing = [k for k in need if k not in rec]
            if missing:
                raise DataFileError(path, f"an evaluation record without {', '.join(missing)}", n, ADVICE)


def failure(numbered: list[tuple[int, dict]]) -> str | None:
    """Why the run failed: the first non-finite score (file line and key); None if all are finite."""
    for n, rec in numbered:
        for key, value in rec.items():
            if key.startswith(SCORE_PREFIXES):
                values = value if isinstance(value, list) else [value]
                if any(v is not None and not math.isfinite(v) for v in values):
                    return f"{key} is {value} at iteration {rec['iteration']} (metrics.jsonl line {n})"
    return None


def check_provenance(path: Path, segments: list) -> None:
    """Each segment a mapping whose fields have the types the writer writes."""
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict):
            raise DataFileError(path, f"segment {i} is not an object", None, ADVICE)
        commit = seg.get("code_commit")
        if commit is not None and not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
            raise DataFileError(path, f"segment {i}: code_commit={commit!r}: 40 hex digits (+dirty) belong here",
                                None, ADVICE)
        frm = seg.get("from_iteration")
        if frm is not None and (not isinstance(frm, int) or isinstance(frm, bool) or frm < 0):
            raise DataFileError(path, f"segment {i}: from_iteration={frm!r}: an integer >= 0 belongs here", None,
                                ADVICE)
        if "started" in seg and parse_time(seg["started"]) is None:
            raise DataFileError(path, f"segment {i}: started={seg['started']!r}: an ISO time with its UTC offset "
                                      "belongs here", None, ADVICE)
        for key in TEXT_FIELDS:
            if key in seg and not isinstance(seg[key], str):
                raise DataFileError(path, f"segment {i}: {key}={seg[key]!r}: a string belongs here", None, ADVICE)


def check_folder(directory: Path, config: dict, config_path: Path) -> None:
    """The config's step size and seed agree with the ``lr<LR>/…/seed<S>/`` folders around the run."""
    seed_name = directory.name
    if seed_name.startswith("seed") and seed_name[4:].isdigit():
        if seed_name != f"seed{int(seed_name[4:])}":
            raise DataFileError(directory, f"the seed folder is spelled {seed_name!r}, not seed{int(seed_name[4:])}: "
                                           "one seed, one folder", None, "rename or remove it")
        seed = config.get("seed")
        if config and seed is not None and seed != int(seed_name[4:]):
            raise DataFileError(config_path, f"seed={seed!r} disagrees with the folder {seed_name}", None, ADVICE)
    lr_dir = directory.parent.parent.name
    match = LR_FOLDER.fullmatch(lr_dir)
    lr = (config.get("optimizer") or {}).get("lr") if isinstance(config.get("optimizer"), dict) else None
    if match and config and lr is not None:
        if not isinstance(lr, (int, float)) or not math.isclose(float(lr), float(match.group(1)), rel_tol=1e-9):
            raise DataFileError(config_path, f"optimizer.lr={lr!r} disagrees with the folder {lr_dir}", None, ADVICE)


class Identity:
    """Each run read once: two directories holding one run (same ``run_id``, same ``metrics.jsonl``
    inode) are refused, naming both."""

    def __init__(self):
        self.seen: dict[tuple, Path] = {}

    def add(self, directory: Path, run_id: str | None) -> None:
        st = os.stat(directory / "metrics.jsonl")
        keys = [("inode", st.st_dev, st.st_ino)] + ([("run_id", run_id)] if run_id else [])
        for key in keys:
            other = self.seen.get(key)
            if other is not None and other != directory:
                what = f"the same run_id {run_id}" if key[0] == "run_id" else "the same metrics.jsonl (hard link)"
                raise DataFileError(directory, f"{what} as {other}: one run in two directories would count "
                                               "twice", None, "remove one of them")
            self.seen[key] = directory
