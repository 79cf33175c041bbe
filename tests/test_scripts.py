"""The figure drivers (scripts/is_figure.sh, scripts/toy_gaussians.sh, train_or_resume of
scripts/runs.sh): a diverged run is a result: it is skipped (never resumed again), a run that
diverges now does not stop the later runs, and the figure is still drawn."""
import json
import os
import stat
import subprocess
import sys

import pytest

from trainer_runs import ROOT, snapshot

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

DIVERGED = {"iteration": 3, "status": "diverged", "message": "loss_d of node 0 is nan at iteration 3"}

# A stand-in for python: `-m dadam3.train` writes a run (optimizer=oadagrad diverges, exit 3;
# optimizer=dosg fails, exit 1), anything else (the plot) runs the real python. Logs its calls.
FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [ "$2" != dadam3.train ]; then exec "$REAL_PYTHON" "$@"; fi
nice >> "$FAKE_LOG.nice"                # the niceness the run started at
for a in "$@"; do case $a in hydra.run.dir=*) dir=${a#*=};; optimizer=*) opt=${a#*=};; esac; done
mkdir -p "$dir/samples"
case $opt in
  oadagrad) printf '{"iteration": 2, "status": "running", "is_mean": 1.5, "is_avg_model": 1.6}\n%s\n' \
              '{"iteration": 3, "status": "diverged", "message": "nan"}' > "$dir/metrics.jsonl"; exit 3;;
  dosg) echo "error: something else" >&2; exit 1;;
esac
printf '{"iteration": 2, "status": "running", "is_mean": 2.0, "is_avg_model": 2.1}\n%s\n' \
  '{"iteration": 2, "status": "finished", "time": 1.0}' > "$dir/metrics.jsonl"
