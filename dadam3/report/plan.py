"""The analysis plans (``docs/analysis_plan/*.yaml``): the claims, grids, seeds, margins and
correction of a claim family, committed before the runs they govern, read and checked here; and
the time of each plan's last commit (``git log -1 --format=%cI``), against which a run's start
makes its verdict post hoc. A plan the report cannot use is one line naming the file and key."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dadam3.errors.files import DataFileError
from dadam3.report import read

PLAN_DIR = Path(__file__).resolve().parents[2] / "docs" / "analysis_plan"     # the checkout's plans
RELATIONS = ("≫", "≈")
MEASURE_NAMES = ("final", "speed")
ADVICE = "the plan is committed before its runs: restore it from git (an edit makes every verdict post hoc)"


@dataclass(frozen=True)
class Claim:
    a: str
    rel: str
    b: str
    measure: str


@dataclass(frozen=True)
class Plan:
    """One claim family's plan. ``methods``: name -> (grid, start) (a step-size search); ``arms``:
    name -> (data, setting, method, lr) (fixed step sizes, no search)."""
    path: Path
    family: str
    title: str
    paper: str
    runs: str
    methods: dict
    arms: dict
    selection_seeds: tuple[int, ...]
    bracket_margin: float
    fresh_seeds: tuple[int, ...]
    fresh_min: int
    claims: tuple[Claim, ...]
    alpha: float
    margin: float
    committed: datetime | None
    iterations: int | None = None      # every run's loop.iterations; a run configured otherwise is excluded

    def folder(self, root: Path) -> Path:
        """The plan's run folder under the results folder ``root`` (``runs`` is relative to the
        repository: ``results/...``)."""
        rel = Path(self.runs)
        return root.joinpath(*rel.parts[1:]) if rel.parts and rel.parts[0] == "results" else root / rel

    @property
    def time_text(self) -> str:
        return "plan time unknown" if self.committed is None else self.committed.isoformat()


def committed_at(path: Path) -> datetime | None:
    """The time of the last commit that changed ``path``; None when git cannot say (no checkout,
    the file not committed, or changed since: an uncommitted plan governs nothing)."""
    try:
        cwd = path.parent
        dirty = subprocess.run(["git", "status", "--porcelain", "--", path.name], cwd=cwd, capture_output=True,
                               text=True, timeout=30)
        out = subprocess.run(["git", "log", "-1", "--format=%cI", "--", path.name], cwd=cwd, capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or dirty.returncode != 0 or dirty.stdout.strip() or not out.stdout.strip():
        return None
    return parse_time(out.stdout.strip())


def parse_time(value) -> datetime | None:
    """An ISO 8601 time with its offset; None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def _need(path: Path, node: dict, key: str, kind, where: str = ""):
    value = node.get(key) if isinstance(node, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataFileError(path, f"{where}{key}={value!r}: a {names} belongs here", None, ADVICE)
    return value


def _seeds(path: Path, node: dict, key: str, where: str = "") -> tuple[int, ...]:
    seeds = _need(path, node, key, list, where)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise DataFileError(path, f"{where}{key}={seeds!r}: a list of seeds (integers >= 0) belongs here", None,
                            ADVICE)
    return tuple(seeds)


def load(path: Path) -> Plan:
    """The plan in ``path``, checked."""
    doc = read.yaml_file(path, {})
    if not isinstance(doc, dict):
        raise DataFileError(path, "holds a list where the plan's mapping belongs", None, ADVICE)
    test = _need(path, doc, "test", dict)
    methods, arms = {}, {}
    if "methods" in doc:
        for name, spec in _need(path, doc, "methods", dict).items():
            grid = tuple(float(x) for x in _need(path, spec, "grid", list, f"methods.{name}."))
            start = float(_need(path, spec, "start", (int, float), f"methods.{name}."))
            if start not in grid or list(grid) != sorted(set(grid)):
                raise DataFileError(path, f"methods.{name}: the grid must be increasing and hold start={start:g}",
                                    None, ADVICE)
            methods[name] = (grid, start)
        selection = _need(path, doc, "selection", dict)
        sel_seeds = _seeds(path, selection, "seeds", "selection.")
        margin = float(_need(path, selection, "bracket_margin", (int, float), "selection."))
    else:
        for name, spec in _need(path, doc, "arms", dict).items():
            if not (isinstance(spec, list) and len(spec) == 4 and isinstance(spec[3], (int, float))):
                raise DataFileError(path, f"arms.{name}={spec!r}: [data, setting, method, lr] belongs here", None,
                                    ADVICE)
            arms[name] = (str(spec[0]), str(spec[1]), str(spec[2]), float(spec[3]))
        sel_seeds, margin = (), 0.0
    claims = []
    for i, c in enumerate(_need(path, doc, "claims", list)):
        names = methods or arms
        ok = isinstance(c, dict) and c.get("rel") in RELATIONS and c.get("measure") in MEASURE_NAMES
        if not ok or c.get("a") not in names or c.get("b") not in names:
            raise DataFileError(path, f"claims[{i}]={c!r}: a, b of {sorted(names)}, rel one of {RELATIONS}, "
                                      f"measure one of {MEASURE_NAMES}", None, ADVICE)
        claims.append(Claim(c["a"], c["rel"], c["b"], c["measure"]))
    if test.get("correction") != "holm":
        raise DataFileError(path, f"test.correction={test.get('correction')!r}: holm is what the report applies",
                            None, ADVICE)
    return Plan(path, str(_need(path, doc, "family", str)), str(doc.get("title", doc["family"])),
                str(doc.get("paper", "")), _need(path, doc, "runs", str), methods, arms, sel_seeds, margin,
                _seeds(path, doc, "fresh_seeds"), int(_need(path, doc, "fresh_min", int)), tuple(claims),
                float(_need(path, test, "alpha", float, "test.")),
                float(_need(path, test, "equivalence_margin", (int, float), "test.")), committed_at(path),
                _need(path, doc, "iterations", int) if "iterations" in doc else None)


def load_all(directory: Path = PLAN_DIR) -> list[Plan]:
    """Every plan in ``directory`` (none when it does not exist), sorted by file name."""
    return [load(p) for p in sorted(Path(directory).glob("*.yaml"))] if Path(directory).is_dir() else []
