"""Does a cell train? A baseline must work before it can lose (DESIGN.md, "Evidence"): a cell
*trains* when its mean final FID (node mean, primary scorer) over the seeds a claim uses is below a
fraction of the untrained generator's FID. Round 4's plans fix both numbers (``trains``); a claim
with a side that does not train is "not testable at this budget", never a win for the other side.
Older plans name no rule: their rows are labelled with the same test, on the untrained generator's
FID measured by the committed runs of ``results/fmnist/round4/untrained/<figure>/`` (one iteration
at step size 1e-9, so the first evaluation is the untrained generator's).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from dadam3.report.plan import Plan
from dadam3.report.runs import LABEL, load_run, seed_dirs
from dadam3.report.search import PRIMARY

UNTRAINED = "fmnist/round4/untrained"        # under the results folder: <figure>/seed<S>/
FRACTION = 0.5                               # what older plans are labelled with (round 4's value)


@dataclass(frozen=True)
class Rule:
    threshold: float            # a cell trains below this mean final FID
    untrained: float            # the untrained generator's FID
    source: str                 # where the untrained FID comes from


def rule_of(root: Path, plan: Plan) -> Rule | None:
    """The plan's ``trains`` rule, or for an older plan the measured one (None: nothing measured)."""
    if plan.trains is not None:
        untrained, fraction = plan.trains
        return Rule(untrained * fraction, untrained, f"the plan's {fraction:g} of {untrained:.1f}")
    figure = (plan.experiment or "").removeprefix("fmnist_")
    folder = root / UNTRAINED / figure
    scores = [v for _, d in seed_dirs(folder) if (v := load_run(root, d, "untrained", 0).final(PRIMARY)) is not None]
    if not figure or not scores:
        return None
    untrained = statistics.fmean(scores)
    return Rule(untrained * FRACTION, untrained,
                f"{FRACTION:g} of {untrained:.1f}, `results/{UNTRAINED}/{figure}/` (n = {len(scores)})")


def not_training(rule: Rule, sides: dict[str, list]) -> list[str]:
    """``sides``: unit label -> the runs a claim uses; the sides whose mean final FID is not below the
    threshold, as ``DOSG @ 4e-4: mean final FID 395.1 ≥ 244.3``."""
    out = []
    for label, runs in sides.items():
        scores = [v for r in runs if (v := r.final(PRIMARY)) is not None]
        if scores and (mean := statistics.fmean(scores)) >= rule.threshold:
            out.append(f"{LABEL.get(label, label)}: mean final FID {mean:.1f} ≥ {rule.threshold:.1f}")
    return out
