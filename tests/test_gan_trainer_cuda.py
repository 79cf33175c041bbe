"""The CUDA code path, checked without a GPU: whole training iterations with ``device=cuda``
under torch's ``FakeTensorMode``, which makes fake ``cuda:0`` tensors (shapes, dtypes,
devices, no data) on a CPU-only machine and raises ``FakeTensorDeviceMismatchError`` when
an op mixes devices (a CPU tensor with a CUDA one), as a real GPU would.

Checked under fake CUDA (the code users run: ``dadam3.train.build_trainer`` with
``device=cuda``, then ``WGANTrainer.train_step()``):

* building the run: fake images (``dataset=fake``; also preloaded uint8 images, as for
  MNIST/CIFAR) served by ``NodeSampler(device=cuda)``, the node-stacked nets (``dcgan32``,
  ``dcgan64`` at width 1/32, M = 3, batch 2; the MLP) moved to cuda, the two players' node
  optimizers (Dadam3, DOSG, DP-OAdam) with a ``LocalMixer``, the CUDA flags;
* ``train_step()``, simultaneous (n_critic = 1) and alternating (n_critic = 2): the draws
  (data, z, eps), every forward pass of ``wgan_gp_step`` (real and fake through the critic,
  the interpolates), the gradient-penalty objectives, the ``.grad`` writes, the operator
  norm, the NaN checks' tensor work, both optimizers' steps and the gossip rounds (elementwise,
  :mod:`dadam3.mixing.ordered`: IEEE float32 although the run set TF32);
* the backward graphs: every node of every graph handed to ``torch.autograd.grad`` holds
  CUDA metadata and reaches the requested inputs (see "unchecked" for why the engine
  itself does not run);
* the sample hook (``generate``: every node's and the node-averaged model's images;
  ``save_image_grids`` and the logger's grid up to the PNG write), ``mode_coverage`` up to
  its host-side counting, the window sums (``LoggingWindow.add``);
* a checkpoint round trip in memory: ``checkpoint()`` (nets, optimizers, sampler, noise,
  RNG) into a fresh trainer's ``state.load_state_dict()``, which then takes another step;
* that the harness can fail: eps drawn on the CPU, or a CPU leaf in a graph, raises.

Unchecked, and why:

* the backward passes themselves, the penalty's double backward included: torch's autograd
  engine cannot run on fake CUDA tensors without a CUDA driver (torch 2.14.1+cu130 here:
  ``GraphTask::stash_current_streams`` asks the driver about device 0, "hasPrimaryContext
  expects a valid device index"; compare pytorch#92627). ``torch.autograd.grad`` is replaced
  by a stand-in that checks the graph (above) and returns zero gradients of the inputs'
  shapes and devices. So the first-order graphs are checked, the engine's kernels are not,
  and the second-order graph (the gradient of ∇_x̂ D(x̂)) is never built: the stand-in's
  ∇_x̂ D(x̂) is a leaf;
* host reads of device values: a fake tensor has no values, so ``bool()``, ``.item()``,
  ``.tolist()``, ``.numpy()`` and data-dependent shapes raise. Hence: the NaN checks'
  decision (``finiteness.first_false`` is replaced by a check of the mask it receives),
  ``_log`` and ``fit()`` (Python floats for the records), ``consensus_distance``, the
  PNG and scatter-plot writing, ``mode_metrics`` (it moves samples to the CPU first),
  ``torch.save`` of the checkpoint, the inception score (torch-fidelity, weights);
* the CUDA noise generator: ``torch.Generator(device="cuda")`` needs a driver, so the
  noise streams (``NodeNoise``) are built with ``make_generator`` handing out a CPU generator
  here, and fake tensors do not check a generator's device (real torch would refuse a CPU generator for a CUDA draw);
  CUDA RNG states in checkpoints (``torch.cuda`` reports no device); the settings' own check
  (``device=cuda`` is refused without CUDA: the settings are composed for the CPU and their
  ``torch_device`` replaced);
* pinned host memory: ``Tensor.pin_memory`` needs a driver, so it returns the tensor itself
  (the optimizers' step scalars are copied to the device from unpinned memory here);
* host-side state kept as real CPU tensors (sampler and global RNG states) is captured and
  restored outside the fake mode: cloning it under the mode would make fake, empty copies;
* nets are built outside the fake mode, as real CPU modules (as in a real run), and moved
  to cuda inside it: parameters created under the mode cannot be moved (torch swaps fake
  parameters in ``Module.to`` and the swap fails); likewise the deep copies of the nets'
  parameter-free template (real tensors on the meta device) that ``node_module`` and
  ``averaged_module`` start from are made outside it (under it, the copy of a real tensor
  is a fake one, which ``deepcopy`` refuses); the copy's move to cuda runs under the mode;
* ``prefetch=true``: the fetch thread would not be under the (thread-local) fake mode;
  ``split``/``dirichlet`` partitions (their shard bookkeeping reads index tensors on the host);
  numerical agreement with the CPU path (the CPU tests and ``scripts/gpu_benchmarks.sh``).
"""
from __future__ import annotations

