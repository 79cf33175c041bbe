"""cuda.graphs: the static-buffer gradient evaluation (captured on CUDA) equals the normal path, falls
back with one line where it cannot capture, and a training run reads nothing on the host between
logging points."""
from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dadam3.errors.config import ConfigError
from dadam3.gan.cuda_graph import GraphedGradients, IterationGraph, capture_obstacle, iteration_obstacle
from dadam3.gan.stacked import build_stacked_nets
from dadam3.run.state import RunOutputs
from dadam3.run.trainer import WGANTrainer
from dadam3.run.start import build_trainer
from dadam3.run.schema import train_settings
from dadam3.gan.wgan_gp import wgan_gp_step
from trainer_runs import TOY, config, train

F64 = torch.float64
M, B = 3, 2


def _pair():
    torch.manual_seed(0)
    G, D = build_stacked_nets("dcgan32", M, width=1 / 16, identical_init=False)
    return G.double(), D.double()


def _inputs(step):
    gen = torch.Generator().manual_seed(100 + step)
    return (torch.rand(M, B, 3, 32, 32, generator=gen, dtype=F64) * 2 - 1,
            torch.randn(M, B, 100, generator=gen, dtype=F64), torch.rand(M, B, generator=gen, dtype=F64))


def _state(G, D):
    return {**{f"G.{k}": v.clone() for k, v in G.state_dict().items()},
            **{f"D.{k}": v.clone() for k, v in D.state_dict().items()},
            **{f"grad.{i}": p.grad.clone() for i, p in enumerate([*G.parameters(), *D.parameters()])}}


def test_static_buffer_path_equals_the_normal_path_in_float64():
    """On the CPU the graph path runs eagerly on its static buffers: same values, same grads, same
    BatchNorm statistics, iteration after iteration (the parameters change in between)."""
    G, D = _pair()
    G2, D2 = _pair()
    steps = iter(range(3))
    graphed = GraphedGradients(G2, D2, lambda: _inputs(next(steps)))
    for step in range(3):
        ref = wgan_gp_step(G, D, *_inputs(step))
        out = graphed()
        assert graphed.reason == "the run is on cpu, not a CUDA device"
        for k in ref:
            torch.testing.assert_close(out[k], ref[k], rtol=1e-13, atol=1e-13)
        want, got = _state(G, D), _state(G2, D2)
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-13, atol=1e-13, msg=k)
        with torch.no_grad():                      # a step that moves the parameters
            for net in (G, D, G2, D2):
                for p in net.parameters():
                    p.sub_(1e-3 * p.grad)


