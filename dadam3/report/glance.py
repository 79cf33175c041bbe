"""The claims at a glance, the table that opens the report: the round-3 plans' claims (each →
verdict, Holm decision, effect with its interval, k of n, second scorer, machine classes, post hoc
mark, code), then round 2's readings as history. Every row comes from the same functions as the
sections below (:mod:`dadam3.report.families`, :mod:`dadam3.report.evidence`,
:func:`sections_paper.fig1_verdict`)."""
from __future__ import annotations

from pathlib import Path

from dadam3.report import claims
from dadam3.report import sections_plan as sp
from dadam3.report import sections_fmnist as fm
from dadam3.report.common import anchor
from dadam3.report.evidence import Judged, evidence_text, select
from dadam3.report.sections_paper import fig1_verdict

PAPER = {"fig2": "Fig. 2: Adam3 outperforms OAdagrad (one node)",
         "fig2 speed": "Fig. 2: Adam3 outperforms OAdagrad, over the whole run",
         "fig3": "Figs. 3–4: Dadam3/Cadam3 generate better images than DOSG/COSG",
         "fig3 speed": "Figs. 3–4: … and reach a good score more quickly",
         "central": "Figs. 3–4: the centralised variant matches the decentralised one"}


def _tested_as(j: Judged) -> str:
    return f"{j.name} ({'final FID' if j.measure == 'final' else 'mean FID over the run'})"


def _rows(root: Path, name: str, claim_list) -> list[tuple[str, object]]:
    runs = fm.group_runs(root, "lr_sweep", name)[0]
    if not runs:
        return []
    out = []
    for j in fm.chosen_claims(runs, claim_list, select(runs)):
        key = name if j.claim[1] == "≫" else "central"
        out.append((PAPER[key + (" speed" if j.measure == "speed" else "")], j))
    return out


def _variant_rows(root: Path) -> list[str]:
    """Each variant folder's claims (only those whose two methods both ran), chosen and judged as
    in its own section: does a verdict survive longer runs or a stabilised baseline?"""
    rows = []
    for folder in fm.variant_folders(root):
        variant = folder.removeprefix("lr_sweep_")
        link = f"[{variant}](#{anchor(fm.step_sizes_title(variant))})"
        for name, claim_list in (("fig2", claims.CLAIMS_FIG2), ("fig3", claims.CLAIMS_FIG3)):
            runs = fm.group_runs(root, folder, name)[0]
            if not runs:
                continue
            chosen = fm.chosen_for(root, folder, name, runs)[0]
            for j in fm.chosen_claims(runs, claim_list, chosen, every=False):
                rows.append(f"| {link} | {_tested_as(j)} | {j.verdict} | {j.effect} | {evidence_text(j)} |")
    if not rows:
        return []
    return ["Round 2's variants of the step-size sweep (other iteration counts or stabilisers, listed in each "
            "variant's section), each method at its own step size there (history, post hoc):", "",
            "| variant | tested as | round-2 reading (post hoc) | effect | evidence (data, scale, step sizes, seeds, "
            "code) |",
            "| --- | --- | --- | --- | --- |"] + rows + [""]


def glance(root: Path, families: list | None = None) -> list[str]:
    """The round-3 plan families' rows first (:mod:`dadam3.report.sections_plan`), Fig. 1's, then
    round 2's readings under their own history heading, outside every verdict."""
    lines = ["## Claims at a glance", "",
             "Round 3: each claim family of a plan in `docs/analysis_plan/`, judged by the plan on its fresh seeds "
             "at the cells its search chose (wording and correction: the conventions above). Effect: the paired "
             "difference a − b (lower FID is better, so negative favours the first), mean [95 % t interval], n and "
             "seeds. A row whose runs mix code commits, or a seed whose runs mix machine classes, is not judged.", ""]
    lines += sp.GLANCE_HEAD + sp.glance_rows(families or []) + [""]
    f1 = fig1_verdict(root)
    if f1 is not None:
        lines += ["Outside the round-3 plans (a closed-form game, one run per method):", "",
                  "| paper's claim | tested as | verdict | effect | evidence |", "| --- | --- | --- | --- | --- |",
                  f"| Fig. 1: Dadam3 finds the FNE point, DP-OAdam diverges | {claims.FIG1_RULE} | {f1[0]} | "
                  f"{f1[1]} | {f1[2]} |", ""]
    rows = _rows(root, "fig2", claims.CLAIMS_FIG2) + _rows(root, "fig3", claims.CLAIMS_FIG3)
    history = []
    order = list(PAPER)
    for paper, j in sorted(rows, key=lambda r: order.index(next(k for k, v in PAPER.items() if v == r[0]))):
        history.append(f"| {paper} | {_tested_as(j)} | {j.verdict} | {j.effect} | {evidence_text(j)} |")
    variants = _variant_rows(root)
    if history or variants:
        lines += ["### Round 2 (history: post hoc readings, not verdicts)", ""] + sp.history_note()
    if history:
        lines += ["| paper's claim | tested as | round-2 reading (post hoc) | effect | evidence (data, scale, step "
                  "sizes, seeds, code) |", "| --- | --- | --- | --- | --- |"] + history + [""]
    return lines + variants + [
        "Not tested here: the paper's image data sets at its scale (Figs. 2–4 sections below). Fashion-MNIST rows "
        "are CPU-scale miniatures.", ""]
