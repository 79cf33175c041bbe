"""dadam3.report.families / sections_plan: a plan's search, its queue, the environment rules (a
family mixing commits, a seed mixing machine classes: refused a verdict), post hoc labels, the
wording, Holm against statsmodels, the second scorer, and the glance agreeing with the sections."""

import pytest
from statsmodels.stats.multitest import multipletests

from dadam3.report import multiplicity as mt
from dadam3.report import families, plan, sections_plan
from dadam3.report import runs as run_files
from dadam3.report.build import build
from report_plan_runs import (ARMS_PLAN, BEFORE, COMMIT, ELSEWHERE, EPYC, OTHER, PLAN, SEARCH_DONE, XEON, here,
                              make_run, selection, write_plan)


@pytest.fixture
def setup(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    plans = tmp_path / "plans"
    write_plan(plans)
    return results, plans


def family(results, plans):
    [p] = plan.load_all(plans)
    with run_files.one_snapshot():
        return families.build(results, p)


def fresh(results, a_fid, b_fid, a_lr=8e-4, b_lr=2e-2, seeds=range(3, 8), **kw):
    """Fresh seeds at the chosen cells: a_fid(seed), b_fid(seed)."""
    for s in seeds:
        make_run(results, "adam3", a_lr, s, a_fid(s), **kw.get("a", {}))
        make_run(results, "oadagrad", b_lr, s, b_fid(s), **kw.get("b", {}))


def test_the_search_starts_at_the_plan_cell_and_says_what_to_run(setup):
    results, plans = setup
    make_run(results, "adam3", 8e-4, 0, 90.0)
    fam = family(results, plans)
    assert "selection not finished: run adam3@8e-4 on seeds 1-2" in fam.queue
    assert "selection not finished: run adam3@4e-4 on seeds 0-2" in fam.queue
    assert "selection not finished: run oadagrad@1e-2 on seeds 0-2" in fam.queue
    assert all(r.state.startswith("awaiting runs (selection not finished") for r in fam.rows)


def test_a_best_cell_at_the_edge_of_the_tried_cells_asks_for_the_next_cell(setup):
    results, plans = setup
    selection(results, {**SEARCH_DONE, ("adam3", 4e-4): 60.0})
    fam = family(results, plans)
    assert "selection not finished: run adam3@2e-4 on seeds 0-2" in fam.queue
    assert fam.selections["adam3"].chosen is None and fam.selections["oadagrad"].chosen == 2e-2
    # oadagrad's best (2e-2) is inside; its grid has no more cells: its fresh seeds are due
    assert not any("oadagrad" in q and "selection" in q for q in fam.queue)


def test_bracketed_choice_then_fresh_seeds_to_run(setup):
    results, plans = setup
    selection(results, SEARCH_DONE)
    fam = family(results, plans)
    assert fam.selections["adam3"].chosen == 8e-4
    assert fam.selections["adam3"].bracket.startswith("bracketed (below: 4e-4 worse by +30.0; above: 1.6e-3")
    assert fam.queue == ["fresh: run adam3@8e-4 on seeds 3-7", "fresh: run oadagrad@2e-2 on seeds 3-7"]


def test_a_neighbour_within_the_margin_is_flat_and_every_claim_is_judged_at_both_cells(setup):
    results, plans = setup
    selection(results, {**SEARCH_DONE, ("adam3", 1.6e-3): 93.0})     # +3 < 5: flat
    fam = family(results, plans)
    assert fam.selections["adam3"].judged_at == [8e-4, 1.6e-3]
    assert "flat between 8e-4 and 1.6e-3 (+3.0 < 5)" in fam.selections["adam3"].bracket
    assert "fresh: run adam3@1.6e-3 on seeds 3-7" in fam.queue
    assert [r.units for r in fam.rows] == [("adam3@8e-4", "oadagrad@2e-2"), ("adam3@1.6e-3", "oadagrad@2e-2")] * 2


def judged(results, plans, a_fid=lambda s: 80.0 + s, b_fid=lambda s: 120.0 - s, **kw):
    selection(results, SEARCH_DONE)
    fresh(results, a_fid, b_fid, **kw)
    return family(results, plans)


def test_a_judged_family_gives_words_k_of_n_and_holm_equal_to_multipletests(setup):
    results, plans = setup
    fam = judged(results, plans)
    assert fam.queue == [] and fam.environment == ""
    much, same = fam.rows
    d = [(80.0 + s) - (120.0 - s) for s in range(3, 8)]
    assert much.primary.paired.diffs == tuple(d) and much.primary.verdict == "reproduced"
    assert much.primary.wins == 5 and same.primary.wins == 0
    assert same.primary.verdict == "contradicted"           # the interval excludes 0 and leaves ±10
    ps = [much.primary.p, same.primary.p]
    # a "≈" read contradicted enters Holm with its difference p (its TOST p is near 1 there)
    assert same.primary.p == mt.p_value("≫", same.primary.paired.diffs, 10.0) < 0.05
    assert mt.p_value("≈", same.primary.paired.diffs, 10.0) > 0.5
    reject, adjusted, _, _ = multipletests(ps, alpha=0.05, method="holm")
    assert [much.holm_p, same.holm_p] == pytest.approx(list(adjusted), rel=1e-12)
    assert much.holm == ("reproduced" if reject[0] else "not reproduced")
    assert same.holm == ("contradicted" if reject[1] else "not reproduced")
    cells = sections_plan.row_cells(fam, much)
    # Holm first, then the reading
    assert cells[2] == f"**{much.holm}** ({adjusted[0]:.3g})" and cells[3] == "reproduced"
    assert cells[6] == "5 of 5" and cells[10] == COMMIT[:12]
    assert cells[9].startswith("no (every run started after the plan's commit")


def test_a_family_mixing_commits_is_not_judged_and_names_them(setup):
    results, plans = setup
    fam = judged(results, plans, b={"commit": OTHER})          # oadagrad's fresh seeds on another commit
    for row in fam.rows:
        assert row.primary is None and row.state.startswith("not judged (mixed environments: commits ")
        assert f"{COMMIT[:12]} (23 runs)" in row.state and f"{OTHER[:12]} (5 runs)" in row.state
    text = "\n".join(sections_plan.section(fam))
    assert "reproduced" not in text.replace("not reproduced", "")


def test_a_dirty_commit_is_mixed_too(setup):
    results, plans = setup
    fam = judged(results, plans, a={"commit": COMMIT + "+dirty"})
    assert all("not judged (mixed environments: commits" in r.state for r in fam.rows)


def test_a_seed_whose_pair_mixes_machine_classes_is_not_judged(setup):
    results, plans = setup
    selection(results, SEARCH_DONE)
    for s in range(3, 8):
        make_run(results, "adam3", 8e-4, s, 80.0 + s)
        make_run(results, "oadagrad", 2e-2, s, 120.0 - s, machine=EPYC if s == 4 else XEON)
    fam = family(results, plans)
    assert fam.rows[0].primary is None
    assert fam.rows[0].state == (f"not judged (mixed environments: seed 4 on {EPYC} (oadagrad@2e-2), "
                                 f"{XEON} (adam3@8e-4))")


def test_seeds_on_two_classes_each_pair_on_one_are_judged_and_split_by_class(setup):
    results, plans = setup
    selection(results, SEARCH_DONE)
    for s in range(3, 8):
        m = EPYC if s >= 6 else XEON
        make_run(results, "adam3", 8e-4, s, 80.0 + s, machine=m)
        make_run(results, "oadagrad", 2e-2, s, 120.0 - s, machine=m)
    fam = family(results, plans)
    row = fam.rows[0]
    assert row.primary.verdict == "reproduced" and row.classes == {XEON: [3, 4, 5], EPYC: [6, 7]}
    assert row.by_class == (f"{EPYC}: -27.0 (n = 2); {XEON}: -32.0 (n = 3); the direction is the same on every "
                            "class")


def test_runs_started_before_the_plan_make_the_verdict_post_hoc(setup):
    results, plans = setup
    fam = judged(results, plans, a={"started": BEFORE})
    assert fam.rows[0].primary.verdict == "reproduced"
    assert fam.rows[0].post_hoc == ("post hoc (5 of 28 runs started before the plan's last commit "
                                    "(2026-01-01T00:00:00+00:00))")


def test_a_run_without_a_start_time_or_a_plan_git_cannot_date_is_post_hoc(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    write_plan(tmp_path / "plans", commit_time=None)
    fam = judged(results, tmp_path / "plans", b={"started": None})
    assert fam.plan.committed is None and fam.rows[0].post_hoc == "post hoc (plan time unknown)"
    write_plan(tmp_path / "dated")
    fam = family(results, tmp_path / "dated")
    assert fam.rows[0].post_hoc == "post hoc (5 of 28 runs without a start time)"


def test_a_verdict_that_flips_under_the_second_scorer_says_so(setup):
    results, plans = setup
    fam = judged(results, plans, b={"second": 10.0})     # the MLP finds OAdagrad far better
    row = fam.rows[0]
    assert row.primary.verdict == "reproduced" and row.second.verdict == "contradicted"
    assert sections_plan.second_text(row).endswith("0 of 5 (flips: primary says reproduced)")


def test_an_unfinished_fresh_seed_is_named_and_the_claim_waits(setup):
    results, plans = setup
    selection(results, SEARCH_DONE)
    fresh(results, lambda s: 80.0, lambda s: 120.0, seeds=range(3, 7))
    make_run(results, "adam3", 8e-4, 7, 80.0)
    make_run(results, "oadagrad", 2e-2, 7, 120.0, finished=False)
    fam = family(results, plans)
    assert fam.queue == ["fresh: wait for or resume oadagrad@2e-2 seed 7 (unfinished)"]
    assert fam.rows[0].state == "awaiting runs (4 of 5 fresh seeds finished on both sides)"
    assert fam.rows[0].left_out == ["seed 7: OAdagrad @ 2e-2 unfinished (last iteration 200 of 200)"]


def test_the_glance_and_the_sections_agree_and_a_family_without_runs_awaits(setup, tmp_path):
    results, plans = setup
    fam = judged(results, plans)
    text = build(results, plans)[0]
    glance = text[text.index("## Claims at a glance"):text.index("## Round 3 (planned)")]
    section = text[text.index("## Round 3 (planned)"):]
    rows = [line for line in glance.splitlines() if line.startswith("| [t2](")]
    assert len(rows) == len(fam.rows) == 2
    for line, row in zip(rows, fam.rows):                        # the glance's cells, as the section gives them
        claim, measure, verdict, effect, power, wins, second = line.removesuffix(" |").split(" | ")[1:8]
        [full] = [x for x in section.splitlines() if x.startswith(f"| {claim} | {measure} | ")]
        assert full.split(" | ")[2] == verdict == f"**{row.holm}** ({row.holm_p:.3g})"    # Holm first
        assert [full.split(" | ")[i] for i in (4, 5, 6, 7)] == [effect, power, wins, second]
    empty = tmp_path / "empty"
    (empty / "fmnist").mkdir(parents=True)
    (empty / "fmnist" / "x").mkdir()
    make_run(empty, "adam3", 8e-4, 0, 90.0, family="other")       # a run, none of the plan's
    text = build(empty, plans)[0]
    assert "| [t2](#round-3-planned-test-family) | all 2 claims | – | awaiting runs (6 lines of runs to make, " \
           "listed in its section) |" in text
    assert "- selection not finished: run adam3@4e-4 on seeds 0-2" in text


def test_spearman_over_every_run_with_both_scorers(setup):
    results, plans = setup
    fam = judged(results, plans, b={"second": 100.0})
    from scipy.stats import spearmanr
    runs = sorted((r for r in fam.runs if r.status == "finished"), key=lambda r: r.rel)
    rho = spearmanr([r.final("fid_mean") for r in runs], [r.final("fid_mean_fmnist_mlp") for r in runs]).statistic
    text = "\n".join(sections_plan.spearman(fam.runs))
    assert f"over the {len(runs)} finished runs that have both: ρ = {rho:.3f}" in text


def test_the_plans_in_the_checkout_load():
    loaded = {p.family: p for p in plan.load_all()}
    assert set(loaded) >= {"fig2", "fig3", "heterogeneous"}
    assert loaded["fig3"].methods["dosg"].start == 2e-4 and loaded["heterogeneous"].arms["a01_dosg_stab"][3] == 2.56e-2
    assert PLAN["family"] not in loaded


def test_arms_have_no_search_and_are_judged_at_their_fixed_step_sizes(tmp_path):
    results = tmp_path / "results"
    write_plan(tmp_path / "plans", ARMS_PLAN)
    make_run(results, "dadam3", 8e-4, 3, 90.0, family="h", arm="iid/plain")
    fam = family(results, tmp_path / "plans")
    assert fam.queue == ["fresh: run iid_c (iid/plain/lr8e-4/cadam3) on seeds 3-7",
                         "fresh: run iid_d (iid/plain/lr8e-4/dadam3) on seeds 4-7"]
    for s in range(4, 8):
        make_run(results, "dadam3", 8e-4, s, 90.0 + s % 2, family="h", arm="iid/plain")
    for s in range(3, 8):
        make_run(results, "cadam3", 8e-4, s, 90.0 - s % 2, family="h", arm="iid/plain")
    fam = family(results, tmp_path / "plans")
    [row] = fam.rows
    assert fam.queue == [] and row.units == ("iid_d", "iid_c") and row.primary.verdict == "reproduced"
    assert row.primary.wins == 5 and row.holm == "reproduced"


def test_a_choice_at_the_grids_edge_is_not_called_bracketed(setup):
    results, plans = setup
    selection(results, {**SEARCH_DONE, ("oadagrad", 3e-2): 100.0, ("oadagrad", 2e-2): 110.0})
    fam = family(results, plans)
    assert fam.selections["oadagrad"].chosen == 3e-2
    assert fam.selections["oadagrad"].bracket == ("not bracketed: at the grid's edge (below: 2e-2 worse by +10.0; "
                                                  "above: the grid's edge)")


def test_a_selection_mixing_commits_is_not_judged_even_before_it_finishes(setup):
    results, plans = setup
    make_run(results, "adam3", 8e-4, 0, 90.0)
    make_run(results, "adam3", 8e-4, 1, 90.0, commit=OTHER)
    fam = family(results, plans)
    assert all(r.state.startswith("not judged (mixed environments: commits ") for r in fam.rows)


def test_a_run_configured_for_other_iterations_than_the_plans_is_excluded_and_named(setup):
    results, plans = setup
    d = make_run(results, "adam3", 8e-4, 0, 90.0, finished=False)       # 200 of its 5000 iterations so far
    cfg = d / "config_resolved.yaml"
    cfg.write_text(cfg.read_text().replace("iterations: 200", "iterations: 5000"))
    fam = family(results, plans)
    assert fam.excluded == [f"`{d.relative_to(results).as_posix()}`: configured for 5000 iterations, the plan's "
                            "are 200"]
    assert "selection not finished: run adam3@8e-4 on seeds 0-2" in fam.queue


def test_todo_lists_each_seeds_cells_the_queue_names_and_an_unfinished_run_to_resume(setup):
    results, plans = setup
    make_run(results, "adam3", 8e-4, 0, 90.0)
    make_run(results, "adam3", 8e-4, 1, 90.0, finished=False)
    fam = family(results, plans)
    assert sorted(fam.todo) == [0, 1, 2]
    assert "adam3@8e-4" not in fam.todo[0]
    assert "adam3@8e-4" in fam.todo[1] and "adam3@8e-4" in fam.todo[2]      # 1: resumed, 2: not run
    assert fam.todo[0] == ["adam3@4e-4", "adam3@1.6e-3", "oadagrad@1e-2", "oadagrad@2e-2", "oadagrad@3e-2"]


def test_todo_after_the_search_is_the_fresh_seeds_at_the_chosen_cells_then_nothing(setup):
    results, plans = setup
    selection(results, SEARCH_DONE)
    assert family(results, plans).todo == {s: ["adam3@8e-4", "oadagrad@2e-2"] for s in range(3, 8)}
    fresh(results, lambda s: 80.0, lambda s: 95.0 + s)
    assert family(results, plans).todo == {}


def test_next_prints_a_line_a_seed_and_nothing_when_complete_and_an_unknown_family_is_one_line(setup):
    import subprocess
    import sys
    results, plans = setup

    def nxt(name):
        return subprocess.run([sys.executable, "-m", "dadam3.report", "--results", str(results), "--plans",
                               str(plans), "--next", name], capture_output=True, text=True)
    selection(results, SEARCH_DONE)
    r = nxt("t2")
    assert r.returncode == 0 and r.stdout.splitlines() == [f"{s} adam3@8e-4 oadagrad@2e-2" for s in range(3, 8)]
    assert not (results / "REPORT.md").exists()                    # --next writes nothing
    fresh(results, lambda s: 80.0, lambda s: 95.0 + s)
    r = nxt("t2")
    assert (r.returncode, r.stdout) == (0, "")
    r = nxt("fig9")
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"error: --next=fig9: no such plan in {plans} (allowed: t2)"], r.stderr


def test_next_leaves_out_a_seed_whose_runs_ran_on_another_machine_class_with_status_3(setup):
    import subprocess
    import sys
    results, plans = setup
    make_run(results, "adam3", 8e-4, 1, 90.0, machine=here())
    make_run(results, "adam3", 8e-4, 0, 90.0, machine=ELSEWHERE)
    make_run(results, "adam3", 4e-4, 2, 90.0, machine=ELSEWHERE)
    make_run(results, "adam3", 1.6e-3, 2, 90.0, machine=here())     # seed 2 mixes already: left too
    r = subprocess.run([sys.executable, "-m", "dadam3.report", "--results", str(results), "--plans", str(plans),
                        "--next", "t2"], capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()] == ["1"]
    assert [line.split(" left for ")[0] for line in r.stderr.splitlines()] == ["t2: seed 0", "t2: seed 2"]
    both = " and ".join(map(repr, sorted({ELSEWHERE, here()})))
    assert r.stderr.splitlines()[1].startswith(f"t2: seed 2 left for a machine of class {both}, where"), r.stderr
    here_ = [sys.executable, "-m", "dadam3.report", "--results", str(results), "--plans", str(plans), "--here", "t2"]
    r = subprocess.run([*here_, "1", "3"], capture_output=True, text=True)       # seed 3: no runs yet
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = subprocess.run([*here_, "1", "2", "0"], capture_output=True, text=True)
    assert r.returncode == 3 and [line.split(" left for ")[0] for line in r.stderr.splitlines()] == [
        "t2: seed 2", "t2: seed 0"], r.stderr
    r = subprocess.run([*here_, "x1"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "error: --here=x1: FAMILY SEED ...: one or more non-negative integers"], r.stderr
