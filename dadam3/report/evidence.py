"""Selection and confirmation, and speed on the curves.

Each method's step size is chosen on the selection seeds (:data:`SELECTION`) only: the cell with
the lowest mean final FID among cells where no selection seed diverged (:func:`select`), and the
grid *brackets* it when a tried, worse step size lies on each side. A claim is then judged on the
fresh seeds (:data:`FRESH`) at the chosen cells, with :func:`dadam3.report.stats.verdict`, once
both sides have at least :data:`FRESH_MIN` finished fresh seeds in common; until then it is "not
resolved (awaiting fresh seeds)" and the selection seeds' paired numbers are shown, labelled as
selection. Legacy runs (no config or no provenance, :attr:`Run.legacy`) may take part in the
selection, never in a verdict.

Two measures, both lower-is-better and paired by seed: the final FID (node mean), and the mean
FID over the run (the area under the FID curve, trapezoids over the evaluations, divided by the
iterations it spans): the "more quickly" measure. Beside it, the first evaluation where the FID
fell below each of :data:`THRESHOLDS`.
"""
from __future__ import annotations

from dataclasses import dataclass

from scipy.integrate import trapezoid

from dadam3.report.runs import LABEL, Run
from dadam3.report.stats import (UNRESOLVED, Cell, Paired, best_cells, cells_of, fmt, lr_text, paired, seed_text,
                                 verdict)

SELECTION = (0, 1, 2)
FRESH = (3, 4, 5, 6, 7)
FRESH_MIN = 5
THRESHOLDS = (300.0, 200.0, 150.0)           # FID (node mean), stated before any curve was read


def final_fid(run: Run) -> float | None:
    return run.final("fid_mean")


def curve_mean(run: Run, key: str = "fid_mean") -> float | None:
    """The area under the run's ``key`` curve (FID, node mean) divided by the iterations it spans."""
    series = run.series(key)
    ks = sorted(series)
    if len(ks) < 2:
        return None
    return float(trapezoid([series[k] for k in ks], ks)) / (ks[-1] - ks[0])


MEASURES = {"final": ("final FID (node mean)", final_fid),
            "speed": ("mean FID over the run (area under the FID curve / iterations)", curve_mean)}


def first_below(run: Run, threshold: float) -> int | None:
    """The first evaluated iteration with FID (node mean) below ``threshold``; None: never."""
    return next((k for k, v in sorted(run.series("fid_mean").items()) if v < threshold), None)


@dataclass
class Selection:
    """A method's cells on the selection seeds, the chosen one and whether the grid brackets it."""
    method: str
    cells: list[Cell]
    chosen: Cell | None

    @property
    def bracketed(self) -> str:
        """``yes`` / ``no: …`` (a tried, worse step size on each side of the chosen one)."""
        if self.chosen is None:
            return "no step size chosen"
        best = self.chosen.stat("fid_mean")[0]

        def worse(c: Cell) -> bool:
            return bool(c.of("diverged")) or (c.eligible and c.stat("fid_mean")[0] > best)
        below = [c for c in self.cells if c.lr is not None and c.lr < self.chosen.lr and worse(c)]
        above = [c for c in self.cells if c.lr is not None and c.lr > self.chosen.lr and worse(c)]
        if below and above:
            return "yes"
        return "no: " + " and ".join(f"no worse step size tried {side}" for side, cs in
                                     (("below", below), ("above", above)) if not cs)


def select(runs: list[Run]) -> dict[str, Selection]:
    """Per method, its cells on the selection seeds and the chosen cell (:func:`best_cells`)."""
    cells = [c for c in cells_of([r for r in runs if r.seed in SELECTION])]
    best = best_cells(cells)
    return {m: Selection(m, [c for c in cells if c.method == m], best.get(m))
            for m in dict.fromkeys(c.method for c in cells)}


@dataclass
class Judged:
    """One claim on one measure: the verdict, the paired differences behind it and which runs."""
    claim: tuple[str, str, str]
    measure: str
    verdict: str
    paired: Paired | None
    stage: str                        # "fresh seeds" | "selection seeds" | "fixed step size"
    lrs: tuple[float | None, float | None]
    runs: list[Run]

    @property
    def name(self) -> str:
        a, rel, b = self.claim
        return f"{LABEL.get(a, a)} {rel} {LABEL.get(b, b)}"

    @property
    def effect(self) -> str:
        if self.paired is None:
            return "–"
        label = " (selection seeds, not a verdict)" if self.stage == "selection seeds" else ""
        return self.paired.text() + label


