"""A new optimizer, a new two-gradient optimizer and a new topology are one file each (issue 45
point 1, issue 61 point 8), and the suite's tests of optimizers and topologies stay green with
them present.

A copy of the package (and the tests that read the registries) gets ONE file each: an optimistic
RMSprop with ``beta2`` and no synthetic-game preset (``dadam3/optim/<name>.py``), an extra-gradient
SGD (two gradients per step, ``dadam3/optim/<name>.py``) and a hypercube with an option of its own
(``dadam3/topologies/<name>.py``). Each name is a plausible one no registry holds yet
(:func:`names.plausible_name`: ``ormsprop``, ``extra_sgd``, ``hypercube``, or with a number after
it where a user has added one). No registry line, no YAML file: the configs ``optimizer=NAME`` and
``topology=NAME`` are made from the registries. In the copy, the tests that read the registries
pass with them (parametrised over the registries, or reading every name), each runs Fig. 1's game
on the compiled loop (float64-equal to the torch optimizers) and a 5-iteration GAN from the command
line.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dadam3.optim import OPTIMIZERS
from dadam3.topologies import TOPOLOGIES

from names import plausible_name

ROOT = Path(__file__).resolve().parents[1]
OPTIMISTIC = plausible_name(OPTIMIZERS, "ormsprop")
TWO_GRADIENT = plausible_name([*OPTIMIZERS, OPTIMISTIC], "extra_sgd")
GRAPH = plausible_name(TOPOLOGIES, "hypercube")
NEW = (OPTIMISTIC, TWO_GRADIENT, GRAPH)

ORMSPROP = '''"""Optimistic RMSprop: D_k = G_k / (sqrt(V_k) + eps), V_k = beta2 V_{k-1} + (1 - beta2) G_k^2."""
from typing import NamedTuple

from dadam3.optim.elementwise import sqrt
from dadam3.optim.hparams import EPS, LR, HParam
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.optimistic import OptimisticGossip


class RMSScalars(NamedTuple):
    one_minus_beta2: float
    eps: float


@optimizer("NAME")
class OptimisticRMSprop(OptimisticGossip):
    HPARAMS = {"lr": LR, "beta2": HParam(0.999, 0.0, 1.0), "eps": EPS}
    STATE = {"v": 0.0}
    SCALARS = RMSScalars

    @staticmethod
    def scalars(h, k):
        return RMSScalars(1.0 - h.beta2, h.eps)

    @staticmethod
    def direction(g, a, v):
        v = v + a.one_minus_beta2 * (g * g - v)
        return g / (sqrt(v) + a.eps), v
'''
EXTRA_SGD = '''"""Extra-gradient SGD (Korpelevich 1976) on each node, then gossip: D = G at both gradients."""
from dadam3.optim.hparams import LR
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.extragradient import ExtraGradientGossip


@optimizer("NAME")
class ExtraSGD(ExtraGradientGossip):
    HPARAMS = {"lr": LR}

    @staticmethod
    def direction(g, a):
        return (g,)
'''
HYPERCUBE = '''"""The hypercube on M = 2^d nodes: i ~ j when they differ in one bit, (1 - self_weight)/d each."""
import numpy as np

from dadam3.errors.config import ConfigError
from dadam3.topologies.registry import topology


@topology("NAME", supports=lambda M: M >= 1 and M & (M - 1) == 0)
def hypercube(nodes: int, self_weight: float = 0.5) -> np.ndarray:
    if not 0.0 < self_weight < 1.0:
        raise ConfigError("self_weight", self_weight, "must be in (0, 1): the hypercube is bipartite")
    d = nodes.bit_length() - 1
    if nodes < 1 or 2 ** d != nodes:
        raise ConfigError("nodes", nodes, "the hypercube needs a power of two")
    W = np.eye(nodes) * (self_weight if d else 1.0)
    for i in range(nodes):
        for b in range(d):
            W[i, i ^ (1 << b)] = (1.0 - self_weight) / d
    return W
'''
# In the copy: Fig. 1's game (c = 1010, k = 0.01; the synthetic entry point's hyper-parameters) on the
# compiled loop, for each new optimizer on the ring and Dadam3 on the new topology
FIGURE_1 = '''
import json, sys
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_kernels import kernel_for
from dadam3.games.synthetic_run import run_synthetic
from dadam3.optim import OPTIMIZERS
from dadam3.run.schema import compose, synthetic_settings
out = {}
for name, topology, nodes in json.loads(sys.argv[1]):
    hp = dict(synthetic_settings(compose("synthetic", [f"optimizer={name}"])).optimizer.hparams)
    r = run_synthetic(SyntheticGame(c=1010.0, k=0.01), name, hp, nodes=nodes, iterations=100_000, topology=topology)
    out[f"{name}@{topology}"] = {"compiled": kernel_for(OPTIMIZERS[name].cls) is not None,
                                 "moved": bool(r.error[-1] != r.error[0])}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The package and the tests, with the three files added (and nothing else changed)."""
    tree = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "dadam3", tree / "dadam3", ignore=ignore)
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=ignore)
    shutil.copytree(ROOT / "scripts", tree / "scripts", ignore=ignore)      # the pinned presets' script
    (tree / "dadam3" / "optim" / f"{OPTIMISTIC}.py").write_text(ORMSPROP.replace("NAME", OPTIMISTIC))
    (tree / "dadam3" / "optim" / f"{TWO_GRADIENT}.py").write_text(EXTRA_SGD.replace("NAME", TWO_GRADIENT))
    (tree / "dadam3" / "topologies" / f"{GRAPH}.py").write_text(HYPERCUBE.replace("NAME", GRAPH))
    return tree


