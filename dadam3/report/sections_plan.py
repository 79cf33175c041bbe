"""The planned claim families in markdown (:mod:`dadam3.report.families`): their rows of the glance,
one section each (the plan, the search and its choice, the runs still to make, the claims under
both scorers with Holm), the scorers' rank agreement, and the list of runs still to make that the
command also prints."""
from __future__ import annotations


from scipy import stats as scipy_stats

from dadam3.report.families import Family, Row, unit_label
from dadam3.report.search import PRIMARY, SECOND, lr_folder, unit_name
from dadam3.report.runs import LABEL, Run
from dadam3.report.stats import seed_text

MEASURES = {"final": "final FID (node mean)", "speed": "mean FID over the run"}
GLANCE_HEAD = ["| family | claim | measure | verdict under Holm (adjusted p) | effect a − b [95 % t interval], n | "
               "power | k of n | second scorer (fmnist_mlp) |", "|" + " --- |" * 8]
SECTION_HEAD = ["| claim | measure | verdict under Holm (adjusted p) | uncorrected reading | effect a − b [95 % t "
                "interval] | power | k of n | second scorer (fmnist_mlp) | machine classes (fresh seeds) | post hoc | "
                "code commit |", "|" + " --- |" * 11]


def claim_text(fam: Family, row: Row) -> str:
    a, b = (unit_label(fam.plan, u) for u in row.units)
    return f"{a} {row.claim.rel} {b}"


def classes_text(row: Row) -> str:
    return "; ".join(f"{c}: seeds {seed_text(s)}" for c, s in sorted(row.classes.items())) or "–"


def second_text(row: Row) -> str:
    if row.primary is None:
        return "–"
    if row.second is None:
        return "no second-scorer scores on these seeds"
    s = row.second
    flip = f" (flips: primary says {row.primary.verdict})" if s.verdict != row.primary.verdict else ""
    return f"{s.verdict}, {s.paired.mean:+.1f} [{s.paired.low:+.1f}, {s.paired.high:+.1f}], {s.wins} of " \
           f"{s.paired.n}{flip}"


def verdict_text(row: Row, short: bool = False) -> str:
    """The verdict that counts: Holm's decision with its adjusted p, or why there is none; an older
    plan's row names a side that does not train (in full in the section, as a label in the glance)."""
    if row.primary is None or not row.testable:
        return row.state
    text = f"**{row.holm}** ({row.holm_p:.3g})"
    if row.note:
        text += f"; {row.note.split(' (')[0]}" if short else f"; {row.note}"
    return text


def power_text(row: Row) -> str:
    if row.power is None:
        return "–" if row.primary is None else "– (the plan has no power calculation)"
    planned = f" (planned {row.planned_power[0]:.2f} at n = {row.planned_power[1]})" if row.planned_power else ""
    observed = f"; {row.observed_power[0]:.2f} at the observed SD {row.observed_power[1]:.1f}" \
        if row.observed_power else ""
    return f"{row.power:.2f} at n = {row.primary.paired.n}{planned}{observed}"


def wins_text(row: Row) -> str:
    p = row.primary
    wins = f"{p.wins} of {p.paired.n}" if p else "–"
    return wins + (" (left out: " + "; ".join(row.left_out) + ")" if row.left_out else "")


def glance_cells(fam: Family, row: Row) -> list[str]:
    p = row.primary
    return [claim_text(fam, row), MEASURES[row.claim.measure], verdict_text(row, short=True),
            p.paired.text() if p else "–", power_text(row), wins_text(row), second_text(row)]


def row_cells(fam: Family, row: Row) -> list[str]:
    p = row.primary
    post = row.post_hoc or f"no (every run started after the plan's commit, {fam.plan.time_text})"
    return [claim_text(fam, row), MEASURES[row.claim.measure], verdict_text(row), p.verdict if p else "–",
            p.paired.text() if p else "–", power_text(row), wins_text(row), second_text(row), classes_text(row), post,
            row.commits]


def glance_rows(families: list[Family]) -> list[str]:
    """The planned families' rows of "Claims at a glance" (a family without runs: awaiting, and what to run)."""
    lines = []
    for fam in families:
        link = f"[{fam.plan.family}](#{anchor_of(fam)})"
        if not fam.runs:
            todo = f"{len(fam.queue)} lines of runs to make, listed in its section" if fam.queue else "nothing planned"
            lines.append(f"| {link} | all {len(fam.plan.claims)} claims | – | awaiting runs ({todo}) |" + " – |" * 4)
            continue
        for row in fam.rows:
            lines.append(f"| {link} | " + " | ".join(glance_cells(fam, row)) + " |")
    return lines


def title_of(fam: Family) -> str:
    return f"Round {fam.plan.round} (planned): {fam.plan.title}"


def anchor_of(fam: Family) -> str:
    from dadam3.report.common import anchor
    return anchor(title_of(fam))


