"""The configs ship with the package (issue 35 point 4): ``dadam3/configs/`` is package data, found
through the package (:data:`dadam3.run.config.CONFIG_DIR`), and the top-level ``configs`` is a link
to it. A non-editable install of one built wheel into a fresh virtual environment (the shared
venv's packages reachable through a ``.pth`` file, so nothing is downloaded; the editable
install's finder is not), run from another directory, trains ``dataset=fake`` for two
iterations and runs ``python -m dadam3.synthetic``."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from dadam3.run.config import CONFIG_DIR

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["dataset=fake", "dataset.length=16", "model=dcgan32", "model.width=0.03125", "nodes=2", "loop.batch_size=2",
         "device=cpu", "loop.progress=false", "loop.iterations=2", "metrics.every=0"]


def test_the_configs_are_found_through_the_package_and_the_top_level_link_points_there():
    import dadam3
    assert CONFIG_DIR == Path(dadam3.__file__).resolve().parent / "configs"
    assert (CONFIG_DIR / "train.yaml").is_file() and (CONFIG_DIR / "synthetic.yaml").is_file()
    assert (ROOT / "configs").is_symlink() and (ROOT / "configs").resolve() == CONFIG_DIR


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, env) of a fresh venv holding a non-editable install of this checkout's wheel."""
    tmp = tmp_path_factory.mktemp("install")
    run = dict(check=True, capture_output=True, text=True, timeout=600)
    src = tmp / "src"                        # built from a copy: the checkout gets no build/ or egg-info
    shutil.copytree(ROOT / "dadam3", src / "dadam3", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).is_file():
            shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(tmp / "wheel")], **run)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], **run)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               **run).stdout.strip())
    (site / "shared_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")   # torch, hydra, ... (no dadam3)
    (wheel,) = (tmp / "wheel").glob("dadam3-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], **run)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)} | {
        "NUMBA_CACHE_DIR": str(tmp / "numba"), "HOME": str(tmp)}
    return str(python), env, elsewhere, site


@pytest.mark.slow
def test_a_wheel_installed_elsewhere_trains_and_runs_the_synthetic_game(installed):
    python, env, cwd, site = installed
    run = dict(capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    where = subprocess.run([python, "-c",
                            "import dadam3, dadam3.run.config as c; print(dadam3.__file__, c.CONFIG_DIR)"], **run)
    assert where.stdout.split() == [str(site / "dadam3" / "__init__.py"), str(site / "dadam3" / "configs")], where
    r = subprocess.run([python, "-m", "dadam3.train", *TRAIN, f"hydra.run.dir={cwd / 'train'}"], **run)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert '"status": "finished"' in (cwd / "train" / "metrics.jsonl").read_text()
    r = subprocess.run([python, "-m", "dadam3.synthetic", "iterations=200", f"hydra.run.dir={cwd / 'synthetic'}"],
                       **run)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert any((cwd / "synthetic").iterdir())


@pytest.mark.slow
def test_a_users_own_presets_run_in_a_wheel_installed_elsewhere(installed):
    """Issue 47 point 4 in the non-editable install: a user's experiment and optimizer presets, kept in a
    directory outside the package, train through ``--config-dir`` and compose through
    ``hydra.searchpath``; an unknown name lists the user's options beside the packaged ones."""
    from test_user_presets import EXPERIMENT, OPTIMIZER

    python, env, cwd, _ = installed
    mine = cwd / "mine"
    (mine / "experiment").mkdir(parents=True)
    (mine / "optimizer").mkdir()
    (mine / "experiment" / "my_toy.yaml").write_text(EXPERIMENT)
    (mine / "optimizer" / "my_dadam3.yaml").write_text(OPTIMIZER)
    run = dict(capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    train = [python, "-m", "dadam3.train"]
    r = subprocess.run([*train, "--config-dir", str(mine), "experiment=my_toy", "device=cpu",
                        f"hydra.run.dir={cwd / 'mine_run'}"], **run)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert '"status": "finished"' in (cwd / "mine_run" / "metrics.jsonl").read_text()
    r = subprocess.run([*train, f"hydra.searchpath=[file://{mine}]", "experiment=my_toy", "--cfg", "job"], **run)
    assert r.returncode == 0 and "beta3: 0.25" in r.stdout, (r.stdout + r.stderr)[-3000:]
    r = subprocess.run([*train, "--config-dir", str(mine), "experiment=nope"], **run)
    assert r.returncode != 0 and "experiment=nope: unknown experiment; allowed: " in r.stderr, r.stderr[-3000:]
    assert "my_toy" in r.stderr and "toy_gaussians" in r.stderr
