"""Cells (one method at one step size, its seeds), mean ± sample SD, the best step size, and the
one rule that turns two methods' runs into a verdict (:func:`paired` and :func:`verdict`).

The rule (stated once; the report's conventions and docs/experiments.md quote :data:`RULE`): a
claim compares two methods on the seeds both ran (same seed = same initialisation and data
stream); per seed the difference a − b of a measure where lower is better (final FID, mean FID
over the run); its mean and a 95 % t interval (``scipy.stats.ttest_rel``). "A ≫ B" *holds* when
the interval lies below 0, *does not hold* when it lies above 0 (the reverse), and is *not
resolved* when it contains 0. "A ≈ B" holds only when the whole interval lies inside ±:data:`MARGIN`
FID (stated before any run was scored), does not hold when it excludes 0 and leaves the margin,
and is not resolved otherwise.
"""
from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass

from scipy import stats as scipy_stats

from dadam3.report.multiplicity import CONTRADICTED, NOT_REPRODUCED, REPRODUCED, words
from dadam3.report.runs import LABEL, Run

ORDER = ("adam3", "oadagrad", "dadam3", "cadam3", "dosg", "cosg", "dp_oadam")
DIGITS = {"is": 2, "fid": 1, "kid": 2}


@dataclass
class Cell:
    """One method at one step size: its runs (seeds)."""
    method: str
    lr: float | None
    runs: list[Run]

    @property
    def label(self) -> str:
        return LABEL.get(self.method, self.method)

    def of(self, status: str) -> list[Run]:
        return [r for r in self.runs if r.status == status]

    def values(self, key: str) -> list[float]:
        """``key``'s final value of each finished run that has one."""
        return [v for r in self.of("finished") if (v := r.final(key)) is not None]

    def stat(self, key: str) -> tuple[float, float | None, int] | None:
        """(mean, sample SD (None for n = 1), n) over the finished runs."""
        vals = self.values(key)
        if not vals:
            return None
        return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else None), len(vals)

    @property
    def eligible(self) -> bool:
        """A candidate for the best step size: no seed diverged or failed, and one finished with a FID."""
        return not self.of("diverged") and not self.of("failed") and bool(self.values("fid_mean"))


def fmt(stat: tuple[float, float | None, int] | None, key: str, with_n: bool = True) -> str:
    """``mean ± SD (n = k)`` (``with_n``: the n part); ``–`` for no value."""
    if stat is None:
        return "–"
    mean, sd, n = stat
    d = DIGITS.get(key.split("_")[0], 3)
    return f"{mean:.{d}f}" + (f" ± {sd:.{d}f}" if sd is not None else "") + (f" (n = {n})" if with_n else "")


def lr_text(lr: float | None) -> str:
    return "unknown" if lr is None else f"{lr:g}"


def cells_of(runs: list[Run]) -> list[Cell]:
    """Runs grouped by (method, step size), in the paper's method order, then by step size."""
    groups: dict[tuple[str, float | None], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.method, run.lr), []).append(run)
    rank = {m: i for i, m in enumerate(ORDER)}
    keys = sorted(groups, key=lambda k: (rank.get(k[0], len(ORDER)), k[0], -1.0 if k[1] is None else k[1]))
    return [Cell(m, lr, sorted(groups[(m, lr)], key=lambda r: str(r.seed))) for m, lr in keys]


def best_cells(cells: list[Cell], key: str = "fid_mean") -> dict[str, Cell]:
    """Per method, the eligible cell with the lowest mean final ``key`` (ties: the smaller step size)."""
    best: dict[str, Cell] = {}
    for cell in cells:
        if not cell.eligible:
            continue
        current = best.get(cell.method)
        if current is None or cell.stat(key)[0] < current.stat(key)[0]:
            best[cell.method] = cell
    return best


MARGIN = 10.0               # FID: round 2's "equal" margin, set after its selection seeds were scored
LEVEL = 0.95
HOLDS, REVERSE, UNRESOLVED = REPRODUCED, CONTRADICTED, NOT_REPRODUCED     # multiplicity.WORDING's words
RULE = (f"its readings use the same words on the per-seed paired differences a − b (same seed = "
        f"same initialisation and data stream; lower is better): their mean and a {LEVEL:.0%} t interval "
        "(scipy.stats.ttest_rel). \"A ≫ B\" is *reproduced* when the interval lies below 0, *contradicted* when it "
        f"lies above 0, *not reproduced* when it contains 0; \"A ≈ B\" is reproduced only inside ±{MARGIN:g} FID, a "
        "margin set after round 2's selection seeds were scored, so every round-2 reading is post hoc.")


@dataclass(frozen=True)
class Paired:
    """Per-seed differences a − b of one measure, their mean and the 95 % t interval."""
    seeds: tuple
    diffs: tuple[float, ...]
    mean: float
    low: float
    high: float

    @property
    def n(self) -> int:
        return len(self.diffs)

    def text(self, unit: str = "FID") -> str:
        """``−12.3 FID [−20.1, −4.5], n = 5 (seeds 3–7)``."""
        return (f"{self.mean:+.1f} {unit} [{self.low:+.1f}, {self.high:+.1f}], n = {self.n} "
                f"(seeds {seed_text(self.seeds)})")


def seed_text(seeds) -> str:
    """``0–2`` for a run of consecutive seeds, else ``0, 2, 5``."""
    s = sorted(seeds, key=str)
    if len(s) > 2 and all(isinstance(x, int) for x in s) and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}–{s[-1]}"
    return ", ".join(map(str, s))


def paired(a: dict, b: dict) -> Paired | None:
    """The paired differences ``a[seed] − b[seed]`` over the seeds both have; None below 2 seeds."""
    seeds = tuple(sorted(set(a) & set(b), key=str))
    if len(seeds) < 2:
        return None
    xa, xb = [a[s] for s in seeds], [b[s] for s in seeds]
    diffs = tuple(x - y for x, y in zip(xa, xb))
    mean = statistics.fmean(diffs)
    if statistics.stdev(diffs) == 0.0:          # identical differences: the interval is the point
        return Paired(seeds, diffs, mean, mean, mean)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = scipy_stats.ttest_rel(xa, xb).confidence_interval(LEVEL)
    return Paired(seeds, diffs, mean, float(ci.low), float(ci.high))


def verdict(relation: str, p: Paired | None, a: str = "A", b: str = "B") -> str:
    """The rule (:data:`RULE`) for "a ≫ b" or "a ≈ b" on the paired differences ``p``."""
    if p is None:
        return f"{UNRESOLVED} (fewer than 2 paired seeds)"
    said = words(relation, p, MARGIN)
    if said == REVERSE:
        return f"{REVERSE} ({b if relation == '≫' or p.low > 0 else a} better)"
    return f"{HOLDS} (equal within ±{MARGIN:g} FID)" if said == HOLDS and relation == "≈" else said
