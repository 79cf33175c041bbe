"""Benchmark: a resume of a large checkpoint from the command line: how often the file is read,
how long the resume takes, and the host memory the resumed run holds (issue 45 point 5).

    python scripts/bench_resume.py [--baseline DIR] [--repeat 3] [--hidden 1024] [--nodes 5]

Trains one iteration of the 2-D toy WGAN with wide MLPs (``model.hidden``) on ``--nodes`` nodes in a
temporary directory: its checkpoint is the file a resume reads. Then, ``--repeat`` times, this
checkout and ``--baseline`` (another checkout, e.g. ``git worktree add /tmp/old <commit>``) in turn,
each on a fresh copy of that run:

* ``python -m dadam3.train resume=RUN loop.iterations=2``: its wall time and the number of
  ``torch.load`` calls on the checkpoint (counted by a wrapper that runs the module unchanged);
* ``build_trainer`` of the same resume in one process: the process's resident memory (RSS)
  after it, the garbage collected (the checkpoint the run still holds shows here).

Prints the checkpoint's size and, per checkout, every run's numbers and their medians.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOY = ["experiment=toy_gaussians", "loop.batch_size=8", "loop.n_critic=1", "loop.progress=false", "metrics.every=0",
       "loop.log_every=1", "loop.checkpoint_every=1", "threads=1"]
# python -m dadam3.train, with torch.load counted on the checkpoint (printed last, to stderr)
CLI = """import atexit, runpy, sys, torch
n, real = [0], torch.load
def load(f, *a, **k):
    n[0] += str(f).endswith("last.pt")
    return real(f, *a, **k)
torch.load = load
atexit.register(lambda: print("LOADS", n[0], file=sys.stderr))
sys.argv = ["dadam3.train", *sys.argv[1:]]
runpy.run_module("dadam3.train", run_name="__main__", alter_sys=True)
"""
# build_trainer of a resume, then this process's RSS
API = """import gc, sys
from pathlib import Path
from dadam3.run.schema import compose, train_settings
from dadam3.run.start import build_trainer
t = build_trainer(train_settings(compose("train", sys.argv[2:])), Path(sys.argv[1]))
gc.collect()
rss = [line for line in open("/proc/self/status") if line.startswith("VmRSS")][0].split()[1]
print("RSS_MIB", int(rss) / 1024)
t.finish()
"""


def run(code: str, args: list[str], checkout: Path, cwd: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=900)
    if p.returncode != 0:
        sys.exit(f"error: {checkout}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
    return time.perf_counter() - start, p.stdout + p.stderr


def value(out: str, name: str) -> float:
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith(name + " ")))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, action="append", default=[], help="another checkout, measured alike")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--hidden", type=int, default=1024, help="model.hidden: the checkpoint's size")
    p.add_argument("--nodes", type=int, default=5)
    a = p.parse_args()
    config = [*TOY, f"model.hidden={a.hidden}", f"nodes={a.nodes}"]
    checkouts = [ROOT, *(b.resolve() for b in a.baseline)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run(API.replace("t.finish()", "t.fit(); t.finish()"), [str(tmp / "run"), *config, "loop.iterations=1"],
            ROOT, tmp)
        print(f"checkpoint: {(tmp / 'run' / 'checkpoints' / 'last.pt').stat().st_size / 2**20:.0f} MiB "
              f"(model.hidden={a.hidden}, nodes={a.nodes})")
        found = {c: {"wall s": [], "torch.load": [], "RSS MiB": []} for c in checkouts}
        for _ in range(a.repeat):
            for c in checkouts:
                copy = tmp / "copy"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(tmp / "run", copy)
                wall, out = run(CLI, [f"resume={copy}", "loop.iterations=2"], c, tmp)
                found[c]["wall s"].append(wall)
                found[c]["torch.load"].append(value(out, "LOADS"))
                shutil.rmtree(copy)
                shutil.copytree(tmp / "run", copy)
                _, out = run(API, [str(copy), *config, f"resume={copy}", "loop.iterations=2"], c, tmp)
                found[c]["RSS MiB"].append(value(out, "RSS_MIB"))
        for c, numbers in found.items():
            said = "; ".join(f"{k} {', '.join(f'{v:.2f}' if k == 'wall s' else f'{v:.0f}' for v in vs)} "
                             f"(median {statistics.median(vs):.2f})" for k, vs in numbers.items())
            print(f"{'this checkout' if c == ROOT else c}: {said}")


if __name__ == "__main__":
    main()