import copy
import functools
import types
from pathlib import Path

import pytest
import torch
import torchvision.utils
from hydra import compose, initialize_config_dir
from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException, FakeTensor,
                                           FakeTensorMode, unset_fake_temporarily)

try:   # torch >= 2.12; the GPU machines' torch 2.11, where this suite also runs, raises a plain RuntimeError
    from torch._subclasses.fake_tensor import FakeTensorDeviceMismatchError
except ImportError:
    FakeTensorDeviceMismatchError = RuntimeError

import dadam3.gan.finiteness as finiteness_mod
import dadam3.gan.stacked as stacked_mod
import dadam3.run.state as state_mod
import dadam3.run.start as build_mod
from dadam3.run.config import CONFIG_DIR
from dadam3.data import NodeSampler, TensorImages
from dadam3.gan.cuda_graph import IterationGraph
from dadam3.gan.iteration import GANStep
from dadam3.mixing.ordered import RoundTerms
from dadam3.run.schema import train_settings

CUDA = torch.device("cuda", 0)          # what fake tensors created for "cuda" report
M = 3
IMAGES = ["dataset=fake", "dataset.length=16", "model.width=0.03125", f"nodes={M}", "loop.batch_size=2",
          "loop.progress=false", "metrics.every=0", "cuda.tf32=true"]
TOY = ["experiment=toy_gaussians", "model.hidden=16", f"nodes={M}", "loop.batch_size=2", "loop.n_critic=1",
       "threads=null", "loop.progress=false", "metrics.every=1", "metrics.samples=10", "cuda.tf32=true"]


