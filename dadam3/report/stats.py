"""Cells (one method at one step size, its seeds), mean ± sample SD, the best step size, and the
verdict of a claim "A ≫ B" / "A ≈ B" computed from the numbers.

Two cells are **separated** when both have n ≥ 2 finished seeds and their means differ by more than
the sum of their sample SDs; "A ≫ B" holds when A is separated from B and better (lower final FID),
"A ≈ B" when they are not separated; with n < 2 on either side a claim is not settled.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

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
        """A candidate for the best step size: no seed diverged and one finished with a FID."""
        return not self.of("diverged") and bool(self.values("fid_mean"))


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


def separation(a: Cell, b: Cell, key: str = "fid_mean") -> str:
    """``better`` / ``worse`` (a than b, separated; lower is better), ``not separated``, ``not settled``."""
    sa, sb = a.stat(key), b.stat(key)
    if sa is None or sb is None or sa[2] < 2 or sb[2] < 2:
        return "not settled"
    if abs(sa[0] - sb[0]) <= sa[1] + sb[1]:
        return "not separated"
    return "better" if sa[0] < sb[0] else "worse"


def claim_verdicts(claims: list[tuple[str, str, str]], cells: dict[str, Cell], key: str = "fid_mean") -> list[str]:
    """One phrase per claim (a, relation "≫" or "≈", b) present in ``cells``: holds / does not hold /
    not settled, with the reason."""
    out = []
    for a, rel, b in claims:
        if a not in cells or b not in cells:
            continue
        sep = separation(cells[a], cells[b], key)
        name = f"{LABEL[a]} {rel} {LABEL[b]}"
        if sep == "not settled":
            out.append(f"{name}: not settled (fewer than 2 finished seeds)")
        elif rel == "≫":
            out.append(f"{name}: " + {"better": "holds", "worse": "does not hold (the reverse, separated)",
                                      "not separated": "does not hold (not separated)"}[sep])
        else:
            out.append(f"{name}: " + ("holds (not separated)" if sep == "not separated" else
                                      f"does not hold ({LABEL[a] if sep == 'better' else LABEL[b]} better, separated)"))
    return out
