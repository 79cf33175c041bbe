"""``python -m dadam3.gossip_study``: how many gossip rounds the synthetic game of Section 5.1 needs,
per topology and node count (issue 36; ``experiments/gossip_rounds.sh`` runs it).

The grid (:func:`grid`): Dadam3 and DP-OAdam at the paper's Section 5.1 settings (the
``synthetic`` config's defaults: c, k, eta, the betas; every node draws its own game), on
M in :data:`NODES` nodes (these constants: :mod:`dadam3.games.study_grid`), every topology of
:data:`TOPOLOGIES`, t in :data:`ROUNDS` gossip rounds
per mixing, game seed 0 (the same sample stream in every cell: a paired design), plus game
seeds :data:`EXTRA_SEEDS` for Dadam3 at t = 1. Erdos-Renyi: p = :func:`er_p` (twice the
connectivity threshold ln M / M), graph seeds :data:`GRAPH_SEEDS`. N = :data:`ITERATIONS`, and
:data:`LONG` on the ring at t = 1, game seed 0 (the slowest-mixing graph at each M). A (topology, M) that
``dadam3/topologies/`` cannot build (a torus of a prime M) is listed in ``study.json`` with its
reason, not run.

Each cell is a run directory ``<out>/<optimizer>/M<M>/<graph>/t<t>[_seed<s>]/`` in the format of
``python -m dadam3.synthetic`` (``metrics.csv`` at ~50 log-spaced iterations, ``status.json``,
``.hydra/config.yaml`` and ``overrides.yaml``: rerun one with ``python -m dadam3.synthetic
<overrides>``), plus ``provenance.json`` (code commit, versions, CPU) and, written last,
``summary.json``: final e_N and R_N, the first iteration with e_k <= 10^-2 (computed at every
iteration by the loop; null: never), rho of the graph, and the bytes each node sent, counted by
the optimizer's own mixer (:func:`mixer_bytes`). A cell with a ``summary.json`` is finished and
skipped, so the study resumes where it stopped; ``--jobs`` cells run side by side.

``--heterogeneous`` (issue 43, point 4): the same table on the heterogeneous variant of the game
(``game.spread`` s in :data:`SPREADS`: node i draws a = c w.p. (1 + s u_i)/3, the average game and its
FNE unchanged; :class:`~dadam3.games.synthetic.SyntheticGame`), Dadam3 only (DP-OAdam reaches the
target in no cell of the iid study), on :data:`HETEROGENEOUS_TOPOLOGIES`, M in :data:`NODES`, t in
:data:`ROUNDS` (the complete graph at t = 1 only: W^t = W), N = :data:`ITERATIONS`, game seed 0 plus
:data:`EXTRA_SEEDS` at t = 1; cells under
``<out>/spread<s>/...`` (default ``results/gossip_heterogeneous``). Every summary also holds the nodes'
final consensus distance (1/M) sum_i ||z_i - z_bar||^2.

``--shared-scale`` (issue 58): on the same heterogeneous game, Dadam3 against ``dadam3_shared`` (one
adaptive scale for every node, tracked by gossip) and ``dadam3_shared_exact`` (its ideal reference, the
scales averaged exactly each step) (:func:`dadam3.games.study_grid.shared_scale_grid`), into
``results/shared_scale_game``; each summary also holds the nodes' final scales' relative consensus
distance (1/M) sum_i ||S_i - S_bar||^2 / ||S_bar||^2 (S_i: the scale node i divides its step by).
The grid's cells and constants: :mod:`dadam3.games.study_grid`.
"""
from __future__ import annotations

import json
import math
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from dadam3.errors.boundary import exit_on_failure
from dadam3.errors.files import write_text_whole
from dadam3.errors.stops import Diverged
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.study_grid import SPREADS, STUDY, SUMMARY, Cell, er_p, grid
from dadam3.games.synthetic_run import TARGET_ERROR, SyntheticDiverged, run_synthetic
from dadam3.mixing import Mixer
from dadam3.mixing.gossip_bytes import bytes_after, period_bytes, rho_per_round
from dadam3.run.paths import ArgumentParser, check_no_link, path_argument
from dadam3.run.job_log import record_provenance
from dadam3.run.provenance import code_commit
from dadam3.optim import build_optimizer, mixer_for
from dadam3.run.schema import compose, synthetic_settings
from dadam3.synthetic import write_results
from dadam3.topologies import Topology
from dadam3.topologies.checks import spectral_gap_rho

__all__ = ["SPREADS", "STUDY", "SUMMARY", "Cell", "grid", "run_cell", "study", "main"]


def cell_config(cell: Cell) -> DictConfig:
    """The cell's composed config: ``compose("synthetic", cell.overrides())``, with Hydra's
    composition done once per (optimizer, topology) and the cell's values merged into a copy
    (Hydra costs ~1 s a call; the test proves the two equal)."""
    return OmegaConf.merge(_composed(cell.optimizer, cell.topology), OmegaConf.from_dotlist(cell.values()))