def cuda_settings(overrides):
    """Settings for a cuda run (composed for the CPU, which the settings check insists on here)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*overrides, "device=cpu"])
    s = train_settings(cfg)
    on_cuda = type("OnCuda", (type(s),), {"torch_device": property(lambda self: torch.device("cuda"))})
    object.__setattr__(s, "__class__", on_cuda)        # the checked settings are frozen
    return s


def outside_fake(fn):
    """``fn`` run with the fake mode switched off (host-side state stays real)."""
    def run(*args, **kwargs):
        with unset_fake_temporarily():
            return fn(*args, **kwargs)
    return run


def graph_nodes(outputs):
    """Every autograd node reachable from ``outputs``."""
    seen, todo = set(), [o.grad_fn for o in outputs if o.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(f for f, _ in node.next_functions if f is not None)
    return seen


class Harness:
    """The stand-ins of the fake-CUDA run, and what they saw."""

    def __init__(self):
        self.grad_calls: list[bool] = []           # create_graph of each autograd.grad
        self.finite_masks: list[tuple] = []        # (device, dtype, shape) of each NaN-check mask
        self.mixes: list[torch.device] = []        # device of each gossip round's output
        self.images: list[tuple] = []              # (file name, device of the images, grid shape)

    def autograd_grad(self, outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
                      only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
        """Checks what the engine would run, returns zeros (the engine cannot run on fake CUDA)."""
        outputs = [outputs] if torch.is_tensor(outputs) else list(outputs)
        inputs = [inputs] if torch.is_tensor(inputs) else list(inputs)
        if grad_outputs is not None:
            grad_outputs = [grad_outputs] if torch.is_tensor(grad_outputs) else list(grad_outputs)
            for go, o in zip(grad_outputs, outputs):
                assert go.device == o.device and go.shape == o.shape, (go, o)
        nodes = graph_nodes(outputs)
        for node in nodes:
            for meta in node._input_metadata:
                assert meta.device == CUDA, f"{node.name()} has an input on {meta.device}"
        leaves = {id(n.variable) for n in nodes if hasattr(n, "variable")}
        for x in inputs:
            assert x.device == CUDA and x.requires_grad, x
            assert (x.grad_fn in nodes) if x.grad_fn is not None else id(x) in leaves, "input not in the graph"
        self.grad_calls.append(create_graph)
        return tuple(torch.zeros_like(x).requires_grad_(create_graph) for x in inputs)

    def first_false(self, mask):
        self.finite_masks.append((mask.device, mask.dtype, tuple(mask.shape)))
        return None                                 # "all finite": a fake tensor has no values

    def make_generator(self, device):
        assert torch.device(device).type == "cuda"
        return torch.Generator()                    # a CUDA generator needs a driver

    def mix_round(self, real):
        def spy(terms, x, out):
            self.mixes.append(out.device)
            return real(terms, x, out)
        return spy

    def save_image(self, tensor, fp, format=None, **kwargs):
        """torchvision's save_image up to the write (the PNG needs values)."""
        grid = torchvision.utils.make_grid(tensor, **kwargs)
        grid.mul(255).add_(0.5).clamp_(0, 255).permute(1, 2, 0).to("cpu", torch.uint8)
        name = Path(getattr(fp, "name", fp)).name       # a file object: errors.files.write_whole's temporary
        if name.startswith(".") and name.endswith(".tmp"):   # .<name>.<pid>.tmp -> <name>
            name = name[1:].rsplit(".", 2)[0]
        self.images.append((name, tensor.device, tuple(grid.shape)))


@pytest.fixture
def fake_cuda(monkeypatch):
    """A fake-CUDA mode with the stand-ins in place; CUDA flags and patches are restored after."""
    h = Harness()
    be = torch.backends
    saved = be.cuda.matmul.fp32_precision, be.cudnn.conv.fp32_precision, be.cudnn.benchmark
    monkeypatch.setattr(build_mod, "build_stacked_nets", outside_fake(build_mod.build_stacked_nets))
    monkeypatch.setattr(build_mod, "NodeNoise", functools.partial(build_mod.NodeNoise, make_generator=h.make_generator))
    monkeypatch.setattr(stacked_mod, "copy", types.SimpleNamespace(deepcopy=outside_fake(copy.deepcopy)))
    monkeypatch.setattr(finiteness_mod, "first_false", h.first_false)
    monkeypatch.setattr(state_mod, "capture_rng_state", outside_fake(state_mod.capture_rng_state))
    monkeypatch.setattr(state_mod, "restore_rng_state", outside_fake(state_mod.restore_rng_state))
    for name in ("state_dict", "load_state_dict"):
        monkeypatch.setattr(NodeSampler, name, outside_fake(getattr(NodeSampler, name)))
    monkeypatch.setattr(torch.autograd, "grad", h.autograd_grad)
    monkeypatch.setattr(RoundTerms, "apply", h.mix_round(RoundTerms.apply))
    monkeypatch.setattr(torchvision.utils, "save_image", h.save_image)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self)   # pinning needs a driver
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            yield h
    finally:
        be.cuda.matmul.fp32_precision, be.cudnn.conv.fp32_precision, be.cudnn.benchmark = saved


