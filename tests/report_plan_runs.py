"""Crafted plans and run directories for the report's plan-driven tests (tiny, in tmp dirs)."""
from __future__ import annotations

import json
import os
import zlib
import subprocess
from pathlib import Path

import yaml

COMMIT = "eda9b562c32f8f2a575d1ebb4118539c7672361c"
OTHER = "a4eee30338838d42b8924707ef46339427cea2e0"
XEON, EPYC = "Intel(R) Xeon(R) Processor", "AMD EPYC 7B13"
ELSEWHERE = "Test CPU of no real machine"      # a class that is never this machine's
PLAN_TIME = "2026-01-01T00:00:00+00:00"
AFTER, BEFORE = "2026-01-02T00:00:00+00:00", "2025-12-31T00:00:00+00:00"

PLAN = {
    "family": "t2", "title": "Test family", "paper": "a claim", "runs": "results/fmnist/round3/t2", "iterations": 200,
    "methods": {"adam3": {"grid": [2.0e-4, 4.0e-4, 8.0e-4, 1.6e-3, 3.2e-3], "start": 8.0e-4},
                "oadagrad": {"grid": [1.0e-2, 2.0e-2, 3.0e-2], "start": 2.0e-2}},
    "selection": {"seeds": [0, 1, 2], "measure": "final", "bracket_margin": 5.0},
    "fresh_seeds": [3, 4, 5, 6, 7], "fresh_min": 5,
    "claims": [{"a": "adam3", "rel": "≫", "b": "oadagrad", "measure": "final"},
               {"a": "adam3", "rel": "≈", "b": "oadagrad", "measure": "final"}],
    "test": {"alpha": 0.05, "equivalence_margin": 10.0, "correction": "holm"},
}


def write_plan(directory: Path, plan: dict = PLAN, commit_time: str | None = PLAN_TIME) -> Path:
    """``directory/<family>.yaml``; committed in a fresh git repository at ``commit_time`` (None: not in git)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{plan['family']}.yaml"
    path.write_text(yaml.safe_dump(plan, allow_unicode=True))
    if commit_time is not None:
        env = {**os.environ, "GIT_COMMITTER_DATE": commit_time, "GIT_AUTHOR_DATE": commit_time,
               "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t"}
        for cmd in (["git", "init", "-q"], ["git", "add", path.name], ["git", "commit", "-qm", "plan"]):
            subprocess.run(cmd, cwd=directory, check=True, env=env, capture_output=True)
    return path


def lr_name(lr: float) -> str:
    mantissa, exponent = f"{lr:.6e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def here() -> str:
    """This machine's class as a run's provenance records it."""
    from dadam3.run.job_log import device_model
    return device_model("cpu")


def make_run(results: Path, method: str, lr: float, seed: int, fid: float, second: float | None = None,
             commit: str = COMMIT, machine: str = XEON, started: str | None = AFTER, family: str = "t2",
             finished: bool = True, arm: str = "") -> Path:
    """A run of the family's layout (``arm``: an arm's ``<data>/<setting>`` folders) whose FID falls
    linearly to ``fid`` (second scorer: to ``second``)."""
    d = results / "fmnist" / "round3" / family / arm / f"lr{lr_name(lr)}" / method / f"seed{seed}"
    d.mkdir(parents=True)
    second = fid if second is None else second
    own = zlib.crc32(d.relative_to(results).as_posix().encode()) % 1000 * 1e-12     # each run logs its own losses
    recs = []
    for k, frac in ((100, 0.0), (200, 1.0)):
        f, g = 400.0 + frac * (fid - 400.0), 400.0 + frac * (second - 400.0)
        recs.append({"iteration": k, "loss_d": 1.0 + k / 1000 + own, "fid_mean": f, "is_mean": 2.0, "kid_mean": 1.0,
                     "fid_mean_fmnist_mlp": g, "is_mean_fmnist_mlp": 2.0, "kid_mean_fmnist_mlp": 1.0})
    if finished:
        recs.append({"iteration": 200, "status": "finished"})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    cfg = {"seed": seed, "nodes": 1, "optimizer": {"name": method, "lr": lr}, "loop": {"iterations": 200}}
    (d / "config_resolved.yaml").write_text(yaml.safe_dump(cfg))
    seg = {"from_iteration": 0, "code_commit": commit, "device_model": machine, "torch": "2", "python": "3.11"}
    if started is not None:
        seg["started"] = started
    (d / "provenance.json").write_text(json.dumps([seg]))
    (d / "run_id").write_text(f"{family}-{method}-{lr}-{seed}\n")
    return d


def selection(results: Path, fids: dict, **kw) -> None:
    """Selection seeds 0-2 at each (method, lr) -> fid (fid + seed per seed)."""
    for (method, lr), fid in fids.items():
        for s in (0, 1, 2):
            make_run(results, method, lr, s, fid + s, **kw)


SEARCH_DONE = {("adam3", 4e-4): 120.0, ("adam3", 8e-4): 90.0, ("adam3", 1.6e-3): 130.0,
               ("oadagrad", 1e-2): 150.0, ("oadagrad", 2e-2): 110.0, ("oadagrad", 3e-2): 140.0}

ARMS_PLAN = {
    "family": "h", "title": "Arms", "runs": "results/fmnist/round3/h",
    "arms": {"iid_d": ["iid", "plain", "dadam3", 8.0e-4], "iid_c": ["iid", "plain", "cadam3", 8.0e-4]},
    "fresh_seeds": [3, 4, 5, 6, 7], "fresh_min": 5,
    "claims": [{"a": "iid_d", "rel": "≈", "b": "iid_c", "measure": "final"}],
    "test": {"alpha": 0.05, "equivalence_margin": 10.0, "correction": "holm"},
}