@lru_cache(maxsize=None)
def _composed(optimizer: str, topology: str) -> DictConfig:
    return compose("synthetic", [f"optimizer={optimizer}", f"topology={topology}"])


# ------------------------------------------------------------------------------- one cell

def run_cell(cell: Cell, out: Path) -> dict:
    """Run one cell into ``out / cell.path`` and return its summary (also written, last)."""
    cfg = cell_config(cell)
    s = synthetic_settings(cfg)
    o, t = s.optimizer, s.topology
    mixer = mixer_for(o.name, s.nodes, t.name, t.rounds, **t.options)
    topo = mixer.topology
    start, period = mixer_bytes(o.name, dict(o.hparams), mixer, s.nodes)
    d = out / cell.path
    d.mkdir(parents=True, exist_ok=True)
    (d / SUMMARY).unlink(missing_ok=True)
    (d / ".hydra").mkdir(exist_ok=True)
    write_text_whole(d / ".hydra" / "config.yaml", OmegaConf.to_yaml(cfg))
    write_text_whole(d / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(cell.overrides())))
    (d / "provenance.json").unlink(missing_ok=True)
    record_provenance(d, "cpu", 0)
    t0 = time.perf_counter()
    try:
        game = SyntheticGame(s.game.c, s.game.k, s.game.spread)
        result = run_synthetic(game, o.name, o.hparams, s.nodes, s.iterations, seed=s.seed,
                               topology={"name": t.name, "rounds": t.rounds, **t.options})
        status = {"status": "finished", "iteration": s.iterations}
    except SyntheticDiverged as e:
        result, status = e.result, {"status": "diverged", "iteration": e.iteration, "message": str(e)}
    seconds = time.perf_counter() - t0
    write_results(d, result, status)
    summary = summarize(cell, result, status["status"], topo, start, period)
    write_text_whole(d / SUMMARY, json.dumps(summary, indent=1) + "\n")
    return {**summary, "seconds": seconds}