def on_cuda(*tensors):
    return all(isinstance(t, FakeTensor) and t.device == CUDA for t in tensors)


def state_tensors(trainer):
    """Every parameter, buffer, gradient and optimizer-state tensor of the trainer."""
    out = [t for net in (trainer.G, trainer.D) for t in (*net.parameters(), *net.buffers())]
    out += [p.grad for net in (trainer.G, trainer.D) for p in net.parameters() if p.grad is not None]
    out += [v for opt in (trainer.opt_g, trainer.opt_d) for st in opt.state.values() for v in st.values()
            if torch.is_tensor(v)]
    return out


@pytest.mark.parametrize("overrides, grads_per_step", [
    (["model=dcgan32", "optimizer=dadam3"], 3),
    (["model=dcgan64", "dataset.image_size=64", "optimizer=dosg"], 3),
    (["model=dcgan32", "optimizer=dp_oadam", "loop.n_critic=2", "topology=complete"], 2 * 2 + 1),
], ids=["dcgan32-dadam3", "dcgan64-dosg", "dcgan32-dp_oadam-alternating"])
def test_training_iterations_on_fake_cuda(fake_cuda, tmp_path, overrides, grads_per_step):
    h = fake_cuda
    s = cuda_settings(IMAGES + overrides)
    t = build_mod.build_trainer(s, tmp_path / "run")
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"          # the CUDA branch set the flags
    assert on_cuda(*state_tensors(t)) and t.sampler.dataset.device.type == "cuda"
    assert on_cuda(t.sampler.next_batch())

    for _ in (1, 2):
        out = t.train_step()                  # its values go into the window, too
        assert on_cuda(*out.values()) and all(v.shape == (M,) for v in out.values())
    t._check_finite()                          # the losses' non-finite iterations, noted on the device; params
    assert on_cuda(*state_tensors(t), *t.state.window.sums.values(), *t.finite.first_bad.values())
    assert len(h.grad_calls) == 2 * grads_per_step and True in h.grad_calls    # the penalty's create_graph
    n_params = sum(1 for net in (t.G, t.D) for _ in net.parameters())
    assert h.finite_masks.count((CUDA, torch.bool, (M,))) == len(h.finite_masks) >= 1 + n_params
    assert h.mixes and all(m == CUDA for m in h.mixes)                          # gossip (elementwise) on cuda
    assert t.opt_g.k == 2 and t.opt_d.k == 2 * s.loop.n_critic

    assert on_cuda(*t.G.node_module(1).parameters(), *t.D.averaged_module().parameters())
    t.samples.write(t.G, 2)
    names = [n for n, _, _ in h.images]
    assert names == [f"iter_000002_node{i:02d}.png" for i in range(M)] + ["iter_000002_avg.png", "00000002.png"]
    size = s.dataset.image_size
    assert [d for _, d, _ in h.images] == [CUDA] * (M + 1) + [torch.device("cpu")]   # the logger's grid: CPU
    assert h.images[0][2] == (3, 8 * (size + 2) + 2, 8 * (size + 2) + 2)

    ckpt = t.checkpoint()
    fresh = build_mod.build_trainer(s, tmp_path / "fresh")
    fresh.state.load_state_dict(ckpt)
    assert fresh.state.iteration == t.state.iteration and fresh.opt_g.k == 2
    for a, b in ((t.G, fresh.G), (t.D, fresh.D), (t.opt_g, fresh.opt_g), (t.opt_d, fresh.opt_d)):
        sa, sb = a.state_dict(), b.state_dict()
        if "state" in sa:
            sa, sb = sa["state"], sb["state"]
            sa = {(i, key): v for i, st in sa.items() for key, v in st.items()}
            sb = {(i, key): v for i, st in sb.items() for key, v in st.items()}
        assert sa.keys() == sb.keys()
        for key, v in sb.items():
            if torch.is_tensor(v):
                assert on_cuda(v) and v.shape == sa[key].shape and v.dtype == sa[key].dtype, key
    assert on_cuda(*state_tensors(fresh))
    fresh.train_step()


