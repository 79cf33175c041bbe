"""Skeletons are written once (dadam3/optim/skeletons/) and every back end is derived from them.

Adding a skeleton is one module: here a third one, gradient tracking in adapt-then-combine
form (``GradientTracking``, as a user would write it in ``dadam3/optim/skeletons/``), runs
on the torch path, on numba's pass over the flat buffers and in the synthetic game's compiled
loop with no other file touched, all equal (float64) and equal to a hand computation. Also:
no code held in strings in the package, and numba compiles once: its cache is reused by the
next process, by processes running side by side, and falls back when nothing is writable.
"""
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import dadam3.optim as optim
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_kernels import kernel_for
from dadam3.games.synthetic_run import run_synthetic
from dadam3.mixing import LocalMixer
from dadam3.optim.base import NodeOptimizer
from dadam3.optim.hparams import LR
from dadam3.optim.skeletons import PARAMS, Round, into_own
from dadam3.topologies import build_topology

ROOT = Path(__file__).resolve().parents[1]


# ---- the new skeleton's module: its phases, buffers and rounds -----------------------------
TRACK, DESCEND = 0, 1


class GradientTracking(NodeOptimizer):
    """Y_k = (Y_{k-1} + D_k - D_{k-1}) W_k^t,  X_k = (X_{k-1} - eta Y_k) W_{k+1}^t  (Y_0 = D_0 = 0)."""

    OWN = ("y", "d")
    ROUNDS = (Round(TRACK, into_own(OWN, "y"), 0), Round(DESCEND, PARAMS, 1))

    @classmethod
    def phase(algorithm, which, g, t, a, p, own, state):
        y, d = own
        if which == TRACK:          # D_k and the new state; Y_{k-1} + D_k - D_{k-1}, mixed into Y_k
            out = algorithm.direction(g * t.sign, a, *state)
            return y + out[0] - d, (y, out[0]), out[1:]
        return p - t.lr * y, None, None     # DESCEND: X_{k-1} - eta Y_k, mixed into X_k


# ---- an algorithm on it (what adding an optimizer takes) -----------------------------------
class GTSGD(GradientTracking):
    HPARAMS = {"lr": LR}

    @staticmethod
    def direction(g, a):
        return (g,)


W2 = [[0.75, 0.25], [0.25, 0.75]]


def two_node_run(engine, steps=2):
    p = torch.tensor([[1.0], [3.0]], dtype=torch.float64, requires_grad=True)
    opt = GTSGD([p], LocalMixer(build_topology("explicit", 2, matrix=W2)), lr=0.1, engine=engine).start()
    for g in ([1.0, -2.0], [2.0, 1.0])[:steps]:
        p.grad = torch.tensor(g, dtype=torch.float64).reshape(2, 1)
        opt.step()
    return opt, p.detach().reshape(-1).tolist()


def test_a_third_skeleton_by_hand_on_every_torch_path():
    W = np.array(W2)
    y1 = W @ [1.0, -2.0]
    x1 = W @ ([1.0, 3.0] - 0.1 * y1)
    y2 = W @ (y1 + np.array([2.0, 1.0]) - [1.0, -2.0])
    x2 = W @ (x1 - 0.1 * y2)
    numba_opt, numba_x = two_node_run("auto")
    assert numba_opt.engine.name == "numba"
    np.testing.assert_allclose(numba_x, x2, rtol=1e-14)
    _, eager_x = two_node_run("eager")
    np.testing.assert_allclose(eager_x, x2, rtol=1e-14)
    np.testing.assert_allclose(numba_opt.state[numba_opt.flat[0].params[0]]["y"].reshape(-1), y2, rtol=1e-14)


def test_a_third_skeleton_runs_the_synthetic_game(monkeypatch):
    monkeypatch.setitem(optim.OPTIMIZERS, "gt_sgd", optim.Spec("gt_sgd", GTSGD))
    assert kernel_for(GTSGD) is not None
    every = np.arange(1, 201)
    kw = dict(nodes=4, iterations=200, seed=1, topology={"name": "one_peer_exponential"}, log_its=every)
    ref = run_synthetic(SyntheticGame(), "gt_sgd", {"lr": 1e-3}, engine="torch", **kw)
    fast = run_synthetic(SyntheticGame(), "gt_sgd", {"lr": 1e-3}, engine="numba", **kw)
    np.testing.assert_allclose(fast.error, ref.error, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(fast.final_point, ref.final_point, rtol=1e-10, atol=1e-12)
    assert not np.allclose(ref.error, ref.error[0])


def test_no_code_held_in_strings():
    """No exec/eval/compile of source anywhere in the package (torch.compile is an attribute)."""
    found = []
    for path in sorted((ROOT / "dadam3").rglob("*.py")):
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
                  for m in re.finditer(r"(?<![.\w])(exec|eval)\s*\(", text)]
        found += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(ast.parse(text))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("exec", "eval", "compile")]
    assert not found, found


PROBE = """
import json, sys, torch
from dadam3.optim import OPTIMIZERS
from dadam3.optim.numba_compile import flat_passes
from dadam3.games.synthetic_kernels import kernel_for
stats = {}
for name in sys.argv[1:]:
    cls = OPTIMIZERS[name].cls
    for f in [*flat_passes(cls, torch.float64).values(), kernel_for(cls).run]:
        stats[name] = [a + sum(b.values()) for a, b in zip(stats.get(name, [0, 0]),
                                                             (f.stats.cache_hits, f.stats.cache_misses))]
print(json.dumps(stats))
"""


def probe(env: dict, *names: str, wait: bool = True):
    """A fresh process compiling (or loading) the numba passes and game loop of ``names``:
    {name: [cache hits, cache misses]}."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    proc = subprocess.Popen([sys.executable, "-c", PROBE, *names], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc if not wait else finish(proc)


def finish(proc) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_numba_compiles_once_across_processes_and_side_by_side(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    side_by_side = [probe(env, "dadam3", wait=False), probe(env, "dp_oadam", wait=False)]
    first = [finish(p) for p in side_by_side]
    assert first[0]["dadam3"][1] > 0 and first[1]["dp_oadam"][1] > 0     # compiled
    again = probe(env, "dadam3", "dp_oadam")
    assert again["dadam3"][1] == 0 and again["dp_oadam"][1] == 0, again   # loaded, nothing compiled
    assert again["dadam3"][0] == first[0]["dadam3"][1]
    names = [p.name for p in (tmp_path / "cache").rglob("*.nbi")]
    assert {n for n in names if "Dadam3" in n}.isdisjoint({n for n in names if "DPOAdam" in n})


@pytest.mark.slow
def test_numba_cache_falls_back_where_it_can_write(tmp_path):
    # a read-only install: numba's user-wide cache directory
    env = {"NUMBA_CACHE_LOCATOR_CLASSES": "UserWideCacheLocator", "XDG_CACHE_HOME": str(tmp_path / "user")}
    assert probe(env, "dosg")["dosg"][1] > 0
    assert probe(env, "dosg")["dosg"][1] == 0
    assert list((tmp_path / "user" / "numba").rglob("*DOSG*.nbi"))
    # nothing writable: it runs, compiled in every process
    (tmp_path / "file").write_text("")
    env = {"NUMBA_CACHE_LOCATOR_CLASSES": "UserProvidedCacheLocator", "NUMBA_CACHE_DIR": str(tmp_path / "file" / "x")}
    for _ in range(2):
        hits, compiled = probe(env, "dosg")["dosg"]
        assert hits == 0 and compiled > 0