def mixer_bytes(optimizer: str, hparams: dict, mixer: Mixer, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The mixer's own count of the torch optimizer on this game's buffers (theta and alpha,
    float64): after its start, and after each iteration of one period (:func:`period_bytes`)."""
    theta = torch.zeros(nodes, 1, dtype=torch.float64)
    alpha = torch.zeros(nodes, 1, dtype=torch.float64)
    opt = build_optimizer(optimizer, [{"params": [theta]}, {"params": [alpha], "maximize": True}], mixer, **hparams)

    def step():
        theta.grad, alpha.grad = torch.zeros_like(theta), torch.zeros_like(alpha)
        opt.step()
    return period_bytes(mixer, step)


def summarize(cell: Cell, result, status: str, topo: Topology, start: np.ndarray, period: np.ndarray) -> dict:
    """``summary.json``: the cell, its final e_N and R_N, the first iteration with e_k <= e*, rho
    (per round; of W^t; of a time-varying schedule's period) and bytes per node (mean, max over nodes)."""
    rho, hit = rho_per_round(topo), result.first_hit
    sent = bytes_after(hit, start, period) if hit else None
    logged = len(result.iteration) > 0
    cell_keys = {k: v for k, v in asdict(cell).items() if k != "extra"}
    z, scale = result.final_point, result.final_scale
    spread = {} if scale is None else {          # (1/M) sum_i ||S_i - S_bar||^2 / ||S_bar||^2 of the nodes' scales
        "final_scale_consensus_rel": float(np.mean(np.sum((scale - scale.mean(axis=0)) ** 2, axis=1))
                                           / np.sum(scale.mean(axis=0) ** 2))}
    return {**cell_keys, "p": cell.topology_options().get("p"), "status": status, **spread,
            "final_consensus_distance": float(np.mean(np.sum((z - z.mean(axis=0)) ** 2, axis=1))),
            "final_iteration": int(result.iteration[-1]) if logged else 0,
            "final_error": float(result.error[-1]) if logged else None,
            "final_avg_grad_sq_norm": float(result.avg_grad_sq_norm[-1]) if logged else None,
            "target_error": TARGET_ERROR, "first_hit": hit,
            "rho": rho, "log_inv_rho": math.log(1 / rho) if rho > 0 else None,
            "rho_operator": spectral_gap_rho(topo.operator(1)),
            "rho_period": topo.rho if topo.time_varying else None,
            "bytes_per_iteration_mean": float(np.mean(period[-1] - start) / len(period)),
            "bytes_to_hit_mean": float(sent.mean()) if hit else None,
            "bytes_to_hit_max": float(sent.max()) if hit else None}


def _warm_up(cells: list[Cell]) -> None:
    """Compile (or load) the optimizers' loops once, before the workers fork."""
    for opt in sorted({c.optimizer for c in cells}):
        s = synthetic_settings(compose("synthetic", [f"optimizer={opt}", "nodes=2", "iterations=2"]))
        run_synthetic(SyntheticGame(c=s.game.c, k=s.game.k, spread=s.game.spread), opt, s.optimizer.hparams, 2, 2)


# ------------------------------------------------------------------------------- the study

def study(out: Path, jobs: int, smoke: bool, heterogeneous: bool = False, shared_scale: bool = False) -> int:
    """Every unfinished cell of the grid into ``out``, ``jobs`` at a time; returns the number run."""
    cells, skipped = grid(smoke, heterogeneous, shared_scale)
    todo = [c for c in cells if not (out / c.path / SUMMARY).is_file()]
    commit = code_commit()
    print(f"gossip study: {len(cells)} cells, {len(cells) - len(todo)} finished, {len(todo)} to run, {jobs} side "
          f"by side, into {out} (code {commit})", flush=True)
    if commit.endswith("+dirty"):
        print("warning: the working tree has uncommitted changes: provenance.json will say +dirty", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    spec = {"optimizers": sorted({c.optimizer for c in cells}), "nodes": sorted({c.nodes for c in cells}),
            "target_error": TARGET_ERROR,
            "er_p": {str(M): er_p(M) for M in sorted({c.nodes for c in cells})}, "cells": len(cells),
            "not_built": skipped, "smoke": smoke,
            **({"spreads": sorted({c.spread for c in cells}), "iterations": max(c.iterations for c in cells)}
               if heterogeneous or shared_scale else {})}
    write_text_whole(out / STUDY, json.dumps(spec, indent=1) + "\n")
    if not todo:
        return 0
    _warm_up(todo)
    t0, done = time.perf_counter(), 0
    with ProcessPoolExecutor(max_workers=jobs, initializer=_worker_signals) as pool:
        futures = {pool.submit(run_cell, c, out): c for c in todo}
        try:
            for f in as_completed(futures):
                r = f.result()
                done += 1
                hit = "never" if r["first_hit"] is None else str(r["first_hit"])
                print(f"[{done}/{len(todo)}] {futures[f].path}: e_k <= {TARGET_ERROR:g} first at {hit}, final e_N "
                      f"{r['final_error']:.3g} ({r['status']}, {r['seconds']:.1f} s)", flush=True)
        except KeyboardInterrupt:
            pool.shutdown(cancel_futures=True)
            raise
        except Terminated:
            for process in list(getattr(pool, "_processes", {}).values()):     # the running cells: ended now
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    print(f"gossip study: {done} cells in {time.perf_counter() - t0:.0f} s", flush=True)
    return done


def main(argv=None) -> None:
    p = ArgumentParser(prog="python -m dadam3.gossip_study", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=path_argument("--out"), default=None,
                   help="results folder (default results/gossip; results/gossip_heterogeneous with --heterogeneous)")
    p.add_argument("--jobs", type=int, default=2, help="cells side by side (default 2, at most the cells)")
    p.add_argument("--smoke", action="store_true", help="a tiny grid (seconds), for the tests")
    p.add_argument("--heterogeneous", action="store_true", help="the heterogeneous game's grid (game.spread > 0)")
    p.add_argument("--shared-scale", action="store_true",
                   help="Dadam3 against one scale for every node and its exact reference, on the heterogeneous game")
    a = p.parse_args(argv)
    a.out = a.out or Path("results/shared_scale_game" if a.shared_scale else
                          "results/gossip_heterogeneous" if a.heterogeneous else "results/gossip")
    cells = len(grid(a.smoke, a.heterogeneous, a.shared_scale)[0])
    refused = (f"--jobs={a.jobs}: must be an integer >= 1" if a.jobs < 1 else
               f"--jobs={a.jobs}: more than the study's {cells} cells; at most {cells}" if a.jobs > cells else
               f"--out={a.out}: not a directory" if a.out.exists() and not a.out.is_dir() else None)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        sys.exit(2)
    exit_on_failure(check_no_link)("--out", a.out, a.out, below=True)     # nothing written through a link
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        study(a.out, a.jobs, a.smoke, a.heterogeneous, a.shared_scale)
    except KeyboardInterrupt:
        print("gossip study: interrupted; finished cells are kept, rerun to go on", file=sys.stderr)
        sys.exit(130)
    except Terminated:
        print("stopped: SIGTERM: the running cells were stopped; finished cells are kept, rerun to go on",
              file=sys.stderr)
        sys.exit(128 + signal.SIGTERM)
    except BrokenProcessPool:
        print("gossip study: a worker process ended abruptly (killed?); finished cells are kept, rerun to go on",
              file=sys.stderr)
        sys.exit(1)
    except (OSError, Diverged) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        signal.signal(signal.SIGTERM, previous)


class Terminated(BaseException):
    """SIGTERM to the study's main process (a scheduler's stop): its cells' processes are ended."""


def _terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)     # one stop; a second SIGTERM while stopping adds nothing
    raise Terminated


def _worker_signals() -> None:
    """A cell's process: SIGTERM ends it (the main process's handler is for the main process)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    main()
