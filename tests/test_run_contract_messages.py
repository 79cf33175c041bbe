"""Issue 60, provenance that says what it knows and messages that name the real cause, each
table-driven through the real command line: git asked in a clean environment about the package
(``unknown (why)`` when it cannot say; an exported ``GIT_DIR``/``GIT_WORK_TREE`` never records
another repository), ``code.diff`` of the package only; one line naming the keys that can fix an
impossible Dirichlet split, a resume's keys judged on its run's config, a preset's error naming
its key and file, a missing config directory and a shadowed user preset said, ``NICE`` honoured
(docs/run_contract.md, "Provenance" and "Messages name the real cause")."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_run_contract import ROOT, cli, said

NEEDS_GIT = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                               reason="needs git and a checkout")


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of this checkout at its HEAD, the package under test copied over it and committed."""
    c = tmp_path_factory.mktemp("code") / "clone"
    _git("clone", "-q", "--no-checkout", str(ROOT), str(c))
    _git("-C", str(c), "sparse-checkout", "set", "--no-cone", "/*", "!/results/")
    _git("-C", str(c), "checkout", "-q")
    shutil.copytree(ROOT / "dadam3", c / "dadam3", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    _git("-C", str(c), "add", "-A", "dadam3")
    _git("-C", str(c), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "under test", "--allow-empty")
    return c


def _other_repository(tmp_path: Path) -> Path:
    other = tmp_path / "other"
    other.mkdir()
    _git("init", "-q", str(other))
    (other / "secret.txt").write_text("public\n")
    _git("-C", str(other), "add", "-A")
    _git("-C", str(other), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "theirs")
    (other / "secret.txt").write_text("SECRET=hunter2\n")
    return other


def _copy(clone: Path, tmp_path: Path) -> Path:
    """A clone of ``clone`` sharing its objects (cheap), checked out the same way."""
    c = tmp_path / "code"
    _git("clone", "-q", "--shared", "--no-checkout", str(clone), str(c))
    _git("-C", str(c), "sparse-checkout", "set", "--no-cone", "/*", "!/results/")
    _git("-C", str(c), "checkout", "-q")
    return c


def _git_off_path(code, tmp_path):
    return {"PATH": str(tmp_path / "nothing")}


def _git_dir_exported(code, tmp_path):
    return {"GIT_DIR": str(_other_repository(tmp_path) / ".git")}


def _git_dir_and_work_tree_exported(code, tmp_path):
    other = _other_repository(tmp_path)
    return {"GIT_DIR": str(other / ".git"), "GIT_WORK_TREE": str(other)}


def _foreign_owner(code, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the checkout to another user")
    for d, dirs, files in os.walk(code):
        for n in dirs + files:
            os.lchown(os.path.join(d, n), 65534, 65534)
    os.lchown(code, 65534, 65534)
    return {}


def _damaged_git(code, tmp_path):
    (code / ".git" / "HEAD").write_text("garbage\n")
    return {}


def _a_change_outside_the_package(code, tmp_path):
    with open(code / "README.md", "a") as f:
        f.write("a change outside the package\n")
    return {}


def _a_change_inside_the_package(code, tmp_path):
    with open(code / "dadam3" / "__init__.py", "a") as f:
        f.write("# a change inside the package\n")
    return {}


PROVENANCE = {      # case: (set the code and the environment up, the code_commit recorded, a code.diff?)
    "git off PATH": (_git_off_path, "unknown (git is not installed or not on PATH)", False),
    "GIT_DIR of another repository exported": (_git_dir_exported, "HEAD", False),
    "GIT_DIR and GIT_WORK_TREE of another repository": (_git_dir_and_work_tree_exported, "HEAD", False),
    "a checkout of another user": (_foreign_owner, "unknown (git: the checkout belongs to another user and git "
                                                   "refuses it (safe.directory))", False),
    "a damaged .git": (_damaged_git, "unknown (git: ", False),
    "a change outside the package": (_a_change_outside_the_package, "HEAD", False),
    "a change inside the package": (_a_change_inside_the_package, "HEAD+dirty", True),
}


@NEEDS_GIT
@pytest.mark.parametrize("case", PROVENANCE)
def test_provenance_says_what_it_knows(clone, tmp_path, case):
    setup, commit, diff = PROVENANCE[case]
    code = _copy(clone, tmp_path)
    head = _git("-C", str(code), "rev-parse", "HEAD")
    env = {**os.environ, "PYTHONPATH": str(code), **setup(code, tmp_path)}
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "dadam3.synthetic", "iterations=50", f"hydra.run.dir={run}"], env=env,
                       cwd=code, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    [segment] = json.loads((run / "provenance.json").read_text())
    assert segment["code_commit"].startswith(commit.replace("HEAD", head)), segment
    if not commit.startswith("HEAD"):
        assert segment["code_version"], segment               # what it knows: the installed version
    assert (run / "code.diff").exists() == diff and ("code_diff" in segment) == diff
    if diff:
        text = (run / "code.diff").read_text()
        assert "dadam3/__init__.py" in text and "README.md" not in text
    assert "hunter2" not in "".join(p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())


# ---------------------------------------------------------------- messages that name the real cause

def _user_dir(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / f"{name}.yaml").write_text(text)
    return tmp_path / "conf"


BAD_PRESET = "# @package _global_\ndefaults:\n  - toy_gaussians\n  - _self_\noptimizer:\n  lrr: 0.1\n"
SHADOW = "# @package _global_\ndefaults:\n  - override /dataset: gaussians\n  - override /model: mlp\noptimizer:\n" \
         "  lr: 0.0042\n"
MESSAGES = {    # case: (the command line, given tmp_path; exit status; the one line)
    "an impossible Dirichlet split": (
        lambda t: ["dadam3.train", "dataset=fake", "dataset.length=100", "model=dcgan32", "nodes=20",
                   "loop.batch_size=8", "dataset.partition=dirichlet", "dataset.alpha=1000", "device=cpu",
                   f"hydra.run.dir={t / 'run'}"], 2,
        "error: loop.batch_size=8: dataset.partition=dirichlet gives each of nodes=20 its own samples, at least "
        "batch_size=8 each: 160 samples, but the data set has 100; lower loop.batch_size to <= 5 or nodes to <= 12"),
    "an error in a user's preset": (
        lambda t: ["dadam3.train", "--config-dir", str(_user_dir(t, "bad", BAD_PRESET)), "experiment=bad",
                   f"hydra.run.dir={t / 'run'}"], 2,
        "error: optimizer.lrr=0.1: set by the preset experiment=bad ({t}/conf/experiment/bad.yaml): Key 'lrr' not in"),
    "a missing --config-dir": (
        lambda t: ["dadam3.train", "--config-dir", str(t / "nope"), "experiment=toy_gaussians",
                   f"hydra.run.dir={t / 'run'}"], 2,
        "error: --config-dir={t}/nope: is not a directory: the user's config directory (its presets) must exist"),
    "a missing hydra.searchpath folder": (
        lambda t: ["dadam3.synthetic", f"hydra.searchpath=[file://{t / 'nope'}]", f"hydra.run.dir={t / 'run'}"], 2,
        "error: hydra.searchpath={t}/nope: is not a directory"),
    "a user's preset named like a packaged one": (
        lambda t: ["dadam3.train", "--config-dir", str(_user_dir(t, "toy_gaussians", SHADOW)),
                   "experiment=toy_gaussians", f"hydra.run.dir={t / 'run'}"], 2,
        "error: experiment=toy_gaussians: the package's "),
    "iterations beyond an int64 counter": (
        lambda t: ["dadam3.synthetic", "iterations=1000000000000000000000", f"hydra.run.dir={t / 'run'}"], 2,
        "error: iterations=1000000000000000000000: must be an integer in [1, 4611686018427387904]"),
}


@pytest.mark.parametrize("case", MESSAGES)
def test_a_message_names_the_real_cause_in_one_line_before_anything_is_made(tmp_path, case):
    argv, status, start = MESSAGES[case]
    module, *args = argv(tmp_path)
    r = cli(module, *args, timeout=300)
    assert r.returncode == status, r.stderr[-2000:]
    assert [x for x in r.stderr.splitlines() if x.strip()] == [said(r.stderr)[0]], r.stderr[-2000:]
    assert said(r.stderr)[0].startswith(start.format(t=tmp_path)), r.stderr
    assert not (tmp_path / "run").exists()


def test_a_resumes_given_key_is_judged_on_its_runs_config(tmp_path):
    """A Dirichlet run resumed with another dataset.alpha: the one line says the key cannot change
    (it fixes the data), not "only used with dataset.partition=dirichlet" (the defaults' partition)."""
    run = tmp_path / "run"
    data = ["dataset=fake", "dataset.length=200", "model=dcgan32", "model.width=0.0625", "nodes=2",
            "loop.batch_size=4", "metrics.every=0", "device=cpu", "loop.progress=false", "loop.sample_every=100",
            "loop.checkpoint_every=100"]
    r = cli("dadam3.train", *data, "dataset.partition=dirichlet", "dataset.alpha=1", "loop.iterations=2",
            f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli("dadam3.train", f"resume={run}", "dataset.alpha=0.5", "loop.iterations=3")
    assert r.returncode == 2 and said(r.stderr) == [
        f"error: dataset.alpha=0.5: cannot change on resume: {run}/checkpoints/last.pt was made with "
        "dataset.alpha=1.0; start a new run to change it"], r.stderr[-2000:]


def test_fig1_synthetic_runs_under_nice(tmp_path):
    """NICE=N reaches both runs (a python stand-in reports its niceness); a NICE that is no
    increment is one line before anything runs."""
    log, shim = tmp_path / "nice.log", tmp_path / "py"
    shim.write_text(f"#!/bin/sh\necho \"$(cut -d' ' -f19 /proc/self/stat) $*\" >> {log}\n"
                    "case \"$*\" in *dadam3.plot*) read -r go;; esac\nexit 0\n")      # the plot waits for its "go"
    shim.chmod(0o755)
    env = {**os.environ, "PYTHON": str(shim), "FIG1_OUT": str(tmp_path / "out")}
    base = int(open("/proc/self/stat").read().split()[18])
    r = subprocess.run(["bash", "scripts/fig1_synthetic.sh", "iterations=10"], cwd=ROOT, capture_output=True,
                       text=True, env={**env, "NICE": "7"})
    assert r.returncode == 0, r.stderr
    runs = [line.split() for line in log.read_text().splitlines() if "dadam3.synthetic" in line]
    assert len(runs) == 2 and all(int(n) == min(base + 7, 19) for n, *_ in runs), runs
    r = subprocess.run(["bash", "scripts/fig1_synthetic.sh"], cwd=ROOT, capture_output=True, text=True,
                       env={**env, "NICE": "high"})
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "error: NICE=high: the niceness increment of each run (nice -n): a whole number from 0 to 19"]
