"""Every optimizer against a hand computation of its first steps (float64), the
registry's wiring (Adam3 = Dadam3 on M = 1, Cadam3 = Dadam3 on the complete graph),
the min-max sign convention, state checkpointing and hyper-parameter validation.

Hand computations use M = 2 nodes with W = [[3/4, 1/4], [1/4, 3/4]], X_0 = (1, 3),
lr = 0.1 and the fixed operator values g_1 = (1, -2), g_2 = (2, 1) unless stated.
"""
import math

import pytest
import torch

from dadam3.errors.config import ConfigError
from dadam3.mixing import LocalMixer
from dadam3.optim import OPTIMIZERS, DAdam, Dadam3, DOSG, DPOAdam, DSGD, OAdagrad, build_optimizer, \
    mixer_for, optimizer_spec
from dadam3.run.schema import compose, train_settings
from dadam3.topologies import TOPOLOGIES, build_topology

from names import allowed_names, unused_name

W2 = [[0.75, 0.25], [0.25, 0.75]]
TINY_EPS = 1e-300       # eps must be > 0; sqrt(v) + 1e-300 == sqrt(v) in float64 for every v these tests reach


def two_node_mixer():
    return LocalMixer(build_topology("explicit", 2, matrix=W2))


def param(values):
    return torch.tensor(values, dtype=torch.float64).reshape(-1, 1).requires_grad_()


def feed(opt, p, g):
    p.grad = torch.tensor(g, dtype=torch.float64).reshape(-1, 1)
    opt.step()


def values(t):
    return t.detach().reshape(-1).tolist()


def test_dadam3_two_steps_by_hand():
    p = param([1.0, 3.0])
    opt = Dadam3([p], two_node_mixer(), lr=0.1, beta1=0.5, beta2=0.5, beta3=0.5, eps=TINY_EPS).start()
    assert values(p) == pytest.approx([1.5, 2.5])                  # Z_1 = W X_0
    feed(opt, p, [1.0, -2.0])
    # M_1 = (0.5, -1), V_1 = (0.5, 2), Lambda_1 = 0.5 max(0, V_1) = (0.25, 1), D_1 = (1, -1)
    st = opt.state[p]
    assert values(st["m"]) == pytest.approx([0.5, -1.0])
    assert values(st["v"]) == pytest.approx([0.5, 2.0])
    assert values(st["lam"]) == pytest.approx([0.25, 1.0])
    assert values(st["d"]) == pytest.approx([1.0, -1.0])
    assert values(st["x"]) == pytest.approx([1.45, 2.55])          # X_1 = W (0.9, 3.1)
    assert values(p) == pytest.approx([1.675, 2.325])              # Z_2 = W (1.35, 2.65)
    feed(opt, p, [2.0, 1.0])
    # M_2 = (1.25, 0), V_2 = (2.25, 1.5), Lambda_2 = 0.5 (0.25, 1) + 0.5 max((0.25, 1), V_2) = (1.25, 1.25)
    assert values(st["lam"]) == pytest.approx([1.25, 1.25])
    assert values(st["d"]) == pytest.approx([math.sqrt(1.25), 0.0])
    assert values(st["x"]) == pytest.approx([1.64114745, 2.24704915])   # W (1.3381966, 2.55)
    assert values(p) == pytest.approx([1.70877033, 2.06762287])         # W (1.52934405, 2.24704915)
    assert opt.k == 2


