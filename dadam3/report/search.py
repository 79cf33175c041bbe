"""A plan's step-size search (:mod:`dadam3.report.plan`): the cells it tries on the selection seeds,
extended while the best is at an edge of the tried cells, its choice (ties and flat neighbours as the
plan says) and its bracket; and a ``matched`` rule's one step size for two methods."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from dadam3.report.plan import Plan

PRIMARY, SECOND = "fid_mean", "fid_mean_fmnist_mlp"
DONE = ("finished", "diverged", "failed")


def lr_folder(lr: float) -> str:
    """A step size spelled as its folder: 8e-4, 1.6e-3, 2.56e-2."""
    mantissa, exponent = f"{lr:.6e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def unit_name(method: str, lr: float) -> str:
    return f"{method}@{lr_folder(lr)}"



@dataclass
class Selection:
    """A method's search: the cells it tried, what is missing, the choice and its bracket."""
    method: str
    tried: list[float]
    missing: list[tuple[float, list[int], list[int]]] = field(default_factory=list)   # lr, to run, unfinished
    chosen: float | None = None
    judged_at: list[float] = field(default_factory=list)
    bracket: str = ""


def _mean_final(cell: dict, seeds) -> float:
    return statistics.fmean(cell[s].final(PRIMARY) for s in seeds)


def search(plan: Plan, method: str, units: dict) -> Selection:
    """The plan's search rule for ``method`` and its choice (lowest mean final FID over the
    selection seeds among tried cells where no selection seed diverged or failed)."""
    grid, start = plan.methods[method].grid, plan.methods[method].start
    seeds, ties = plan.selection_seeds, plan.ties
    i0 = grid.index(start)
    tried = set(range(max(0, i0 - 1), min(len(grid), i0 + 2)))
    while True:
        sel = Selection(method, [grid[i] for i in sorted(tried)])
        for i in sorted(tried):
            cell = units.get(unit_name(method, grid[i]), {})
            absent = [s for s in seeds if s not in cell]
            running = [s for s in seeds if s in cell and cell[s].status not in DONE]
            if absent or running:
                sel.missing.append((grid[i], absent, running))
        if sel.missing:
            return sel
        cells = {i: units[unit_name(method, grid[i])] for i in tried}
        ok = [i for i, c in cells.items() if all(c[s].status == "finished" and c[s].final(PRIMARY) is not None
                                                 for s in seeds)]
        if not ok:
            sel.bracket = "no cell chosen: every tried cell has a diverged or failed selection seed"
            return sel
        best = min(ok, key=lambda i: (ties.value(_mean_final(cells[i], seeds)), grid[i]))
        lo, hi = min(tried), max(tried)
        if best == lo and lo > 0:
            tried.add(lo - 1)
        elif best == hi and hi < len(grid) - 1:
            tried.add(hi + 1)
        else:
            break
    sel.chosen, sel.judged_at = grid[best], [grid[best]]
    sides = []
    for side, j in (("below", best - 1), ("above", best + 1)):
        if j < 0 or j >= len(grid):
            sides.append(f"{side}: the grid's edge")
            continue
        nb, ch = cells[j], cells[best]
        if j not in ok:
            sides.append(f"{side}: {lr_folder(grid[j])} diverged or failed on a selection seed")
            continue
        gap = ties.value(statistics.fmean(nb[s].final(PRIMARY) - ch[s].final(PRIMARY) for s in seeds))
        if gap >= plan.bracket_margin:
            sides.append(f"{side}: {lr_folder(grid[j])} worse by {gap:+.1f}")
        else:
            sides.append(f"{side}: flat between {lr_folder(grid[best])} and {lr_folder(grid[j])} "
                         f"({gap:+.1f} < {plan.bracket_margin:g})")
            if plan.flat == "both":
                sel.judged_at.append(grid[j])
    if len(sel.judged_at) > 1:
        word = "flat: judged at " + " and ".join(map(lr_folder, sel.judged_at))
    elif any("flat" in x for x in sides):
        word = "flat: judged at the chosen cell only (the plan's flat rule)"
    else:
        word = "not bracketed: at the grid's edge" if any("edge" in x for x in sides) else "bracketed"
    sel.bracket = f"{word} ({'; '.join(sides)})"
    return sel


def matched_cell(plan: Plan, name: str, units: dict, selections: dict[str, Selection]) -> float | None:
    """The step size of ``plan.matched[name]`` (its rule ``lowest_mean_of_both``): among the grid cells
    both searches tried, with every selection seed finished for both, the lowest mean of the two methods'
    mean final FIDs (ties as the plan says: the smaller step size); None until both searches are done."""
    a, b = plan.matched[name]
    if selections[a].chosen is None or selections[b].chosen is None:
        return None
    seeds = plan.selection_seeds

    def finished(method: str, lr: float) -> dict | None:
        cell = units.get(unit_name(method, lr), {})
        ok = all(s in cell and cell[s].status == "finished" and cell[s].final(PRIMARY) is not None for s in seeds)
        return cell if ok else None
    both = [lr for lr in selections[a].tried if lr in selections[b].tried
            and finished(a, lr) is not None and finished(b, lr) is not None]
    if not both:
        return None
    return min(both, key=lambda lr: (plan.ties.value((_mean_final(finished(a, lr), seeds)
                                                      + _mean_final(finished(b, lr), seeds)) / 2.0), lr))