def test_mlp_step_and_mode_coverage_on_fake_cuda(fake_cuda, tmp_path):
    """The 2-D toy run: a step of the MLP pair, then mode coverage, whose device work (every
    node's samples and the averaged model's) runs before it counts modes on the CPU."""
    t = build_mod.build_trainer(cuda_settings(TOY), tmp_path)
    out = t.train_step()
    assert on_cuda(*out.values(), *state_tensors(t))
    with pytest.raises((DynamicOutputShapeException, DataDependentOutputException)) as err:
        t.evaluate.score(t.G, 1)
    innermost = [entry for entry in err.traceback if "dadam3" in str(entry.path)][-1]
    assert innermost.name == "mode_metrics" and "nearest[good]" in str(innermost.statement)


def test_preloaded_images_are_served_on_fake_cuda(fake_cuda):
    """MNIST/CIFAR keep their images in one uint8 tensor, moved to the device with the sampler."""
    with unset_fake_temporarily():                           # a real data set, loaded on the CPU
        images = TensorImages(torch.randint(0, 256, (8, 1, 4, 4), dtype=torch.uint8), None, "tiny")
    x = NodeSampler(images, M, 2, device="cuda").next_batch()
    assert on_cuda(x) and x.shape == (M, 2, 1, 4, 4) and x.dtype == torch.float32


def test_the_harness_catches_device_mismatches(fake_cuda, tmp_path, monkeypatch):
    """eps drawn on the CPU (the kind of bug this file is for) fails the step; so does a
    CPU leaf in a graph handed to autograd."""
    t = build_mod.build_trainer(cuda_settings(IMAGES + ["model=dcgan32"]), tmp_path)
    draw = GANStep._draw

    def eps_on_cpu(self):
        real, z, eps = draw(self)
        return real, z, torch.rand(eps.shape, dtype=eps.dtype)

    monkeypatch.setattr(GANStep, "_draw", eps_on_cpu)
    with pytest.raises(FakeTensorDeviceMismatchError):
        t.train_step()

    w = torch.ones(2, requires_grad=True)                    # a CPU parameter, moved for the forward
    loss = (w.to("cuda") * 2).sum()
    with pytest.raises(AssertionError, match="AccumulateGrad has an input on cpu"):
        torch.autograd.grad(loss, [w])


def test_captured_iteration_logic_on_fake_cuda(fake_cuda, tmp_path):
    """cuda.graphs' whole-iteration capture (``IterationGraph``) on fake CUDA, its capture and
    replays emulated: the warm-up and the restore of the state, the gossip's custom op, the step
    scalars written before each replay into the same device tensor the graph reads — all on
    cuda, and nothing reads a value on the host (a fake tensor has none: it would raise)."""
    h = fake_cuda
    t = build_mod.build_trainer(cuda_settings(IMAGES + ["model=dcgan32", "optimizer=dadam3"]), tmp_path / "run")
    t.step.iteration_graph = IterationGraph(t.step._iteration, t.step._draw, (t.G, t.D), (t.opt_d, t.opt_g),
                                            t.state.mixer, warmup=1, emulate=True)
    scalars = []
    for _ in (1, 2):
        out = t.train_step()
        assert t.step.iteration_graph.reason is None and on_cuda(*out.values(), *state_tensors(t))
        scalars.append([f.scalars for opt in (t.opt_d, t.opt_g) for f in opt.flat])
    assert on_cuda(*scalars[0]) and all(a is b for a, b in zip(*scalars))     # one tensor, rewritten in place
    assert t.opt_g.k == t.opt_d.k == 2 and h.mixes and all(m == CUDA for m in h.mixes)
