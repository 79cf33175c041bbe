"""What the trainer tests share: a composed config, a whole run in this process, the CLI."""
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from dadam3.config import CONFIG_DIR
from dadam3.settings import train_settings
from dadam3.train import build_trainer

ROOT = Path(__file__).resolve().parent.parent
TOY = ["experiment=toy_gaussians", "n_critic=1", "model.hidden=16", "batch_size=8", "progress=false", "log_every=2",
       "metrics.every=4", "metrics.samples=200", "sample_every=4", "checkpoint_every=3"]


def config(overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def train(overrides, run_dir):
    """Build, fit and finish a run, as ``python -m dadam3.train`` does (minus the CLI)."""
    t = build_trainer(train_settings(config(overrides)), Path(run_dir))
    t.fit()
    t.finish()
    return t


def cli(*args, module="dadam3.train", env=None, **kw):
    """``python -m dadam3.train ARGS`` (or another module) in a subprocess, output captured."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, env=env, **kw)
