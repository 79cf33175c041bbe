"""A new optimizer and a new topology are one file each (issue 45 point 1), and the suite's
tests of optimizers and topologies stay green with them present.

A copy of the package (and the tests that read the registries) gets ONE file each: an optimistic
RMSprop with ``beta2`` and no synthetic-game preset (``dadam3/optim/ormsprop.py``) and a
``hypercube`` topology with an option of its own (``dadam3/topologies/hypercube.py``). No registry
line, no YAML file: the configs ``optimizer=ormsprop`` and ``topology=hypercube`` are made from
the registries. In the copy, the schema, topology and mixing tests pass with them (parametrised
over the registries), and both entry points run them from the command line.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORMSPROP = '''"""Optimistic RMSprop: D_k = G_k / (sqrt(V_k) + eps), V_k = beta2 V_{k-1} + (1 - beta2) G_k^2."""
from typing import NamedTuple

from dadam3.optim.elementwise import sqrt
from dadam3.optim.hparams import EPS, LR, HParam
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.optimistic import OptimisticGossip


class RMSScalars(NamedTuple):
    one_minus_beta2: float
    eps: float


@optimizer("ormsprop")
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
HYPERCUBE = '''"""The hypercube on M = 2^d nodes: i ~ j when they differ in one bit, (1 - self_weight)/d each."""
import numpy as np

from dadam3.errors.config import ConfigError
from dadam3.topology import topology


@topology("hypercube", options=("self_weight",), supports=lambda M: M >= 1 and M & (M - 1) == 0)
def hypercube(M: int, self_weight: float = 0.5) -> np.ndarray:
    if not 0.0 < self_weight < 1.0:
        raise ConfigError("self_weight", self_weight, "must be in (0, 1): the hypercube is bipartite")
    d = M.bit_length() - 1
    if M < 1 or 2 ** d != M:
        raise ConfigError("nodes", M, "the hypercube needs a power of two")
    W = np.eye(M) * (self_weight if d else 1.0)
    for i in range(M):
        for b in range(d):
            W[i, i ^ (1 << b)] = (1.0 - self_weight) / d
    return W
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The package and the tests, with the two files added (and nothing else changed)."""
    tree = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "dadam3", tree / "dadam3", ignore=ignore)
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=ignore)
    shutil.copytree(ROOT / "scripts", tree / "scripts", ignore=ignore)      # the pinned presets' script
    (tree / "dadam3" / "optim" / "ormsprop.py").write_text(ORMSPROP)
    (tree / "dadam3" / "topologies" / "hypercube.py").write_text(HYPERCUBE)
    return tree


def in_tree(tree, *args):
    return subprocess.run([sys.executable, *args], cwd=tree, capture_output=True, text=True, timeout=900,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "HOME": str(tree),
                               "OMP_NUM_THREADS": "1", "NUMBA_CACHE_DIR": str(tree / ".numba")})


@pytest.mark.slow
def test_the_registries_tests_pass_with_a_new_optimizer_and_topology(tree):
    r = in_tree(tree, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0",
                "tests/test_schema.py", "tests/test_schema_optimizer.py", "tests/test_topology.py",
                "tests/test_mixing.py", "-k", "ormsprop or hypercube")
    assert r.returncode == 0 and " failed" not in r.stdout, (r.stdout + r.stderr)[-3000:]
    assert int(r.stdout.rsplit(" passed", 1)[0].split()[-1]) >= 10, r.stdout[-2000:]


@pytest.mark.slow
def test_the_entry_points_run_a_new_optimizer_on_a_new_topology(tree):
    run = tree / "run"
    r = in_tree(tree, "-m", "dadam3.train", "experiment=toy_gaussians", "optimizer=ormsprop", "optimizer.beta2=0.99",
                "topology=hypercube", "topology.self_weight=0.25", "nodes=4", "loop.iterations=3", "model.hidden=8",
                "loop.batch_size=4", "metrics.samples=20", "loop.progress=false", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["status"] == "finished"
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "self_weight: 0.25" in config and "beta2: 0.99" in config
    r = in_tree(tree, "-m", "dadam3.synthetic", "optimizer=ormsprop", "topology=hypercube", "nodes=4",
                "iterations=200", f"hydra.run.dir={tree / 'game'}")
    assert r.returncode == 0, r.stderr[-3000:]
    bad = in_tree(tree, "-m", "dadam3.train", "topology=hypercube", "topology.self_weight=0", "nodes=4")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: topology.self_weight=0.0: "
                                                                                   "must be in (0, 1)")
