"""Round 4's plans (docs/analysis_plan/fig2_r4.yaml, fig3_stable.yaml, shared_scale.yaml): the search's
tie and flat rules, a matched step size, methods on data of their own and inherited step sizes with
fewer fresh seeds, as the queue (`--next`) and the judged rows see them. Crafted runs in tmp dirs."""
from __future__ import annotations

import copy

import pytest

from dadam3.report import families, plan
from dadam3.report.runs import one_snapshot
from report_plan_runs import PLAN, make_run, write_plan

ROUND4 = {
    **copy.deepcopy(PLAN), "round": 4,
    "methods": {"adam3": {"grid": [2.0e-4, 4.0e-4, 8.0e-4, 1.6e-3, 3.2e-3], "start": 8.0e-4},
                "oadagrad": {"grid": [2.0e-4, 4.0e-4, 8.0e-4, 1.6e-3, 3.2e-3], "start": 8.0e-4}},
    "selection": {"seeds": [0, 1, 2], "measure": "final", "bracket_margin": 5.0,
                  "ties": {"rounding": 0.1, "equal_means": "smaller_step", "gap_at_margin": "worse"},
                  "flat": "chosen"},
    "matched": {"both": {"methods": ["adam3", "oadagrad"], "rule": "lowest_mean_of_both"}},
    "trains": {"untrained_fid": 400.0, "fraction": 0.5},
    "seen_seeds": [90],
    "power": {"sd": 8.0, "effect": 10.0, "target": 0.8},
    "claims": [{"a": "adam3", "rel": "≫", "b": "oadagrad", "measure": "final"},
               {"a": "adam3", "rel": "≈", "b": "oadagrad", "measure": "final", "at": "both"}],
}

SHARED = {
    **copy.deepcopy(ROUND4), "family": "s", "runs": "results/fmnist/round3/s",
    "data": {"iid": ["dataset.partition=iid"], "a01": ["dataset.partition=dirichlet", "dataset.alpha=0.1"]},
    "settings": {"stab": ["loop.lr_warmup=50"]},
    "methods": {"a_d": {"optimizer": "dadam3", "data": "a01", "setting": "stab",
                        "grid": [4.0e-4, 8.0e-4, 1.6e-3], "start": 8.0e-4},
                "i_d": {"optimizer": "dadam3", "data": "iid", "setting": "stab", "inherit": "a_d", "fresh": 2,
                        "fresh_min": 2},
                "i_c": {"optimizer": "cadam3", "data": "iid", "setting": "stab", "inherit": "a_d", "fresh": 2,
                        "fresh_min": 2}},
    "claims": [{"a": "i_d", "rel": "≈", "b": "i_c", "measure": "final", "sd": 4.0}],
}
SHARED.pop("matched")


def family(tmp_path, doc):
    path = tmp_path / "plans" / f"{doc['family']}.yaml"
    if not path.exists():
        write_plan(tmp_path / "plans", doc)
    with one_snapshot():
        return families.build(tmp_path / "results", plan.load(path))


def search(results, fids, family="t2"):
    """Selection seeds 0-2: (method, lr) -> mean final FID (the seeds at fid - 1, fid, fid + 1)."""
    for (method, lr), fid in fids.items():
        for s in (0, 1, 2):
            make_run(results, method, lr, s, fid + s - 1, family=family)


def test_a_round4_plan_loads_its_rules():
    p = {x.family: x for x in plan.load_all()}
    assert {"fig2_r4", "fig3_stable", "shared_scale"} <= set(p)
    assert p["fig3_stable"].matched == {"dadam3_cadam3": ("dadam3", "cadam3")}
    assert p["fig3_stable"].flat == "chosen" and p["fig3_stable"].ties.rounding == 0.1
    assert p["shared_scale"].methods["iid_dadam3"].inherit == "a01_dadam3"
    assert p["fig3"].round == 3 and p["fig3"].flat == "both"


def test_a_gap_that_prints_as_the_margin_brackets_and_a_flat_neighbour_is_only_named(tmp_path):
    """Round 3's COSG gap of 4.996 against a margin of 5 decided on the unprinted digits; here it prints
    as 5.0 and counts as worse. A neighbour 3 FID away is flat: named, the claims judged at the choice."""
    results = tmp_path / "results"
    search(results, {("adam3", 4e-4): 104.996, ("adam3", 8e-4): 100.0, ("adam3", 1.6e-3): 103.0,
                     ("oadagrad", 4e-4): 150.0, ("oadagrad", 8e-4): 120.0, ("oadagrad", 1.6e-3): 140.0})
    fam = family(tmp_path, ROUND4)
    sel = fam.selections["adam3"]
    assert sel.chosen == 8e-4 and sel.judged_at == [8e-4]
    assert "below: 4e-4 worse by +5.0" in sel.bracket and "above: flat between 8e-4 and 1.6e-3" in sel.bracket
    assert sel.bracket.startswith("flat: judged at the chosen cell only")


