"""dadam3.report.stats (the paired rule) and dadam3.report.evidence (selection on seeds 0–2,
confirmation on fresh seeds, speed on the curves): against hand computations, in float64."""
import math
import statistics

import pytest

from dadam3.report.evidence import (FRESH, FRESH_MIN, SELECTION, curve_mean, first_below, judge, judge_fixed,
                                    select)
from dadam3.report.runs import Run, commit_text
from dadam3.report.stats import MARGIN, paired, verdict

T_975 = {2: 4.302652729749464, 4: 2.776445105197793}      # Student t quantiles (tables), df = n − 1
PROVENANCE = [{"from_iteration": 0, "code_commit": "eda9b562c32f8f2a575d1ebb4118539c7672361c"}]


def fake_run(method, lr, seed, fids, provenance=True, finished=True, every=100):
    """A run whose FID (node mean) is ``fids[i]`` at iteration ``every * (i + 1)``."""
    recs = [{"iteration": every * (i + 1), "loss_d": 1.0 + i, "fid_mean": f} for i, f in enumerate(fids)]
    recs += [{"iteration": every * len(fids), "status": "finished"}] if finished else []
    cfg = {"nodes": 5, "optimizer": {"name": method, "lr": lr}, "loop": {"iterations": every * len(fids)}}
    return Run(f"{method}/lr{lr}/seed{seed}", method, seed, cfg, PROVENANCE if provenance else [], recs)


def test_paired_interval_is_the_t_interval_of_the_per_seed_differences():
    a, b = {0: 100.0, 1: 130.0, 2: 90.0}, {0: 80.0, 1: 100.0, 2: 85.0}
    p = paired(a, b)
    d = [20.0, 30.0, 5.0]
    half = T_975[2] * statistics.stdev(d) / math.sqrt(3)
    assert p.seeds == (0, 1, 2) and p.diffs == tuple(d)
    assert p.mean == pytest.approx(statistics.fmean(d), rel=1e-12)
    assert (p.low, p.high) == pytest.approx((p.mean - half, p.mean + half), rel=1e-9)


def test_paired_uses_only_the_seeds_both_ran_and_needs_two():
    p = paired({0: 1.0, 1: 2.0, 2: 4.0, 5: 9.0}, {1: 0.0, 2: 1.0, 5: 3.0, 7: 0.0})
    assert p.seeds == (1, 2, 5) and p.diffs == (2.0, 3.0, 6.0)
    assert paired({0: 1.0, 1: 2.0}, {1: 0.0}) is None
    same = paired({0: 3.0, 1: 4.0}, {0: 1.0, 1: 2.0})          # identical differences: the point
    assert (same.low, same.mean, same.high) == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("diffs, relation, said", [
    ((-30.0, -20.0, -25.0), "≫", "reproduced"),
    ((30.0, 20.0, 25.0), "≫", "contradicted (B better)"),
    ((-30.0, 20.0, -5.0), "≫", "not reproduced"),
    ((1.0, -1.0, 0.5), "≈", f"reproduced (equal within ±{MARGIN:g} FID)"),
    ((20.3, 19.3, 20.1), "≈", "contradicted (B better)"),          # the Dadam3 − Cadam3
    ((-40.0, 30.0, 2.0), "≈", "not reproduced"),
])
def test_the_rule(diffs, relation, said):
    p = paired({i: d for i, d in enumerate(diffs)}, {i: 0.0 for i in range(len(diffs))})
    assert verdict(relation, p) == said


def test_a_near_difference_inside_zero_but_beyond_the_margin_is_not_equal():
    p = paired({0: 2.0, 1: 4.0, 2: 3.0}, {0: 0.0, 1: 0.0, 2: 0.0})   # [0.5, 5.5]: inside ±10
    assert verdict("≈", p).startswith("reproduced")
    p = paired({0: 9.0, 1: 12.0, 2: 8.0}, {0: 0.0, 1: 0.0, 2: 0.0})  # excludes 0, leaves ±10
    assert verdict("≈", p, "A", "B") == "contradicted (B better)"


def test_curve_mean_is_the_trapezoid_area_over_the_iterations():
    r = fake_run("dosg", 2e-4, 0, [400.0, 300.0, 100.0, 100.0])
    area = (400 + 300) / 2 * 100 + (300 + 100) / 2 * 100 + 100 * 100
    assert curve_mean(r) == pytest.approx(area / 300, rel=1e-12)
    assert first_below(r, 301.0) == 200 and first_below(r, 100.0) is None


def _grid(fids_of_method):
    """method -> {lr: fid}: selection seeds 0–2 at each lr (fid + seed)."""
    return [fake_run(m, lr, s, [500.0, fid + s]) for m, cells in fids_of_method.items()
            for lr, fid in cells.items() for s in SELECTION]


