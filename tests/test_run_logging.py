import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from dadam3.errors.config import ConfigError
from dadam3.run.loggers import (JsonlLogger, MultiLogger, WandbLogger, build_logger,
                                progress, read_jsonl)
from dadam3.run.schema import train_settings

from trainer_runs import TOY, cli, config


def _strict_lines(path):
    """Parse every line as strict JSON (bare NaN/Infinity tokens are rejected)."""
    def reject(token):
        raise AssertionError(f"non-standard JSON token {token}")
    return [json.loads(line, parse_constant=reject) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------- JSONL

def test_jsonl_roundtrip_of_common_value_types(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    lg = JsonlLogger(path)
    lg.log({"loss_d": torch.tensor(0.25), "loss_g": np.float32(1.5), "lr": 1e-3, "n": np.int64(4),
            "ok": True, "name": "dadam3", "per_node": torch.tensor([1.0, 2.0]),
            "nested": {"a": np.array([1, 2])}}, step=0)
    lg.log({"loss_d": 0.5}, step=1)
    lg.finish()
    assert read_jsonl(path) == [
        {"iteration": 0, "loss_d": 0.25, "loss_g": 1.5, "lr": 1e-3, "n": 4, "ok": True,
         "name": "dadam3", "per_node": [1.0, 2.0], "nested": {"a": [1, 2]}},
        {"iteration": 1, "loss_d": 0.5},
    ]
    assert len(_strict_lines(path)) == 2


def test_jsonl_non_finite_values_are_strings_in_file_and_floats_when_read(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lg = JsonlLogger(path)
    lg.log({"a": float("nan"), "b": torch.tensor(float("inf")), "c": np.float64(-np.inf),
            "d": [1.0, float("nan")]}, step=3)
    lg.finish()
    (raw,) = _strict_lines(path)
    assert raw == {"iteration": 3, "a": "NaN", "b": "Infinity", "c": "-Infinity", "d": [1.0, "NaN"]}
    (back,) = read_jsonl(path)
    assert math.isnan(back["a"]) and back["b"] == math.inf and back["c"] == -math.inf
    assert back["d"][0] == 1.0 and math.isnan(back["d"][1])


def test_jsonl_rejects_unknown_types_and_conflicting_iteration(tmp_path):
    lg = JsonlLogger(tmp_path / "metrics.jsonl")
    with pytest.raises(TypeError, match="object"):
        lg.log({"x": object()}, step=0)
    with pytest.raises(ValueError, match="iteration"):
        lg.log({"iteration": 2, "x": 1.0}, step=3)
    lg.finish()


def _log_range(path, start, stop, **kwargs):
    lg = JsonlLogger(path, **kwargs)
    for it in range(start, stop):
        lg.log({"loss": float(it)}, step=it)
    return lg


def test_resume_from_iteration_truncates_later_records(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _log_range(path, 0, 10).finish()
    with open(path, "a") as f:
        f.write('{"iteration": 10, "loss": ')  # killed mid-line
    _log_range(path, 5, 8, resume_from_iteration=4).finish()
    assert [r["iteration"] for r in read_jsonl(path)] == list(range(8))
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # no temp file left


def test_reopening_drops_torn_last_line_and_appends(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _log_range(path, 0, 2).finish()
    with open(path, "a") as f:
        f.write('{"iteration": 2, "lo')
    _log_range(path, 2, 3).finish()
    assert [r["iteration"] for r in _strict_lines(path)] == [0, 1, 2]


def test_jsonl_log_images_writes_png(tmp_path):
    lg = JsonlLogger(tmp_path / "metrics.jsonl")
    out = lg.log_images("samples/node0", torch.rand(4, 1, 8, 8) * 2 - 1, step=12)
    lg.finish()
    assert out == tmp_path / "images" / "samples_node0" / "00000012.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- factory, fan-out, progress

def test_build_logger_is_jsonl_without_wandb(tmp_path):
    lg = build_logger(tmp_path / "metrics.jsonl")
    assert isinstance(lg, JsonlLogger)
    lg.finish()


def test_wandb_bad_mode_is_config_error(tmp_path):
    with pytest.raises(ConfigError, match="^logger.mode=dryrun: must be one of online, offline, disabled$"):
        WandbLogger(project="p", mode="dryrun", dir=tmp_path)


def test_multilogger_fans_out(tmp_path):
    a, b = JsonlLogger(tmp_path / "a.jsonl"), JsonlLogger(tmp_path / "b.jsonl")
    multi = MultiLogger(a, b)
    multi.log({"x": 1.0}, step=0)
    multi.log({"x": 2.0}, step=1)
    multi.finish()
    assert [r["x"] for r in read_jsonl(tmp_path / "a.jsonl")] == [r["x"] for r in read_jsonl(tmp_path / "b.jsonl")] \
        == [1.0, 2.0]


def test_progress_shows_rate_and_eta_from_resume_point(capsys):
    bar = progress(total=100, initial=40)                   # on stderr, captured
    bar.update(10)
    text = str(bar)
    bar.close()
    assert bar.n == 50 and "50/100" in text and "it/s" in text and "<" in text


# ---------------------------------------------------------------- wandb offline, read back

@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    for var, sub in (("WANDB_DIR", "wandb_dir"), ("WANDB_CACHE_DIR", "wandb_cache"),
                     ("WANDB_CONFIG_DIR", "wandb_config"), ("WANDB_DATA_DIR", "wandb_data")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tmp_path


def _read_wandb_records(run_file):
    """wandb's own reader of the .wandb transaction log: ``wandb leet inspect FILE --json``."""
    wandb_dir = run_file.parent.parent  # <dir>/wandb: the CLI then logs there, not to /tmp
    env = {**os.environ, "WANDB_DIR": str(wandb_dir.parent), "TMPDIR": str(wandb_dir)}
    proc = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", str(run_file), "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_wandb_offline_run_is_written_and_read_back(wandb_env):
    run_dir = wandb_env / "run"
    lg = build_logger(run_dir / "metrics.jsonl", wandb=dict(project="dadam3-test", group="mnist-dadam3",
                      job_type="node-sim", mode="offline", config={"lr": 1e-3, "nodes": 5}))
    for it in range(3):
        lg.log({"loss_d": 0.5 * it, "consensus": torch.tensor(2.0 ** -it), "bad": float("nan")}, step=it)
    lg.log_images("samples", torch.rand(4, 1, 8, 8) * 2 - 1, step=2)
    wandb_id = lg.loggers[1].run_id
    lg.finish()

    # local records are complete on their own
    local = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["loss_d"] for r in local] == [0.0, 0.5, 1.0]
    assert (run_dir / "images" / "samples" / "00000002.png").exists()

    (run_file,) = (run_dir / "wandb").glob(f"offline-run-*/run-{wandb_id}.wandb")
    records = _read_wandb_records(run_file)
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["project"] == "dadam3-test" and run["run_group"] == "mnist-dadam3"
    assert run["job_type"] == "node-sim" and run["run_id"] == wandb_id
    assert run["config"]["update"]["lr"] == 1e-3 and run["config"]["update"]["nodes"] == 5

    history = {}
    for r in records:
        if r["type"] == "history":
            history.setdefault(r["history"]["step"]["num"], {}).update(r["history"]["item"])
    assert sorted(history) == [0, 1, 2]
    assert [history[s]["loss_d"] for s in range(3)] == [0.0, 0.5, 1.0]
    assert [history[s]["consensus"] for s in range(3)] == [1.0, 0.5, 0.25]
    assert all(history[s]["bad"] == "NaN" for s in range(3))
    assert history[2]["samples._type"] == "image-file"
    assert (run_file.parent / "files" / history[2]["samples.path"]).exists()


def test_wandb_disabled_mode_writes_nothing(wandb_env):
    lg = WandbLogger(project="p", group="g", job_type="j", mode="disabled", dir=wandb_env / "run")
    lg.log({"x": 1.0}, step=0)
    lg.log_images("samples", torch.zeros(2, 1, 4, 4), step=0)
    lg.finish()
    assert not (wandb_env / "run" / "wandb").exists()


def test_wandb_mode_comes_from_the_environment_unless_the_config_sets_it(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert train_settings(config(TOY + ["logger=wandb"])).logger.mode == "offline"
    assert train_settings(config(TOY + ["logger=wandb", "logger.mode=disabled"])).logger.mode == "disabled"
    monkeypatch.delenv("WANDB_MODE")
    assert train_settings(config(TOY + ["logger=wandb"])).logger.mode == "online"


@pytest.mark.slow
def test_wandb_without_login_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "c"), WANDB_DIR=str(tmp_path / "d"),
               WANDB_SILENT="true", NETRC=str(tmp_path / "netrc"))
    r = cli(*TOY, "loop.iterations=2", "logger=wandb", f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: logger.mode=online: wandb cannot start") and "wandb login" in r.stderr
