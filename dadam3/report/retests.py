"""Round 3 → round 4, claim by claim: each round-4 plan that retests a round-3 family, its claims beside
the same claims of the older plan (the same sides, relation, measure and matched rule), both as judged
(:mod:`dadam3.report.families`): Holm's verdict, the effect and its interval, n.

Which family retests which is the report's, not the plans' (a plan is frozen once its runs start):
``RETESTS`` names it. A round-4 claim with no older twin reads "new"; a round-3 family judged at two
cells of one side (a flat neighbour) gives each cell's row.
"""
from __future__ import annotations

from dadam3.report.families import Family, Row
from dadam3.report.runs import LABEL
from dadam3.report.sections_plan import MEASURES, anchor_of, claim_text, power_text, verdict_text

RETESTS = {"fig2_r4": "fig2", "fig3_stable": "fig3", "shared_scale": "heterogeneous"}
TITLE = "Round 3 → round 4, claim by claim"


def claim_key(row: Row) -> tuple:
    c = row.claim
    return c.a, c.rel, c.b, c.measure, c.at


def outcome(fam: Family, row: Row) -> str:
    """``**reproduced** (0.01): −12.3 FID [−20.1, −4.5], n = 5`` (the sides' cells named), or why none."""
    text = verdict_text(row, short=True)
    if row.primary is None:
        return text
    p = row.primary.paired
    return f"{text}: {claim_text(fam, row)}, {p.mean:+.1f} FID [{p.low:+.1f}, {p.high:+.1f}], n = {p.n}"


def section(families: list[Family]) -> list[str]:
    """The table, one line per round-4 claim whose family retests an older one; none: no section."""
    by_name = {f.plan.family: f for f in families}
    lines = []
    for fam in families:
        older = by_name.get(RETESTS.get(fam.plan.family, ""))
        if older is None:
            continue
        link = f"[{fam.plan.family}](#{anchor_of(fam)}) (was [{older.plan.family}](#{anchor_of(older)}))"
        for row in fam.rows:
            before = [outcome(older, r) for r in older.rows if claim_key(r) == claim_key(row)]
            c = row.claim
            lines.append(f"| {link} | {LABEL.get(c.a, c.a)} {c.rel} {LABEL.get(c.b, c.b)}"
                         + (f" (matched: {c.at})" if c.at else "")
                         + f" | {MEASURES[c.measure]} | {'<br>'.join(before) or 'new in round 4'} | "
                         f"{outcome(fam, row)} | {power_text(row)} |")
    if not lines:
        return []
    return [f"## {TITLE}", "",
            "Each round-4 claim beside the same claim of the round-3 plan it retests (the sides named as in the "
            "plans, then the cells each round judged): Holm's verdict with its adjusted p, the paired difference "
            "a − b (lower FID is better) and its 95 % t interval, n; round 4's power as in the glance. What each "
            "round ran (seeds, stabilisers, step-size search) is in its family's section.", "",
            "| family | claim | measure | round 3 | round 4 | power (round 4) |", "|" + " --- |" * 6] + lines + [""]
