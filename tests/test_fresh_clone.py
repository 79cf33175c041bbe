"""The README's first command on a fresh clone: `make fig1` leaves `git status` empty (issue 47)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
needs_git = pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None
                               or not (ROOT / ".git").exists(), reason="needs git, make and a checkout")


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def fresh_clone(tmp_path) -> Path:
    """A clone of this checkout (without results/fmnist/, for its size) whose last commit adds this
    checkout's uncommitted changes: the code under test, committed."""
    clone = tmp_path / "clone"
    _git("clone", "-q", "--no-checkout", str(ROOT), str(clone), cwd=tmp_path)
    _git("sparse-checkout", "set", "--no-cone", "/*", "!/results/fmnist/", cwd=clone)
    _git("checkout", "-q", _git("rev-parse", "HEAD", cwd=ROOT).strip(), cwd=clone)
    changed = _git("ls-files", "-z", "-m", "-o", "--exclude-standard", cwd=ROOT).split("\0")
    for rel in filter(None, changed):
        if not rel.startswith("results/fmnist/") and (ROOT / rel).is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, clone / rel)
    _git("add", "-A", cwd=clone)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the code under test", "--allow-empty",
         cwd=clone)
    return clone


@pytest.mark.slow
@needs_git
def test_make_fig1_on_a_fresh_clone_leaves_git_status_empty(tmp_path):
    """`make fig1` (with this interpreter's environment as its .venv: no install) runs into the
    untracked outputs/fig1/, compares with the committed results/fig1/ and changes no tracked file."""
    clone = fresh_clone(tmp_path)
    assert _git("status", "--porcelain", cwd=clone) == ""
    venv = Path(sys.executable).parent.parent
    env = {**os.environ, "PYTHONPATH": str(clone)}
    env.pop("FIG1_OUT", None)
    r = subprocess.run(["make", "-o", f"{venv}/.installed", "fig1", f"VENV={venv}"], cwd=clone, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for opt in ("dadam3", "dp_oadam"):
        assert f"fig1: {opt}: reproduced the committed curve to a relative difference of" in r.stdout, r.stdout
        assert (clone / "outputs" / "fig1" / opt / "metrics.csv").is_file()
    assert (clone / "outputs" / "fig1" / "fig1_synthetic.png").is_file()
    assert _git("status", "--porcelain", "--untracked-files=all", cwd=clone) == ""
