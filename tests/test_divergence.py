"""loop.diverge_above (dadam3/run/divergence.py) in the trainer: a run whose logged loss passes the
bound stops, naming node and iteration, before the record is written."""
import pytest

from dadam3.gan.finiteness import TrainingDiverged
from dadam3.run.loggers import read_jsonl
from trainer_runs import TOY, train


def test_a_loss_beyond_the_bound_stops_the_run_naming_node_and_iteration(tmp_path):
    with pytest.raises(TrainingDiverged, match=r"loop.diverge_above\), at node \d+, iteration 2"):
        train(TOY + ["loop.iterations=8", "loop.diverge_above=1e-9"], tmp_path)
    last = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert last["status"] == "diverged" and last["iteration"] == 2 and isinstance(last["node"], int)
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 1       # checked before the record is written
