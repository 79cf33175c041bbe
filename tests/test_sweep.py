"""Issue 26 items 2 and 13: sweep jobs that resolve to one directory, and sweeps that can be
rerun (finished jobs skipped, interrupted ones resumed, every record naming its invocation and,
over resume=, the run it resumed). Real processes; each test failed before its fix."""
import json

import pytest

from dadam3.run.loggers import read_jsonl

from test_run_dir import FAST, run_cli
from trainer_runs import SMALL, cli


def statuses(sweep_dir):
    return [json.loads(x) for x in (sweep_dir / "sweep_status.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_jobs_resolving_to_one_directory_never_delete_each_others_results(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("-m", *FAST, "loop.iterations=2", "overwrite=true", "seed=0,1", f"hydra.sweep.dir={sweep}",
                "hydra.sweep.subdir=same")
    assert r.returncode == 1, r.stderr[-3000:]
    jobs = statuses(sweep)
    assert [(j["job"], j["status"]) for j in jobs] == [(0, "finished"), (1, "refused")]
    assert jobs[1]["message"].startswith("error: hydra.sweep.subdir=same: job #1 resolves to ") and \
        "the directory of job #0 of this sweep" in jobs[1]["message"]
    assert "seed: 0\n" in (sweep / "same" / "config_resolved.yaml").read_text()      # job 0's results stay
    assert read_jsonl(sweep / "same" / "metrics.jsonl")[-1]["status"] == "finished"
    assert "error: sweep: 1 of 2 jobs did not finish (#1 " in r.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_rerun_sweep_skips_finished_jobs_and_resumes_interrupted_ones(tmp_path):
    sweep = tmp_path / "sweep"
    args = [*FAST, "loop.iterations=4"]
    assert run_cli(*args, "seed=0", f"hydra.run.dir={sweep / 's0'}").returncode == 0               # finished
    assert run_cli(*FAST, "loop.iterations=2", "seed=1", f"hydra.run.dir={sweep / 's1'}").returncode == 0
    log = sweep / "s1" / "metrics.jsonl"                 # s1 as a SIGTERM at iteration 2 leaves it
    kept = [r for r in read_jsonl(log) if r["status"] != "finished"]
    log.write_text("".join(json.dumps(r) + "\n" for r in kept)
                   + json.dumps({"iteration": 2, "status": "interrupted", "signal": "SIGTERM", "time": 1.0}) + "\n")
    s0 = (sweep / "s0" / "metrics.jsonl").read_bytes()

    r = run_cli("-m", *args, "seed=0,1", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=s${seed}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sweep: all 2 jobs finished" in r.stderr
    jobs = statuses(sweep)
    assert len({j["invocation"] for j in jobs}) == 1 and jobs[0]["invocation"][:4].isdigit()
    assert [(j["job"], j["status"], j["message"]) for j in jobs] == [
        (0, "finished", "finished in an earlier invocation: skipped"), (1, "finished", "")]
    assert jobs[1]["resume"] == str(sweep / "s1") and "resume" not in jobs[0]
    assert (sweep / "s0" / "metrics.jsonl").read_bytes() == s0
    records = read_jsonl(log)
    assert [r["status"] for r in records if r["status"] != "running"] == ["resumed", "finished"]
    assert records[-1]["iteration"] == 4

    # a sweep over resume= of runs made with overrides: resume=DIR alone, each record names its run
    r = run_cli("-m", f"resume={sweep / 's0'},{sweep / 's1'}", "loop.iterations=6",
                f"hydra.sweep.dir={tmp_path / 'more'}", "hydra.sweep.subdir=${hydra.job.num}")
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = statuses(tmp_path / "more")
    assert [(j["resume"], j["status"]) for j in jobs] == [(str(sweep / "s0"), "finished"),
                                                          (str(sweep / "s1"), "finished")]
    assert jobs[0]["invocation"] != statuses(sweep)[0]["invocation"]
    assert read_jsonl(sweep / "s1" / "metrics.jsonl")[-1]["iteration"] == 6
    assert sorted(p.name for p in (tmp_path / "more").iterdir()) == ["multirun.yaml", "sweep_status.jsonl"]  # no jobs


@pytest.mark.slow
def test_a_sweep_runs_every_job_and_sums_up(tmp_path):
    r = cli("-m", *SMALL, "loop.gp_lambda=1e308,10", f"hydra.sweep.dir={tmp_path}",
            "hydra.sweep.subdir=${hydra.job.num}")
    assert r.returncode == 1, r.stderr[-3000:]
    jobs = [json.loads(x) for x in (tmp_path / "sweep_status.jsonl").read_text().splitlines()]
    assert [(j["job"], j["status"], j["exit"]) for j in jobs] == [(0, "diverged", 3), (1, "finished", 0)]
    assert jobs[0]["message"].startswith("error: training diverged: NaN/Inf")
    assert read_jsonl(tmp_path / "1" / "metrics.jsonl")[-1]["status"] == "finished"
    assert read_jsonl(tmp_path / "0" / "metrics.jsonl")[-1]["status"] == "diverged"
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sweep: 1 of 2 jobs did not finish (#0 "), r.stderr
    assert "loop.gp_lambda=1e+308" in last, r.stderr
    assert ": diverged); see " in last and "sweep_status.jsonl" in last


def test_a_job_directory_holding_a_run_of_another_config_is_refused_never_skipped(tmp_path):
    """Issue 33: the sweep's reading of an earlier run in a job's directory (in process): another
    identity is refused naming the directory and the keys; the same one at more iterations
    resumes; a "finished" log with a NaN loss is a diverged run."""
    from dadam3.errors.config import ConfigError
    from dadam3.run.schema import compose
    from dadam3.run.sweep import _earlier_run
    from trainer_runs import train

    from omegaconf import OmegaConf
    from dadam3.run.checkpoint import checkpoint_path, load

    run = tmp_path / "0"
    train([*SMALL, "optimizer.lr=1e-3"], run)
    (run / "config_resolved.yaml").write_text(OmegaConf.to_yaml(load(checkpoint_path(run))["config"]))  # as the CLI
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for change in (["optimizer.lr=7e-3"], ["optimizer.lr=7e-3", "loop.iterations=9"], ["seed=5"]):
        with pytest.raises(ConfigError) as e:
            _earlier_run(run, compose("train", [*SMALL, "optimizer.lr=1e-3", *change]))
        key = change[0].partition("=")[0]
        assert str(e.value).startswith(f"hydra.sweep.dir={run}: holds a run of another config ({key}=")
        assert "neither skipped nor continued" in str(e.value) and "\n" not in str(e.value)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert _earlier_run(run, compose("train", [*SMALL, "optimizer.lr=1e-3"])) == "finished"
    assert _earlier_run(run, compose("train", [*SMALL, "optimizer.lr=1e-3", "loop.iterations=9",
                                               "loop.log_every=1"])) == "resume"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["loss_g"] = "NaN"
    (run / "metrics.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    assert _earlier_run(run, compose("train", [*SMALL, "optimizer.lr=1e-3"])) == "diverged"
    (run / "config_resolved.yaml").unlink()                     # the checkpoint's config says the same
    with pytest.raises(ConfigError, match="holds a run of another config"):
        _earlier_run(run, compose("train", [*SMALL, "optimizer.lr=2e-3"]))


@pytest.mark.slow
def test_a_rerun_sweep_with_other_values_into_the_same_directories_trains_nothing_it_reports(tmp_path):
    """Issue 33's reproducer: optimizer.lr=1e-3,2e-3, then 5e-3,6e-3 (and 7e-3 with more
    iterations) into the same hydra.sweep.dir with hydra.sweep.subdir=${hydra.job.num}: refused,
    the earlier runs untouched, nothing recorded finished."""
    sweep = tmp_path / "sweep"
    args = ["-m", *FAST, "loop.iterations=2", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}"]
    assert run_cli(*args, "optimizer.lr=1e-3,2e-3").returncode == 0
    before = (sweep / "0" / "metrics.jsonl").read_bytes()
    r = run_cli(*args, "optimizer.lr=5e-3,6e-3")
    assert r.returncode == 1 and "error: sweep: 2 of 2 jobs did not finish" in r.stderr, r.stderr[-3000:]
    r = run_cli(*args, "optimizer.lr=7e-3", "loop.iterations=4")
    assert r.returncode == 1, r.stderr[-3000:]
    assert f"error: hydra.sweep.dir={sweep / '0'}: holds a run of another config (optimizer.lr=0.001 there, " \
           "0.007 in this job)" in r.stderr
    jobs = statuses(sweep)
    assert [j["status"] for j in jobs] == ["finished", "finished", "refused", "refused", "refused"]
    assert (sweep / "0" / "metrics.jsonl").read_bytes() == before


@pytest.mark.skipif(__import__("shutil").which("srun") is not None, reason="a SLURM machine")
def test_the_slurm_launcher_without_slurm_is_one_line_before_any_job(tmp_path):
    r = cli("-m", *SMALL, "hydra/launcher=slurm_gpus", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.startswith("error: hydra/launcher (SlurmLauncher) needs SLURM, but srun and sbatch are not on "
                               "PATH") and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert not (tmp_path / "sweep").exists()