def in_tree(tree, *args):
    return subprocess.run([sys.executable, *args], cwd=tree, capture_output=True, text=True, timeout=1800,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "HOME": str(tree),
                               "OMP_NUM_THREADS": "1", "NUMBA_CACHE_DIR": str(tree / ".numba")})


def test_the_new_names_are_plausible_and_unused():
    assert len(set(NEW)) == 3 and not set(NEW) & {*OPTIMIZERS, *TOPOLOGIES}
    assert [n.split("_")[0] for n in NEW] == ["ormsprop", "extra", "hypercube"]


@pytest.mark.slow
def test_the_registries_tests_pass_with_a_new_optimizer_two_gradient_optimizer_and_topology(tree):
    """The suite's tests that read the registries, whole files (a test reading every name, or the
    allowed list, is among them), and the registry-wide ones selected by the new names."""
    whole = ["tests/test_topology.py", "tests/test_mixing.py", "tests/test_schema_optimizer.py", "tests/test_optim.py"]
    r = in_tree(tree, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0", "-m", "not slow",
                *whole)
    assert r.returncode == 0 and " failed" not in r.stdout, (r.stdout + r.stderr)[-3000:]
    r = in_tree(tree, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0",
                "tests/test_schema.py", "tests/test_games_synthetic.py", "-k", " or ".join(NEW))
    assert r.returncode == 0 and " failed" not in r.stdout, (r.stdout + r.stderr)[-3000:]
    assert int(r.stdout.rsplit(" passed", 1)[0].split()[-1]) >= 5, r.stdout[-2000:]


@pytest.mark.slow
def test_each_runs_figure_1s_game_compiled_and_a_five_iteration_gan(tree):
    cases = [[OPTIMISTIC, "ring", 5], [TWO_GRADIENT, "ring", 5], ["dadam3", GRAPH, 4]]
    r = in_tree(tree, "-c", FIGURE_1, json.dumps(cases))
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {f"{n}@{t}": {"compiled": True, "moved": True}
                                                            for n, t, _ in cases}
    gan = ["experiment=toy_gaussians", "loop.iterations=5", "model.hidden=8", "loop.batch_size=4", "metrics.samples=20",
           "loop.progress=false"]
    for name, run in ((OPTIMISTIC, [f"optimizer={OPTIMISTIC}", "optimizer.beta2=0.99"]),
                      (TWO_GRADIENT, [f"optimizer={TWO_GRADIENT}"]),
                      (GRAPH, [f"topology={GRAPH}", "topology.self_weight=0.25", "nodes=4"])):
        r = in_tree(tree, "-m", "dadam3.train", *gan, *run, f"hydra.run.dir={tree / 'gan' / name}")
        assert r.returncode == 0, r.stderr[-3000:]
        records = [json.loads(line) for line in (tree / "gan" / name / "metrics.jsonl").read_text().splitlines()]
        assert records[-1]["status"] == "finished" and records[-1]["iteration"] == 5
        config = (tree / "gan" / name / ".hydra" / "config.yaml").read_text()
        assert all(f"{k.rpartition('.')[2]}: {v}" in config for k, v in (o.split("=") for o in run if "." in o))
    r = in_tree(tree, "-m", "dadam3.synthetic", f"optimizer={TWO_GRADIENT}", f"topology={GRAPH}", "nodes=4",
                "iterations=200000", f"hydra.run.dir={tree / 'game'}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "no compiled loop" not in (tree / "game" / "synthetic.log").read_text()
    bad = in_tree(tree, "-m", "dadam3.train", f"topology={GRAPH}", "topology.self_weight=0", "nodes=4")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: topology.self_weight=0.0: "
                                                                                   "must be in (0, 1)")
