"""What a resume accepts (:mod:`dadam3.run.checkpoint.resume`, :mod:`dadam3.run.directory`): changed
settings that steer the run take effect and are recorded, keys that fix the run and
checkpoints that are not one or do not fit are refused with one line, before any write."""
import pytest
import torch

from dadam3.run.checkpoint import atomic_save, checkpoint_path, load
from dadam3.errors.config import ConfigError
from dadam3.run.loggers import read_jsonl
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer

from trainer_runs import TOY, config, snapshot, train


def test_resume_applies_a_changed_learning_rate_and_records_it(tmp_path):
    train(TOY + ["loop.iterations=3"], tmp_path / "run")
    t = train(TOY + ["loop.iterations=5", "optimizer.lr=1e-5", f"resume={tmp_path / 'run'}"], tmp_path / "x")
    assert all(g["lr"] == 1e-5 for opt in (t.opt_g, t.opt_d) for g in opt.param_groups)
    recs = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    (resumed,) = [r for r in recs if r["status"] == "resumed"]
    assert resumed["iteration"] == 3
    assert resumed["changed"] == {"loop.iterations": [3, 5], "optimizer.lr": [1e-3, 1e-5]}


@pytest.mark.parametrize("change, key, old", [("topology=complete", "topology.name", "ring"),
                                              ("dtype=float64", "dtype", "float32"),
                                              ("seed=1", "seed", "0"),
                                              ("optimizer=dosg", "optimizer.name", "dadam3")])
def test_resume_refuses_keys_that_fix_the_run(tmp_path, change, key, old):
    train(TOY + ["loop.iterations=3"], tmp_path / "run")
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(TOY + ["loop.iterations=5", change, f"resume={tmp_path / 'run'}"])),
                      tmp_path)
    msg = str(e.value)
    assert e.value.key == key and f"was made with {key}={old}" in msg and "\n" not in msg


@pytest.mark.parametrize("damage", ["sampler", "param_groups", "shape"])
def test_a_checkpoint_that_does_not_fit_leaves_the_log_alone(tmp_path, damage):
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=5"], run)                  # ends off the logging grid
    ckpt = load(checkpoint_path(run))
    if damage == "sampler":
        del ckpt["sampler"]
    elif damage == "param_groups":
        ckpt["opt_g"]["param_groups"] = []
    else:
        ckpt["G"] = {k: torch.zeros(*v.shape[:-1], v.shape[-1] + 1) if v.dim() else v for k, v in ckpt["G"].items()}
    atomic_save(ckpt, checkpoint_path(run))
    before = snapshot(run)
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(TOY + ["loop.iterations=9", f"resume={run}"])), tmp_path / "x")
    assert e.value.key == "resume" and "does not fit this run" in str(e.value) and "\n" not in str(e.value)
    assert snapshot(run) == before


def test_files_that_are_no_checkpoint_are_one_line_before_any_training(tmp_path):
    not_ckpt = tmp_path / "notes.txt"
    not_ckpt.write_text("hello")
    run = tmp_path / "run"
    train(TOY + ["loop.iterations=3"], run)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(checkpoint_path(run).read_bytes()[:2000])
    other = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, other)
    signed = tmp_path / "signed.pt"                        # another program's file, with a checksum file
    atomic_save({"weight": torch.zeros(2)}, signed)
    cases = [(not_ckpt, "not a readable checkpoint"), (truncated, "not a readable checkpoint"),
             (other, "no weights.pt.sha256 beside it, which every checkpoint of this code has"),
             (signed, "not a checkpoint of python -m dadam3.train")]
    for path, says in cases:
        with pytest.raises(ConfigError) as e:
            build_trainer(train_settings(config(TOY + ["loop.iterations=5", f"resume={path}"])), tmp_path / "fresh")
        assert str(e.value).startswith(f"resume={path}: {says}") and "\n" not in str(e.value), str(e.value)
        assert not (tmp_path / "fresh" / "metrics.jsonl").exists()