def test_dadam3_beta1_schedule_and_lambda0_by_hand():
    # beta1_k = 0.8 * 0.5^(k-1); beta2 = beta3 = 0 so V_k = g^2 and Lambda_k = max(Lambda_{k-1}, g^2)
    p = param([0.0])
    opt = Dadam3([p], None, lr=1.0, beta1=0.8, beta2=0.0, beta3=0.0, eps=TINY_EPS, beta1_decay=0.5).start()
    feed(opt, p, [1.0])     # M_1 = 0.2, Lambda_1 = 1, D_1 = 0.2, X_1 = -0.2, Z_2 = -0.4
    assert values(opt.state[p]["x"]) == pytest.approx([-0.2]) and values(p) == pytest.approx([-0.4])
    feed(opt, p, [-1.0])    # beta1_2 = 0.4: M_2 = 0.08 - 0.6 = -0.52, D_2 = -0.52, X_2 = 0.32, Z_3 = 0.84
    assert values(opt.state[p]["x"]) == pytest.approx([0.32]) and values(p) == pytest.approx([0.84])
    q = param([0.0])
    opt = Dadam3([q], None, lr=1.0, beta1=0.8, beta2=0.0, beta3=0.0, eps=TINY_EPS, lambda0=4.0).start()
    feed(opt, q, [1.0])     # Lambda_1 = max(4, 1) = 4, D_1 = 0.2 / 2
    assert values(opt.state[q]["d"]) == pytest.approx([0.1])


def test_dosg_two_steps_by_hand():
    p = param([1.0, 3.0])
    opt = DOSG([p], two_node_mixer(), lr=0.1).start()
    feed(opt, p, [1.0, -2.0])
    assert values(opt.state[p]["x"]) == pytest.approx([1.475, 2.625])   # W (0.9, 3.2)
    assert values(p) == pytest.approx([1.7375, 2.4625])                 # W (1.375, 2.825)
    feed(opt, p, [2.0, 1.0])
    assert values(opt.state[p]["x"]) == pytest.approx([1.5875, 2.2125])  # W (1.275, 2.525)
    assert values(p) == pytest.approx([1.56875, 1.93125])                # W (1.3875, 2.1125)


def test_oadagrad_two_steps_by_hand():
    p = param([1.0])
    opt = OAdagrad([p], None, lr=0.1, delta=0.5).start()
    feed(opt, p, [3.0])     # H_1 = 0.5 + 3, D_1 = 3/3.5
    assert values(opt.state[p]["x"]) == pytest.approx([1 - 0.3 / 3.5])
    assert values(p) == pytest.approx([1 - 0.6 / 3.5])
    feed(opt, p, [4.0])     # H_2 = 0.5 + sqrt(9 + 16) = 5.5, D_2 = 4/5.5
    assert values(opt.state[p]["x"]) == pytest.approx([1 - 0.3 / 3.5 - 0.4 / 5.5])
    assert values(p) == pytest.approx([1 - 0.3 / 3.5 - 0.8 / 5.5])


def test_dp_oadam_three_steps_by_hand():
    p = param([1.0])
    opt = DPOAdam([p], None, lr=0.1, beta1=0.5, beta2=0.5, eps=TINY_EPS).start()
    feed(opt, p, [2.0])     # m=1, v=2, m_hat=2, v_hat=4, D_1=1: X_1 = 1 - 0.2
    assert values(p) == pytest.approx([0.8])
    feed(opt, p, [-1.0])    # m=0 -> D_2 = 0: X_2 = 0.8 - 0 + 0.1 * D_1
    assert values(p) == pytest.approx([0.9])
    feed(opt, p, [4.0])     # m=2, v=8.75, m_hat=2/0.875, v_hat=10, D_3 = 2.2857143/sqrt(10)
    assert values(p) == pytest.approx([0.9 - 0.2 * (2 / 0.875) / math.sqrt(10)])


def test_dp_oadam_gossips_after_the_local_step():
    p = param([1.0, 3.0])
    opt = DPOAdam([p], two_node_mixer(), lr=0.1, beta1=0.0, beta2=0.0, eps=TINY_EPS).start()
    feed(opt, p, [1.0, -2.0])   # D_1 = sign(g) = (1, -1): W (1 - 0.2, 3 + 0.2) = (1.4, 2.6)
    assert values(p) == pytest.approx([1.4, 2.6])
    feed(opt, p, [2.0, 1.0])    # D_2 = (1, 1): W (1.4 - 0.2 + 0.1, 2.6 - 0.2 - 0.1) = W (1.3, 2.3)
    assert values(p) == pytest.approx([1.55, 2.05])