touch "$dir/samples/iter_000002_avg.png"
"""


@pytest.fixture
def fake_python(tmp_path):
    path = tmp_path / "fake_python"
    path.write_text(FAKE_PYTHON)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "calls.log"
    env = {**os.environ, "PYTHON": str(path), "FAKE_LOG": str(log), "REAL_PYTHON": sys.executable,
           "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return env, log


def _diverged_run(d, records=()):
    """A run whose last record says diverged, with a checkpoint that cannot be loaded: resuming
    it would fail, so a driver that skips it is the only way to exit 0."""
    (d / "checkpoints").mkdir(parents=True)
    (d / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (*records, DIVERGED)))


def _train_or_resume(env, *lines):
    script = "set -euo pipefail\nPY=$PYTHON\nsource scripts/runs.sh\n" + "\n".join(lines) + "\necho after\n"
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_train_or_resume_skips_a_diverged_run_and_goes_on_after_one_that_diverges(tmp_path, fake_python):
    env, log = fake_python
    _diverged_run(tmp_path / "old")
    r = _train_or_resume(env, f"train_or_resume {tmp_path}/old optimizer=adam3",
                         f"train_or_resume {tmp_path}/new optimizer=oadagrad")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "after", r.stdout + r.stderr
    assert f"{tmp_path}/old: diverged, skipped" in r.stdout and f"{tmp_path}/new: diverged (" in r.stdout
    calls = [c for c in log.read_text().splitlines() if "dadam3.train" in c]
    assert len(calls) == 1 and "optimizer=oadagrad" in calls[0] and "overwrite=true" in calls[0]   # old not resumed


def test_a_finished_run_with_a_non_finite_loss_in_its_log_is_diverged_for_the_drivers(tmp_path, fake_python):
    """Issue 33: a log whose last record says finished but that holds a NaN or -Infinity loss is a
    diverged run (docs/run_contract.md), for train_or_resume as for the report: skipped, not resumed."""
    env, log = fake_python
    for name, bad in (("nan", "NaN"), ("neginf", "-Infinity")):
        d = tmp_path / name
        (d / "checkpoints").mkdir(parents=True)
        (d / "metrics.jsonl").write_text(json.dumps({"iteration": 2, "status": "running", "loss_d": bad}) + "\n"
                                         + json.dumps({"iteration": 4, "status": "finished"}) + "\n")
    r = _train_or_resume(env, f"train_or_resume {tmp_path}/nan optimizer=adam3",
                         f"diverged {tmp_path}/neginf && echo neginf-diverged")
    assert r.returncode == 0 and f"{tmp_path}/nan: diverged, skipped" in r.stdout, r.stdout + r.stderr
    assert "neginf-diverged" in r.stdout
    assert not [c for c in log.read_text().splitlines() if "dadam3.train" in c]


def test_the_drivers_start_each_run_at_the_niceness_NICE_asks_and_refuse_another_in_one_line(tmp_path, fake_python):
    """Each training run starts under ``nice -n $NICE`` (default 10); a NICE that is not 0 to 19
    is one line, exit 2, before any run."""
    env, log = fake_python
    base = os.nice(0)
    for nice, want in ((None, base + 10), ("0", base), ("3", base + 3)):
        run_env = {k: v for k, v in env.items() if k != "NICE"} | ({} if nice is None else {"NICE": nice})
        r = _train_or_resume(run_env, f"train_or_resume {tmp_path}/run{nice} optimizer=adam3")
        assert r.returncode == 0, r.stdout + r.stderr
        assert int((tmp_path / "calls.log.nice").read_text().split()[-1]) == min(want, 19)
    for bad in ("abc", "-5", "20", " 3"):
        r = _train_or_resume({**env, "NICE": bad}, f"train_or_resume {tmp_path}/bad optimizer=adam3")
        assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
        said = "the niceness increment of each run (nice -n): a whole number from 0 to 19"
        assert r.stderr == f"error: NICE={bad}: {said}\n"
    assert not (tmp_path / "bad").exists()


def test_train_or_resume_stops_on_a_failure_that_is_not_a_divergence(tmp_path, fake_python):
    env, _ = fake_python
    r = _train_or_resume(env, f"train_or_resume {tmp_path}/x optimizer=dosg")
    assert r.returncode == 1 and "after" not in r.stdout


@pytest.mark.slow
def test_is_figure_skips_diverged_runs_and_draws_the_figure(tmp_path, fake_python):
    """Figs. 2-4's driver: a run that diverged earlier is skipped, one that diverges now does not
    stop the next; the figure holds every run with an inception score, a diverged one labelled."""
    env, log = fake_python
    env["FIG_OUT"] = str(tmp_path / "results")
    ds = tmp_path / "results" / "fig2" / "cifar10"
    _diverged_run(ds / "adam3")                       # diverged before its first evaluation
    args = ["bash", "scripts/is_figure.sh", "fig2", "cifar10", "adam3 oadagrad dadam3"]
    for attempt in range(2):                           # the rerun trains nothing again
        r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert (ds.parent / "fig2_cifar10_inception_score.png").stat().st_size > 0
        trains = [c for c in log.read_text().splitlines() if "dadam3.train" in c]
        assert [c.split("optimizer=")[1].split()[0] for c in trains] == ["oadagrad", "dadam3"]
        plots = [c for c in log.read_text().splitlines() if "dadam3.plot" in c]
        assert len(plots) == attempt + 1
        assert "--run OAdagrad (diverged)=" in plots[-1] and "--run Dadam3=" in plots[-1] and "Adam3=" not in \
            plots[-1].replace("OAdagrad", "").replace("Dadam3", "")
        assert f"{ds}/adam3: no is_mean record" in r.stderr
    assert (ds / "samples_dadam3.png").exists() and not (ds / "samples_adam3.png").exists()


TINY = ["loop.n_critic=1", "model.hidden=8", "loop.batch_size=8", "loop.iterations=4", "loop.log_every=2",
        "metrics.every=2", "metrics.samples=100", "loop.sample_every=4", "loop.checkpoint_every=2"]


@pytest.mark.slow
def test_toy_gaussians_trains_a_run_without_provenance_again_and_skips_one_with_it(tmp_path, fake_python):
    """A finished run written before runs recorded their code (no provenance.json) is trained again
    in its directory (overwrite=true); a finished run with its provenance.json is skipped."""
    env, log = fake_python
    for opt in ("dadam3", "dosg", "dp_oadam"):
        (tmp_path / opt).mkdir()
        (tmp_path / opt / "metrics.jsonl").write_text('{"iteration": 2, "status": "finished", "time": 1.0}\n')
    (tmp_path / "dosg" / "provenance.json").write_text("{}")
    r = subprocess.run(["bash", "scripts/toy_gaussians.sh"], cwd=ROOT, env={**env, "TOY_OUT": str(tmp_path)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    calls = [c for c in log.read_text().splitlines() if "dadam3.train" in c]
    assert [c.split("optimizer=")[1].split()[0] for c in calls] == ["dadam3", "dp_oadam"]
    assert all("overwrite=true" in c and f"hydra.run.dir={tmp_path}/" in c for c in calls)
    assert f"{tmp_path}/dadam3: no provenance.json (trained before runs recorded their code): trained again" in r.stdout
    assert f"{tmp_path}/dosg: finished, skipped" in r.stdout


def test_toy_gaussians_skips_a_diverged_run_and_draws_the_figure(tmp_path):
    """Real runs at tiny settings: DOSG's directory holds a diverged run (after one evaluation);
    the other two train, the figure is drawn with DOSG labelled diverged, and a rerun trains
    nothing and changes no run's files (it resumes or skips, never deletes)."""
    env = {**os.environ, "PYTHON": sys.executable, "TOY_OUT": str(tmp_path), "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1"}
    _diverged_run(tmp_path / "dosg", [{"iteration": 2, "status": "running", "modes_covered": 1,
                                       "high_quality_share": 0.1, "modes_covered_avg_model": 1,
                                       "high_quality_share_avg_model": 0.1}])
    runs = []
    for attempt in range(2):
        r = subprocess.run(["bash", "-x", "scripts/toy_gaussians.sh", *TINY], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        assert f"{tmp_path}/dosg: diverged, skipped" in r.stdout
        assert r.stdout.count("finished, skipped") == 2 * attempt
        assert "--run 'DOSG (diverged)=" in r.stderr          # bash -x shows the plot's arguments
        assert (tmp_path / "toy_gaussians.png").stat().st_size > 0
        runs.append({opt: snapshot(tmp_path / opt) for opt in ("dadam3", "dosg", "dp_oadam")})
    assert runs[1] == runs[0]                                        # the rerun changed no file
    assert not (tmp_path / "dosg" / "train.log").exists()          # never resumed


@pytest.mark.slow
def test_fig1_script_reproduces_the_committed_files(tmp_path):
    """scripts/fig1_synthetic.sh on a fresh clone changes no committed file: run into a copy of
    results/fig1, every tracked file there comes out byte for byte the same (twice: the second
    run replaces the first's results, overwrite=true). After a change to the synthetic game's
    code or config, regenerate them with `make fig1` and commit."""
    tracked = subprocess.run(["git", "ls-files", "results/fig1"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert {"results/fig1/dadam3/metrics.csv", "results/fig1/dadam3/.hydra/config.yaml",
            "results/fig1/dadam3/provenance.json"} <= set(tracked)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    env = {**os.environ, "PYTHON": sys.executable, "FIG1_OUT": str(tmp_path), "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1"}
    for _ in range(2):
        r = subprocess.run(["bash", "scripts/fig1_synthetic.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
        changed = [f for f in tracked if not f.endswith("/provenance.json")
                   and (tmp_path / f[len("results/fig1/"):]).read_bytes() != (ROOT / f).read_bytes()]
        assert changed == [], changed
        for f in tracked:              # the run's own record: this checkout's commit (whatever it is)
            if f.endswith("/provenance.json"):
                [entry] = json.loads((tmp_path / f[len("results/fig1/"):]).read_text())
                assert entry["code_commit"].removesuffix("+dirty") == head and entry["from_iteration"] == 0


@pytest.mark.parametrize("part, folder, args", [
    ("long", "lr_sweep_long5000/lr8e-4", ["loop.iterations=5000", "optimizer.lr=8e-4"]),
    ("stable", "lr_sweep_warmup500_clip10/lr8e-4",
     ["optimizer.lr=8e-4", "loop.lr_warmup=500", "loop.clip_grad_norm=10"]),
])
def test_the_longer_and_stabilised_experiment_runs_each_part_into_its_variant(tmp_path, fake_python, part, folder,
                                                                               args):
    """experiments/fmnist_longer_and_stabilised.sh (issue 32 point 3): each part is a variant of the
    step-size sweep with its own folder and overrides; a call without PART is refused."""
    env, log = fake_python
    env = {**env, "FMNIST_OUT": str(tmp_path), "PART": part, "CELLS": "cadam3@8e-4", "SEEDS": "0"}
    r = subprocess.run(["bash", "experiments/fmnist_longer_and_stabilised.sh"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / folder / "cadam3" / "seed0" / "metrics.jsonl").is_file()
    [train] = [line.split() for line in log.read_text().splitlines() if line.startswith("-m dadam3.train")]
    assert {"experiment=fmnist_fig3", "optimizer=cadam3", "seed=0", *args} <= set(train), train
    r = subprocess.run(["bash", "experiments/fmnist_longer_and_stabilised.sh"], cwd=ROOT,
                       env={**env, "PART": ""}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "PART=long or PART=stable" in r.stderr


@pytest.mark.slow
def test_the_sweep_runs_a_cell_off_its_grid_once_and_refuses_a_malformed_one_before_any_run(tmp_path, fake_python):
    """CELLS may name a step size the grid lacks (to bracket a best value at its edge): it runs
    once, beside the grid's own cells; a cell that is not METHOD@LR stops the script before a run."""
    env, log = fake_python
    env = {**env, "FMNIST_OUT": str(tmp_path), "SEEDS": "0", "CELLS": "cosg@2.56e-2 adam3@8e-4 cosg@2.56e-2"}
    r = subprocess.run(["bash", "scripts/fmnist_lr_sweep.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    trains = [line.split() for line in log.read_text().splitlines() if line.startswith("-m dadam3.train")]
    assert sorted((t[2], t[3], next(a for a in t if a.startswith("optimizer.lr="))) for t in trains) == [
        ("experiment=fmnist_fig2", "optimizer=adam3", "optimizer.lr=8e-4"),
        ("experiment=fmnist_fig3", "optimizer=cosg", "optimizer.lr=2.56e-2")]
    assert (tmp_path / "lr_sweep" / "lr2.56e-2" / "cosg" / "seed0" / "metrics.jsonl").is_file()
    for bad in ("sgd@1e-3", "dosg@fast", "dosg"):
        r = subprocess.run(["bash", "scripts/fmnist_lr_sweep.sh"], cwd=ROOT, capture_output=True, text=True,
                           env={**env, "CELLS": f"adam3@8e-4 {bad}", "FMNIST_OUT": str(tmp_path / bad)}, timeout=60)
        assert r.returncode == 2 and r.stderr.startswith(f"error: CELLS={bad}: not METHOD@LR") and r.stdout == ""
        assert not (tmp_path / bad).exists()


def test_figure_script_decides_finished_from_the_last_record_only(tmp_path):
    run = tmp_path / "figX" / "fake" / "dadam3"
    run.mkdir(parents=True)
    records = [{"iteration": 80, "status": "finished"}, {"iteration": 80, "status": "resumed"},
               {"iteration": 100, "status": "running"}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    script = ROOT / "scripts" / "runs.sh"             # the figure drivers' train_or_resume
    line = next(x for x in script.read_text().splitlines() if "the last record decides" in x)
    test = line.strip().removeprefix("if ").split("; then")[0].replace('"$dir', f'"{run}')
    assert subprocess.run(["bash", "-c", test]).returncode == 1           # not finished
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"iteration": 120, "status": "finished"}) + "\n")
    assert subprocess.run(["bash", "-c", test]).returncode == 0


def test_copy_runs_writes_the_worktrees_absolute_path_in_a_log_as_results(tmp_path):
    """The trainer logs its run directory absolute; a committed log names no path of this machine."""
    repo, src = tmp_path / "repo", tmp_path / "worktree" / "results"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "copy_runs.sh").write_bytes((ROOT / "scripts" / "copy_runs.sh").read_bytes())
    run = src / "toy" / "a"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "status": "finished"}) + "\n")
    (run / "run_id").write_text("r1\n")
    (run / "train.log").write_text(f"[t][dadam3.train][INFO] - finished 1 iterations in 0.1 s -> {run}\n")
    made_elsewhere = src / "toy" / "lr1.6e-3" / "b"         # made in another checkout, then copied here
    made_elsewhere.mkdir(parents=True)
    for f in ("metrics.jsonl", "run_id"):
        (made_elsewhere / f).write_bytes((run / f).read_bytes())
    (made_elsewhere / "train.log").write_text(
        f"[t][dadam3.train][INFO] - finished 1 iterations in 0.1 s -> {tmp_path}/other/results/toy/lr1.6e-3/b\n")
    r = subprocess.run(["bash", str(repo / "scripts" / "copy_runs.sh"), str(src), "toy"], capture_output=True,
                       text=True, env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stderr
    assert (repo / "results" / "toy" / "a" / "train.log").read_text().endswith("-> results/toy/a\n")
    assert (repo / "results" / "toy" / "lr1.6e-3" / "b" / "train.log").read_text().endswith(
        "-> results/toy/lr1.6e-3/b\n")
    assert (repo / "results" / "toy" / "a" / "run_id").read_text() == "r1\n"
