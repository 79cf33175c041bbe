"""loop.lr_warmup (dadam3/run/trainer.py): iteration k steps with lr · min(1, k / N), both players,
every optimizer alike; the configured lr stays in the optimizers (and checkpoints), so a resume
mid-warm-up ends where an uninterrupted run does, in float64."""
import pytest
import torch

import dadam3.run.trainer as trainer_mod
from dadam3.errors.config import ConfigError
from dadam3.run.schema import train_settings
from trainer_runs import TOY, config, train

LR = 1e-3                                   # the toy preset's
QUIET = ["metrics.every=100", "loop.sample_every=100"]     # no evaluation or samples: not what is tested
F64 = ["dtype=float64", *QUIET]


def _params(t):
    return [p.detach().clone() for net in (t.G, t.D) for p in net.parameters()]


def test_each_iteration_steps_with_the_hand_computed_lr(tmp_path, monkeypatch):
    seen = []
    real = trainer_mod.step_together
    monkeypatch.setattr(trainer_mod, "step_together",
                        lambda opts: (seen.append([g["lr"] for o in opts for g in o.param_groups]), real(opts)))
    t = train(TOY + QUIET + ["optimizer=dosg", "loop.iterations=5", "loop.lr_warmup=4"], tmp_path)
    by_hand = [LR * 1 / 4, LR * 2 / 4, LR * 3 / 4, LR, LR]
    assert [set(lrs) for lrs in seen] == [{lr} for lr in by_hand]
    assert all(g["lr"] == LR for opt in (t.opt_g, t.opt_d) for g in opt.param_groups)


def test_the_first_step_is_a_step_with_lr_over_n(tmp_path):
    warm = train(TOY + F64 + ["loop.iterations=1", "loop.lr_warmup=4"], tmp_path / "warm")
    small = train(TOY + F64 + ["loop.iterations=1", f"optimizer.lr={LR / 4}"], tmp_path / "small")
    for a, b in zip(_params(warm), _params(small)):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=0)


def test_a_resume_mid_warm_up_ends_where_an_uninterrupted_run_does(tmp_path):
    whole = train(TOY + F64 + ["loop.iterations=5", "loop.lr_warmup=4"], tmp_path / "whole")
    train(TOY + F64 + ["loop.iterations=2", "loop.lr_warmup=4"], tmp_path / "run")
    resumed = train(TOY + F64 + ["loop.iterations=5", "loop.lr_warmup=4", f"resume={tmp_path / 'run'}"],
                    tmp_path / "x")
    for a, b in zip(_params(whole), _params(resumed)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("value", ["-1", "2.5", "true"])
def test_the_schema_refuses_a_bad_warm_up_with_one_line(value):
    with pytest.raises(ConfigError, match="loop.lr_warmup") as e:
        train_settings(config(TOY + [f"loop.lr_warmup={value}"]))
    assert "\n" not in str(e.value)
