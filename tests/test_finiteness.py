"""The NaN policy (:mod:`dadam3.gan.finiteness`): a diverged run's message and its last
record name the same iteration."""
import pytest
import torch

import dadam3.run.trainer as trainer_mod
from dadam3.gan.finiteness import TrainingDiverged
from dadam3.run.loggers import read_jsonl

from trainer_runs import TOY, train


def test_divergence_message_and_record_name_the_same_iteration(tmp_path, monkeypatch):
    real_step = trainer_mod.WGANTrainer.train_step

    def poisoned(self):
        out = real_step(self)
        if self.state.iteration + 1 == 3:               # the step of iteration 3 leaves a NaN parameter
            with torch.no_grad():
                next(iter(self.G.parameters()))[1].fill_(float("nan"))
        return out

    monkeypatch.setattr(trainer_mod.WGANTrainer, "train_step", poisoned)
    with pytest.raises(TrainingDiverged) as e:
        train(TOY + ["loop.iterations=8"], tmp_path)
    last = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert last["status"] == "diverged" and last["node"] == 1
    assert f"after iteration {last['iteration']}" in str(e.value)
    assert last["iteration"] == 3                       # checked before its checkpoint
