"""A user's own presets the Hydra way (issue 47 point 4): ``--config-dir DIR`` and
``hydra.searchpath=[file://DIR]`` add options to every group (experiment, optimizer, topology,
dataset, model); the schema checks them as it checks the packaged ones, and an unknown name is
one line listing the options of every search path."""
import json

import pytest

from dadam3.errors.config import ConfigError
from dadam3.run.schema import presets
from dadam3.run.schema.presets import check_group_choices
from dadam3.run.schema import compose, train_settings
from trainer_runs import cli

EXPERIMENT = """# @package _global_
defaults:
  - toy_gaussians
  - override /optimizer: my_dadam3
  - _self_

nodes: 2
loop:
  iterations: 2
  batch_size: 4
  progress: false
model:
  hidden: 8
metrics:
  samples: 20
"""
OPTIMIZER = "defaults:\n  - schema_dadam3\n  - _self_\n\nname: dadam3\nbeta3: 0.25\n"


@pytest.fixture
def user_dir(tmp_path):
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "optimizer").mkdir()
    (tmp_path / "mine" / "experiment" / "my_toy.yaml").write_text(EXPERIMENT)
    (tmp_path / "mine" / "optimizer" / "my_dadam3.yaml").write_text(OPTIMIZER)
    return tmp_path / "mine"


@pytest.fixture
def searchpath(user_dir):
    before = list(presets.SEARCHPATH)
    presets.use_searchpath(["--config-dir", str(user_dir)])
    yield user_dir
    presets.SEARCHPATH[:] = before


def test_both_hydra_ways_name_the_same_directories(user_dir):
    want = [f"file://{user_dir}"]
    assert presets.user_searchpath(["--config-dir", str(user_dir)]) == want
    assert presets.user_searchpath([f"--config-dir={user_dir}"]) == want
    assert presets.user_searchpath([f"hydra.searchpath=[file://{user_dir}]"]) == want


def test_a_users_presets_compose_and_are_checked_like_the_packaged_ones(searchpath):
    assert "my_toy" in presets.group_choices("experiment") and "my_dadam3" in presets.group_choices("optimizer")
    s = train_settings(compose("train", ["experiment=my_toy", "device=cpu"]))
    assert s.optimizer.name == "dadam3" and s.optimizer.hparams["beta3"] == 0.25 and s.loop.iterations == 2
    (searchpath / "optimizer" / "my_dadam3.yaml").write_text(OPTIMIZER.replace("0.25", "-1.0"))
    with pytest.raises(ConfigError, match=r"^optimizer.beta3=-1.0: "):
        train_settings(compose("train", ["experiment=my_toy", "device=cpu"]))


def test_an_unknown_name_lists_the_options_of_every_search_path(searchpath):
    with pytest.raises(ConfigError) as e:
        check_group_choices(["experiment=nope"], ["experiment"])
    line = str(e.value)
    assert line.startswith("experiment=nope: unknown experiment; allowed: ") and "\n" not in line
    assert "my_toy" in line and "toy_gaussians" in line


@pytest.mark.slow
def test_a_users_experiment_runs_from_a_directory_outside_the_package(user_dir, tmp_path):
    run = tmp_path / "run"
    r = cli("--config-dir", str(user_dir), "experiment=my_toy", "device=cpu", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["status"] == "finished"
    r = cli(f"hydra.searchpath=[file://{user_dir}]", "experiment=my_toy", "--cfg", "job")
    assert r.returncode == 0 and "beta3: 0.25" in r.stdout, r.stderr[-3000:]
    r = cli("experiment=my_toy")
    assert r.returncode != 0 and "unknown experiment; allowed: " in r.stderr
