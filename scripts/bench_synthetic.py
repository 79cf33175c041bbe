"""Benchmark: the whole paper Fig. 1 (Dadam3 and DP-OAdam, N = 1e7, M = 5 ring) as the
figure script runs it, plus the per-iteration cost of both engines (numba, torch).

    python scripts/bench_synthetic.py [--iterations N]

Prints wall times. The figure script runs twice in fresh processes on an empty numba cache
(a temporary ``NUMBA_CACHE_DIR``): the first run compiles the loops, the second loads them
(issue 27's target: the second <= 0.6x commit 1e7f3a7's whole script, ~8 s on a 2-core CPU).
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_run import run_synthetic

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iterations", type=int, default=10_000_000)
    a = p.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    game = SyntheticGame()
    b2 = 1.0 / (1.0 + game.c ** 2)
    hp = {"dadam3": dict(lr=1e-2, beta1=0.0, beta2=b2, beta3=0.1), "dp_oadam": dict(lr=1e-2, beta1=0.0, beta2=b2)}
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
        env = {**os.environ, "FIG1_OUT": tmp, "PYTHON": sys.executable, "NUMBA_CACHE_DIR": f"{tmp}/numba"}
        for cache in ("empty", "warm"):
            t0 = time.perf_counter()
            subprocess.run(["bash", str(ROOT / "scripts/fig1_synthetic.sh"), f"iterations={a.iterations}"],
                           check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"whole Fig. 1 script (2 runs + plot, fresh processes, numba cache {cache}): "
                  f"{time.perf_counter() - t0:.1f} s wall")


if __name__ == "__main__":
    main()
