"""The three engines (dadam3/optim/engines.py) and the switch that runs the eager one everywhere.

* ``engine="eager"`` (library) and ``optimizer.engine=eager`` (config) run the algorithm's
  ``direction`` in Python at every step on the CPU default path: a trace hook (what a debugger's
  breakpoint uses) sees each call; the default (numba) runs it compiled, where it sees none.
* Engine against engine, float64: the eager engine equals the per-parameter reference of
  ``reference_optim`` and numba's pass (test_optim_flat.py has numba against the reference and
  torch.compile against the reference).
"""
import sys
from functools import partial

import numpy as np
import pytest
import torch
from test_optim_flat import HP, grads, groups, leaves, mixer, run_reference, set_grads_at

from dadam3.optim import OPTIMIZERS, build_optimizer, optimizer_spec
from dadam3.optim.base import gradients_per_step
from dadam3.optim.engines import Compiled, Eager, Numba, choose_engine
from dadam3.run.schema import compose, synthetic_settings, train_settings


def run(name, engine, steps=4, topology="ring"):
    params = leaves(0)
    opt = build_optimizer(name, groups(params), mixer(topology), engine=engine, **HP[name])
    for k in range(steps):
        for p, g in zip(params, grads(k, params)):
            p.grad = g
        opt.step()
    return params, opt


def direction_calls(name, engine) -> int:
    """Calls of ``name``'s ``direction`` that a trace hook (a debugger's breakpoint) sees in 2 steps."""
    code = optimizer_spec(name).cls.direction.__code__
    seen = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is code:
            seen.append(frame.f_lineno)
        return None
    params = leaves(0)
    opt = build_optimizer(name, groups(params), mixer("ring"), engine=engine, **HP[name])
    for k in range(2):
        sys.settrace(tracer)
        try:
            opt.step(partial(set_grads_at, k, params))      # the gradient callback: once, or twice (extra_adam)
        finally:
            sys.settrace(None)
    return len(seen)


@pytest.mark.parametrize("name", ["dadam3", "dp_oadam", "extra_adam"])
def test_the_eager_switch_makes_a_breakpoint_in_direction_fire(name):
    assert direction_calls(name, "auto") == 0               # numba: direction runs compiled
    twice = gradients_per_step(optimizer_spec(name).cls)    # extra_adam: a direction per gradient
    assert direction_calls(name, "eager") == 2 * 2 * twice  # 2 steps x 2 parameter groups


def test_the_config_key_selects_the_eager_engine():
    s = train_settings(compose("train", ["device=cpu", "optimizer=dadam3", "optimizer.engine=eager"]))
    assert s.optimizer.engine == "eager" and "engine" not in s.optimizer.hparams
    assert train_settings(compose("train", ["device=cpu"])).optimizer.engine == "auto"
    assert synthetic_settings(compose("synthetic", ["optimizer=dadam3", "engine=eager"])).engine == "eager"


def test_the_synthetic_game_names_its_own_switch():
    from dadam3.errors.config import ConfigError
    with pytest.raises(ConfigError, match=r"^optimizer.engine=eager: the synthetic game's switch is engine=eager"):
        synthetic_settings(compose("synthetic", ["optimizer=dadam3", "optimizer.engine=eager"]))


def test_the_synthetic_games_eager_engine_equals_its_numba_loop():
    from dadam3.games.synthetic import SyntheticGame
    from dadam3.games.synthetic_run import run_synthetic
    kw = dict(nodes=3, iterations=20, seed=1, log_its=np.arange(1, 21))
    fast = run_synthetic(SyntheticGame(), "dadam3", {"lr": 1e-2}, engine="numba", **kw)
    eager = run_synthetic(SyntheticGame(), "dadam3", {"lr": 1e-2}, engine="eager", **kw)
    np.testing.assert_allclose(eager.error, fast.error, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(eager.final_point, fast.final_point, rtol=1e-10, atol=1e-12)


def test_the_engine_is_chosen_visibly():
    cls = OPTIMIZERS["dadam3"].cls
    cpu = torch.zeros(4, 3, dtype=torch.float64)
    assert type(choose_engine(cls, cpu)) is Numba
    assert type(choose_engine(cls, cpu, compile=True)) is Compiled
    assert type(choose_engine(cls, cpu, "eager", compile=True)) is Eager
    assert type(choose_engine(cls, cpu.to(torch.float16))) is Eager        # numba runs float32/64 only
    with pytest.raises(ValueError, match="engine='fast'"):
        choose_engine(cls, cpu, "fast")


@pytest.mark.parametrize("name", sorted(set(HP) - {"extra_adam"}))      # extra_adam: tests/test_extra_adam.py
def test_eager_engine_equals_the_reference_and_numba(name):
    ref_params, ref = run_reference(name, "ring")
    params, opt = run(name, "eager")
    numba_params, numba_opt = run(name, "auto")
    assert (opt.engine.name, numba_opt.engine.name) == ("eager", "numba")
    for p, q, r in zip(params, ref_params, numba_params):
        torch.testing.assert_close(p, q, rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(p, r, rtol=1e-14, atol=1e-15)
        for key, value in opt.state[p].items():
            torch.testing.assert_close(value, ref.state[q][key], rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(value, numba_opt.state[r][key], rtol=1e-14, atol=1e-15)
