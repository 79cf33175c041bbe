"""Adding an optimizer takes exactly what the README says: the algorithm (a class on a
skeleton: HPARAMS, STATE, SCALARS, scalars, direction), one registry line and one YAML file. Here an
optimistic sign method is added that way (its YAML in a directory on Hydra's search path) and
runs in the GAN trainer and on the synthetic game, whose compiled loop runs the same math
through numba; an algorithm written with a function numba cannot compile falls back to the
torch optimizer there."""
import math
from typing import NamedTuple

import numpy as np
import pytest
import torch
from trainer_runs import TOY, config, train

import dadam3.optim as optim
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_kernels import kernel_for
from dadam3.games.synthetic_run import run_synthetic
from dadam3.optim.hparams import LR, HParam
from dadam3.optim.elementwise import sign
from dadam3.optim.skeletons.optimistic import OptimisticGossip
from dadam3.run_logging import read_jsonl
from dadam3.schema import train_settings


class SignScalars(NamedTuple):
    scale: float


class OptimisticSign(OptimisticGossip):
    """Z_k = (X_{k-1} - eta D_{k-1}) W, D_k = sign(G_k) * scale, X_k = (X_{k-1} - eta D_k) W."""

    HPARAMS = {"lr": LR, "scale": HParam(1.0, 0.0, None, low_open=True)}
    STATE = {"steps": 0.0}
    SCALARS = SignScalars

    @staticmethod
    def scalars(h, k):
        return SignScalars(h.scale)

    @staticmethod
    def direction(g, a, steps):
        return sign(g) * a.scale, steps + 1.0


class TorchSign(OptimisticSign):
    """The same method written with a torch function: numba cannot compile it."""

    @staticmethod
    def direction(g, a, steps):
        return torch.sign(g) * a.scale, steps + 1.0


@pytest.fixture
def osign(tmp_path, monkeypatch):
    monkeypatch.setitem(optim.OPTIMIZERS, "osign", optim.Spec("osign", OptimisticSign))     # the registry line
    (tmp_path / "conf" / "optimizer").mkdir(parents=True)
    (tmp_path / "conf" / "optimizer" / "osign.yaml").write_text("name: osign\nlr: 1.0e-3\nscale: 0.5\n")
    return [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "optimizer=osign"]


def test_a_new_optimizer_trains_a_gan(osign, tmp_path):
    settings = train_settings(config(TOY + osign + ["loop.iterations=4", "loop.checkpoint_every=4"]))
    assert dict(settings.optimizer.hparams) == {"lr": 1e-3, "scale": 0.5}
    t = train(TOY + osign + ["loop.iterations=4", "loop.checkpoint_every=4"], tmp_path / "run")
    recs = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert recs[-1]["status"] == "finished" and math.isfinite(recs[-2]["loss_d"])
    p = next(t.G.parameters())
    assert torch.equal(t.opt_g.state[p]["steps"], torch.full_like(p, 4.0))
    assert set(t.opt_g.state[p]["d"].unique().tolist()) <= {-0.5, 0.0, 0.5}


def test_a_new_optimizer_runs_on_the_synthetic_game(osign):
    game = SyntheticGame(c=1010, k=0.01)
    assert kernel_for(OptimisticSign) is not None                # its math compiles: the numba loop runs it
    kernel = run_synthetic(game, "osign", {"lr": 1e-3}, nodes=3, iterations=50, engine="numba")
    torch_ = run_synthetic(game, "osign", {"lr": 1e-3}, nodes=3, iterations=50, engine="torch")
    np.testing.assert_allclose(kernel.final_point, torch_.final_point, rtol=1e-12, atol=1e-15)
    assert abs(kernel.final_point).max() > 0


def test_math_numba_cannot_compile_runs_through_torch_on_the_synthetic_game(monkeypatch):
    monkeypatch.setitem(optim.OPTIMIZERS, "tsign", optim.Spec("tsign", TorchSign))
    assert kernel_for(TorchSign) is None
    game = SyntheticGame(c=1010, k=0.01)
    kernel = run_synthetic(game, "tsign", {"lr": 1e-3}, nodes=3, iterations=50, engine="numba")
    torch_ = run_synthetic(game, "tsign", {"lr": 1e-3}, nodes=3, iterations=50, engine="torch")
    assert (kernel.final_point == torch_.final_point).all()   # the torch optimizer ran for both


def test_state_may_not_reuse_a_skeleton_buffer_name():
    with pytest.raises(TypeError, match=r"^Clash.STATE names d, a buffer of its skeleton \(x, d\): rename it$"):
        type("Clash", (OptimisticGossip,), {"HPARAMS": {"lr": LR}, "STATE": {"d": 0.0, "m": 0.0}})
