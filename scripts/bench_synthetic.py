"""Benchmark: the whole paper Fig. 1 (Dadam3 and DP-OAdam, N = 1e7, M = 5 ring) as the
figure script runs it, plus the per-iteration cost of both engines (numba, torch).

    python scripts/bench_synthetic.py [--iterations N] [--baseline DIR [--repeat R]]

Prints wall times. The figure script runs twice in fresh processes on an empty numba cache
(a temporary ``NUMBA_CACHE_DIR``): the first run compiles the loops, the second loads them.
``--baseline DIR`` (a checkout of another commit, e.g. ``git worktree add /tmp/old 1e7f3a7``)
then times both checkouts' whole script R times more, alternating, each with its own code
(``PYTHONPATH``) and its own warm numba cache, and prints the medians and their ratio
(issue 27's target: this checkout's <= 0.6x commit 1e7f3a7's, from the second run on).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_run import run_synthetic
from dadam3.run.schema import compose, synthetic_settings

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iterations", type=int, default=10_000_000)
    p.add_argument("--baseline", type=Path, help="another checkout whose fig1 script is timed alternately")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    game = SyntheticGame()
    # Section 5.1's values, as python -m dadam3.synthetic runs them (the classes' SYNTHETIC)
    hp = {name: dict(synthetic_settings(compose("synthetic", [f"optimizer={name}", f"game.c={game.c}",
                                                              f"game.k={game.k}"])).optimizer.hparams)
          for name in ("dadam3", "dp_oadam")}
    run_synthetic(game, "dadam3", hp["dadam3"], 5, 10)  # compile (or load the cached kernels)
    run_synthetic(game, "dp_oadam", hp["dp_oadam"], 5, 10)
    for name, h in hp.items():
        r = run_synthetic(game, name, h, 5, a.iterations)
        print(f"numba  {name:9s}: {a.iterations:.0e} iterations in {r.seconds:7.2f} s "
              f"({1e9 * r.seconds / a.iterations:6.1f} ns/it), final e_k = {r.error[-1]:.3g}")
        rt = run_synthetic(game, name, h, 5, 2000, engine="torch")
        print(f"torch  {name:9s}: {1e6 * rt.seconds / 2000:8.1f} us/it "
              f"(=> {rt.seconds / 2000 * a.iterations / 60:.0f} min for the figure run)")
    with tempfile.TemporaryDirectory() as tmp:
        for cache in ("empty", "warm"):
            t = whole_script(ROOT, Path(tmp), "this", a.iterations)
            print(f"whole Fig. 1 script (2 runs + plot, fresh processes, numba cache {cache}): {t:.1f} s wall")
        if a.baseline is not None:
            whole_script(a.baseline.resolve(), Path(tmp), "baseline", a.iterations)      # its cache warm too
            times: dict[str, list[float]] = {"this": [], "baseline": []}
            for _ in range(a.repeat):
                times["baseline"].append(whole_script(a.baseline.resolve(), Path(tmp), "baseline", a.iterations))
                times["this"].append(whole_script(ROOT, Path(tmp), "this", a.iterations))
            this, base = statistics.median(times["this"]), statistics.median(times["baseline"])
            print(f"whole Fig. 1 script, median of {a.repeat} alternating runs: this checkout {this:.1f} s "
                  f"{sorted(times['this'])}, {a.baseline} {base:.1f} s {sorted(times['baseline'])}: "
                  f"ratio {this / base:.2f}")


def whole_script(checkout: Path, tmp: Path, name: str, iterations: int) -> float:
    """Wall seconds of ``checkout``'s scripts/fig1_synthetic.sh, its code first on the path and its
    numba cache under ``tmp/name``."""
    env = {**os.environ, "FIG1_OUT": str(tmp / name / "out"), "PYTHON": sys.executable,
           "NUMBA_CACHE_DIR": str(tmp / name / "numba"), "PYTHONPATH": str(checkout)}
    t0 = time.perf_counter()
    subprocess.run(["bash", str(checkout / "scripts/fig1_synthetic.sh"), f"iterations={iterations}"], cwd=checkout,
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
