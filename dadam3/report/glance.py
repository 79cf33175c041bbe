"""The claims at a glance, the table that opens the report: every planned claim of
``docs/analysis_plan/`` on one line (the verdict under Holm first, then the effect with its
interval, the power at its n, k of n and the second scorer), then Fig. 1's closed-form game.
Machine classes, code commits and the post hoc mark are in each family's section; round 2's post hoc
readings are in their own sections. Every row comes from the same functions as the sections below
(:mod:`dadam3.report.families`, :func:`sections_paper.fig1_verdict`)."""
from __future__ import annotations

from pathlib import Path

from dadam3.report import claims
from dadam3.report import sections_plan as sp
from dadam3.report.sections_paper import fig1_verdict


def glance(root: Path, families: list | None = None) -> list[str]:
    """The plan families' rows (:mod:`dadam3.report.sections_plan`), then Fig. 1's."""
    lines = ["## Claims at a glance", "",
             "Each claim family of a plan in `docs/analysis_plan/` (round 3's and round 4's), judged by the plan on "
             "its fresh seeds at the cells its search chose (wording and correction: the conventions above). "
             "Verdict: Holm's decision over the family, with the adjusted p (the uncorrected reading, machine "
             "classes, code commit and the post hoc mark are in the family's section). Effect: the paired "
             "difference a − b (lower FID is better, so negative favours the first), mean [95 % t interval], n and "
             "seeds. Power: of the claim's test at its n, at the plan's planning SD and smallest effect (for \"≈\": "
             "equivalence within the margin when the true difference is 0), at α over the family's rows (Holm's "
             "first step), and at the plan's n; then at the SD the fresh seeds' paired differences showed (the same "
             "effect and level: a planning SD that was too small shows there). A family whose runs mix code "
             "commits or machine classes within a "
             "seed, or whose seeds were seen before, is not judged; a round-4 claim with a side that does not "
             "train is not testable at this budget.", ""]
    lines += sp.GLANCE_HEAD + sp.glance_rows(families or []) + [""]
    f1 = fig1_verdict(root)
    if f1 is not None:
        lines += ["Outside the plans (a closed-form game, one run per method):", "",
                  "| paper's claim | tested as | verdict | effect | evidence |", "| --- | --- | --- | --- | --- |",
                  f"| Fig. 1: Dadam3 finds the FNE point, DP-OAdam diverges | {claims.FIG1_RULE} | {f1[0]} | "
                  f"{f1[1]} | {f1[2]} |", ""]
    return lines + [
        "Not tested here: the paper's image data sets at its scale (Figs. 2–4 sections below). Fashion-MNIST rows "
        "are CPU-scale miniatures. Round 2's readings (post hoc, history) are in their sections below.", ""]
