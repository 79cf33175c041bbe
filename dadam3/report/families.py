"""A plan's claim family from its runs (:mod:`dadam3.report.plan`): the step-size search's choices
(:mod:`dadam3.report.search`) and the cells each claim is judged at, the runs still to make,
the environment rules (:mod:`dadam3.report.environments`), the post hoc label, and
each claim judged under both scorers with Holm over the family (:mod:`dadam3.report.multiplicity`).

A *unit* is what a claim names: a method at a step size (fig2/fig3: ``method@lr``) or an arm of a
plan without search (heterogeneous). Statuses: a run is *done* when finished, diverged or failed;
a diverged or failed selection seed rules its cell out; a fresh seed that is not finished on both
sides is named beside the claim and left out of its interval.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from dadam3.report import multiplicity as mt
from dadam3.report.environments import commits_text, environment, machine_class
from dadam3.report.evidence import curve_mean
from dadam3.report.plan import Claim, Plan, parse_time
from dadam3.report.power import claim_power
from dadam3.report.search import DONE, PRIMARY, SECOND, Selection, lr_folder, matched_cell, search, unit_name
from dadam3.report.runs import LABEL, Run, method_runs, seed_dirs, load_run
from dadam3.report.seen import seen_seeds, seen_text
from dadam3.report.stats import Paired, paired
from dadam3.report.trains import not_training, rule_of


def seeds_text(seeds) -> str:
    """Seeds for the queue, ASCII: ``seed 2``, ``seeds 0-2`` for consecutive ones, else ``seeds 0,2,5``."""
    s = sorted(seeds)
    if len(s) <= 1:
        return f"seed {s[0]}" if s else "no seed"
    return "seeds " + (f"{s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) else ",".join(map(str, s)))


def measure(run: Run, name: str, key: str) -> float | None:
    """The claim's measure of ``run``: final ``key``, or its mean over the run (``speed``)."""
    return run.final(key) if name == "final" else curve_mean(run, key)


@dataclass
class Outcome:
    paired: Paired
    verdict: str
    wins: int
    p: float


@dataclass
class Row:
    """One claim at one pair of units."""
    claim: Claim
    units: tuple[str, str]
    state: str                         # "judged" or why not
    primary: Outcome | None = None
    second: Outcome | None = None
    left_out: list[str] = field(default_factory=list)
    classes: dict = field(default_factory=dict)          # device model -> fresh seeds
    by_class: str = ""
    post_hoc: str = ""
    commits: str = ""
    holm: str = ""
    holm_p: float | None = None
    testable: bool = True              # False: a side does not train (round 4: no verdict)
    note: str = ""                     # an older plan's row: a side that does not train, named
    power: float | None = None         # at the judged n, the plan's SD and smallest effect, alpha / rows
    planned_power: tuple[float, int] | None = None      # (power, n) at the plan's n
    observed_power: tuple[float, float] | None = None   # (power, SD) at the judged n and the observed paired SD


@dataclass
class Family:
    plan: Plan
    runs: list[Run]
    units: dict                        # unit -> {seed: Run}
    selections: dict[str, Selection]
    queue: list[str]
    environment: str
    rows: list[Row]
    excluded: list[str]
    todo: dict[int, list[str]] = field(default_factory=dict)     # seed -> units to run or resume, plan order
    seen: str = ""                     # the plan's seeds with committed runs of the same figure (seen.seen_text)


def unit_label(plan: Plan, unit: str) -> str:
    if unit in plan.arms or "@" not in unit:
        return LABEL.get(unit, unit)
    method, lr = unit.split("@")
    return f"{LABEL.get(method, method)} @ {lr}"


def arm_folder(plan: Plan, arm: str) -> str:
    """An arm's run folder below the plan's: ``<data>/<setting>/lr<LR>/<method>``."""
    data, setting, method, lr = plan.arms[arm]
    return f"{data}/{setting}/lr{lr_folder(lr)}/{method}"


