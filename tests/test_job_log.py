"""dadam3.run.job_log: a run's provenance reads the code's git commit without writing into the
user's repository (``git status`` refreshes the index under ``.git/index.lock`` unless told
not to; a run stopped in that call, by a signal or a file-size limit, left the lock behind)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


def _clone_with_the_package(tmp_path):
    """A clone of this checkout (its dadam3/ only) with the package under test copied over the
    clone's: the index's stat of its files is stale then."""
    clone = tmp_path / "clone"
    _git("clone", "-q", "--no-checkout", str(ROOT), str(clone))
    _git("-C", str(clone), "sparse-checkout", "set", "dadam3")
    _git("-C", str(clone), "checkout", "-q")
    shutil.copytree(ROOT / "dadam3", clone / "dadam3", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return clone


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_the_code_commit_leaves_the_users_index_alone(tmp_path):
    clone = _clone_with_the_package(tmp_path)
    index = clone / ".git" / "index"
    before = index.stat().st_mtime_ns
    said = subprocess.run([sys.executable, "-c", "from dadam3.run.provenance import code_commit; print(code_commit())"],
                          env={**os.environ, "PYTHONPATH": str(clone)}, cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert said.startswith(_git("-C", str(clone), "rev-parse", "HEAD"))
    assert index.stat().st_mtime_ns == before
    assert not (clone / ".git" / "index.lock").exists()


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_a_run_from_a_dirty_checkout_saves_its_diff_and_says_so(tmp_path):
    clone = _clone_with_the_package(tmp_path)
    with open(clone / "dadam3" / "__init__.py", "a") as f:
        f.write("# an uncommitted change\n")
    run = tmp_path / "run"
    run.mkdir()
    code = ("import json, sys; from pathlib import Path; from dadam3.run.job_log import record_provenance as r; "
            "r(Path(sys.argv[1]), 'cpu', 0); r(Path(sys.argv[1]), 'cpu', 7)")
    subprocess.run([sys.executable, "-c", code, str(run)], env={**os.environ, "PYTHONPATH": str(clone)},
                   cwd=tmp_path, capture_output=True, text=True, check=True)
    first, resumed = json.loads((run / "provenance.json").read_text())
    assert first["code_commit"].endswith("+dirty") and first["code_diff"] == "code.diff"
    assert resumed["code_diff"] == ".hydra/resumed_00000007/code.diff"
    for entry in (first, resumed):
        diff = (run / entry["code_diff"]).read_text()
        assert "+# an uncommitted change" in diff and "dadam3/__init__.py" in diff


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_a_rewritten_committed_run_under_results_is_not_dirty_code(tmp_path):
    """make fig1 rewrites results/fig1/ (committed) before the run records its provenance: the code is clean."""
    clone = _clone_with_the_package(tmp_path)
    _git("-C", str(clone), "add", "-A", "dadam3")
    _git("-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the package under test",
         "--allow-empty")
    _git("-C", str(clone), "sparse-checkout", "add", "results/fig1")
    (clone / "results" / "fig1" / "dadam3" / "metrics.csv").unlink()
    code = "from dadam3.run.provenance import code_commit; print(code_commit())"
    said = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(clone)}, cwd=tmp_path,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert said == _git("-C", str(clone), "rev-parse", "HEAD")
    with open(clone / "dadam3" / "__init__.py", "a") as f:       # a change to the code still is
        f.write("# an uncommitted change\n")
    said = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(clone)}, cwd=tmp_path,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert said.endswith("+dirty")


RECORD = ("import sys; from pathlib import Path; from dadam3.run.job_log import record_provenance as r; "
          "r(Path(sys.argv[1]), 'cpu', 0)")
NEEDS_GIT = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                               reason="needs git and a checkout")


@NEEDS_GIT
def test_an_untracked_module_in_the_package_is_dirty_code_and_goes_into_the_diff(tmp_path):
    clone = _clone_with_the_package(tmp_path)
    _git("-C", str(clone), "add", "-A", "dadam3")
    _git("-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the package under test",
         "--allow-empty")
    (clone / "dadam3" / "x.py").write_text("NEW = 'an untracked module'\n")
    run = tmp_path / "run"
    run.mkdir()
    code = RECORD
    subprocess.run([sys.executable, "-c", code, str(run)], env={**os.environ, "PYTHONPATH": str(clone)},
                   cwd=tmp_path, capture_output=True, text=True, check=True)
    [entry] = json.loads((run / "provenance.json").read_text())
    assert entry["code_commit"] == _git("-C", str(clone), "rev-parse", "HEAD") + "+dirty"
    diff = (run / "code.diff").read_text()
    assert "dadam3/x.py" in diff and "+NEW = 'an untracked module'" in diff


@NEEDS_GIT
def test_a_package_inside_someone_elses_repository_records_nothing_of_it(tmp_path):
    """The package copied (as pip installs it) into a folder of the user's own repository, whose
    tracked file holds an uncommitted secret: the run records the installed version and "not a
    checkout", and nothing of that repository (its commit, its diff, its secret)."""
    proj = tmp_path / "myproj"
    (proj / "site").mkdir(parents=True)
    _git("init", "-q", str(proj))
    (proj / "notes.txt").write_text("public\n")
    # even one naming dadam3, above the package's parent
    (proj / "pyproject.toml").write_text('[project]\nname = "dadam3"\n')
    _git("-C", str(proj), "add", "-A")
    _git("-C", str(proj), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "mine")
    (proj / "notes.txt").write_text("public\nSECRET=hunter2\n")
    shutil.copytree(ROOT / "dadam3", proj / "site" / "dadam3", ignore=shutil.ignore_patterns("__pycache__"))
    run = tmp_path / "run"
    run.mkdir()
    code = RECORD
    subprocess.run([sys.executable, "-c", code, str(run)], env={**os.environ, "PYTHONPATH": str(proj / "site")},
                   cwd=proj, capture_output=True, text=True, check=True)
    [entry] = json.loads((run / "provenance.json").read_text())
    assert entry["code_commit"] == "not a checkout" and entry["code_version"]
    assert "code_diff" not in entry
    assert sorted(p.name for p in run.iterdir()) == ["provenance.json"]
    assert _git("-C", str(proj), "rev-parse", "HEAD") not in (run / "provenance.json").read_text()
    assert "hunter2" not in (run / "provenance.json").read_text()