def test_dsgd_and_dadam_by_hand():
    p = param([1.0, 3.0])
    opt = DSGD([p], two_node_mixer(), lr=0.1).start()
    feed(opt, p, [1.0, -2.0])
    assert values(p) == pytest.approx([1.475, 2.625])      # W (0.9, 3.2)
    feed(opt, p, [2.0, 1.0])
    assert values(p) == pytest.approx([1.5875, 2.2125])    # W (1.275, 2.525)
    q = param([1.0])
    opt = DAdam([q], None, lr=0.1, beta1=0.5, beta2=0.5, eps=TINY_EPS).start()
    feed(opt, q, [2.0])     # D_1 = 1
    feed(opt, q, [-1.0])    # D_2 = 0
    assert values(q) == pytest.approx([0.9])
    feed(opt, q, [4.0])
    assert values(q) == pytest.approx([0.9 - 0.1 * (2 / 0.875) / math.sqrt(10)])


def test_maximize_group_ascends():
    theta, alpha = param([1.0]), param([1.0])
    opt = DSGD([{"params": [theta]}, {"params": [alpha], "maximize": True}], None, lr=0.1).start()
    theta.grad = torch.tensor([[2.0]], dtype=torch.float64)
    alpha.grad = torch.tensor([[2.0]], dtype=torch.float64)
    opt.step()
    assert values(theta) == pytest.approx([0.8]) and values(alpha) == pytest.approx([1.2])


def run_steps(opt, params, grads):
    for g in grads:
        for p, gp in zip(params, g):
            p.grad = gp.clone()
        opt.step()


def random_grads(n, shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes] for _ in range(n)]


