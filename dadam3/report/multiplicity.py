"""The words of a reproduction and the correction for the number of claims, stated once.

A claim "a ≫ b" or "a ≈ b" is judged on the per-seed paired differences d_s = a_s − b_s of a
lower-is-better measure (:func:`dadam3.report.stats.paired`: mean and 95 % t interval [lo, hi]):

- "a ≫ b" is *reproduced* when hi < 0 (the interval excludes 0 in the paper's direction),
  *contradicted* when lo > 0 (it excludes 0 against the paper), *not reproduced* otherwise;
  its p-value is the two-sided paired t test of mean(d) = 0 (``scipy.stats.ttest_rel``).
- "a ≈ b" is *reproduced* when −δ ≤ lo and hi ≤ δ (δ: the plan's equivalence margin),
  *contradicted* when the interval excludes 0 and leaves ±δ, *not reproduced* otherwise. It is
  tested two ways: as equivalence (the TOST p, max(p₋, p₊) of the one-sided paired t tests of
  mean(d) ≤ −δ and mean(d) ≥ δ) and as a difference (the two-sided paired t p of mean(d) = 0).

Holm's step-down correction runs over every claim of a family
(``statsmodels.stats.multitest.multipletests(method="holm")``) on the p that matches the claim's
reading (:func:`holm_p`): a "≈" claim read *contradicted* enters with its difference p (a TOST p,
near 1 there, cannot carry a "contradicted"), every other "≈" with its TOST p; a claim without a
p-value yet, or not testable, enters with p = 1, so the family size never shrinks. "k of n": the
seeds on which the paper's direction held (d_s < 0 for "≫", |d_s| ≤ δ for "≈").
"""
from __future__ import annotations

import statistics
import warnings

from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests


REPRODUCED, NOT_REPRODUCED, CONTRADICTED = "reproduced", "not reproduced", "contradicted"
WORDING = ("A claim of the paper reads *reproduced* when the 95 % t interval of the per-seed paired differences "
           "a − b (lower FID is better) excludes 0 in the paper's direction, *not reproduced* when it contains 0, "
           "and *contradicted* when it excludes 0 against the paper. \"A ≈ B\" is reproduced when the whole interval "
           "lies within ± the plan's equivalence margin, contradicted when it excludes 0 and leaves the margin, and "
           "not reproduced otherwise. Beside each verdict: the seeds on which the paper's direction held (k of n). "
           "p-values: two-sided paired t (scipy.stats.ttest_rel) for \"≫\"; for \"≈\" the TOST p (the larger of the "
           "two one-sided paired t tests against ± the margin), or, where the interval reads contradicted, the "
           "two-sided paired t p of a difference. Holm's correction (statsmodels multipletests) runs over every "
           "claim of a family on those p, a claim not yet judged (or not testable) entering with p = 1; its "
           "decision is the verdict that counts, shown first, the uncorrected reading beside it.")


def words(relation: str, p, margin: float) -> str:
    """The uncorrected verdict of "a ≫ b" / "a ≈ b" on the paired differences ``p``
    (:class:`dadam3.report.stats.Paired`: its interval ``low``, ``high``)."""
    if relation == "≫":
        return REPRODUCED if p.high < 0 else CONTRADICTED if p.low > 0 else NOT_REPRODUCED
    if -margin <= p.low and p.high <= margin:
        return REPRODUCED
    return CONTRADICTED if (p.low > 0 or p.high < 0) else NOT_REPRODUCED


def p_value(relation: str, diffs: tuple[float, ...], margin: float) -> float:
    """Two-sided paired t p of mean(d) = 0 ("≫"), or the TOST p against ±``margin`` ("≈")."""
    if len(diffs) < 2:
        return 1.0
    if statistics.stdev(diffs) == 0.0:          # identical differences: the test is degenerate
        mean = diffs[0]
        if relation == "≫":
            return 0.0 if mean != 0 else 1.0
        return 0.0 if -margin < mean < margin else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if relation == "≫":
            return float(scipy_stats.ttest_1samp(diffs, 0.0).pvalue)
        low = scipy_stats.ttest_1samp(diffs, -margin, alternative="greater").pvalue
        high = scipy_stats.ttest_1samp(diffs, margin, alternative="less").pvalue
    return float(max(low, high))


def holm_p(relation: str, p, margin: float) -> float:
    """The p that enters Holm for a claim read on the paired differences ``p``: the difference p for
    "≫" and for a "≈" read *contradicted*, the TOST p for every other "≈"."""
    if relation == "≈" and words(relation, p, margin) == CONTRADICTED:
        return p_value("≫", p.diffs, margin)
    return p_value(relation, p.diffs, margin)


def wins(relation: str, diffs: tuple[float, ...], margin: float) -> int:
    """The seeds on which the paper's direction held."""
    return sum((d < 0) if relation == "≫" else (abs(d) <= margin) for d in diffs)


def holm(pvalues: list[float | None], alpha: float) -> tuple[list[bool], list[float]]:
    """(reject, Holm-adjusted p) for each claim of a family; None (not judged yet) enters as p = 1."""
    if not pvalues:
        return [], []
    ps = [1.0 if p is None else p for p in pvalues]
    reject, adjusted, _, _ = multipletests(ps, alpha=alpha, method="holm")
    return [bool(r) for r in reject], [float(a) for a in adjusted]


def holm_words(relation: str, reject: bool, reading: str, mean: float) -> str:
    """The corrected decision: when Holm rejects the claim's null hypothesis, its reading stands
    (reproduced, or contradicted: "≫" in the other direction, "≈" tested as a difference); not
    reproduced otherwise."""
    if not reject:
        return NOT_REPRODUCED
    if relation == "≫":
        return CONTRADICTED if mean > 0 else REPRODUCED
    return reading if reading in (REPRODUCED, CONTRADICTED) else NOT_REPRODUCED
