"""Adding an optimizer takes exactly what the README says: one file, the algorithm (a module with a
class on a skeleton: HPARAMS, STATE, SCALARS, scalars, direction) decorated with
``@optimizer("name")``. Here an optimistic sign method is
added that way to a copy of the package (its registry edited as a user edits it: no
monkeypatching); in the copy the suite's tests of the optimizers' presets and schemas pass
with it, and it trains a GAN and runs on the synthetic game (at the game's stated step size:
its class has no ``SYNTHETIC`` preset), through numba's loop and through torch,
equal. Also: an algorithm written with a function numba cannot compile falls back to the torch
optimizer on the synthetic game."""
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

import dadam3.optim as optim
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_kernels import kernel_for
from dadam3.games.synthetic_run import run_synthetic
from dadam3.optim.elementwise import sign
from dadam3.optim.hparams import LR, HParam
from dadam3.optim.skeletons.optimistic import OptimisticGossip

from names import plausible_name

ROOT = Path(__file__).resolve().parents[1]
NAME = plausible_name(optim.OPTIMIZERS, "osign")       # plausible, and no registered optimizer's
OSIGN = '''"""Optimistic sign method: D_k = sign(G_k) * scale on the two-sequence skeleton."""
from typing import NamedTuple

from dadam3.optim.elementwise import sign
from dadam3.optim.hparams import LR, HParam
from dadam3.optim.registry import optimizer
from dadam3.optim.skeletons.optimistic import OptimisticGossip


class SignScalars(NamedTuple):
    scale: float


@optimizer("NAME")
class OptimisticSign(OptimisticGossip):
    HPARAMS = {"lr": LR, "scale": HParam(1.0, 0.0, None, low_open=True)}
    STATE = {"steps": 0.0}
    SCALARS = SignScalars

    @staticmethod
    def scalars(h, k):
        return SignScalars(h.scale)

    @staticmethod
    def direction(g, a, steps):
        return sign(g) * a.scale, steps + 1.0
'''
RUN = textwrap.dedent('''
    import json, math, sys
    import numpy as np, torch
    sys.path.insert(0, "tests")
    from trainer_runs import TOY, train
    from dadam3.games.synthetic import SyntheticGame
    from dadam3.games.synthetic_run import run_synthetic
    from dadam3.run.loggers import read_jsonl
    from dadam3.run.schema import compose, synthetic_settings
    t = train(TOY + ["optimizer=NAME", "optimizer.scale=0.5", "loop.iterations=4"], sys.argv[1])
    recs = read_jsonl(sys.argv[1] + "/metrics.jsonl")
    p = next(t.G.parameters())
    hp = dict(synthetic_settings(compose("synthetic", ["optimizer=NAME"])).optimizer.hparams)
    game = SyntheticGame(c=1010, k=0.01)
    runs = {e: run_synthetic(game, "NAME", hp, nodes=3, iterations=50, engine=e) for e in ("numba", "torch")}
    print(json.dumps({"status": recs[-1]["status"], "finite": math.isfinite(recs[-2]["loss_d"]),
                      "steps": t.opt_g.state[p]["steps"].unique().tolist(),
                      "d": sorted(set(t.opt_g.state[p]["d"].unique().tolist())), "synthetic_hp": hp,
                      "numba_eq_torch": bool(np.allclose(runs["numba"].final_point, runs["torch"].final_point,
                                                         rtol=1e-12, atol=1e-15)),
                      "moved": float(abs(runs["numba"].final_point).max())}))
''')


OSIGN, RUN = OSIGN.replace("NAME", NAME), RUN.replace("NAME", NAME)


@pytest.fixture(scope="module")
def tree_with_osign(tmp_path_factory):
    """A copy of the package, configs, tests and scripts with the optimizer added the README's way."""
    tree = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("dadam3", "configs", "tests", "scripts"):
        if (ROOT / part).is_symlink():
            (tree / part).symlink_to(Path(*(ROOT / part).readlink().parts))
        else:
            shutil.copytree(ROOT / part, tree / part, ignore=ignore, symlinks=True)
    (tree / "dadam3" / "optim" / f"{NAME}.py").write_text(OSIGN)       # the one file: the algorithm, registered
    return tree


def in_tree(tree, *args, timeout=900):
    return subprocess.run([sys.executable, *args], cwd=tree, capture_output=True, text=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "HOME": str(tree),
                               "NUMBA_CACHE_DIR": str(tree / ".numba")})


@pytest.mark.slow
def test_the_suites_optimizer_tests_pass_with_an_optimizer_added_the_readme_way(tree_with_osign):
    r = in_tree(tree_with_osign, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0",
                "tests/test_schema_optimizer.py", "tests/test_schema.py", "-k", NAME)
    assert r.returncode == 0 and " passed" in r.stdout and " failed" not in r.stdout, (r.stdout + r.stderr)[-3000:]


@pytest.mark.slow
def test_an_optimizer_added_the_readme_way_trains_a_gan_and_runs_the_synthetic_game(tree_with_osign):
    r = in_tree(tree_with_osign, "-c", RUN, str(tree_with_osign / "run"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "finished" and out["finite"]
    assert out["steps"] == [4.0] and set(out["d"]) <= {-0.5, 0.0, 0.5}
    assert out["synthetic_hp"] == {"lr": 1e-2, "scale": 1.0}     # no preset: the game's stated step size
    assert out["numba_eq_torch"] and out["moved"] > 0


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
        return torch.sgn(g) * a.scale, steps + 1.0         # torch.sgn: no numba twin


def test_math_numba_cannot_compile_runs_through_torch_on_the_synthetic_game(monkeypatch):
    name = plausible_name(optim.OPTIMIZERS, "tsign")
    monkeypatch.setitem(optim.OPTIMIZERS, name, optim.Spec(name, TorchSign))
    assert kernel_for(TorchSign) is None
    game = SyntheticGame(c=1010, k=0.01)
    kernel = run_synthetic(game, name, {"lr": 1e-3}, nodes=3, iterations=50, engine="numba")
    torch_ = run_synthetic(game, name, {"lr": 1e-3}, nodes=3, iterations=50, engine="torch")
    assert (kernel.final_point == torch_.final_point).all()   # the torch optimizer ran for both


def test_state_may_not_reuse_a_skeleton_buffer_name():
    with pytest.raises(TypeError, match=r"^Clash.STATE names d, a buffer of its skeleton \(x, d\): rename it$"):
        type("Clash", (OptimisticGossip,), {"HPARAMS": {"lr": LR}, "STATE": {"d": 0.0, "m": 0.0}})