def _load(root: Path, plan: Plan) -> tuple[dict, list[str]]:
    """unit -> {seed: Run} under the plan's folder, and the runs outside its grid (excluded)."""
    folder, units, excluded = plan.folder(root), {}, []

    def planned(run: Run) -> bool:
        if plan.iterations is None or run.target in (None, plan.iterations):
            return True
        excluded.append(f"`{run.rel}`: configured for {run.target} iterations, the plan's are {plan.iterations}")
        return False
    if plan.arms:
        for name, (_, _, method, _) in plan.arms.items():
            d = folder / arm_folder(plan, name)
            found = [load_run(root, p, method, s) for s, p in seed_dirs(d)] if d.is_dir() else []
            units[name] = {r.seed: r for r in found if planned(r)}
        return units, excluded
    for where, names in method_folders(plan).items():
        for lr_dir in sorted((folder / where).glob("lr*")) if (folder / where).is_dir() else []:
            for run in filter(planned, method_runs(root, lr_dir)):
                name = names.get(run.method)
                grid = method_grid(plan, name) if name is not None else ()
                if run.lr is None or not any(abs(run.lr - g) <= 1e-9 * g for g in grid):
                    excluded.append(f"`{run.rel}`: outside the plan's methods and grids")
                    continue
                units.setdefault(unit_name(name, next(g for g in grid if abs(run.lr - g) <= 1e-9 * g)),
                                 {})[run.seed] = run
    return units, excluded


def method_folders(plan: Plan) -> dict[str, dict[str, str]]:
    """The plan's method folders: ``<data>/<setting>`` (``.`` for the plan's own data and setting)
    -> {optimizer (the folder below ``lr<LR>``): method name}."""
    out: dict[str, dict[str, str]] = {}
    for name, m in plan.methods.items():
        where = f"{m.data}/{m.setting}" if m.data is not None else "."
        out.setdefault(where, {})[m.optimizer] = name
    return out


def method_grid(plan: Plan, name: str) -> tuple[float, ...]:
    """The step sizes a method's runs may have: its grid, or that of the method it inherits from."""
    m = plan.methods[name]
    return plan.methods[m.inherit].grid if m.inherit is not None else m.grid


def fresh_of(plan: Plan, name: str) -> tuple[tuple[int, ...], int]:
    """(the fresh seeds a plan's method or arm runs, how many a claim needs finished on both sides)."""
    m = plan.methods.get(name)
    if m is None or m.fresh is None:
        return plan.fresh_seeds, plan.fresh_min
    return plan.fresh_seeds[:m.fresh], m.fresh_min if m.fresh_min is not None else plan.fresh_min


def post_hoc(plan: Plan, runs: list[Run]) -> str:
    """"" when every run started after the plan's last commit; else why the verdict is post hoc."""
    if plan.committed is None:
        return "post hoc (plan time unknown)"
    starts = [parse_time(r.provenance[0].get("started")) if r.provenance else None for r in runs]
    unknown = sum(t is None for t in starts)
    early = sum(t is not None and t < plan.committed for t in starts)
    if not unknown and not early:
        return ""
    parts = [f"{early} of {len(runs)} runs started before the plan's last commit ({plan.time_text})"] * bool(early)
    parts += [f"{unknown} of {len(runs)} runs without a start time"] * bool(unknown)
    return "post hoc (" + "; ".join(parts) + ")"


def _outcome(claim: Claim, plan: Plan, ra: dict, rb: dict, seeds, key: str, needed: int) -> Outcome | None:
    va = {s: v for s in seeds if (v := measure(ra[s], claim.measure, key)) is not None}
    vb = {s: v for s in seeds if (v := measure(rb[s], claim.measure, key)) is not None}
    p = paired(va, vb)
    if p is None or p.n < needed:
        return None
    return Outcome(p, mt.words(claim.rel, p, plan.margin), mt.wins(claim.rel, p.diffs, plan.margin),
                   mt.holm_p(claim.rel, p, plan.margin))


def bymachine_class(claim: Claim, plan: Plan, out: Outcome, classes: dict) -> str:
    """With fresh seeds on two or more machine classes: the effect on each class's seeds and
    whether its sign differs from the whole's."""
    if len(classes) < 2:
        return ""
    diffs = dict(zip(out.paired.seeds, out.paired.diffs))
    parts, flips = [], []
    for cls, seeds in sorted(classes.items()):
        d = [diffs[s] for s in seeds if s in diffs]
        if not d:
            continue
        mean = statistics.fmean(d)
        parts.append(f"{cls}: {mean:+.1f} (n = {len(d)})")
        if (mean < 0) != (out.paired.mean < 0):
            flips.append(cls)
    return "; ".join(parts) + (f"; the direction changes on {', '.join(flips)}" if flips
                               else "; the direction is the same on every class")


