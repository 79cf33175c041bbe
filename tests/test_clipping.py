"""loop.clip_grad_norm (dadam3/gan/clipping.py) in the trainer: float64 against a hand computation
over a loop of M modules."""
import math

import pytest
import torch

import dadam3.gan.iteration as iteration
from dadam3.gan.clipping import clip_node_grads_
from dadam3.gan.nets import build_nets
from dadam3.gan.stacked import StackedNet
from trainer_runs import TOY, config, train

M = 3


def _nets_with_grads():
    """M different float64 MLP critics, their stacked copy, and the same gradients on both."""
    torch.manual_seed(0)
    modules = [build_nets("mlp", hidden=8)[1].double() for _ in range(M)]
    stacked = StackedNet(modules)
    x = torch.randn(M, 5, 2, dtype=torch.float64)
    stacked(x).pow(2).sum().backward()
    for i, mod in enumerate(modules):
        mod(x[i]).pow(2).sum().backward()
    return modules, stacked


def _hand_clipped(modules, bound):
    """The loop over modules: each module's grads scaled by min(1, bound / ||its grads||)."""
    out = []
    for mod in modules:
        grads = [p.grad.clone() for p in mod.parameters()]
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        out.append([g * min(1.0, bound / norm) for g in grads])
    return out


def _stacked_rows(stacked):
    return [[p.grad[i] for p in stacked.parameters()] for i in range(M)]


def test_huge_bound_changes_nothing():
    _, stacked = _nets_with_grads()
    before = [p.grad.clone() for p in stacked.parameters()]
    clip_node_grads_(stacked, 1e300)
    assert all(torch.equal(a, p.grad) for a, p in zip(before, stacked.parameters()))


def test_small_bound_gives_the_clipped_gradient_of_each_node():
    modules, stacked = _nets_with_grads()
    norms = [math.sqrt(sum(float((p.grad ** 2).sum()) for p in m.parameters())) for m in modules]
    bound = 0.5 * min(norms)                    # every node is clipped
    expected = _hand_clipped(modules, bound)
    clip_node_grads_(stacked, bound)
    for want, got in zip(expected, _stacked_rows(stacked)):
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-15)
        assert math.isclose(math.sqrt(sum(float((g ** 2).sum()) for g in got)), bound, rel_tol=1e-12)


def test_bound_between_norms_clips_only_the_nodes_above_it():
    modules, stacked = _nets_with_grads()
    norms = sorted(math.sqrt(sum(float((p.grad ** 2).sum()) for p in m.parameters())) for m in modules)
    bound = 0.5 * (norms[0] + norms[-1])
    expected = _hand_clipped(modules, bound)
    clip_node_grads_(stacked, bound)
    for want, got in zip(expected, _stacked_rows(stacked)):
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-15)


def test_schema_refuses_a_negative_bound():
    with pytest.raises(Exception, match="loop.clip_grad_norm"):
        from dadam3.run.schema import train_settings
        train_settings(config(TOY + ["loop.clip_grad_norm=-1"]))


def test_trainer_clips_both_players_before_the_step(tmp_path, monkeypatch):
    seen = []
    real = iteration.clip_node_grads_
    monkeypatch.setattr(iteration, "clip_node_grads_", lambda net, b: (seen.append(b), real(net, b)))
    train(TOY + ["loop.iterations=2", "loop.clip_grad_norm=0.25"], tmp_path)
    assert seen == [0.25] * 4                   # two players, two iterations