def test_capture_obstacles_are_one_line_each():
    G, D = _pair()
    assert capture_obstacle(G, D, torch.device("cpu")) == "the run is on cpu, not a CUDA device"
    G.layers[1].momentum = None
    if torch.cuda.is_available():
        assert "momentum=None" in capture_obstacle(G.cuda(), D.cuda(), torch.device("cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_replay_equals_eager():
    G, D = (n.cuda() for n in _pair())
    G2, D2 = (n.cuda() for n in _pair())
    steps = iter(range(3))
    graphed = GraphedGradients(G2, D2, lambda: [t.cuda() for t in _inputs(next(steps))])
    for step in range(3):
        ref = wgan_gp_step(G, D, *[t.cuda() for t in _inputs(step)])
        out = graphed()
        assert graphed.reason is None and graphed.graph is not None
        for k in ref:
            torch.testing.assert_close(out[k], ref[k], rtol=1e-12, atol=1e-12)
        want, got = _state(G, D), _state(G2, D2)
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-12, atol=1e-12, msg=k)


def train_with_graphs(overrides, run_dir):
    """``train()`` with the trainer's graph path switched on whatever the device: the config
    refuses cuda.* keys on the CPU (they mean nothing there), so the built trainer's parts go
    to a trainer whose run says ``graphs=True``; the library falls back with its one line."""
    t = build_trainer(train_settings(config(overrides)), Path(run_dir))
    t = WGANTrainer(t.state, t.s, replace(t.run, graphs=True), RunOutputs(t.records, t.checkpointer, t.samples,
                                                                         t.evaluate))
    t.fit()
    t.finish()
    return t


def test_trainer_with_graphs_on_cpu_falls_back_once_and_equals_the_eager_run(tmp_path, caplog):
    overrides = TOY + ["loop.iterations=6", "nodes=3", "dtype=float64"]
    with pytest.raises(ConfigError, match=r"cuda.graphs=true: only used with a CUDA device \(not device=cpu, nor"):
        train(overrides + ["cuda.graphs=true"], tmp_path / "refused")
    reference = train(overrides, tmp_path / "eager")
    with caplog.at_level(logging.WARNING):
        t = train_with_graphs(overrides, tmp_path / "graphs")
    said = [r.getMessage() for r in caplog.records if "cuda.graphs" in r.getMessage()]
    assert said == ["cuda.graphs=true: running eagerly: the run is on cpu, not a CUDA device"]
    for net, ref in ((t.G, reference.G), (t.D, reference.D)):
        for k, v in net.state_dict().items():
            torch.testing.assert_close(v, ref.state_dict()[k], rtol=1e-13, atol=1e-13, msg=k)


class HostReads(TorchDispatchMode):
    """Counts reads of tensor values on the host: ``item``/``bool``/``float``/``int`` (all
    ``aten._local_scalar_dense``) and, through a patch, ``Tensor.tolist``."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("graphs", ["false", "true"])
def test_training_reads_nothing_on_the_host_between_logging_points(tmp_path, monkeypatch, graphs):
    quiet = ["loop.log_every=60", "metrics.every=0", "loop.sample_every=1000", "loop.checkpoint_every=1000",
             "nodes=3"]
    run = train_with_graphs if graphs == "true" else train
    reads = {}
    for iterations in (30, 60):
        counter = HostReads()
        tolist = torch.Tensor.tolist

        def counted_tolist(self, _counter=counter, _tolist=tolist):
            _counter.count += 1
            return _tolist(self)
        monkeypatch.setattr(torch.Tensor, "tolist", counted_tolist)
        with counter:
            run(TOY + quiet + [f"loop.iterations={iterations}"], tmp_path / str(iterations))
        monkeypatch.setattr(torch.Tensor, "tolist", tolist)
        reads[iterations] = counter.count
    assert 0 < reads[60] <= 30, reads
    assert reads[60] == reads[30], reads      # the 30 extra iterations read nothing


def test_static_buffer_path_under_bf16_autocast_agrees_with_the_normal_path():
    """The graph path's autocast (weight-cast cache off, as capture needs) computes what the
    trainer's autocast does."""
    G, D = (n.float() for n in _pair())
    G2, D2 = (n.float() for n in _pair())
    inputs = [t.float() for t in _inputs(0)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = wgan_gp_step(G, D, *inputs)
    out = GraphedGradients(G2, D2, lambda: inputs, autocast=True)()
    for k in ref:
        torch.testing.assert_close(out[k], ref[k], rtol=1e-6, atol=1e-6)
    for p, q in zip([*G.parameters(), *D.parameters()], [*G2.parameters(), *D2.parameters()]):
        assert q.grad.dtype == torch.float32
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-6, atol=1e-6)


# ---- the whole iteration (issue 34 point 2) -------------------------------------------------------

def _trainer(tmp_path, name, overrides):
    return build_trainer(train_settings(config(TOY + ["nodes=3", "dtype=float64", *overrides])), tmp_path / name)


def _opt_state(t):
    return [t.clone() for opt in (t.opt_d, t.opt_g) for flat in opt.flat
            for t in (flat.param_buf, *flat.state.values())]


@pytest.mark.parametrize("overrides", [["optimizer.beta1_decay=0.9"],          # step scalars that change with k
                                       ["optimizer=dosg", "topology.rounds=2", "loop.clip_grad_norm=0.5"],
                                       ["optimizer=extra_adam", "loop.clip_grad_norm=0.5"]])   # two gradients
def test_emulated_iteration_graph_equals_the_plain_iteration(tmp_path, overrides):
    """The captured iteration's logic on the CPU: :class:`IterationGraph` with ``emulate=True``
    warms up on the real state (then restored), "captures" with the host's effects undone, and
    per iteration does what a replay cannot — the step counters, the step scalars written
    before the replay, the byte counts. Outputs, parameters, optimizer state, step counters and
    byte counts equal the plain iterations' bit for bit, and the replays read no tensor value
    on the host."""
    plain, graphed = _trainer(tmp_path, "plain", overrides), _trainer(tmp_path, "graphed", overrides)
    g = graphed
    graph = IterationGraph(g.step._iteration, g.step._draw, (g.G, g.D), (g.opt_d, g.opt_g), g.state.mixer, warmup=2,
                           emulate=True)
    g.step.iteration_graph = graph
    for step in range(3):
        reads = HostReads()
        with reads if step else contextlib.nullcontext():
            got = g.train_step()
        want = plain.train_step()
        assert graph.reason is None and (step == 0 or reads.count == 0), (graph.reason, reads.count)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), step
        assert all(torch.equal(a, b) for a, b in zip(_opt_state(g), _opt_state(plain))), step
        assert [o.k for o in (g.opt_d, g.opt_g)] == [o.k for o in (plain.opt_d, plain.opt_g)] == [step + 1] * 2
        assert (g.state.mixer.bytes_sent == plain.state.mixer.bytes_sent).all()


def test_iteration_graph_needs_a_static_local_gossip():
    from dadam3.mixing import LocalMixer
    from dadam3.topologies import build_topology
    assert iteration_obstacle(LocalMixer(build_topology("ring", 4))) is None and iteration_obstacle(None) is None
    said = iteration_obstacle(LocalMixer(build_topology("one_peer_exponential", 4)))
    assert said == "the topology is time-varying (each step mixes with another matrix)"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_iteration_graph_replay_equals_eager(tmp_path):
    """On a GPU: the captured iteration (gradients, both Dadam3 steps, the Triton gossip)
    replayed against the eager iterations, float32, TF32 off."""
    cuda = ["device=cuda", "dtype=float32", "optimizer.beta1_decay=0.9", "cuda.tf32=false"]
    plain = build_trainer(train_settings(config(TOY + ["nodes=3", *cuda])), tmp_path / "plain")
    t = build_trainer(train_settings(config(TOY + ["nodes=3", *cuda, "cuda.graphs=true"])), tmp_path / "graphed")
    assert t.step.iteration_graph is not None
    for step in range(4):
        got, want = t.train_step(), plain.train_step()
        assert t.step.iteration_graph.reason is None and t.step.iteration_graph.graph is not None
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, msg=f"{step} {k}")
        for a, b in zip(_opt_state(t), _opt_state(plain)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=str(step))
    assert (t.state.mixer.bytes_sent == plain.state.mixer.bytes_sent).all()