def test_dadam3_on_one_node_equals_adam3_and_complete_graph_equals_cadam3():
    hp = dict(lr=0.05, beta1=0.5, beta2=0.9, beta3=0.5)
    grads = random_grads(5, [(1, 3)])
    a = torch.tensor([[0.3, -0.2, 0.1]], dtype=torch.float64, requires_grad=True)
    b = a.detach().clone().requires_grad_()
    run_steps(build_optimizer("adam3", [a], mixer_for("adam3", 1), **hp), [a], grads)
    run_steps(Dadam3([b], LocalMixer(build_topology("ring", 1)), **hp).start(), [b], grads)
    assert torch.equal(a, b)
    e = torch.tensor([[0.3, -0.2, 0.1]], dtype=torch.float64, requires_grad=True)
    run_steps(Dadam3([e], None, **hp).start(), [e], grads)          # Adam3 = Dadam3 without mixing
    assert torch.equal(a, e)

    grads = random_grads(5, [(4, 3)], seed=1)
    c = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    d = c.detach().clone().requires_grad_()
    cadam3 = build_optimizer("cadam3", [c], mixer_for("cadam3", 4, topology="ring"), **hp)
    assert cadam3.mixer.topology.name == "complete"
    run_steps(cadam3, [c], grads)
    run_steps(Dadam3([d], LocalMixer(build_topology("complete", 4)), **hp).start(), [d], grads)
    assert torch.equal(c, d)
    # complete mixing keeps every node identical: the centralized algorithm
    torch.testing.assert_close(c, c.mean(0, keepdim=True).expand_as(c), rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", ["dadam3", "dosg", "oadagrad", "dp_oadam", "dadam", "dsgd"])
def test_state_dict_resume_is_exact(name):
    grads = random_grads(6, [(3, 2), (3,)])
    ps = [torch.randn(3, 2, dtype=torch.float64, requires_grad=True), torch.randn(3, dtype=torch.float64,
                                                                                   requires_grad=True)]
    qs = [p.detach().clone().requires_grad_() for p in ps]
    hp = {"lr": 0.01}
    opt = build_optimizer(name, ps, LocalMixer(build_topology("ring", 3)), **hp)
    run_steps(opt, ps, grads)
    opt2 = build_optimizer(name, qs, LocalMixer(build_topology("ring", 3)), **hp)
    run_steps(opt2, qs, grads[:3])
    sd = opt2.state_dict()
    saved = [q.detach().clone() for q in qs]
    rs = [s.clone().requires_grad_() for s in saved]
    opt3 = build_optimizer(name, rs, LocalMixer(build_topology("ring", 3)), **hp)
    opt3.load_state_dict(sd)
    assert opt3.k == 3
    run_steps(opt3, rs, grads[3:])
    for p, r in zip(ps, rs):
        assert torch.equal(p, r)


def test_previous_direction_is_not_an_alias_of_grad():
    p = param([1.0, 3.0])
    opt = DOSG([p], two_node_mixer(), lr=0.1).start()
    feed(opt, p, [1.0, -2.0])
    p.grad.zero_()
    assert values(opt.state[p]["d"]) == [1.0, -2.0]


def test_step_without_grad_is_an_error():
    p = param([1.0])
    with pytest.raises(RuntimeError, match="needs a .grad"):
        DSGD([p], None, lr=0.1).start().step()


def test_step_before_start_is_an_error_and_the_constructor_does_not_mix():
    p = param([1.0, 3.0])
    opt = Dadam3([p], two_node_mixer(), lr=0.1)
    assert values(p) == [1.0, 3.0] and opt.mixer.bytes_sent.sum() == 0      # no gossip in the constructor
    p.grad = torch.ones_like(p)
    with pytest.raises(RuntimeError, match="before start"):
        opt.step()
    opt.start()
    assert values(p) == pytest.approx([1.5, 2.5])                         # Z_1 = W X_0


@pytest.mark.parametrize("name, hp, match", [
    ("dadam3", {"beta1": 1.0}, r"beta1=1.0: must be in \[0, 1\)$"),
    ("dadam3", {"beta2": -0.1}, r"beta2=-0.1: must be in \[0, 1\)$"),
    ("dadam3", {"beta3": 1.5}, r"beta3=1.5: must be in \[0, 1\)$"),
    ("dosg", {"lr": 0.0}, r"lr=0.0: must be in \(0, inf\)$"),
    ("dosg", {"lr": -1}, r"lr=-1: must be in \(0, inf\)$"),
    ("dosg", {"beta1": 0.5}, r"beta1=0.5: not an option of name=dosg; allowed: lr$"),
    ("dadam3", {"lr": "fast"}, r"lr=fast: must be a number$"),
    ("dadam3", {"lr": float("inf")}, r"lr=inf: must be a finite number$"),
])
def test_bad_hyper_parameters(name, hp, match):
    """The library names its arguments; the config's schema says the same in its keys."""
    with pytest.raises(ConfigError, match="^" + match):
        optimizer_spec(name).check_hparams(hp)
    with pytest.raises(ConfigError, match="^" + match.replace("name=dosg", "DOSG")):
        build_optimizer(name, [param([1.0])], None, **hp)
    said = match.replace("not an option of name=dosg; allowed: lr", r"means nothing for optimizer=dosg \(its keys: "
                                                                    r"name, engine, lr\)")
    with pytest.raises(ConfigError, match="^optimizer." + said):     # the schema: the same check, in its keys
        train_settings(compose("train", ["device=cpu", f"optimizer={name}",
                                         *(f"optimizer.{k}={v}" for k, v in hp.items())]))


def test_constructors_check_their_ranges_like_torch_optim():
    # ConfigError is a ValueError, as torch.optim raises for a bad beta
    with pytest.raises(ValueError, match=r"^beta1=1.5: must be in \[0, 1\)$"):
        Dadam3([param([1.0])], beta1=1.5)
    with pytest.raises(ValueError, match=r"^delta=0.0: must be in \(0, inf\)$"):
        OAdagrad([param([1.0])], delta=0.0)
    with pytest.raises(ValueError, match=r"^beta3=0.1: not an option of DPOAdam"):
        DPOAdam([param([1.0])], beta3=0.1)


def test_eps_is_checked_by_its_hparam_for_library_callers_too():
    with pytest.raises(ValueError, match=r"^eps=0.0: must be in \(0, inf\): the first step divides a zero gradient"):
        Dadam3([param([1.0])], eps=0.0)
    with pytest.raises(ValueError, match=r"^eps=0.0: must be in \(0, inf\)"):
        build_optimizer("dp_oadam", [param([1.0])], None, eps=0.0)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_build_optimizer_without_hyper_parameters_trains_like_the_config(name):
    """One source for every default: the library's defaults are what ``optimizer=NAME`` trains with."""
    from dadam3.run.schema import compose, train_settings
    topology = "complete" if OPTIMIZERS[name].topology == "complete" else "ring"
    nodes = 1 if OPTIMIZERS[name].single_node else 4
    s = train_settings(compose("train", ["device=cpu", f"optimizer={name}", f"nodes={nodes}"]))
    p = torch.zeros(nodes, 3, dtype=torch.float64, requires_grad=True)
    lib = build_optimizer(name, [p], mixer_for(name, nodes, topology))
    cfg = build_optimizer(s.optimizer.name, [p.detach().clone().requires_grad_()],
                          mixer_for(name, nodes, topology), **s.optimizer.hparams)
    lib_h = {k: v for k, v in lib.param_groups[0].items() if k != "params"}
    cfg_h = {k: v for k, v in cfg.param_groups[0].items() if k != "params"}
    assert lib_h == cfg_h and set(s.optimizer.hparams) <= set(lib_h), (lib_h, cfg_h)


def test_registry_defaults_are_the_class_tables():
    for name, spec in OPTIMIZERS.items():
        assert spec.check_hparams({}) == {k: hp.default for k, hp in spec.cls.HPARAMS.items()}, name
    assert OPTIMIZERS["dadam3"].check_hparams({"lr": 1e-2})["lr"] == 1e-2


def test_unknown_optimizer_and_single_node_rule():
    name = unused_name(OPTIMIZERS)
    with pytest.raises(ConfigError, match=rf"^name={name}: unknown optimizer \(not in dadam3.optim.OPTIMIZERS\); "
                                              r"allowed: ") as e:
        build_optimizer(name, [param([1.0])], None)
    assert allowed_names(str(e.value)) == set(OPTIMIZERS)
    with pytest.raises(ConfigError, match=r"^nodes=5: name=adam3 is the single-node algorithm: use nodes=1 "
                                          r"\(or name=dadam3"):
        mixer_for("adam3", 5)
    # mixer_for's own argument for the topology's name (build_topology says name=)
    name = unused_name(TOPOLOGIES)
    with pytest.raises(ConfigError, match=rf"^topology={name}: unknown topology \(not in "
                                              r"dadam3.topologies.TOPOLOGIES\); allowed: ") as e:
        mixer_for("dadam3", 4, name)
    assert allowed_names(str(e.value)) == set(TOPOLOGIES)
    with pytest.raises(ConfigError, match=r"^topology=torus: nodes=5 has no factorisation .* use topology=ring"):
        mixer_for("dadam3", 5, "torus")


def test_an_hparams_why_follows_an_interval_only():
    """``why`` is said after the interval a value missed, decided from the check, not from the text."""
    from dadam3.optim.hparams import EPS
    with pytest.raises(ConfigError) as e:
        EPS.check("eps", -1.0)
    assert str(e.value) == "eps=-1.0: must be in (0, inf): the first step divides a zero gradient by sqrt(0) + eps"
    for bad, said in (("x", "must be a number"), (float("nan"), "must be a finite number"), (True, "must be a number")):
        with pytest.raises(ConfigError) as e:
            EPS.check("eps", bad)
        assert e.value.allowed == said and e.value.key == "eps"
