"""The analysis plans (``docs/analysis_plan/*.yaml``): the claims, grids, seeds, margins and
correction of a claim family, committed before the runs they govern, read and checked here; and
the time of each plan's last commit (``git log -1 --format=%cI``), against which a run's start
makes its verdict post hoc. A plan the report cannot use is one line naming the file and key."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from dadam3.errors.files import DataFileError
from dadam3.report import read

PLAN_DIR = Path(__file__).resolve().parents[2] / "docs" / "analysis_plan"     # the checkout's plans
RELATIONS = ("≫", "≈")
MEASURE_NAMES = ("final", "speed")
FLAT = ("both", "chosen")
MATCH_RULES = ("lowest_mean_of_both",)
ADVICE = "the plan is committed before its runs: restore it from git (an edit makes every verdict post hoc)"


@dataclass(frozen=True)
class Claim:
    a: str
    rel: str
    b: str
    measure: str
    at: str | None = None              # a ``matched`` rule's name: both sides at its one step size
    sd: float | None = None            # the planning SD of its paired differences (``power``'s otherwise)
    effect: float | None = None        # the smallest effect it names ("≫"; ``power``'s otherwise)


@dataclass(frozen=True)
class Method:
    """A searched (or inherited) unit of a plan: ``optimizer`` on ``data`` shards in ``setting`` (the
    plan's ``data`` and ``settings`` overrides; none: the plan's own), at the step size its search over
    ``grid`` from ``start`` chooses, or at the one the search of method ``inherit`` chose; ``fresh``:
    how many of the plan's fresh seeds it runs (None: all), ``fresh_min``: how many of them a claim
    needs finished on both sides (None: the plan's)."""
    grid: tuple[float, ...]
    start: float | None
    optimizer: str
    data: str | None = None
    setting: str | None = None
    inherit: str | None = None
    fresh: int | None = None
    fresh_min: int | None = None


@dataclass(frozen=True)
class Ties:
    """How the search decides ties (round 4's plans say so; round 3's compared the exact numbers):
    means and gaps rounded to ``rounding`` FID before comparing, equal means -> the smaller step size,
    a gap equal to the bracket margin counts as worse (bracketed)."""
    rounding: float | None = None

    def value(self, x: float) -> float:
        return x if self.rounding is None else round(round(x / self.rounding) * self.rounding, 10)


@dataclass(frozen=True)
class Power:
    """The power calculation a plan's n came from: the planning SD of the paired differences, the
    smallest effect for "≫" claims (the equivalence margin for "≈"), the target power."""
    sd: float
    effect: float
    target: float


@dataclass(frozen=True)
class Plan:
    """One claim family's plan. ``methods``: name -> :class:`Method` (a step-size search, or a step
    size inherited from one); ``arms``: name -> (data, setting, method, lr) (fixed step sizes, no
    search). Round 4's plans add the search's ``ties`` and ``flat`` rules, ``matched`` step sizes
    (name -> the methods judged at one common cell), the ``trains`` rule (untrained FID, fraction),
    ``seen_seeds`` and the ``power`` calculation."""
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
    round: int = 3
    ties: Ties = Ties()
    flat: str = "both"                 # a flat neighbour: judged too ("both", round 3) or only named ("chosen")
    matched: dict = field(default_factory=dict)       # name -> the methods judged at one common cell
    trains: tuple[float, float] | None = None         # (untrained generator's FID, fraction)
    seen_seeds: tuple[int, ...] | None = None
    power: Power | None = None
    experiment: str | None = None

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


def _number(path: Path, node: dict, key: str, where: str = "", positive: bool = True) -> float:
    value = float(_need(path, node, key, (int, float), where))
    if positive and not value > 0:
        raise DataFileError(path, f"{where}{key}={value!r}: a number > 0 belongs here", None, ADVICE)
    return value


def _method(path: Path, name: str, spec, doc: dict) -> Method:
    """``methods.<name>``: {grid, start} (round 3), with optional optimizer, data, setting; or
    {inherit, ...} (the step size another method's search chose); optional fresh, fresh_min."""
    where = f"methods.{name}."
    if not isinstance(spec, dict):
        raise DataFileError(path, f"methods.{name}={spec!r}: a mapping (grid, start or inherit) belongs here", None,
                            ADVICE)
    data = spec.get("data")
    setting = spec.get("setting")
    for key, value, table in (("data", data, "data"), ("setting", setting, "settings")):
        if value is not None and value not in (doc.get(table) or {}):
            raise DataFileError(path, f"{where}{key}={value!r}: not a key of {table} "
                                      f"(allowed: {', '.join(doc.get(table) or {}) or 'none'})", None, ADVICE)
    counts = {}
    for key in ("fresh", "fresh_min"):
        if key in spec:
            counts[key] = int(_need(path, spec, key, int, where))
    optimizer = str(spec.get("optimizer", name))
    if "inherit" in spec:
        return Method((), None, optimizer, data, setting, str(spec["inherit"]), **counts)
    grid = tuple(float(x) for x in _need(path, spec, "grid", list, where))
    start = float(_need(path, spec, "start", (int, float), where))
    if start not in grid or list(grid) != sorted(set(grid)):
        raise DataFileError(path, f"methods.{name}: the grid must be increasing and hold start={start:g}",
                            None, ADVICE)
    return Method(grid, start, optimizer, data, setting, None, **counts)


def _round4(path: Path, doc: dict, selection: dict, methods: dict, claims: list) -> dict:
    """The keys round 4's plans add (``round: 4``): ties, flat, matched, trains, seen_seeds, power."""
    out: dict = {"round": int(_need(path, doc, "round", int))}
    if out["round"] < 4:
        return out
    ties = _need(path, selection, "ties", dict, "selection.")
    if ties.get("equal_means") != "smaller_step" or ties.get("gap_at_margin") != "worse":
        raise DataFileError(path, f"selection.ties={ties!r}: equal_means: smaller_step and gap_at_margin: worse are "
                                  "the rules the report applies", None, ADVICE)
    out["ties"] = Ties(_number(path, ties, "rounding", "selection.ties."))
    flat = selection.get("flat")
    if flat not in FLAT:
        raise DataFileError(path, f"selection.flat={flat!r}: one of {', '.join(FLAT)}", None, ADVICE)
    out["flat"] = flat
    for name, spec in (doc.get("matched") or {}).items():
        both = spec.get("methods") if isinstance(spec, dict) else None
        if not (isinstance(both, list) and len(both) == 2 and all(m in methods and methods[m].grid for m in both)
                and spec.get("rule") in MATCH_RULES):
            raise DataFileError(path, f"matched.{name}={spec!r}: methods: two searched methods, rule one of "
                                      f"{', '.join(MATCH_RULES)}", None, ADVICE)
        out.setdefault("matched", {})[name] = tuple(both)
    for c in claims:
        if c.at is not None and (c.at not in out.get("matched", {}) or {c.a, c.b} != set(out["matched"][c.at])):
            raise DataFileError(path, f"claim {c.a} {c.rel} {c.b} at {c.at}: at names a matched rule of both methods",
                                None, ADVICE)
    trains = _need(path, doc, "trains", dict)
    out["trains"] = (_number(path, trains, "untrained_fid", "trains."), _number(path, trains, "fraction", "trains."))
    out["seen_seeds"] = tuple(_need(path, doc, "seen_seeds", list))
    power = _need(path, doc, "power", dict)
    out["power"] = Power(_number(path, power, "sd", "power."), _number(path, power, "effect", "power."),
                         _number(path, power, "target", "power."))
    return out


def load(path: Path) -> Plan:
    """The plan in ``path``, checked."""
    doc = read.yaml_file(path, {})
    if not isinstance(doc, dict):
        raise DataFileError(path, "holds a list where the plan's mapping belongs", None, ADVICE)
    test = _need(path, doc, "test", dict)
    methods, arms, selection = {}, {}, {}
    if "methods" in doc:
        for name, spec in _need(path, doc, "methods", dict).items():
            methods[name] = _method(path, name, spec, doc)
        for name, m in methods.items():
            searched = [k for k, v in methods.items() if v.grid]
            if m.inherit is not None and m.inherit not in searched:
                raise DataFileError(path, f"methods.{name}.inherit={m.inherit!r}: a searched method of this plan "
                                          f"belongs here (allowed: {', '.join(searched)})", None, ADVICE)
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
        extra = {k: _number(path, c, k, f"claims[{i}].") for k in ("sd", "effect") if k in c}
        claims.append(Claim(c["a"], c["rel"], c["b"], c["measure"], c.get("at"), **extra))
    if test.get("correction") != "holm":
        raise DataFileError(path, f"test.correction={test.get('correction')!r}: holm is what the report applies",
                            None, ADVICE)
    later = _round4(path, doc, selection, methods, claims) if "round" in doc else {}
    return Plan(path, str(_need(path, doc, "family", str)), str(doc.get("title", doc["family"])),
                str(doc.get("paper", "")), _need(path, doc, "runs", str), methods, arms, sel_seeds, margin,
                _seeds(path, doc, "fresh_seeds"), int(_need(path, doc, "fresh_min", int)), tuple(claims),
                float(_need(path, test, "alpha", float, "test.")),
                float(_need(path, test, "equivalence_margin", (int, float), "test.")), committed_at(path),
                _need(path, doc, "iterations", int) if "iterations" in doc else None,
                experiment=str(doc["experiment"]) if "experiment" in doc else None, **later)


def load_all(directory: Path = PLAN_DIR) -> list[Plan]:
    """Every plan in ``directory`` (none when it does not exist), sorted by file name."""
    return [load(p) for p in sorted(Path(directory).glob("*.yaml"))] if Path(directory).is_dir() else []
