"""``python -m dadam3.synthetic``: the synthetic game of Section 5.1 (paper Fig. 1).

Writes ``metrics.csv`` (iteration,error,avg_grad_sq_norm at ~50 log-spaced iterations
and the last) into the Hydra run directory. Example::

    python -m dadam3.synthetic optimizer=dp_oadam iterations=1000000 hydra.run.dir=out/dp
"""
from __future__ import annotations

import csv
import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from dadam3.config import CONFIG_DIR, optimizer_args, run_cli, topology_args
from dadam3.errors import ConfigError, exit_on_config_error
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_run import run_synthetic

log = logging.getLogger(__name__)


def write_metrics_csv(path: Path, result) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["iteration", "error", "avg_grad_sq_norm"])
        for it, err, r in result.rows():
            w.writerow([it, repr(err), repr(r)])


@exit_on_config_error
def run(cfg: DictConfig, out_dir: Path) -> None:
    name, hparams = optimizer_args(cfg.optimizer)
    topology, rounds, topology_kw = topology_args(cfg.topology)
    nodes = cfg.nodes
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError("nodes", nodes, "must be an integer >= 1")
    game = SyntheticGame(c=cfg.game.c, k=cfg.game.k)
    result = run_synthetic(game, name, hparams, nodes, cfg.iterations, seed=cfg.seed, topology=topology,
                           rounds=rounds, topology_kw=topology_kw, backend=cfg.backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_metrics_csv(out_dir / "metrics.csv", result)
    log.info("%s: %d iterations on %d nodes in %.2f s; final e_k=%.4g R_k=%.4g -> %s", name, cfg.iterations,
             nodes, result.seconds, result.error[-1], result.avg_grad_sq_norm[-1], out_dir / "metrics.csv")


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="synthetic")
def main(cfg: DictConfig) -> None:
    run(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    run_cli(main, groups=("optimizer", "topology"))