def _values(runs: list[Run], method: str, lr: float | None, seeds, measure: str, with_legacy: bool) -> dict:
    get = MEASURES[measure][1]
    return {r.seed: v for r in runs if r.method == method and r.lr == lr and r.seed in seeds
            and r.status == "finished" and (with_legacy or not r.legacy) and (v := get(r)) is not None}


def _used(runs: list[Run], claim, lrs, seeds) -> list[Run]:
    return [r for r in runs if (r.method, r.lr) in ((claim[0], lrs[0]), (claim[2], lrs[1])) and r.seed in seeds]


def judge(claim: tuple[str, str, str], runs: list[Run], chosen: dict[str, Selection], measure: str = "final") -> Judged:
    """``claim`` (a, "≫" or "≈", b) at the cells chosen on the selection seeds, judged on the fresh seeds."""
    a, rel, b = claim
    la, lb = LABEL.get(a, a), LABEL.get(b, b)
    ca, cb = (chosen[m].chosen if m in chosen else None for m in (a, b))
    if ca is None or cb is None:
        return Judged(claim, measure, f"{UNRESOLVED} (no step size chosen for "
                      f"{' and '.join(lab for lab, c in ((la, ca), (lb, cb)) if c is None)})", None,
                      "selection seeds", (ca and ca.lr, cb and cb.lr), [])
    lrs = (ca.lr, cb.lr)
    fa, fb = (_values(runs, m, lr, FRESH, measure, False) for m, lr in ((a, ca.lr), (b, cb.lr)))
    common = set(fa) & set(fb)
    if len(common) >= FRESH_MIN:
        p = paired(fa, fb)
        return Judged(claim, measure, verdict(rel, p, la, lb), p, "fresh seeds", lrs, _used(runs, claim, lrs, common))
    sa, sb = (_values(runs, m, lr, SELECTION, measure, True) for m, lr in ((a, ca.lr), (b, cb.lr)))
    p = paired(sa, sb)
    said = f"; the rule on the selection seeds alone: {verdict(rel, p, la, lb)}" if p is not None else ""
    return Judged(claim, measure, f"{UNRESOLVED} (awaiting fresh seeds: {len(common)} of {FRESH_MIN} paired{said})",
                  p, "selection seeds", lrs, _used(runs, claim, lrs, set(sa) & set(sb)))


def judge_fixed(claim: tuple[str, str, str], runs: list[Run], measure: str = "final") -> Judged:
    """``claim`` at one step size fixed in advance (a preset's): every seed both ran, legacy runs out."""
    a, rel, b = claim
    lr = {r.method: r.lr for r in runs}
    fa, fb = (_values(runs, m, lr.get(m), {r.seed for r in runs}, measure, False) for m in (a, b))
    p = paired(fa, fb)
    legacy = any(r.legacy for r in runs if r.method in (a, b))
    v = (f"{UNRESOLVED} (legacy runs, provenance unknown, left out)" if p is None and legacy
         else verdict(rel, p, LABEL.get(a, a), LABEL.get(b, b)))
    lrs = (lr.get(a), lr.get(b))
    return Judged(claim, measure, v, p, "fixed step size", lrs, _used(runs, claim, lrs, set(fa) & set(fb)))


