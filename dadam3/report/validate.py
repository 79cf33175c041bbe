"""The one validation pass over every run the report reads (issues 44 and 60): what the report
refuses in one line naming the file and line (:class:`~dadam3.errors.files.DataFileError`: exit 1,
nothing written), and what it keeps but names (a run whose scores are not finite is *failed*, with
the reason; a run whose code git could not name is *unverified*, listed and kept out of verdicts).

Refused, each by name:

* records: out of iteration order; two records of one iteration; an evaluation record (one with any
  ``fid_``, ``is_`` or ``kid_`` key: an IS without its FID is no earlier FID's licence) without
  ``fid_mean`` (and, when it carries the second scorer's keys, without ``fid_mean_<scorer>``); a
  ``status`` the writer never writes; a ``finished`` record before the configured iterations, or
  after a log whose records stop short of it (a log cut, a record added);
* provenance: a segment whose fields have the wrong type (``code_commit`` neither 40 hex digits
  (``+dirty``) nor a value the trainer writes when it cannot say: ``unknown (...)``, ``not a
  checkout``; ``started`` not an ISO time with offset, ...); a start in the future; segments out
  of order (iterations or start times going back); a commit this repository does not hold
  (:func:`commits`, asked once per build);
* folders: a config that disagrees with a key its folders encode (:func:`encoded`: the seed of
  ``seed<S>/``, the optimizer of ``<method>/``, the step size of ``lr<LR>/``, a plan's data and
  setting folders, the step size of a preset's folder ``fmnist/<preset>/``); a seed folder not spelled
  ``seed<digits>``; a run folder that is a symbolic link (the report reads each run once, at its
  real path);
* identity (:class:`Identity`): two directories that are one run (the same ``run_id``, the same
  ``metrics.jsonl`` inode), or whose logged values are identical while their configs differ in the
  seed only (a copy with its seed or run id edited: two seeds never log the same values; a
  re-execution of the same config gives the same values and is the same run; two configs that
  differ otherwise may compute alike, Cadam3 and Dadam3 on the complete graph).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from dadam3.errors.files import DataFileError
from dadam3.report.plan import parse_time

ADVICE = "the file is damaged or was edited by hand: restore it from the run, or remove the run from the results"
STATUSES = ("running", "finished", "diverged", "interrupted", "resumed")
EVAL_KEYS = ("fid_mean",)                 # what every verdict reads from an evaluation
SCORE_PREFIXES = ("fid_", "is_", "kid_")
SECOND_SUFFIX = "_fmnist_mlp"
COMMIT = re.compile(r"[0-9a-f]{40}(\+dirty)?")
CLEAN_COMMIT = re.compile(r"[0-9a-f]{40}")
UNVERIFIED = re.compile(r"unknown( \(.+\))?|not a checkout")     # what the trainer writes when git cannot say
SEED_FOLDER = re.compile(r"seed([0-9]+)", re.ASCII)
LR_FOLDER = re.compile(r"lr([0-9.]+(e[+-]?[0-9]+)?)")
TEXT_FIELDS = ("torch", "python", "device", "device_model", "machine_session", "config_identity")
NOT_VALUES = ("time",)                    # a record's keys that a re-execution does not repeat
CLOCK_SLACK = timedelta(days=1)           # a start this far ahead of this machine's clock is in the future


def check_records(path: Path, numbered: list[tuple[int, dict]], target: int | None = None) -> None:
    """Order, one record per iteration, the keys of each record kind, the status words, and a
    ``finished`` that the records reach (``target``: the configured iterations). Refusals name the line."""
    last, seen = -1, {}
    for n, rec in numbered:
        it = rec["iteration"]
        if it < last:
            raise DataFileError(path, f"iteration {it} after iteration {last}: records out of order", n, ADVICE)
        last = it
        status = rec.get("status")
        if status is not None and status not in STATUSES:
            raise DataFileError(path, f"status={status!r}: one of {', '.join(STATUSES)} belongs here", n, ADVICE)
        if status in (None, "running"):
            if it in seen:
                raise DataFileError(path, f"a second record of iteration {it} (the first: line {seen[it]}): one "
                                          "record per iteration", n, ADVICE)
            seen[it] = n
        if any(k.startswith(SCORE_PREFIXES) for k in rec):     # an evaluation: its FID is there
            need = EVAL_KEYS + (("fid_mean" + SECOND_SUFFIX,) if any(k.endswith(SECOND_SUFFIX) for k in rec) else ())
            missing = [k for k in need if k not in rec]
            if missing:
                raise DataFileError(path, f"an evaluation record without {', '.join(missing)}", n, ADVICE)
    done = [(n, r) for n, r in numbered if r.get("status") == "finished"]
    if done:
        n, it = done[-1][0], done[-1][1]["iteration"]
        logged = max(seen, default=None)
        if target is not None and it != target:
            raise DataFileError(path, f"finished at iteration {it}, but the run is configured for {target}", n,
                                ADVICE)
        if logged != it:
            raise DataFileError(path, f"finished at iteration {it}, but its records stop at iteration {logged}: a "
                                      "log cut short, or a record added", n, ADVICE)


def failure(numbered: list[tuple[int, dict]]) -> str | None:
    """Why the run failed: the first non-finite score (file line and key); None if all are finite."""
    for n, rec in numbered:
        for key, value in rec.items():
            if key.startswith(SCORE_PREFIXES):
                values = value if isinstance(value, list) else [value]
                if any(v is not None and not math.isfinite(v) for v in values):
                    return f"{key} is {value} at iteration {rec['iteration']} (metrics.jsonl line {n})"
    return None


def check_provenance(path: Path, segments: list, now: datetime | None = None) -> None:
    """Each segment a mapping whose fields have the types the trainer writes, starting no later than
    ``now`` (this machine's clock, with a day's slack), in order (iterations up, start times not back)."""
    now = now or datetime.now(timezone.utc)
    previous: tuple[int, datetime | None] | None = None
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict):
            raise DataFileError(path, f"segment {i} is not an object", None, ADVICE)
        commit = seg.get("code_commit")
        if commit is not None and not (isinstance(commit, str) and (COMMIT.fullmatch(commit)
                                                                    or UNVERIFIED.fullmatch(commit))):
            raise DataFileError(path, f"segment {i}: code_commit={commit!r}: 40 hex digits (+dirty) belong here, or "
                                      "what the trainer writes when git cannot say ('unknown (why)', 'not a "
                                      "checkout')", None, ADVICE)
        frm = seg.get("from_iteration")
        if frm is not None and (not isinstance(frm, int) or isinstance(frm, bool) or frm < 0):
            raise DataFileError(path, f"segment {i}: from_iteration={frm!r}: an integer >= 0 belongs here", None,
                                ADVICE)
        started = parse_time(seg["started"]) if "started" in seg else None
        if "started" in seg and started is None:
            raise DataFileError(path, f"segment {i}: started={seg['started']!r}: an ISO time with its UTC offset "
                                      "belongs here", None, ADVICE)
        if started is not None and started > now + CLOCK_SLACK:
            raise DataFileError(path, f"segment {i}: started={seg['started']!r} is in the future (this machine's "
                                      f"clock: {now.isoformat(timespec='seconds')}): not a start a run records", None,
                                ADVICE)
        for key in TEXT_FIELDS:
            if key in seg and not isinstance(seg[key], str):
                raise DataFileError(path, f"segment {i}: {key}={seg[key]!r}: a string belongs here", None, ADVICE)
        if previous is not None and frm is not None:
            if frm <= previous[0] or (started and previous[1] and started < previous[1]):
                raise DataFileError(path, f"segment {i} (from_iteration={frm}, started={seg.get('started')!r}) comes "
                                          f"before segment {i - 1}: segments out of order", None, ADVICE)
        if frm is not None:
            previous = (frm, started)


def check_commits(path: Path, segments: list, known: set[str] | None) -> None:
    """Every commit of ``segments`` is one this repository holds (``known``; None: git cannot say)."""
    for i, seg in enumerate(segments):
        commit = str(seg.get("code_commit", "")).removesuffix("+dirty")
        if known is not None and COMMIT.fullmatch(commit) and commit not in known:
            raise DataFileError(path, f"segment {i}: code_commit={commit} is no commit of this repository (git "
                                      "cat-file): not code that ran here", None, ADVICE)


def is_unverified(segments: list) -> bool:
    """A run whose code git could not name (``unknown (...)``, ``not a checkout``): listed, kept out of verdicts."""
    return any(UNVERIFIED.fullmatch(str(s.get("code_commit", ""))) for s in segments if isinstance(s, dict))


def check_folder(directory: Path, config: dict, config_path: Path, encodes: dict[str, tuple[Any, str]]) -> None:
    """The config agrees with every key its folders encode (``encodes``: key -> (value, folder);
    :func:`encoded`); a ``seed*`` folder is spelled ``seed<digits>``."""
    name = directory.name
    if name.startswith("seed") and not (SEED_FOLDER.fullmatch(name) and name == f"seed{int(name[4:])}"):
        right = f"seed{int(name[4:])}" if SEED_FOLDER.fullmatch(name) else "seed<digits>"
        raise DataFileError(directory, f"the seed folder is spelled {name!r}, not {right}: one seed, one folder", None,
                            "rename or remove it")
    if not config:
        return
    for key, (want, folder) in encodes.items():
        have = lookup(config, key)
        if have is None or _same(have, want):
            continue
        raise DataFileError(config_path, f"{key}={have!r} disagrees with the folder {folder} ({key}={want!r})", None,
                            ADVICE)


def encoded(root: Path, directory: Path, cells: list[tuple[Path, dict, dict]]) -> dict[str, tuple[Any, str]]:
    """The config keys the folders around ``directory`` encode, each with its value and folder:
    ``seed<S>/`` the seed, ``<optimizer>/`` above it the optimizer, ``lr<LR>/`` above that the step
    size; in a plan's folder (``cells``: (folder, its data table, its settings table)) its
    ``<data>/<setting>/`` folders the overrides they name; a preset's folder (``fmnist/<name>/<method>/``,
    with the preset ``experiment=fmnist_<name>``) its step size."""
    from dadam3.optim import OPTIMIZERS
    out: dict[str, tuple[Any, str]] = {}
    seed = SEED_FOLDER.fullmatch(directory.name)
    if not seed:
        return out
    out["seed"] = (int(seed.group(1)), directory.name)
    method = directory.parent.name
    if method in OPTIMIZERS:
        out["optimizer.name"] = (method, method)
    lr = LR_FOLDER.fullmatch(directory.parent.parent.name)
    if lr:
        out["optimizer.lr"] = (float(lr.group(1)), directory.parent.parent.name)
    for folder, data, settings in cells:
        parts = directory.relative_to(folder).parts if directory.is_relative_to(folder) else ()
        if len(parts) == 5:
            for table, part in ((data, parts[0]), (settings, parts[1])):
                for line in table.get(part) or ():
                    key, _, value = str(line).partition("=")
                    out[key] = (_yaml_value(value), part)
    preset = directory.parent.parent
    if not lr and preset.parent == root / "fmnist":
        step = preset_step_size(f"fmnist_{preset.name}")
        if step is not None:
            out["optimizer.lr"] = (step, f"fmnist/{preset.name} (experiment=fmnist_{preset.name})")
    return out


@lru_cache(maxsize=None)
def preset_step_size(option: str) -> float | None:
    """The step size the experiment preset ``option`` composes to (None: no such preset)."""
    from dadam3.run.schema import compose
    from dadam3.run.schema.presets import exists
    if not exists("experiment", option):
        return None
    return float(compose("train", [f"experiment={option}"]).optimizer.lr)


def lookup(cfg: dict, key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _yaml_value(text: str) -> Any:
    import yaml
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _same(have: Any, want: Any) -> bool:
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        return isinstance(have, (int, float)) and not isinstance(have, bool) and \
            math.isclose(float(have), float(want), rel_tol=1e-9)
    return str(have) == str(want)


class Identity:
    """Each run read once: two directories holding one run (the same ``run_id``, the same
    ``metrics.jsonl`` inode, or identical logged values under configs that differ in the seed only:
    a copy) are refused, naming both."""

    def __init__(self):
        self.seen: dict[tuple, tuple[Path, str]] = {}

    def add(self, directory: Path, run_id: str | None, records: list[dict], config: dict) -> None:
        from dadam3.run.checkpoint.resume import run_identity
        st = os.stat(directory / "metrics.jsonl")
        values = [{k: v for k, v in r.items() if k not in NOT_VALUES} for r in records
                  if r.get("status") in (None, "running")]
        digest = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()
        # a copy: the same config but its seed (no two seeds log the same values); two configs that differ
        # otherwise may compute alike (Cadam3 and Dadam3 on the complete graph) and are two runs
        me = (run_identity({k: v for k, v in config.items() if k != "seed"}), config.get("seed"))
        keys = [("inode", st.st_dev, st.st_ino)] + ([("run_id", run_id)] if run_id else []) + \
            ([("values", digest)] if values and config else [])
        for key in keys:
            other, theirs = self.seen.get(key, (None, None))
            if other is None or other == directory or (key[0] == "values" and (theirs[0] != me[0]
                                                                                or theirs[1] == me[1])):
                continue
            what = {"run_id": f"the same run_id {run_id}", "inode": "the same metrics.jsonl (hard link)",
                    "values": f"the same logged values under another seed ({me[1]}, there {theirs[1]}: a copy, its "
                              "seed or run id edited?)"}
            raise DataFileError(directory, f"{what[key[0]]} as {other}: one run in two directories would count "
                                           "twice", None, "remove one of them")
        for key in keys:
            self.seen.setdefault(key, (directory, me))
