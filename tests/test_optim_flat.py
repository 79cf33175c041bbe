"""The flat-buffer optimizers against the per-parameter ones they replaced (float64).

``reference_optim`` is the optimizer code of commit 1e7f3a7 verbatim (one tensor at a
time, a matmul per tensor per gossip round). The flat path (parameters, gradients and state
as views of ``[n, P]`` buffers) with its CPU default (the same math compiled by numba), its
eager torch form, its compiled form (``compile=True``: ``torch.compile`` of the same ``update``)
and the joint step of two optimizers (:func:`step_together`, one mixer call
per round for both) must give the same parameters and state, on several parameter tensors
of different shapes, a maximising group, a time-varying topology and changing gradients.
"""
from functools import partial

import pytest
import torch
from reference_optim import REFERENCE

from dadam3.mixing import LocalMixer
from dadam3.optim import OPTIMIZERS, build_optimizer
from dadam3.optim import step_together
from dadam3.optim.flat import same_memory
from dadam3.topologies import build_topology

M = 4
SHAPES = [(3, 2, 2), (5,), (1,), (2, 3)]
HP = {"dadam3": dict(lr=0.05, beta1=0.6, beta2=0.9, beta3=0.3, eps=1e-3, beta1_decay=0.9, lambda0=0.01),
      "dosg": dict(lr=0.05), "oadagrad": dict(lr=0.05, delta=1e-2),
      "dp_oadam": dict(lr=0.05, beta1=0.5, beta2=0.9, eps=1e-3), "dadam": dict(lr=0.05, beta1=0.5, beta2=0.9, eps=1e-3),
      "dsgd": dict(lr=0.05), "extra_adam": dict(lr=0.05, beta1=0.5, beta2=0.9, eps=1e-3)}


def leaves(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(M, *s, generator=gen, dtype=torch.float64).requires_grad_() for s in SHAPES]


def groups(params):
    return [{"params": params[:2]}, {"params": params[2:], "maximize": True}]


def grads(step, params):
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]


def set_grads_at(step, params, dtype=torch.float64):
    """A gradient that depends on the point (step's draw + p / 4), into .grad: the step's callback
    (called once before a step, and again inside an extra-gradient step)."""
    for p, g in zip(params, grads(step, params)):
        p.grad = g.to(dtype) + p.detach() / 4


def mixer(topology):
    kw = {"p": 0.7, "seed": 3} if topology == "erdos_renyi" else {}
    return LocalMixer(build_topology(topology, M, 1, **kw))


def run_reference(name, topology, steps=4):
    params = leaves(0)
    opt = REFERENCE[name](groups(params), mixer(topology), **HP[name])
    for k in range(steps):
        for p, g in zip(params, grads(k, params)):
            p.grad = g
        opt.step()
    return params, opt


@pytest.mark.parametrize("topology", ["ring", "one_peer_exponential"])
@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_flat_step_equals_per_parameter_step(name, topology):
    ref_params, ref = run_reference(name, topology)
    params = leaves(0)
    opt = build_optimizer(name, groups(params), mixer(topology), compile=False, **HP[name])
    for k in range(4):
        for p, g in zip(params, grads(k, params)):
            if p.grad is None:
                p.grad = g
            else:
                p.grad.copy_(g)                    # in place, as the trainer writes gradients
        opt.step()
    for p, q in zip(params, ref_params):
        torch.testing.assert_close(p, q, rtol=1e-13, atol=1e-13)
        assert set(opt.state[p]) == {k for k, v in ref.state[q].items() if torch.is_tensor(v)}
        for key, value in opt.state[p].items():
            torch.testing.assert_close(value, ref.state[q][key], rtol=1e-13, atol=1e-13)


def run_flat(name, steps=4, eager=False, dtype=torch.float64):
    params = [p.detach().to(dtype).requires_grad_() for p in leaves(0)]
    opt = build_optimizer(name, groups(params), mixer("one_peer_exponential"), engine="eager" if eager else "auto",
                          **HP[name])
    for k in range(steps):
        opt.step(partial(set_grads_at, k, params, dtype))
    return params, opt