def judged_table(judged: list[Judged]) -> list[str]:
    """One row per claim and measure: step sizes, stage, effect (mean [95 % interval], n), verdict."""
    lines = ["| claim | measure | step sizes | seeds | paired difference a − b, mean [95 % interval] | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for j in judged:
        lines.append(f"| {j.name} | {MEASURES[j.measure][0]} | {lr_text(j.lrs[0])} vs {lr_text(j.lrs[1])} | "
                     f"{j.stage} | {j.effect} | {j.verdict} |")
    return lines + [""]


def selection_table(selections: dict[str, Selection], runs: list[Run]) -> list[str]:
    """Per method: the chosen step size, its selection-seed FID, whether the grid brackets it, and
    how many fresh seeds at the chosen cell have finished (with config and provenance)."""
    lines = [f"| method | step sizes tried (seeds {seed_text(SELECTION)}) | chosen step size | final FID there "
             f"(selection seeds) | bracketed | fresh seeds finished there ({seed_text(FRESH)}) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for m, s in selections.items():
        tried = ", ".join(lr_text(c.lr) for c in s.cells)
        c = s.chosen
        fresh = "–" if c is None else str(len(_values(runs, m, c.lr, FRESH, "final", False)))
        lines.append(f"| {LABEL.get(m, m)} | {tried} | {lr_text(c.lr) if c else 'none'} | "
                     f"{fmt(c.stat('fid_mean'), 'fid_mean') if c else '–'} | {s.bracketed} | {fresh} |")
    return lines + [""]


def inherited_table(selections: dict[str, Selection], runs: list[Run]) -> list[str]:
    """Per method: the step size the main sweep chose (and whether its grid brackets it), and the
    seeds run here at it, selection and fresh apart."""
    lines = ["| method | step size (chosen on the main sweep) | bracketed there | seeds finished here |",
             "| --- | --- | --- | --- |"]
    for m, s in selections.items():
        done = {r.seed for r in runs if r.method == m and r.lr == s.chosen.lr and r.status == "finished"}
        parts = [f"{label} {seed_text(done & set(group))}" for label, group in (("selection", SELECTION),
                                                                                ("fresh", FRESH)) if done & set(group)]
        lines.append(f"| {LABEL.get(m, m)} | {lr_text(s.chosen.lr)} | {s.bracketed} | {'; '.join(parts) or 'none'} |")
    return lines + [""]


def thresholds_table(selections: dict[str, Selection], runs: list[Run]) -> list[str]:
    """Per method at its chosen cell (fresh seeds if any finished, else the selection seeds): the
    mean first iteration below each FID threshold over the seeds that reached it, and how many did."""
    head = [f"FID < {t:g}" for t in THRESHOLDS]
    lines = ["| method | step size | seeds | " + " | ".join(head) + " |", "|" + " --- |" * (3 + len(head))]
    for m, s in selections.items():
        if s.chosen is None:
            continue
        mine = [r for r in runs if r.method == m and r.lr == s.chosen.lr and r.status == "finished"]
        fresh = [r for r in mine if r.seed in FRESH and not r.legacy]
        use, stage = (fresh, "fresh") if fresh else ([r for r in mine if r.seed in SELECTION], "selection")
        if not use:
            continue
        cols = []
        for t in THRESHOLDS:
            hit = [k for r in use if (k := first_below(r, t)) is not None]
            cols.append(f"{sum(hit) / len(hit):.0f} ({len(hit)} of {len(use)})" if hit else f"never (0 of {len(use)})")
        lines.append(f"| {LABEL.get(m, m)} | {lr_text(s.chosen.lr)} | {stage} {seed_text({r.seed for r in use})} | "
                     + " | ".join(cols) + " |")
    return lines + ["", "Each entry: the mean first evaluated iteration at which the FID (node mean) fell below the "
                        "threshold, over the seeds that reached it (how many of how many).", ""]


def threshold_lines(judged: list[Judged]) -> list[str]:
    """For each "more quickly" claim, on the seeds its row used: per threshold, the paired
    difference of the first iterations below it (a − b, negative: a got there first) when both
    methods reached it on every seed, else how many seeds of each reached it."""
    lines = []
    for j in judged:
        if j.measure != "speed" or not j.runs:
            continue
        a, _, b = j.claim
        parts = []
        for t in THRESHOLDS:
            hit = {m: {r.seed: first_below(r, t) for r in j.runs if r.method == m and r.status == "finished"}
                   for m in (a, b)}
            n = {m: sum(k is not None for k in hit[m].values()) for m in (a, b)}
            if n[a] == len(hit[a]) and n[b] == len(hit[b]) and (p := paired(hit[a], hit[b])) is not None:
                parts.append(f"FID < {t:g}: {p.text('iterations')}")
            else:
                parts.append(f"FID < {t:g}: {LABEL.get(a, a)} reached it on {n[a]} of {len(hit[a])} seeds, "
                             f"{LABEL.get(b, b)} on {n[b]} of {len(hit[b])}")
        lines.append(f"- {j.name} ({j.stage}), first iteration below the threshold: " + "; ".join(parts))
    return lines + ([""] if lines else [])
