"""What the trainer tests share: a composed config, a whole run in this process, the CLI."""
import subprocess
import sys
from pathlib import Path

from dadam3.run.schema import compose, train_settings
from dadam3.train import build_trainer

ROOT = Path(__file__).resolve().parent.parent
TOY = ["experiment=toy_gaussians", "loop.n_critic=1", "model.hidden=16", "loop.batch_size=8", "loop.progress=false",
       "loop.log_every=2", "metrics.every=4", "metrics.samples=200", "loop.sample_every=4", "loop.checkpoint_every=3"]
SMALL = [*TOY, "loop.iterations=3"]


def config(overrides):
    """The composed train config (an unknown or meaningless key: one-line ConfigError)."""
    return compose("train", overrides)


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


def snapshot(run):
    """Every file of a run directory (but the lock) and its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def one_line(stderr, start):
    """The process said one error line, starting with ``start``, and no traceback."""
    lines = [x for x in stderr.strip().splitlines() if x.startswith("error") or "Traceback" in x]
    assert len(lines) == 1 and lines[0].startswith(start), stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]


def without_time(records):
    """Log records without their wall-clock time (what two runs of the same steps share)."""
    return [{k: v for k, v in r.items() if k != "time"} for r in records]