def judge_row(plan: Plan, claim: Claim, ua: str, ub: str, units: dict, env: str, extra: list[Run]) -> Row:
    row = Row(claim, (ua, ub), "judged")
    ra, rb = units.get(ua, {}), units.get(ub, {})
    (seeds_a, min_a), (seeds_b, min_b) = fresh_of(plan, ua.split("@")[0]), fresh_of(plan, ub.split("@")[0])
    fresh = [s for s in seeds_a if s in seeds_b and s in ra and s in rb]
    needed = min(min_a, min_b)
    both = [s for s in fresh if ra[s].status == "finished" and rb[s].status == "finished"]
    row.left_out = [f"seed {s}: {unit_label(plan, u)} {r[s].status_text()}" for s in fresh if s not in both
                    for u, r in ((ua, ra), (ub, rb)) if r[s].status != "finished"]
    used = [r[s] for s in both for r in (ra, rb)]
    for s in both:
        row.classes.setdefault(machine_class(ra[s]), []).append(s)
    row.post_hoc = post_hoc(plan, used + extra)
    row.commits = commits_text(used + extra)
    if env:
        row.state = f"not judged (mixed environments: {env})"
        return row
    row.primary = _outcome(claim, plan, ra, rb, both, PRIMARY, needed)
    if row.primary is None:
        row.state = f"awaiting runs ({len(both)} of {needed} fresh seeds finished on both sides)"
        return row
    row.second = _outcome(claim, plan, ra, rb, both, SECOND, needed)
    row.by_class = bymachine_class(claim, plan, row.primary, row.classes)
    return row


def claim_cells(plan: Plan, claim: Claim, cells: dict, matched: dict) -> tuple[list[str], list[str]]:
    """The units a claim is judged at: each side's chosen cells, or both at its matched step size."""
    if claim.at is None:
        return cells.get(claim.a, []), cells.get(claim.b, [])
    lr = matched.get(claim.at)
    return ([unit_name(claim.a, lr)], [unit_name(claim.b, lr)]) if lr is not None else ([], [])


