"""A committed run directory as the report reads it: records, status, final scores, settings and
provenance. Nothing here is copied by hand; a setting a run did not record is ``UNKNOWN``. Every
run is read once per build, at its real path, and validated once (:class:`Snapshot`,
:mod:`dadam3.report.validate`), so every section and the glance read the same runs."""
from __future__ import annotations

import math
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

from dadam3.errors.files import DataFileError
from dadam3.errors.small_files import read_small_text
from dadam3.run.divergence import Breach, run_breach
from dadam3.report import read, validate
from dadam3.run.provenance import commits_known

UNKNOWN = "unknown"
DIRTY = "+dirty"                 # dadam3.run.job_log: a commit with uncommitted changes
LABEL = {"adam3": "Adam3", "oadagrad": "OAdagrad", "dadam3": "Dadam3", "cadam3": "Cadam3", "dosg": "DOSG",
         "cosg": "COSG", "dp_oadam": "DP-OAdam"}
CENTRALISED = {"cadam3", "cosg", "cadam3_shared"}   # run on the complete graph whatever an older config says


def _yaml(path: Path) -> dict:
    value = read.yaml_file(path, {})
    return value if isinstance(value, dict) else {}


def lookup(cfg: dict, *keys: str) -> Any:
    """The first of the dotted ``keys`` present in ``cfg`` (older runs had the loop keys at the top)."""
    for key in keys:
        node: Any = cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return node
    return None


@dataclass
class Run:
    """One run directory (``rel``: its path relative to ``results/``)."""
    rel: str
    method: str
    seed: int | str
    config: dict
    provenance: list[dict]
    records: list[dict] = field(repr=False, default_factory=list)
    overrides: list[str] = field(default_factory=list)
    failure: str | None = None          # a non-finite score (:func:`dadam3.report.validate.failure`)

    @property
    def label(self) -> str:
        return LABEL.get(self.method, self.method)

    @property
    def lr(self) -> float | None:
        value = lookup(self.config, "optimizer.lr")
        return float(value) if value is not None else None

    @property
    def last_iteration(self) -> int:
        return max((r["iteration"] for r in self.records), default=0)

    @property
    def target(self) -> int | None:
        value = lookup(self.config, "loop.iterations", "iterations")
        return int(value) if value is not None else None

    @cached_property
    def breach(self) -> Breach | None:
        """Where the run diverged: its own ``diverged`` record, else the rule (a non-finite or
        out-of-bound loss, frozen losses: :func:`dadam3.run.divergence.run_breach`)."""
        return run_breach(self.records)

    @property
    def status(self) -> str:
        """``finished`` | ``diverged`` | ``failed`` (a non-finite score) | ``unfinished``."""
        if self.breach is not None:
            return "diverged"
        if self.failure is not None:
            return "failed"
        return "finished" if self.records and self.records[-1].get("status") == "finished" else "unfinished"

    def status_text(self) -> str:
        if self.status == "diverged":
            return f"diverged at iteration {self.breach.iteration} ({self.breach.message})"
        if self.status == "failed":
            return f"failed: {self.failure}"
        if self.status == "unfinished":
            of = f" of {self.target}" if self.target else ""
            return f"unfinished (last iteration {self.last_iteration}{of})"
        return f"finished ({self.last_iteration} iterations)"

    def final(self, key: str) -> float | None:
        """``key`` at the run's last evaluation (None: never evaluated, or not finite)."""
        values = [r[key] for r in self.records if r.get(key) is not None]
        return float(values[-1]) if values and math.isfinite(values[-1]) else None

    def series(self, key: str) -> dict[int, float]:
        return {r["iteration"]: float(r[key]) for r in self.records if r.get(key) is not None}

    def provenance_field(self, key: str) -> str:
        values = sorted({commit_text(s) if key == "code_commit" else str(s.get(key, UNKNOWN)) for s in self.provenance})
        return ", ".join(values) if values else UNKNOWN

    @property
    def legacy(self) -> bool:
        """No config, no ``provenance.json``, or a code commit git could not give (``unknown (...)``,
        ``not a checkout``): what ran is not known, so the run is kept out of every verdict."""
        return not self.config or not self.provenance or validate.is_unverified(self.provenance)

    def setting(self, *keys: str) -> str:
        value = lookup(self.config, *keys)
        return UNKNOWN if value is None else str(value)

    @property
    def topology(self) -> str:
        if self.method in CENTRALISED:
            return "complete"
        return self.setting("topology.name")


def commit_text(segment: dict) -> str:
    """A provenance segment's commit, shortened to 12 digits: ``+dirty`` kept (with ``, diff saved``
    when the run saved the uncommitted changes, ``code_diff``), never printed as the clean commit."""
    commit = str(segment.get("code_commit", UNKNOWN))
    if not re.fullmatch(r"[0-9a-f]+(\+dirty)?", commit):     # what git could not give, said whole: unknown (why)
        return commit
    dirty = commit.endswith(DIRTY)
    text = commit.removesuffix(DIRTY)[:12] + (DIRTY if dirty else "")
    if dirty:
        text += " (diff saved)" if segment.get("code_diff") else " (diff not saved)"
    return text


