"""Benchmark: one synthetic run's start-up and shut-down, and paper Fig. 1 end to end, against
earlier commits, interleaved (issue 47: Fig. 1 <= 0.5x commit 1e7f3a7's wall time).

    python scripts/bench_start_up.py --baseline 1e7f3a7 [--baseline REV ...] [--repeat 5]

Each ``--baseline REV`` is checked out in a temporary ``git worktree`` (removed at the end); this
checkout is measured as it is (uncommitted changes included). Every checkout gets its own numba
cache, filled by one uncounted warm-up. Then, ``--repeat`` times, each checkout in turn runs

* ``start-up``: ``python -m dadam3.synthetic optimizer=dadam3 iterations=1`` (imports, Hydra, the
  compiled loop's cache, one iteration, exit: what a run costs beside its iterations), and
* ``fig1``: ``bash scripts/fig1_synthetic.sh`` (both runs at N = 1e7 and the figure);

and the medians and their ratios to the first baseline are printed. Time is noisy on a loaded
machine; two numbers that are not are printed too, from one start-up run of each checkout under
``--probe`` (this script, run as a wrapper of the module): the cyclic garbage collector's
collections and the objects it still tracks at exit. Measure on an idle machine.
"""
from __future__ import annotations

import argparse
import atexit
import gc
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_UP = ["-m", "dadam3.synthetic", "optimizer=dadam3", "iterations=1"]


def probe(module: str, args: list[str]) -> None:
    """Run ``python -m module args`` in this process, then print the collector's counts to stderr."""
    counts = {"collections": 0, "full": 0}

    def count(phase, info):
        if phase == "stop":
            counts["collections"] += 1
            counts["full"] += info["generation"] == 2

    gc.callbacks.append(count)
    atexit.register(lambda: print(f"PROBE collections={counts['collections']} full={counts['full']} "
                                  f"tracked={len(gc.get_objects())} frozen={gc.get_freeze_count()}",
                                  file=sys.stderr))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def timed(cmd: list[str], tree: Path, env: dict[str, str]) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} in {tree} failed (exit status {r.returncode}):\n{r.stderr[-2000:]}")
    return time.perf_counter() - t


def commands(tree: Path, out: Path) -> dict[str, list[str]]:
    """What each measure runs, writing only into a fresh folder under ``out``."""
    run_dir = Path(tempfile.mkdtemp(dir=out))
    return {"start-up": [sys.executable, *START_UP, f"hydra.run.dir={run_dir / 'run'}"],
            "fig1": ["bash", "scripts/fig1_synthetic.sh"]}


def main(argv=None) -> None:
    if argv is None and sys.argv[1:2] == ["--probe"]:
        probe(sys.argv[2], sys.argv[3:])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", action="append", default=[], help="a commit to compare with (repeatable)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs of each measure per checkout (default 5)")
    a = p.parse_args(argv)
    if a.repeat < 1:
        sys.exit(f"error: --repeat={a.repeat}: must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="bench_start_up."))
    trees = {"this checkout": ROOT}
    try:
        for rev in a.baseline:
            tree = work / f"tree_{rev}"
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), rev], cwd=ROOT, check=True)
            trees[rev] = tree
        envs = {}
        for name, tree in trees.items():
            cache = work / f"numba_{len(envs)}"
            envs[name] = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": str(cache),
                          "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
            for cmd in commands(tree, work).values():                       # warm-up: compile, fill caches
                timed(cmd, tree, {**envs[name], "FIG1_OUT": tempfile.mkdtemp(dir=work)})
            r = subprocess.run([sys.executable, __file__, "--probe", *START_UP[1:],
                                f"hydra.run.dir={tempfile.mkdtemp(dir=work)}/run"],
                               cwd=tree, env=envs[name], capture_output=True, text=True)
            said = [x for x in r.stderr.splitlines() if x.startswith("PROBE")]
            print(f"{name}: {said[-1] if said else 'probe failed: ' + r.stderr[-300:]}")
        times = {(name, what): [] for name in trees for what in ("start-up", "fig1")}
        for _ in range(a.repeat):
            for name, tree in trees.items():
                for what, cmd in commands(tree, work).items():
                    times[name, what].append(timed(cmd, tree, {**envs[name], "FIG1_OUT": tempfile.mkdtemp(dir=work)}))
        first = a.baseline[0] if a.baseline else None
        for what in ("start-up", "fig1"):
            for name in trees:
                med = statistics.median(times[name, what])
                ratio = f", {med / statistics.median(times[first, what]):.2f}x {first}" if first else ""
                print(f"{what}: {name}: median {med:.2f} s of {a.repeat}{ratio}")
    finally:
        for rev in a.baseline:
            subprocess.run(["git", "worktree", "remove", "--force", str(work / f"tree_{rev}")], cwd=ROOT,
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
