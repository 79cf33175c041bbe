"""dadam3.report.validate (issue 44 point 2) and dadam3.report.multiplicity: every run the report
reads is validated once, each violation a one-line refusal naming file and line (exit 1, nothing
written) or a named exclusion; the reproduction wording, the TOST p and Holm."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

from dadam3.errors.files import DataFileError
from dadam3.report import multiplicity as mt
from dadam3.report import runs as run_files
from dadam3.report.stats import paired
from report_plan_runs import make_run

ROOT = Path(__file__).resolve().parents[1]


def load(results, d):
    return run_files.load_run(results, d, d.parent.name, int(d.name[4:]))


def edit_records(d, change):
    recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    change(recs)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def refusal(results, d) -> str:
    with pytest.raises(DataFileError) as e:
        load(results, d)
    return str(e.value)


def test_records_out_of_order_are_refused_naming_the_line(tmp_path):
    d = make_run(tmp_path, "adam3", 8e-4, 0, 90.0)
    edit_records(d, lambda recs: recs.insert(1, {"iteration": 50, "loss_d": 1.0}))
    assert refusal(tmp_path, d).startswith(f"{d / 'metrics.jsonl'}, line 2: iteration 50 after iteration 100")


def test_a_last_evaluation_without_fid_is_refused(tmp_path):
    d = make_run(tmp_path, "adam3", 8e-4, 0, 90.0)
    edit_records(d, lambda recs: recs[1].pop("fid_mean"))
    assert "line 2: an evaluation record without fid_mean" in refusal(tmp_path, d)
    edit_records(d, lambda recs: (recs[1].update(fid_mean=1.0), recs[1].pop("fid_mean_fmnist_mlp")))
    assert "line 2: an evaluation record without fid_mean_fmnist_mlp" in refusal(tmp_path, d)


def test_a_nan_score_makes_the_run_failed_and_named(tmp_path):
    d = make_run(tmp_path, "adam3", 8e-4, 0, 90.0)
    edit_records(d, lambda recs: recs[1].update(fid_mean="NaN"))
    run = load(tmp_path, d)
    assert run.status == "failed"
    assert run.status_text() == "failed: fid_mean is nan at iteration 200 (metrics.jsonl line 2)"


@pytest.mark.parametrize("field, value, said", [
    ("code_commit", 12345, "code_commit=12345: 40 hex digits (+dirty) belong here"),
    ("code_commit", "abc", "code_commit='abc': 40 hex digits"),
    ("started", "yesterday", "started='yesterday': an ISO time with its UTC offset"),
    ("device_model", 7, "device_model=7: a string belongs here"),
    ("from_iteration", "0", "from_iteration='0': an integer >= 0"),
])
def test_provenance_fields_of_the_wrong_type_are_refused(tmp_path, field, value, said):
    d = make_run(tmp_path, "adam3", 8e-4, 0, 90.0)
    seg = json.loads((d / "provenance.json").read_text())
    seg[0][field] = value
    (d / "provenance.json").write_text(json.dumps(seg))
    assert said in refusal(tmp_path, d)


def test_a_config_whose_step_size_or_seed_disagrees_with_its_folder_is_refused(tmp_path):
    d = make_run(tmp_path, "adam3", 8e-4, 0, 90.0)
    cfg = (d / "config_resolved.yaml").read_text()
    (d / "config_resolved.yaml").write_text(cfg.replace("lr: 0.0008", "lr: 0.0016"))
    assert "config_resolved.yaml: optimizer.lr=0.0016 disagrees with the folder lr8e-4" in refusal(tmp_path, d)
    (d / "config_resolved.yaml").write_text(cfg.replace("seed: 0", "seed: 4"))
    assert "seed=4 disagrees with the folder seed0" in refusal(tmp_path, d)


def test_one_run_in_two_directories_is_refused(tmp_path):
    a = make_run(tmp_path, "adam3", 8e-4, 3, 90.0)
    b = a.parent / "seed03"
    b.mkdir()
    (b / "metrics.jsonl").write_text((a / "metrics.jsonl").read_text())
    assert "the seed folder is spelled 'seed03', not seed3" in refusal(tmp_path, b)
    c = make_run(tmp_path, "adam3", 8e-4, 4, 90.0)
    (c / "run_id").write_text((a / "run_id").read_text())
    e = make_run(tmp_path, "adam3", 8e-4, 5, 90.0)
    (e / "metrics.jsonl").unlink()
    (e / "metrics.jsonl").hardlink_to(a / "metrics.jsonl")
    (e / "run_id").unlink()
    with run_files.one_snapshot():
        run_files.load_run(tmp_path, a, "adam3", 3)
        with pytest.raises(DataFileError, match=f"the same run_id .* as {a}"):
            run_files.load_run(tmp_path, c, "adam3", 4)
        with pytest.raises(DataFileError, match="the same metrics.jsonl \\(hard link\\)"):
            run_files.load_run(tmp_path, e, "adam3", 5)


def test_each_run_is_read_once_per_build(tmp_path):
    d = make_run(tmp_path, "adam3", 8e-4, 0, 90.0)
    with run_files.one_snapshot():
        first = run_files.load_run(tmp_path, d, "adam3", 0)
        (d / "metrics.jsonl").write_text("")             # a writer changed it meanwhile: the snapshot holds
        assert run_files.load_run(tmp_path, d, "adam3", 0).records == first.records
    assert run_files.load_run(tmp_path, d, "adam3", 0).records == []      # the next build reads it again


def test_a_refusal_through_the_command_is_one_line_and_writes_nothing(tmp_path):
    results = tmp_path / "results"
    d = make_run(results, "adam3", 8e-4, 0, 90.0, family="fig2")      # read by the checkout's fig2 plan
    edit_records(d, lambda recs: recs.insert(1, {"iteration": 50, "loss_d": 1.0}))
    r = subprocess.run([sys.executable, "-m", "dadam3.report", "--results", str(results)], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "line 2: iteration 50 after iteration 100" in r.stderr
    assert not (results / "REPORT.md").exists() and not (results / "report").exists()


@pytest.mark.parametrize("diffs, rel, said", [
    ((-30.0, -20.0, -25.0), "≫", "reproduced"),
    ((30.0, 20.0, 25.0), "≫", "contradicted"),
    ((-30.0, 20.0, -5.0), "≫", "not reproduced"),
    ((1.0, -1.0, 0.5), "≈", "reproduced"),
    ((20.3, 19.3, 20.1), "≈", "contradicted"),
    ((-40.0, 30.0, 2.0), "≈", "not reproduced"),
    ((2.0, 4.0, 3.0), "≈", "reproduced"),              # excludes 0 but inside ±10: equal within the margin
])
def test_the_words(diffs, rel, said):
    p = paired({i: d for i, d in enumerate(diffs)}, {i: 0.0 for i in range(len(diffs))})
    assert mt.words(rel, p, 10.0) == said


def test_p_values_and_k_of_n():
    d = (-3.0, 1.0, -2.0, -4.0, 0.5)
    assert mt.p_value("≫", d, 10.0) == pytest.approx(scipy_stats.ttest_rel(d, [0.0] * 5).pvalue, rel=1e-12)
    lo = scipy_stats.ttest_1samp(d, -10.0, alternative="greater").pvalue
    hi = scipy_stats.ttest_1samp(d, 10.0, alternative="less").pvalue
    assert mt.p_value("≈", d, 10.0) == pytest.approx(max(lo, hi), rel=1e-12)
    assert mt.wins("≫", d, 10.0) == 3 and mt.wins("≈", (-11.0, 9.0, 10.0), 10.0) == 2


def test_holm_is_multipletests_and_a_claim_not_judged_enters_with_p_1():
    ps = [0.001, 0.04, None, 0.012]
    reject, adjusted = mt.holm(ps, 0.05)
    ref_reject, ref_adjusted, _, _ = multipletests([0.001, 0.04, 1.0, 0.012], alpha=0.05, method="holm")
    assert reject == list(ref_reject) and adjusted == pytest.approx(list(ref_adjusted), rel=1e-12)
    assert reject == [True, False, False, True]          # 0.04 alone would pass; Holm over 4 claims does not
    assert mt.holm_words("≫", True, "reproduced", -3.0) == "reproduced"
    assert mt.holm_words("≫", True, "contradicted", 3.0) == "contradicted"
    assert mt.holm_words("≈", False, "reproduced", 0.0) == "not reproduced"
    assert mt.holm_words("≈", True, "contradicted", 30.0) == "contradicted"     # tested as a difference
    assert mt.holm_words("≈", True, "reproduced", 1.0) == "reproduced"
    assert not math.isnan(adjusted[2])