def build(root: Path, plan: Plan) -> Family:
    """The family of ``plan`` from the runs under the results folder ``root``."""
    units, excluded = _load(root, plan)
    queue: list[str] = []
    todo: dict[int, list[str]] = {}
    selections = {m: search(plan, m, units) for m, spec in plan.methods.items() if spec.grid}
    cells: dict[str, list[str]] = {}
    sel_runs: list[tuple[str, Run]] = []
    for m, sel in selections.items():
        for lr, absent, running in sel.missing:
            queue += [f"selection not finished: run {m}@{lr_folder(lr)} on {seeds_text(absent)}"] * bool(absent)
            queue += [f"selection not finished: wait for or resume {m}@{lr_folder(lr)} "
                      f"{seeds_text(running)} (unfinished)"] * bool(running)
            for s in absent + running:
                todo.setdefault(s, []).append(unit_name(m, lr))
        sel_runs += [(unit_name(m, lr), r) for lr in sel.tried for s, r in units.get(unit_name(m, lr), {}).items()
                     if s in plan.selection_seeds]
        cells[m] = [unit_name(m, lr) for lr in sel.judged_at]
    for m, spec in plan.methods.items():
        if spec.inherit is not None:
            cells[m] = [unit_name(m, lr) for lr in selections[spec.inherit].judged_at]
    for arm in plan.arms:
        cells[arm] = [arm]
    matched = {name: matched_cell(plan, name, units, selections) for name in plan.matched}
    fresh_units = sorted({u for c in plan.claims for side in claim_cells(plan, c, cells, matched) for u in side})
    for u in fresh_units:
        have = units.get(u, {})
        seeds, _ = fresh_of(plan, u.split("@")[0])
        absent = [s for s in seeds if s not in have]
        running = [s for s in seeds if s in have and have[s].status not in DONE]
        where = f"{u} ({arm_folder(plan, u)})" if u in plan.arms else u
        queue += [f"fresh: run {where} on {seeds_text(absent)}"] * bool(absent)
        queue += [f"fresh: wait for or resume {where} {seeds_text(running)} (unfinished)"] * bool(running)
        for s in absent + running:
            todo.setdefault(s, []).append(u)
    fresh_runs = [(u, r) for u in fresh_units for s, r in units.get(u, {}).items() if s in plan.fresh_seeds]
    env = environment(sel_runs + fresh_runs)
    rows = []
    for c in plan.claims:
        at_a, at_b = claim_cells(plan, c, cells, matched)
        pending = [n for n, at in ((c.a, at_a), (c.b, at_b)) if not at]
        if pending:
            waiting = f"awaiting runs (selection not finished for {' and '.join(LABEL.get(n, n) for n in pending)})"
            row = Row(c, (c.a, c.b), f"not judged (mixed environments: {env})" if env else waiting)
            row.post_hoc = post_hoc(plan, [r for _, r in sel_runs])
            row.commits = commits_text([r for _, r in sel_runs])
            rows.append(row)
            continue
        extra = [r for u, r in sel_runs if u.split("@")[0] in (c.a, c.b, *(plan.methods[n].inherit for n in (c.a, c.b)
                                                                         if n in plan.methods))]
        rows += [judge_row(plan, c, ua, ub, units, env, extra) for ua in at_a for ub in at_b]
    seen = seen_seeds(root, plan)
    for row in rows:
        judge_rules(root, plan, row, units, len(rows), bool(seen) and plan.seen_seeds is not None)
    reject, adjusted = mt.holm([r.primary.p if r.primary and r.testable else None for r in rows], plan.alpha)
    for row, rej, adj in zip(rows, reject, adjusted):
        row.holm_p = adj
        row.holm = mt.holm_words(row.claim.rel, rej, row.primary.verdict, row.primary.paired.mean) \
            if row.primary and row.testable else "–"
    runs = [r for cell in units.values() for r in cell.values()]
    return Family(plan, runs, units, selections, queue, env, rows, excluded, dict(sorted(todo.items())),
                  seen_text(seen))


def judge_rules(root: Path, plan: Plan, row: Row, units: dict, family_size: int, refused: bool) -> None:
    """Round 4's rules on a judged row: a plan with a seen seed is refused (the row not judged), a side
    that does not train makes the row not testable (older plans: a label), and the row's power at its n
    and at the plan's, for the plan's SD and smallest effect, at alpha / (the family's rows)."""
    if refused:
        row.state, row.testable = "not judged (the plan has seeds already seen: see its section)", False
        return
    if row.primary is None:
        return
    seeds = row.primary.paired.seeds
    rule = rule_of(root, plan)
    failing = not_training(rule, {unit_label(plan, u): [units[u][s] for s in seeds] for u in row.units}) \
        if rule is not None else []
    if failing and plan.trains is not None:
        row.testable = False
        row.state = f"not testable at this budget (does not train, {rule.source}: {'; '.join(failing)})"
    elif failing:
        row.note = f"SGD does not train at this budget ({'; '.join(failing)}; threshold {rule.source})" \
            if any(x.split(" ")[0] in ("DOSG", "COSG", "DSGD") for x in failing) else \
            f"does not train at this budget ({'; '.join(failing)}; threshold {rule.source})"
    if plan.power is not None:
        sd = row.claim.sd or plan.power.sd
        effect = row.claim.effect or plan.power.effect
        level = plan.alpha / family_size
        row.power = claim_power(row.claim.rel, sd, row.primary.paired.n, level, effect, plan.margin)
        n = min(len(fresh_of(plan, u.split("@")[0])[0]) for u in row.units)
        row.planned_power = (claim_power(row.claim.rel, sd, n, level, effect, plan.margin), n)
        observed = statistics.stdev(row.primary.paired.diffs) if row.primary.paired.n > 1 else 0.0
        if observed > 0.0:
            row.observed_power = (claim_power(row.claim.rel, observed, row.primary.paired.n, level, effect,
                                              plan.margin), observed)
