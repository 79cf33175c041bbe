"""python -m dadam3.plot: seed bands and the summary table from metrics.jsonl, one-line errors."""
import json
import subprocess
import sys

import numpy as np
import pytest

from dadam3.plot import seed_series

from trainer_runs import ROOT


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
    assert x.tolist() == [10, 20] and mean.tolist() == [3.0, 4.0] and np.allclose(std, [2 ** 0.5, 2 ** 0.5])   # sample SD (n − 1)


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
