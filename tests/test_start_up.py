"""What a run costs besides its work (issue 47): the readers load no torch or numba; the synthetic
runner's import-time objects are frozen out of the cyclic collector's sight."""
import re
import subprocess
import sys

import pytest

from trainer_runs import ROOT


@pytest.mark.parametrize("module", ["dadam3.report.read", "dadam3.report.runs", "dadam3.plot"])
def test_the_plot_and_report_readers_import_no_torch_or_numba(module):
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'numba') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout


@pytest.mark.slow
def test_a_synthetic_run_freezes_its_imports_and_collects_them_at_most_once(tmp_path):
    """The counts of scripts/bench_start_up.py's probe (load-independent): before the freeze, 5 full
    collections over ~290 000 tracked objects; after it, at most one over what the run made."""
    r = subprocess.run([sys.executable, "scripts/bench_start_up.py", "--probe", "dadam3.synthetic", "iterations=1",
                        f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    counts = dict(re.findall(r"(\w+)=(\d+)", r.stderr.splitlines()[-1]))
    assert int(counts["full"]) <= 1 and int(counts["frozen"]) > 100_000, counts
    assert int(counts["tracked"]) < int(counts["frozen"]), counts