def test_equal_means_as_printed_choose_the_smaller_step(tmp_path):
    results = tmp_path / "results"
    search(results, {("adam3", 4e-4): 100.04, ("adam3", 8e-4): 100.0, ("adam3", 1.6e-3): 120.0,
                     ("adam3", 2e-4): 130.0,
                     ("oadagrad", 4e-4): 150.0, ("oadagrad", 8e-4): 120.0, ("oadagrad", 1.6e-3): 140.0})
    assert family(tmp_path, ROUND4).selections["adam3"].chosen == 4e-4


def test_the_matched_cell_is_the_best_mean_of_both_and_its_fresh_runs_are_queued(tmp_path):
    """adam3 chooses 8e-4 and oadagrad 1.6e-3; the matched cell (lowest mean of both, among cells both
    tried) is 8e-4 (adam3 100, oadagrad 125: 112.5) over 1.6e-3 (115, 118: 116.5): both methods' fresh
    seeds run at 8e-4, oadagrad's at 1.6e-3 too."""
    results = tmp_path / "results"
    search(results, {("adam3", 4e-4): 110.0, ("adam3", 8e-4): 100.0, ("adam3", 1.6e-3): 115.0,
                     ("oadagrad", 4e-4): 150.0, ("oadagrad", 8e-4): 125.0, ("oadagrad", 1.6e-3): 118.0,
                     ("oadagrad", 3.2e-3): 130.0})
    fam = family(tmp_path, ROUND4)
    assert fam.selections["oadagrad"].chosen == 1.6e-3
    assert fam.todo[3] == ["adam3@8e-4", "oadagrad@1.6e-3", "oadagrad@8e-4"]
    assert [r.units for r in fam.rows] == [("adam3@8e-4", "oadagrad@1.6e-3"), ("adam3@8e-4", "oadagrad@8e-4")]


def test_an_inherited_method_runs_its_few_fresh_seeds_at_its_parents_choice_in_its_own_folder(tmp_path):
    results = tmp_path / "results"
    for lr, fid in ((4e-4, 120.0), (8e-4, 100.0), (1.6e-3, 130.0)):
        for s in (0, 1, 2):
            make_run(results, "dadam3", lr, s, fid + s, family="s", arm="a01/stab")
    fam = family(tmp_path, SHARED)
    assert fam.selections["a_d"].chosen == 8e-4 and set(fam.selections) == {"a_d"}
    assert fam.todo == {3: ["i_c@8e-4", "i_d@8e-4"], 4: ["i_c@8e-4", "i_d@8e-4"]}
    for s, (d, c) in ((3, (90.0, 91.0)), (4, (95.0, 94.0))):
        make_run(results, "dadam3", 8e-4, s, d, family="s", arm="iid/stab")
        make_run(results, "cadam3", 8e-4, s, c, family="s", arm="iid/stab")
    fam = family(tmp_path, SHARED)
    [row] = fam.rows
    assert fam.todo == {} and row.state == "judged" and row.primary.paired.n == 2


@pytest.mark.parametrize("key, value, said", [
    ("flat", "maybe", "selection.flat='maybe': one of both, chosen"),
    ("matched", {"x": {"methods": ["adam3"], "rule": "lowest_mean_of_both"}}, "matched.x="),
    ("trains", {"untrained_fid": 0, "fraction": 0.5}, "trains.untrained_fid=0.0: a number > 0 belongs here"),
])
def test_a_round4_plan_with_a_bad_rule_is_one_line_naming_the_key(tmp_path, key, value, said):
    doc = copy.deepcopy(ROUND4)
    if key == "flat":
        doc["selection"]["flat"] = value
    else:
        doc[key] = value
    with pytest.raises(Exception) as e:
        plan.load(write_plan(tmp_path / "plans", doc))
    assert said in str(e.value) and "\n" not in str(e.value)


def judged_round4(tmp_path, fresh_fid_b=120.0, doc=None):
    """ROUND4's search done (adam3 8e-4, oadagrad 8e-4 chosen; matched 8e-4) and fresh seeds 3-7 run."""
    results = tmp_path / "results"
    search(results, {("adam3", 4e-4): 110.0, ("adam3", 8e-4): 100.0, ("adam3", 1.6e-3): 115.0,
                     ("oadagrad", 4e-4): fresh_fid_b + 30, ("oadagrad", 8e-4): fresh_fid_b,
                     ("oadagrad", 1.6e-3): fresh_fid_b + 20})
    for s in range(3, 8):
        make_run(results, "adam3", 8e-4, s, 100.0 - s)
        make_run(results, "oadagrad", 8e-4, s, fresh_fid_b + s % 2)
    return family(tmp_path, doc or ROUND4)


def test_round4_rows_carry_their_power_at_n_and_at_the_plans_n(tmp_path):
    from dadam3.report.power import claim_power
    fam = judged_round4(tmp_path)
    much, same = fam.rows
    assert much.state == "judged" and much.primary.paired.n == 5 and much.testable
    assert much.power == pytest.approx(claim_power("≫", 8.0, 5, 0.05 / 2, 10.0, 10.0))
    assert much.planned_power == (pytest.approx(claim_power("≫", 8.0, 5, 0.05 / 2, 10.0, 10.0)), 5)
    assert same.power == pytest.approx(claim_power("≈", 8.0, 5, 0.05 / 2, 10.0, 10.0))
    from dadam3.report import sections_plan
    import statistics
    sd = statistics.stdev(much.primary.paired.diffs)
    assert much.observed_power == (pytest.approx(claim_power("≫", sd, 5, 0.05 / 2, 10.0, 10.0)), pytest.approx(sd))
    assert sections_plan.power_text(much) == (f"{much.power:.2f} at n = 5 (planned {much.power:.2f} at n = 5); "
                                              f"{much.observed_power[0]:.2f} at the observed SD {sd:.1f}")