def _selection_table(fam: Family) -> list[str]:
    plan = fam.plan
    lines = [f"| method | cells tried (seeds {seed_text(plan.selection_seeds)}): mean final FID, n done | chosen | "
             f"bracket (margin {plan.bracket_margin:g} FID, paired) |", "| --- | --- | --- | --- |"]
    for m, sel in fam.selections.items():
        cells = []
        for lr in sel.tried:
            cell = fam.units.get(unit_name(m, lr), {})
            done = [cell[s] for s in plan.selection_seeds if s in cell]
            fids = [r.final(PRIMARY) for r in done if r.status == "finished" and r.final(PRIMARY) is not None]
            bad = [f"seed {r.seed} {r.status}" for r in done if r.status in ("diverged", "failed")]
            mean = f"{sum(fids) / len(fids):.1f}" if fids else "–"
            cells.append(f"{lr_folder(lr)}: {mean}, {len(fids)} of {len(plan.selection_seeds)}"
                         + (f" ({', '.join(bad)})" if bad else ""))
        chosen = lr_folder(sel.chosen) if sel.chosen is not None else "not yet"
        bracket = sel.bracket or "selection not finished"
        lines.append(f"| {LABEL.get(m, m)} | {'; '.join(cells)} | {chosen} | {bracket} |")
    return lines + [""]


def section(fam: Family) -> list[str]:
    plan = fam.plan
    lines = [f"## {title_of(fam)}", "", f"Paper: {plan.paper}", "",
             f"Plan: `docs/analysis_plan/{plan.path.name}`, last committed {plan.time_text}; "
             f"runs under `{plan.runs}/`; fresh seeds {seed_text(plan.fresh_seeds)} (a claim is judged once "
             f"{plan.fresh_min} finished on both sides); equivalence margin ±{plan.margin:g} FID; Holm over the "
             f"family's {len(fam.rows)} rows at α = {plan.alpha:g}.", ""]
    if not fam.runs:
        lines += ["No runs yet."]
    else:
        finished = sum(r.status == "finished" for r in fam.runs)
        lines += [f"Runs read: {len(fam.runs)} ({finished} finished); environment: "
                  + (f"**mixed: {fam.environment}** (no verdict)" if fam.environment
                     else "one clean commit, each seed on one machine class") + ".", ""]
        classes: dict = {}
        for r in fam.runs:
            classes.setdefault(r.seed, set()).add(r.provenance_field("device_model"))
        per_seed = sorted(classes.items(), key=lambda kv: str(kv[0]))
        lines += ["Machine classes per seed: " + "; ".join(f"seed {s}: {', '.join(sorted(c))}" for s, c in per_seed)
                  + ".", ""]
    if plan.methods:
        lines += ["Step-size search (the plan's rule): start cell and its two neighbours on the selection seeds, "
                  "extended while the best is at an edge of the tried cells; chosen: the lowest mean final FID "
                  "among cells with no diverged or failed selection seed.", ""] + _selection_table(fam)
    lines += [f"Runs still to make ({plan.family}):", ""]
    lines += [f"- {q}" for q in fam.queue] or ["- none"]
    lines += [""] + seen_lines(fam) + SECTION_HEAD
    lines += ["| " + " | ".join(row_cells(fam, row)) + " |" for row in fam.rows]
    lines += [""]
    split = [f"- {claim_text(fam, r)} ({r.claim.measure}), per machine class: {r.by_class}" for r in fam.rows
              if r.by_class]
    if split:
        lines += ["The fresh seeds span several machine classes; the effect on each class's seeds alone:", ""] + \
            split + [""]
    if fam.excluded:
        lines += ["Excluded (outside the plan): " + "; ".join(fam.excluded) + ".", ""]
    return lines


def seen_lines(fam: Family) -> list[str]:
    """The plan's seeds with committed runs of the same figure elsewhere: a refusal (round 4 on), or
    a label (an older plan, written before the rule)."""
    if not fam.seen:
        return ["Seeds never seen: no seed of this plan has a committed run of the same figure (data set and "
                "number of nodes) outside its folder" + (", nor is one in its list of seen seeds." if
                                                         fam.plan.seen_seeds is not None else "."), ""]
    if fam.plan.seen_seeds is not None:
        return [f"**Refused: seeds already seen**, so no claim of this plan is judged: {fam.seen}.", ""]
    return [f"Seeds also used by committed runs of the same figure outside this plan (it predates round 4's "
            f"never-seen rule, so its rows are kept): {fam.seen}.", ""]


def spearman(runs: list[Run]) -> list[str]:
    """The two scorers' rank agreement (Spearman) of final FID over every finished run with both."""
    pairs = sorted((r.rel, r.final(PRIMARY), r.final(SECOND)) for r in runs
                   if r.status == "finished" and r.final(PRIMARY) is not None and r.final(SECOND) is not None)
    lines = ["## The two scorers' agreement", ""]
    if len(pairs) < 3:
        return lines + [f"Fewer than 3 finished runs have both scorers' final FID ({len(pairs)}): no rank agreement.",
                        ""]
    res = scipy_stats.spearmanr([p[1] for p in pairs], [p[2] for p in pairs])
    return lines + [f"Spearman rank correlation of final FID (node mean) between the primary scorer (the "
                    f"Fashion-MNIST CNN, `{PRIMARY}`) and the second (an MLP, `{SECOND}`) over the {len(pairs)} "
                    f"finished runs that have both: ρ = {res.statistic:.3f} (p = {res.pvalue:.2g}).", ""]


def queue(families: list[Family]) -> list[str]:
    """Every run still to make, one line each, family first."""
    return [f"to run ({f.plan.family}): {q}" for f in families for q in f.queue]