def test_selection_uses_seeds_0_to_2_and_says_whether_the_grid_brackets():
    runs = _grid({"dadam3": {2e-4: 120.0, 8e-4: 90.0}, "dosg": {5e-5: 410.0, 2e-4: 400.0, 8e-4: 405.0}})
    runs.append(fake_run("dadam3", 2e-4, 3, [500.0, 10.0]))     # a fresh seed: no part in the choice
    chosen = select(runs)
    assert chosen["dadam3"].chosen.lr == 8e-4 and chosen["dadam3"].bracketed == "no: no worse step size tried above"
    assert chosen["dosg"].chosen.lr == 2e-4 and chosen["dosg"].bracketed == "yes"


def test_a_claim_awaits_fresh_seeds_then_is_judged_on_them_alone():
    runs = _grid({"dadam3": {8e-4: 90.0}, "dosg": {2e-4: 400.0}})
    j = judge(("dadam3", "≫", "dosg"), runs, select(runs))
    assert j.verdict == (f"not reproduced (awaiting fresh seeds: 0 of {FRESH_MIN} paired; the rule on the selection "
                         "seeds alone: reproduced)")
    assert j.stage == "selection seeds" and j.paired.seeds == SELECTION and j.paired.mean == pytest.approx(-310.0)
    fresh = [fake_run("dadam3", 8e-4, s, [500.0, 100.0 + s]) for s in FRESH]
    fresh += [fake_run("dosg", 2e-4, s, [500.0, 300.0 + 2 * s]) for s in FRESH[:-1]]
    fresh.append(fake_run("dosg", 2e-4, FRESH[-1], [500.0, 350.0], provenance=False))   # legacy: left out
    j = judge(("dadam3", "≫", "dosg"), runs + fresh, select(runs + fresh))
    assert j.verdict.startswith("not reproduced (awaiting fresh seeds: 4 of")
    fresh[-1] = fake_run("dosg", 2e-4, FRESH[-1], [500.0, 300.0 + 2 * FRESH[-1]])
    j = judge(("dadam3", "≫", "dosg"), runs + fresh, select(runs + fresh))
    assert j.stage == "fresh seeds" and j.verdict == "reproduced"
    assert j.paired.seeds == FRESH and j.paired.diffs == tuple(-200.0 - s for s in FRESH)
    assert {r.seed for r in j.runs} == set(FRESH)


def test_legacy_runs_are_kept_out_of_a_fixed_step_size_verdict():
    runs = [fake_run(m, 2e-4, s, [500.0, f + s], provenance=False) for m, f in (("dadam3", 100.0), ("dosg", 400.0))
            for s in range(3)]
    j = judge_fixed(("dadam3", "≫", "dosg"), runs)
    assert j.paired is None and j.verdict == "not reproduced (legacy runs, provenance unknown, left out)"
    runs += [fake_run(m, 2e-4, s, [500.0, f + s]) for m, f in (("dadam3", 100.0), ("dosg", 400.0)) for s in (3, 4)]
    j = judge_fixed(("dadam3", "≫", "dosg"), runs)
    assert j.paired.seeds == (3, 4) and j.verdict == "reproduced"


def test_a_dirty_commit_is_never_printed_as_the_clean_one():
    commit = "cb87a914d23bc1c82179b9be06fa0b5bab5f2c34"
    assert commit_text({"code_commit": commit}) == "cb87a914d23b"
    assert commit_text({"code_commit": commit + "+dirty"}) == "cb87a914d23b+dirty (diff not saved)"
    saved = {"code_commit": commit + "+dirty", "code_diff": "code.diff"}
    assert commit_text(saved) == "cb87a914d23b+dirty (diff saved)"


def test_threshold_times_are_paired_when_both_got_there_and_counted_when_not():
    from dadam3.report.evidence import threshold_lines
    runs = [fake_run("dadam3", 8e-4, s, [400.0, 250.0, 140.0]) for s in SELECTION]
    runs += [fake_run("dosg", 2e-4, s, [400.0, 390.0 - 100 * (s == 0), 250.0]) for s in SELECTION]
    j = judge(("dadam3", "≫", "dosg"), runs, select(runs), "speed")
    (line,) = [x for x in threshold_lines([j]) if x]
    # FID < 300: Dadam3 at 200 on every seed; DOSG at 200 (seed 0), 300, 300: differences 0, −100, −100
    d = [0.0, -100.0, -100.0]
    half = T_975[2] * statistics.stdev(d) / math.sqrt(3)
    assert f"FID < 300: {statistics.fmean(d):+.1f} iterations [{statistics.fmean(d) - half:+.1f}, " in line
    assert "FID < 200: Dadam3 reached it on 3 of 3 seeds, DOSG on 0 of 3" in line