@pytest.mark.parametrize("name", sorted(HP))
def test_numba_step_equals_eager_torch_step(name):
    """The CPU's default update (numba) and the eager torch update of the same ``direction``."""
    params, opt = run_flat(name)
    ref_params, ref = run_flat(name, eager=True)
    assert opt.engine.name == "numba"
    for p, q in zip(params, ref_params):
        torch.testing.assert_close(p, q, rtol=1e-14, atol=1e-15)
        for key, value in opt.state[p].items():
            torch.testing.assert_close(value, ref.state[q][key], rtol=1e-14, atol=1e-15)
    params32, opt32 = run_flat(name, dtype=torch.float32)      # float32 buffers: numba computes in float32/64
    assert opt32.engine.name == "numba"
    for p, q in zip(params32, ref_params):
        torch.testing.assert_close(p.double(), q, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dadam3", "dp_oadam", "oadagrad"])
def test_compiled_step_equals_eager_step(name):
    """compile=True compiles each round's phase into one kernel; changing scalars (beta1_k, bias
    corrections, read from the scalars tensor) do not recompile it."""
    from torch._dynamo.utils import counters
    ref_params, ref = run_reference(name, "ring", steps=3)
    params = leaves(0)
    opt = build_optimizer(name, groups(params), mixer("ring"), compile=True, **HP[name])
    counters.clear()
    graphs = []
    for k in range(3):
        for p, g in zip(params, grads(k, params)):
            p.grad = g
        opt.step()
        graphs.append(counters["stats"]["unique_graphs"])
    for p, q in zip(params, ref_params):
        torch.testing.assert_close(p, q, rtol=1e-13, atol=1e-13)
        for key, value in opt.state[p].items():
            torch.testing.assert_close(value, ref.state[q][key], rtol=1e-13, atol=1e-13)
    assert graphs == [2 * len(opt.ROUNDS)] * 3       # one per round and group's buffer width, at the first step


@pytest.mark.parametrize("name", ["dadam3", "dosg", "dp_oadam", "extra_adam"])
def test_stepping_together_equals_stepping_one_by_one(name):
    """step_together([opt_d, opt_g]) mixes both players' buffers in one call per round."""
    results = []
    for joint in (False, True):
        a, b = leaves(0), leaves(1)
        mx = mixer("ring")
        calls = []
        original = mx.mix
        mx.mix = lambda tensors, k=1, out=None: (calls.append(len(tensors)), original(tensors, k, out=out))[1]
        opt_a = build_optimizer(name, a, mx, compile=False, **HP[name])
        opt_b = build_optimizer(name, b, mx, compile=False, **HP[name])
        calls.clear()
        for k in range(3):
            set_a, set_b = partial(set_grads_at, k, a), partial(set_grads_at, k + 10, b)
            if joint:
                set_a(), set_b()
                step_together([opt_b, opt_a], lambda: (set_a(), set_b()))
            else:
                opt_b.step(set_b)
                opt_a.step(set_a)
        cls = OPTIMIZERS[name].cls
        rounds = sum(rnd.gossip for rnd in cls.ROUNDS)             # DP-OAdam, ExtraAdam: one exchange per step
        assert calls == ([2] * rounds * 3 if joint else [1] * rounds * 6)
        results.append([p.detach().clone() for p in a + b])
    for p, q in zip(*results):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_views_survive_checkpoints_and_replaced_tensors():
    params = leaves(0)
    opt = build_optimizer("dadam3", params, mixer("ring"), compile=False, **HP["dadam3"])
    for p, g in zip(params, grads(0, params)):
        p.grad = g
    opt.step()
    state = opt.state_dict()
    saved = [p.detach().clone() for p in params]
    # a second optimizer over fresh leaves, loaded from the first: same next step
    params2 = leaves(5)
    opt2 = build_optimizer("dadam3", params2, mixer("ring"), compile=False, **HP["dadam3"])
    opt2.load_state_dict(state)
    with torch.no_grad():
        for p, s in zip(params2, saved):
            p.copy_(s)
    for ps in (params, params2):
        for p, g in zip(ps, grads(1, ps)):
            p.grad = g
    opt.step()
    opt2.step()
    for p, q in zip(params, params2):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
        assert opt2.state[q]["m"].data_ptr() >= opt2.flat[0].state["m"].data_ptr()   # still views
    # replacing a parameter's data is picked up before the next step
    with torch.no_grad():
        params[0].data = torch.zeros_like(params[0])
    opt.flat[0].sync()
    assert same_memory(params[0], opt.flat[0].views(opt.flat[0].param_buf)[0])
    assert float(params[0].detach().abs().sum()) == 0.0


def test_tensors_without_memory_step_eagerly():
    """Fake tensors (the fake-CUDA checks) and meta tensors have no memory for numba or a
    compiled kernel: the optimizer picks the eager update for them, numba for real CPU ones."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        fake = [torch.zeros(M, 3, requires_grad=True)]
        assert build_optimizer("dadam3", fake, None, start=False).engine.name == "eager"
    meta = [torch.zeros(M, 3, device="meta", requires_grad=True)]
    assert build_optimizer("dadam3", meta, None, start=False).engine.name == "eager"
    assert build_optimizer("dadam3", [torch.zeros(M, 3, requires_grad=True)], None).engine.name == "numba"