def test_a_side_that_does_not_train_makes_a_round4_claim_not_testable(tmp_path):
    """trains: untrained FID 400, fraction 0.5: oadagrad at 300 does not train, so neither claim is a
    verdict (never a win for adam3), and Holm counts them as p = 1."""
    fam = judged_round4(tmp_path, fresh_fid_b=300.0)
    for row in fam.rows:
        assert not row.testable and row.holm == "–" and row.holm_p == 1.0
        assert row.state.startswith("not testable at this budget (does not train, the plan's 0.5 of 400.0: "
                                    "OAdagrad @ 8e-4: mean final FID 30")
        assert row.primary is not None                       # the effect is still shown


def test_a_seed_seen_elsewhere_or_listed_as_seen_refuses_the_plan(tmp_path):
    """A committed run of the same figure outside the plan's folder with one of its seeds (or the seed in
    its own seen list): no claim judged, the section names it."""
    fam = judged_round4(tmp_path)
    assert fam.seen == "" and all(r.state == "judged" for r in fam.rows)
    make_run(tmp_path / "results", "adam3", 8e-4, 4, 90.0, family="elsewhere")
    fam = family(tmp_path, ROUND4)
    assert fam.seen == "seed 4 (`fmnist/round3/elsewhere/lr8e-4/adam3/seed4`)"
    assert all(r.state.startswith("not judged (the plan has seeds already seen") and r.holm == "–" for r in fam.rows)
    from dadam3.report import sections_plan
    assert "**Refused: seeds already seen**, so no claim of this plan is judged: seed 4" in \
        "\n".join(sections_plan.section(fam))
    listed = {**copy.deepcopy(ROUND4), "family": "t3", "runs": "results/fmnist/round3/t3", "seen_seeds": [5]}
    seen = family(tmp_path, listed).seen            # t2's runs are runs of the same figure outside t3's folder
    assert "seed 5 (in the plan's own list of seen seeds, `fmnist/round3/t2/lr8e-4/adam3/seed5`" in seen


@pytest.mark.parametrize("rel, effect, sd, n, alpha", [
    ("≫", 10.0, 8.0, 14, 0.05 / 11),
    ("≫", 10.0, 41.4, 20, 0.05 / 2),
    ("≈", 10.0, 8.0, 14, 0.05 / 11),
    ("≈", 15.0, 20.0, 16, 0.05 / 4),
])
def test_claim_power_matches_a_simulation_of_the_paired_tests(rel, effect, sd, n, alpha):
    """The closed forms against 200 000 simulated paired samples (normal differences, seeded): the
    paired t test's rejection rate at a true effect, TOST's at a true 0 (margin = effect)."""
    import numpy as np
    from scipy import stats as st

    from dadam3.report.power import claim_power
    d = np.random.default_rng(7).normal(effect if rel == "≫" else 0.0, sd, size=(200_000, n))
    m, se = d.mean(axis=1), d.std(axis=1, ddof=1) / np.sqrt(n)
    if rel == "≫":
        hit = np.abs(m / se) > st.t.ppf(1 - alpha / 2, n - 1)
    else:
        t = st.t.ppf(1 - alpha, n - 1)
        hit = (m - t * se > -effect) & (m + t * se < effect)
    assert claim_power(rel, sd, n, alpha, effect, effect) == pytest.approx(hit.mean(), abs=0.005)


def test_power_at_an_effect_far_beyond_the_sd_is_one_not_nan():
    from dadam3.report.power import power_difference
    assert power_difference(10.0, 0.5, 5, 0.025) == 1.0


def test_a_round4_claim_stands_beside_the_same_claim_of_the_plan_it_retests(tmp_path, monkeypatch):
    """retests.section pairs rows by sides, relation, measure and matched rule; a claim without an older
    twin reads "new in round 4"; a family that retests nothing gives no section."""
    import dataclasses

    from dadam3.report import retests
    fam = judged_round4(tmp_path)
    older = dataclasses.replace(fam, plan=dataclasses.replace(fam.plan, family="t2_old", round=3),
                                rows=fam.rows[:1])
    assert retests.section([fam, older]) == []
    monkeypatch.setitem(retests.RETESTS, "t2", "t2_old")
    lines = retests.section([older, fam])
    much, same = (line for line in lines if line.startswith("| [t2]("))
    p = fam.rows[0].primary.paired
    numbers = f"{p.mean:+.1f} FID [{p.low:+.1f}, {p.high:+.1f}], n = 5"
    assert much.count(numbers) == 2 and "(was [t2_old](" in much
    assert "(matched: both)" in same and "| new in round 4 |" in same