class Snapshot:
    """What one build read: each run directory's files read once (one consistent snapshot of a run
    still writing), validated once (:mod:`dadam3.report.validate`), run identity unique. ``plans``:
    the build's analysis plans, whose data and setting folders a run's config must agree with."""

    def __init__(self, plans=()):
        self.files: dict[Path, tuple] = {}
        self.identity = validate.Identity()
        self.plans = list(plans)
        self.known: dict[str, bool] = {}        # commit -> this repository holds it

    def read(self, root: Path, directory: Path) -> tuple:
        key = directory.resolve()
        if key not in self.files:
            _refuse_links(root, directory)
            self.files[key] = _read_run(root, directory, self.cells(root))
            config, provenance, records = self.files[key][:3]
            self.check_commits(directory / "provenance.json", provenance)
            run_id = read_small_text(directory / "run_id", 4096).strip() if os.path.lexists(directory / "run_id") \
                else None
            self.identity.add(key, run_id, records, config)
        return self.files[key]

    def cells(self, root: Path) -> list[tuple[Path, dict, dict]]:
        """(folder, data table, settings table) of each plan: the folders a run's config must agree with."""
        out = []
        for plan in self.plans:
            doc = read.yaml_file(plan.path, {})
            out.append((plan.folder(root), doc.get("data") or {}, doc.get("settings") or {}))
        return out

    def check_commits(self, path: Path, provenance: list) -> None:
        """Every commit the run names is one this repository holds (git asked once per commit)."""
        commits = {str(s.get("code_commit", "")).removesuffix(DIRTY) for s in provenance}
        new = {c for c in commits if validate.COMMIT.fullmatch(c) and c not in self.known}
        if new:
            held = commits_known(new)
            self.known.update({c: held is None or c in held for c in new})
        validate.check_commits(path, provenance, {c for c, ok in self.known.items() if ok})


SNAPSHOT: Snapshot | None = None      # the build's, while one runs (:func:`one_snapshot`)


@contextmanager
def one_snapshot(plans=()) -> Iterator[Snapshot]:
    """While a build runs: every run directory read once, identities unique across it. Outside
    one, :func:`load_run` reads (and validates) afresh each time."""
    global SNAPSHOT
    SNAPSHOT = Snapshot(plans)
    try:
        yield SNAPSHOT
    finally:
        SNAPSHOT = None


def _refuse_links(root: Path, directory: Path) -> None:
    """A run folder (or one above it, below the results folder) that is a symbolic link: refused,
    one line (its run would be read twice, once through the link)."""
    for d in (directory, *directory.parents):
        if d == root or root not in d.parents:
            return
        if d.is_symlink():
            raise DataFileError(d, f"is a symbolic link to {os.readlink(d)}: the report reads each run once, at its "
                                   "real path", None, "remove the link")


def _read_run(root: Path, directory: Path, cells: list) -> tuple:
    prov_path = directory / "provenance.json"
    provenance = read.json_file(prov_path, list, [])
    validate.check_provenance(prov_path, provenance)
    cfg_path = directory / "config_resolved.yaml"
    config = _yaml(cfg_path)
    if not config:
        cfg_path = directory / ".hydra" / "config.yaml"
        config = _yaml(cfg_path)
    validate.check_folder(directory, config, cfg_path, validate.encoded(root, directory, cells))
    overrides = read.yaml_file(directory / ".hydra" / "overrides.yaml", [])
    numbered = read.numbered_records(directory / "metrics.jsonl")
    target = lookup(config, "loop.iterations", "iterations")
    validate.check_records(directory / "metrics.jsonl", numbered, target if isinstance(target, int) else None)
    return (config, provenance, [r for _, r in numbered], list(overrides) if isinstance(overrides, list) else [],
            validate.failure(numbered))


def load_run(root: Path, directory: Path, method: str, seed: int | str) -> Run:
    """The run in ``directory`` (under ``root``, the results folder) with a ``metrics.jsonl``,
    read once per build and validated (:class:`Snapshot`)."""
    config, provenance, records, overrides, failed = (SNAPSHOT or Snapshot()).read(root, directory)
    return Run(directory.relative_to(root).as_posix(), method, seed, config, provenance, records, overrides, failed)


def sample_grid(root: Path, run: Run) -> str | None:
    """The run's last sample grid of the node-averaged model, relative to ``root``."""
    grids = sorted((root / run.rel / "samples").glob("iter_*_avg.png"))
    return grids[-1].relative_to(root).as_posix() if grids else None


def shown_grids(report: str) -> list[str]:
    """The run sample grids (``.../samples/*.png``) a REPORT.md text shows, relative to its folder,
    in order: ``.gitignore`` keeps samples out of git, so each is committed by hand (``git add -f``)."""
    return list(dict.fromkeys(re.findall(r"\]\(([^)\s]*/samples/[^)\s]*\.png)\)", report)))


def seed_dirs(parent: Path) -> list[tuple[int, Path]]:
    """``seed<s>/`` folders of ``parent`` holding a metrics.jsonl, by seed; a ``seed*`` folder holding
    one but not spelled ``seed<digits>`` (``seed²``, ``seed03``) is refused in one line."""
    found = []
    for d in parent.glob("seed*"):
        if not os.path.lexists(d / "metrics.jsonl"):
            continue
        if not validate.SEED_FOLDER.fullmatch(d.name) or d.name != f"seed{int(d.name[4:])}":
            validate.check_folder(d, {}, d, {})
        found.append((int(d.name[4:]), d))
    return sorted(found)


def method_runs(root: Path, experiment: Path) -> list[Run]:
    """Every ``<method>/seed<s>/`` run under ``experiment`` (sorted by method, then seed)."""
    runs = []
    for method_dir in sorted(p for p in experiment.iterdir() if p.is_dir()) if experiment.is_dir() else []:
        runs += [load_run(root, d, method_dir.name, s) for s, d in seed_dirs(method_dir)]
    return runs
