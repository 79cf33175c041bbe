"""python -m dadam3.plot: seed bands and the summary table from metrics.jsonl, one-line errors."""
import json
import subprocess
import sys

import numpy as np
import pytest

from dadam3.plot import seed_series

from trainer_runs import ROOT, one_line


def _run(dir_, records):
    dir_.mkdir(parents=True)
    (dir_ / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return dir_


def _plot(*args):
    return subprocess.run([sys.executable, "-m", "dadam3.plot", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def seeds(tmp_path):
    a = _run(tmp_path / "s0", [{"iteration": 10, "status": "running", "is_mean": 2.0, "fid_mean": 50.0},
                               {"iteration": 20, "status": "running", "is_mean": 3.0, "fid_mean": 40.0},
                               {"iteration": 20, "status": "finished", "time": 100.0}])
    b = _run(tmp_path / "s1", [{"iteration": 10, "status": "running", "is_mean": 4.0, "fid_mean": 30.0},
                               {"iteration": 20, "status": "running", "is_mean": 5.0, "fid_mean": 20.0},
                               {"iteration": 20, "status": "finished", "time": 120.0}])
    return a, b


def test_seed_series_is_mean_and_sample_std_at_the_common_iterations(seeds):
    x, mean, std = seed_series(list(seeds), "is_mean")
    assert x.tolist() == [10, 20] and mean.tolist() == [3.0, 4.0]
    assert np.allclose(std, [2 ** 0.5, 2 ** 0.5])                               # the sample SD (n − 1)


def test_summary_table_holds_the_last_values_over_seeds(seeds, tmp_path):
    out = tmp_path / "summary.md"
    r = _plot("summary", "--run", f"Dadam3={seeds[0]},{seeds[1]}", "--out", str(out))
    assert r.returncode == 0, r.stderr
    row = out.read_text().splitlines()[2]
    assert row.startswith("| Dadam3 | 2 | 20 | 4.000 ± 1.414 |") and row.endswith("| 110 |"), row
    assert "30.000 ± 14.142" in row and "sample standard deviation (n − 1)" in out.read_text()


@pytest.mark.parametrize("figure, run, says", [
    ("fidelity", "A=/nonexistent", "expected LABEL=DIR[,DIR...] with DIR/metrics.jsonl"),
    ("fig1", "A=results/fig1/dadam3,results/fig1/dp_oadam", "fig1 draws one run per label, got 2 directories"),
])
def test_bad_runs_are_one_line(tmp_path, figure, run, says):
    r = _plot(figure, "--run", run, "--out", str(tmp_path / "x.png"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


@pytest.mark.parametrize("out, says", [
    ("/proc/x.png", "error: --out=/proc/x.png: cannot be written ("),
    ("o.xyz", "error: --out=o.xyz: needs the suffix of a format matplotlib writes: "),
    ("noext", "error: --out=noext: needs the suffix of a format matplotlib writes: "),
])
def test_an_unwritable_out_is_one_line_before_drawing(seeds, out, says):
    r = _plot("is", "--run", f"A={seeds[0]}", "--out", out)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(says), r.stderr
    assert not (ROOT / out).exists()


def test_summary_to_an_unwritable_path_is_one_line(seeds):
    r = _plot("summary", "--run", f"A={seeds[0]}", "--out", "/proc/x.md")
    assert r.returncode == 2 and r.stderr.startswith("error: --out=/proc/x.md: cannot be written ("), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("runs, says", [
    (["={0}"], "an empty label"),
    ([" ={0}"], "an empty label"),
    (["A={0}", "A={1}"], "the label 'A' twice"),
])
def test_an_empty_or_repeated_label_is_refused(seeds, tmp_path, runs, says):
    args = [a for spec in runs for a in ("--run", spec.format(*seeds))]
    r = _plot("is", *args, "--out", str(tmp_path / "x.png"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("line, says", [
    ("[1, 2]", "record 2 is an array, not a record"),
    ("3", "record 2 is a number, not a record"),
    ('"x"', "record 2 is a string, not a record"),
    ("null", "record 2 is null, not a record"),
    ('{"status": "running"}', "record 2 has iteration=null: not an integer >= 0"),
    ('{"iteration": "20"}', 'record 2 has iteration="20": not an integer >= 0'),
    ('{"iteration": 2.5}', "record 2 has iteration=2.5: not an integer >= 0"),
    ('{"iteration": true}', "record 2 has iteration=true: not an integer >= 0"),
    ('{"iteration": [20]}', "record 2 has iteration=[20]: not an integer >= 0"),
    ('{"iteration": 20, "is_mean": "high"}', 'the record of iteration 20 has is_mean="high": not a number'),
    ('{"iteration": 20, "is_mean": [1]}', "the record of iteration 20 has is_mean=[1]: not a number"),
    ('{"iteration": 20, "is_mean": {"a": 1}}', 'has is_mean={"a": 1}: not a number'),
])
@pytest.mark.parametrize("figure", ["is", "summary"])
def test_json_lines_that_are_not_records_are_one_line(tmp_path, line, says, figure):
    """Lines of metrics.jsonl that parse as JSON but are not a record of the trainer's."""
    d = _run(tmp_path / "r", [{"iteration": 10, "status": "running", "is_mean": 2.0}])
    with open(d / "metrics.jsonl", "a") as f:
        f.write(line + "\n")
    out = tmp_path / ("x.md" if figure == "summary" else "x.png")
    r = _plot(figure, "--run", f"A={d}", "--out", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"error: {d / 'metrics.jsonl'}: ") and says in r.stderr, r.stderr


def test_plot_refuses_bad_inputs_an_unwritable_out_and_a_missing_metric(tmp_path):
    empty, header, corrupt, good = (tmp_path / n for n in ("empty", "header", "corrupt", "good"))
    for d in (empty, header, corrupt, good):
        d.mkdir()
    (empty / "metrics.csv").write_text("")
    (header / "metrics.csv").write_text("iteration,error,avg_grad_sq_norm\n")
    (corrupt / "metrics.jsonl").write_text('{"iteration": 1}\nnot json\n')
    (good / "metrics.jsonl").write_text('{"iteration": 1, "loss_d": 0.5, "status": "running"}\n')
    out = tmp_path / "o.png"
    cases = [(("fig1", "--run", f"a={empty}"), f"error: {empty / 'metrics.csv'}: no rows"),
             (("fig1", "--run", f"a={header}"), f"error: {header / 'metrics.csv'}: no rows"),
             (("toy", "--run", f"a={corrupt}"), f"error: {corrupt / 'metrics.jsonl'}: not a metrics.jsonl"),
             (("toy", "--run", f"a={good}"), f"error: {good / 'metrics.jsonl'} (--run a): no record has modes_covered"),
             (("is", "--run", f"a={good}", "--out", str(tmp_path / "afile" / "x.png")), None)]
    (tmp_path / "afile").write_text("x")
    for args, start in cases:
        r = _plot(*args, *(() if "--out" in args else ("--out", str(out))))
        assert r.returncode == 2, (args, r.stderr)
        one_line(r.stderr, start or f"error: --out={tmp_path / 'afile' / 'x.png'}: its directory exists and is not a "
                                    "directory")
        assert not out.exists()


@pytest.mark.parametrize("said", ["", "stop\n", "go\n"])
def test_wait_draws_only_after_go_on_its_input(tmp_path, said):
    """--wait (scripts/fig1_synthetic.sh starts the plot beside its runs): nothing is read or written
    before a line arrives; 'go' draws, its input's end or another line exits 0 with nothing written."""
    out = tmp_path / "fig.png"
    r = subprocess.run([sys.executable, "-m", "dadam3.plot", "fig1", "--wait", "--run", "A=results/fig1/dadam3",
                        "--out", str(out)], cwd=ROOT, input=said, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.exists() == (said == "go\n") and (r.stdout == f"wrote {out}\n" if out.exists() else r.stdout == "")
