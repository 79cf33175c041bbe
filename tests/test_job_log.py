"""dadam3.job_log: a run's provenance reads the code's git commit without writing into the
user's repository (``git status`` refreshes the index under ``.git/index.lock`` unless told
not to; a run stopped in that call, by a signal or a file-size limit, left the lock behind)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_the_code_commit_leaves_the_users_index_alone(tmp_path):
    clone = tmp_path / "clone"
    _git("clone", "-q", "--no-checkout", str(ROOT), str(clone))
    _git("-C", str(clone), "sparse-checkout", "set", "dadam3")
    _git("-C", str(clone), "checkout", "-q")
    # the package under test, over the clone's: the index's stat of its files is stale now
    shutil.copytree(ROOT / "dadam3", clone / "dadam3", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    index = clone / ".git" / "index"
    before = index.stat().st_mtime_ns
    said = subprocess.run([sys.executable, "-c", "from dadam3.job_log import _code_commit; print(_code_commit())"],
                          env={**os.environ, "PYTHONPATH": str(clone)}, cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert said.startswith(_git("-C", str(clone), "rev-parse", "HEAD"))
    assert index.stat().st_mtime_ns == before
    assert not (clone / ".git" / "index.lock").exists()
