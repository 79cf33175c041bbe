"""loop.lr_warmup (dadam3/gan/iteration.py): iteration k steps with lr · min(1, k / N), both players,
every optimizer alike; the configured lr stays in the optimizers (and checkpoints), so a resume
mid-warm-up ends where an uninterrupted run does, in float64."""
import os
import signal
from pathlib import Path

import pytest
import torch

import dadam3.gan.iteration as iteration
from dadam3.errors.config import ConfigError
from dadam3.errors.stops import RunStopped
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer
from trainer_runs import TOY, config, train

LR = 1e-3                                   # the toy preset's
QUIET = ["metrics.every=100", "loop.sample_every=100"]     # no evaluation or samples: not what is tested
F64 = ["dtype=float64", *QUIET]


def _params(t):
    return [p.detach().clone() for net in (t.G, t.D) for p in net.parameters()]


def test_each_iteration_steps_with_the_hand_computed_lr(tmp_path, monkeypatch):
    seen = []
    real = iteration.step_together
    monkeypatch.setattr(iteration, "step_together", lambda opts, gradients=None: (
        seen.append([g["lr"] for o in opts for g in o.param_groups]), real(opts, gradients)))
    t = train(TOY + QUIET + ["optimizer=dosg", "loop.iterations=5", "loop.lr_warmup=4"], tmp_path)
    by_hand = [LR * 1 / 4, LR * 2 / 4, LR * 3 / 4, LR, LR]
    assert [set(lrs) for lrs in seen] == [{lr} for lr in by_hand]
    assert all(g["lr"] == LR for opt in (t.opt_g, t.opt_d) for g in opt.param_groups)


def stopped_after(overrides, run_dir, k: int):
    """A run stopped by SIGTERM after iteration ``k`` (checkpoint saved), as a user stops one: a
    warm-up longer than the run itself is refused (loop.lr_warmup), so a run stops mid warm-up."""
    t = build_trainer(train_settings(config(overrides)), Path(run_dir))
    real = t.train_step

    def step():
        out = real()
        if t.state.iteration + 1 == k:
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    t.train_step = step
    with pytest.raises(RunStopped):
        t.fit()
    assert t.state.iteration == k
    t.records.logger.finish()                 # what the entry point does after a stop: the directory released
    t.run.lock.release()
    return t


def test_the_first_step_is_a_step_with_lr_over_n(tmp_path):
    warm = stopped_after(TOY + F64 + ["loop.iterations=4", "loop.lr_warmup=4"], tmp_path / "warm", 1)
    small = train(TOY + F64 + ["loop.iterations=1", f"optimizer.lr={LR / 4}"], tmp_path / "small")
    for a, b in zip(_params(warm), _params(small)):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=0)


def test_a_resume_mid_warm_up_ends_where_an_uninterrupted_run_does(tmp_path):
    whole = train(TOY + F64 + ["loop.iterations=5", "loop.lr_warmup=4"], tmp_path / "whole")
    stopped_after(TOY + F64 + ["loop.iterations=5", "loop.lr_warmup=4"], tmp_path / "run", 2)
    resumed = train(TOY + F64 + ["loop.iterations=5", "loop.lr_warmup=4", f"resume={tmp_path / 'run'}"],
                    tmp_path / "x")
    for a, b in zip(_params(whole), _params(resumed)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("value", ["-1", "2.5", "true"])
def test_the_schema_refuses_a_bad_warm_up_with_one_line(value):
    with pytest.raises(ConfigError, match="loop.lr_warmup") as e:
        train_settings(config(TOY + [f"loop.lr_warmup={value}"]))
    assert "\n" not in str(e.value)
