"""experiments/evidence_round3.sh FAMILY next: the whole family phase by phase (the search, then the
fresh seeds at its choice), seed by seed, asking `python -m dadam3.report --next` between phases; a run
that does not finish stops it. Run in a copy of the script beside a stand-in scripts/fmnist_figure.sh
that writes a crafted run (tests/report_plan_runs.py) instead of training."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from report_plan_runs import ELSEWHERE, PLAN, here, make_run

ROOT = Path(__file__).resolve().parent.parent
# every test here runs the script end to end, tens of Python processes: 70-300 s each on a loaded
# 2-core machine, so behind the slow marker (make test-slow, CI); the timeout only catches a hang
pytestmark = pytest.mark.slow
TIMEOUT_S = 1800
STAND_IN = r"""#!/usr/bin/env bash
# NAME EXPERIMENT METHOD SEED optimizer.lr=LR: a crafted run whose final FID is lowest at adam3 8e-4 / oadagrad 2e-2
set -euo pipefail
method=$3 seed=$4 lr=${5#optimizer.lr=}
echo "$seed $method@$lr" >> calls.log
"$PYTHON" - "$method" "$lr" "$seed" <<'PYEOF'
import os, sys
from pathlib import Path
from report_plan_runs import here, make_run
from test_evidence_script import crafted_fid
method, lr, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
make_run(Path("results"), method, lr, seed, crafted_fid(method, lr, seed), finished=os.environ.get("UNFINISHED") != "1",
         machine=here())
PYEOF
"""


def crafted_fid(method: str, lr: float, seed: int) -> float:
    return 100 + (1e5 * abs(lr - 8e-4) if method == "adam3" else 2e3 * abs(lr - 2e-2)) + seed


def project(tmp_path: Path) -> Path:
    (tmp_path / "experiments").mkdir(parents=True)
    shutil.copy(ROOT / "experiments" / "evidence_round3.sh", tmp_path / "experiments")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "fmnist_figure.sh").write_text(STAND_IN)
    (tmp_path / "docs" / "analysis_plan").mkdir(parents=True)
    plan = {**PLAN, "experiment": "fmnist_fig2"}
    (tmp_path / "docs" / "analysis_plan" / "t2.yaml").write_text(yaml.safe_dump(plan, allow_unicode=True))
    (tmp_path / "results").mkdir()
    commit(tmp_path)
    return tmp_path


def commit(repo: Path) -> None:
    """``repo`` a git checkout with everything in it committed: the script runs only from a clean CODE."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "project"], check=True)


def run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
           **env}
    return subprocess.run(["bash", "experiments/evidence_round3.sh", "t2", "next", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def calls(tmp_path: Path) -> list[tuple[int, str]]:
    return [(int(s), c) for s, c in (line.split() for line in (tmp_path / "calls.log").read_text().splitlines())]


def test_next_runs_the_search_then_the_fresh_seeds_at_its_choice_then_stops(tmp_path):
    r = run(project(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "t2: nothing left to run; make report judges it"
    made = calls(tmp_path)
    search = {f"adam3@{lr}" for lr in ("4e-4", "8e-4", "1.6e-3")}
    search |= {f"oadagrad@{lr}" for lr in ("1e-2", "2e-2", "3e-2")}
    assert [s for s, _ in made[:18]] == [0] * 6 + [1] * 6 + [2] * 6        # the search, seed by seed
    assert all({c for s, c in made[:18] if s == k} == search for k in (0, 1, 2))
    assert sorted(made[18:]) == [(s, c) for s in range(3, 8) for c in ("adam3@8e-4", "oadagrad@2e-2")]
    assert [s for s, _ in made[18:]] == sorted(s for s, _ in made[18:])       # seed by seed


def test_next_keeps_only_the_seeds_given_and_waits_for_the_others(tmp_path):
    """A second queue ("1 3 4 5 6 7") beside one that made seeds 0 and 2 of the search."""
    p = project(tmp_path)
    for method, lrs in (("adam3", (4e-4, 8e-4, 1.6e-3)), ("oadagrad", (1e-2, 2e-2, 3e-2))):
        for lr in lrs:
            for s in (0, 2):
                make_run(p / "results", method, lr, s, crafted_fid(method, lr, s), machine=here())
    r = run(p, "1 3 4 5 6 7")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "t2: nothing left to run; make report judges it"
    assert [s for s, _ in calls(p)] == [1] * 6 + [3, 3, 4, 4, 5, 5, 6, 6, 7, 7]


def test_a_queue_with_nothing_of_its_own_says_what_it_waits_for_once_and_asks_again(tmp_path):
    p = project(tmp_path)
    env = {**os.environ, "PYTHON": sys.executable, "POLL_S": "0.2",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    proc = subprocess.Popen(["timeout", "600", "bash", "experiments/evidence_round3.sh", "t2", "next", "3"], cwd=p,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()           # waits for the line, however slow the machine
    time.sleep(6)                            # more polls: none may say it again
    proc.terminate()
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode in (-15, 124, 143) and not (p / "calls.log").exists(), err     # stopped here
    assert first.rstrip("\n") == ("t2: nothing to run on seeds 3 until these are done: 0 adam3@4e-4 adam3@8e-4 "
                                  "adam3@1.6e-3 oadagrad@1e-2 oadagrad@2e-2 oadagrad@3e-2; 1 adam3@4e-4 adam3@8e-4 "
                                  "adam3@1.6e-3 oadagrad@1e-2 oadagrad@2e-2 oadagrad@3e-2; 2 adam3@4e-4 adam3@8e-4 "
                                  "adam3@1.6e-3 oadagrad@1e-2 oadagrad@2e-2 oadagrad@3e-2"), first
    assert rest == "", rest


def test_a_queue_whose_seeds_are_done_stops_once_only_other_seeds_fresh_runs_are_left(tmp_path):
    """Waiting is for the search, whose choice may give this queue more runs; once the search is done,
    the runs left are other seeds' fresh runs at known cells, so it stops (it polled for ever before)."""
    p = project(tmp_path)
    for method, lrs in (("adam3", (4e-4, 8e-4, 1.6e-3)), ("oadagrad", (1e-2, 2e-2, 3e-2))):
        for lr in lrs:
            for s in (0, 1, 2):
                make_run(p / "results", method, lr, s, crafted_fid(method, lr, s), machine=here())
    for method, lr in (("adam3", 8e-4), ("oadagrad", 2e-2)):
        make_run(p / "results", method, lr, 3, crafted_fid(method, lr, 3), machine=here())
    r = run(p, "0 1 2 3", POLL_S="0.2")
    assert r.returncode == 0 and not (p / "calls.log").exists(), r.stderr
    assert r.stdout.splitlines() == ["t2: nothing left to run on seeds 0 1 2 3; the rest is other seeds' fresh runs: "
                                     + "; ".join(f"{s} adam3@8e-4 oadagrad@2e-2" for s in (4, 5, 6, 7))]


def test_runs_that_do_not_finish_stop_it_after_one_pass_naming_them(tmp_path):
    r = run(project(tmp_path), UNFINISHED="1")
    assert r.returncode == 1 and len(calls(tmp_path)) == 18
    [line] = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: t2: still needed after running them: 0 adam3@4e-4 ") and "train.log" in line


def test_a_seed_begun_on_another_machine_class_is_left_for_it_and_the_rest_runs_then_it_stops(tmp_path):
    """Seed 0's search began on another class: running its other cells here would mix classes within
    the seed (the family "not judged"), so they are left, named once, and the queue stops with status 3."""
    p = project(tmp_path)
    make_run(p / "results", "adam3", 8e-4, 0, crafted_fid("adam3", 8e-4, 0), machine=ELSEWHERE)
    r = run(p)
    assert r.returncode == 3, r.stderr
    assert {s for s, _ in calls(p)} == {1, 2} and len(calls(p)) == 12          # seeds 1 and 2's search only
    held = [x for x in r.stderr.splitlines() if x.startswith("t2: seed 0 ")]
    assert held == [f"t2: seed 0 left for a machine of class {ELSEWHERE!r}, where its runs so far ran (this machine: "
                    f"{here()!r}; the plan's one_machine_class_per_seed): adam3@4e-4 adam3@1.6e-3 oadagrad@1e-2 "
                    "oadagrad@2e-2 oadagrad@3e-2"], r.stderr
    assert r.stderr.splitlines()[-1] == ("error: t2: what is left needs another machine class (above); nothing more "
                                         "run here")


def test_explicit_cells_of_a_seed_begun_on_another_machine_class_are_refused_before_any_run(tmp_path):
    """FAMILY SEEDS CELLS asks too: one line for each seed bound to another class, status 3, nothing run;
    the same cells on a seed with no runs elsewhere run."""
    p = project(tmp_path)
    make_run(p / "results", "adam3", 8e-4, 0, crafted_fid("adam3", 8e-4, 0), machine=ELSEWHERE)
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    r = subprocess.run(["bash", "experiments/evidence_round3.sh", "t2", "1 0", "adam3@4e-4"], cwd=p, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 3 and not (p / "calls.log").exists(), r.stderr
    assert r.stderr.splitlines() == [
        f"t2: seed 0 left for a machine of class {ELSEWHERE!r}, where its runs so far ran (this machine: {here()!r}; "
        "the plan's one_machine_class_per_seed)",
        "error: t2: seeds 1 0: a run of the seeds above here would mix machine classes within a seed; nothing run"]
    r = subprocess.run(["bash", "experiments/evidence_round3.sh", "t2", "1", "adam3@4e-4"], cwd=p, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0 and calls(p) == [(1, "adam3@4e-4")], r.stderr


def test_code_runs_the_cells_in_another_checkout_while_this_one_chooses_them(tmp_path):
    """CODE=DIR: the runs are made in DIR (its stand-in, its results/), the plan and the report here;
    a CODE that is not a checkout is one line and runs nothing."""
    here_dir, code = project(tmp_path / "main"), project(tmp_path / "old")
    (here_dir / "scripts" / "fmnist_figure.sh").write_text("echo should not run >> calls.log; exit 1\n")
    for method, lrs in (("adam3", (4e-4, 8e-4, 1.6e-3)), ("oadagrad", (1e-2, 2e-2, 3e-2))):
        for lr in lrs:
            for s in (0, 1, 2):                       # the search is done (in the other checkout)
                make_run(code / "results", method, lr, s, crafted_fid(method, lr, s), machine=here())
    r = run(here_dir, CODE="../old")
    assert r.returncode == 0, r.stderr
    assert not (here_dir / "calls.log").exists() and not any((here_dir / "results").iterdir())
    assert sorted(calls(code)) == [(s, c) for s in range(3, 8) for c in ("adam3@8e-4", "oadagrad@2e-2")]
    r = run(here_dir, "0", CODE=str(tmp_path / "nowhere"))
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"error: CODE={tmp_path / 'nowhere'}: not a checkout of dadam3 (no scripts/fmnist_figure.sh in it); "
        "nothing run"]


def test_a_code_with_uncommitted_changes_or_no_git_is_refused_before_any_run(tmp_path):
    """Every run of a family comes from one clean commit: a CODE whose tracked files changed, or that git
    cannot place, is one line naming it, status 2, nothing run."""
    p = project(tmp_path)
    (p / "scripts" / "fmnist_figure.sh").write_text(STAND_IN + "# edited\n")
    r = run(p)
    assert r.returncode == 2 and not (p / "calls.log").exists(), r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: CODE={p}: uncommitted changes to tracked files (") and "fmnist_figure.sh" in line
    shutil.rmtree(p / ".git")
    r = run(p)
    assert r.returncode == 2 and not (p / "calls.log").exists(), r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: CODE={p}: git cannot say which commit it is (") and line.endswith("nothing run")


@pytest.mark.parametrize("seeds", ["x", "3 99", "-1"])
def test_seeds_that_are_not_the_plans_are_refused_at_once_never_waited_for(seeds, tmp_path):
    """`next "x"` polled for ever: a seed that is not an integer of the plan is one line, status 2."""
    p = project(tmp_path)
    r = run(p, seeds)
    assert r.returncode == 2 and not (p / "calls.log").exists(), r.stderr
    bad = next(s for s in seeds.split() if s not in ("3",))
    assert r.stderr.splitlines() == [f"error: SEEDS: {bad} is not a seed of docs/analysis_plan/t2.yaml (allowed: "
                                     "0 1 2 3 4 5 6 7); nothing run"]
