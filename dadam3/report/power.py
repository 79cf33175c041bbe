"""The power of a claim family's tests, stated once: how likely a plan's claims are to come out
decided at its n, for the smallest effect it names, after Holm over the family.

A claim is judged on n per-seed paired differences d_s (:mod:`dadam3.report.multiplicity`); with
d_s ~ N(mu, sigma^2) (sigma: the plan's planning SD, from earlier rounds' paired differences):

- "a ≫ b", tested as a difference (two-sided paired t at level alpha'): its power at a true effect
  mu = -delta is P(|T| > t_{1-alpha'/2, n-1}) with T noncentral t, df n - 1, noncentrality
  delta sqrt(n) / sigma (``scipy.stats.nct``);
- "a ≈ b", tested as equivalence within +-margin (TOST, each one-sided test at level alpha'): its
  power at a true difference mu (0 by default) is
  P(-margin + t s/sqrt(n) < mean(d) < margin - t s/sqrt(n)), t = t_{1-alpha', n-1}, integrated over
  the distribution of the sample SD s ((n - 1) s^2 / sigma^2 ~ chi^2_{n-1}).

*After Holm*: Holm's first step tests at alpha / m (m: the family's claims) and every later step at
a larger level, so a claim's power at alpha' = alpha / m is a lower bound of its power under Holm
(Bonferroni's level). :func:`n_for` is the smallest n reaching a target power at that level.
"""
from __future__ import annotations

import math

from scipy import integrate
from scipy import stats as scipy_stats


def power_difference(effect: float, sd: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t test at level ``alpha`` on ``n`` differences of SD ``sd``
    when the true mean difference is ``effect`` (its sign does not matter)."""
    if n < 2:
        return 0.0
    df = n - 1
    t = scipy_stats.t.ppf(1.0 - alpha / 2.0, df)
    nc = abs(effect) * math.sqrt(n) / sd
    return float(scipy_stats.nct.sf(t, df, nc) + scipy_stats.nct.sf(t, df, -nc))   # the cdf at -t is NaN at large nc


def power_equivalence(margin: float, sd: float, n: int, alpha: float, true: float = 0.0) -> float:
    """Power of TOST against +-``margin`` (each one-sided paired t test at level ``alpha``) on ``n``
    differences of SD ``sd`` when the true mean difference is ``true``."""
    if n < 2 or abs(true) >= margin:
        return 0.0
    df = n - 1
    t = scipy_stats.t.ppf(1.0 - alpha, df)
    se_scale = sd / math.sqrt(n)
    s_max = margin * math.sqrt(n) / t                       # beyond it the TOST region is empty

    def given_s(q: float) -> float:                         # q = (n - 1) s^2 / sd^2 ~ chi2(df)
        half = margin - t * sd * math.sqrt(q / df) / math.sqrt(n)
        if half <= 0.0:
            return 0.0
        inside = scipy_stats.norm.cdf((half - true) / se_scale) - scipy_stats.norm.cdf((-half - true) / se_scale)
        return inside * scipy_stats.chi2.pdf(q, df)
    q_max = df * (s_max / sd) ** 2
    value, _ = integrate.quad(given_s, 0.0, q_max, limit=200)
    return float(min(max(value, 0.0), 1.0))


def claim_power(relation: str, sd: float, n: int, alpha: float, effect: float, margin: float) -> float:
    """The power of one claim (``relation`` "≫" at ``effect``, "≈" within ``margin`` at a true 0)."""
    if relation == "≫":
        return power_difference(effect, sd, n, alpha)
    return power_equivalence(margin, sd, n, alpha)


def n_for(relation: str, sd: float, alpha: float, effect: float, margin: float, target: float = 0.8,
          most: int = 200) -> int | None:
    """The smallest n (2..``most``) whose power reaches ``target``; None when none does."""
    for n in range(2, most + 1):
        if claim_power(relation, sd, n, alpha, effect, margin) >= target:
            return n
    return None
