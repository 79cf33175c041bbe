"""``python -m dadam3.synthetic``: the synthetic game of Section 5.1 (paper Fig. 1).

Writes ``metrics.csv`` (iteration,error,avg_grad_sq_norm at ~50 log-spaced iterations
and the last) and ``status.json`` (``{"status": "finished"}``, or ``"diverged"`` with the
iteration and message, then the exit status is 3; or ``"interrupted"`` after SIGINT/SIGTERM,
with what was logged until then, exit status 130/143) into the Hydra run directory. Example::

    python -m dadam3.synthetic optimizer=dp_oadam iterations=1000000 hydra.run.dir=out/dp
"""
from __future__ import annotations

import csv
import json
import logging
import signal
from functools import partial
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from dadam3.config import CONFIG_DIR, run_cli
from dadam3.errors import exit_on_config_error, named_as
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_run import SyntheticDiverged, SyntheticInterrupted, SyntheticResult, run_synthetic
from dadam3.schema import check_overrides, synthetic_settings
from dadam3.signals import StopSignals

log = logging.getLogger(__name__)


def write_results(out_dir: Path, result: SyntheticResult, status: dict) -> None:
    with open(out_dir / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["iteration", "error", "avg_grad_sq_norm"])
        for it, err, r in result.rows():
            w.writerow([it, repr(err), repr(r)])
    (out_dir / "status.json").write_text(json.dumps(status) + "\n")


@exit_on_config_error
def run(cfg: DictConfig, out_dir: Path) -> None:
    s = synthetic_settings(cfg)
    o, t = s.optimizer, s.topology
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with StopSignals() as stop, named_as(t.keys("topology.")):
            result = run_synthetic(SyntheticGame(c=s.game.c, k=s.game.k), o.name, o.hparams, s.nodes, s.iterations,
                                   seed=s.seed, topology={"name": t.name, "rounds": t.rounds, **t.options},
                                   backend=s.backend, stop=lambda: stop.signum is not None)
    except SyntheticDiverged as e:
        write_results(out_dir, e.result, {"status": "diverged", "iteration": e.iteration, "message": str(e)})
        raise
    except SyntheticInterrupted as e:
        name = signal.Signals(stop.signum).name
        e.exit_code = 128 + stop.signum
        e.args = (f"{name} {e}; {out_dir / 'metrics.csv'} holds the iterations logged so far (rerun to continue: "
                  "the synthetic runner does not resume)",)
        write_results(out_dir, e.result, {"status": "interrupted", "iteration": e.iteration, "signal": name})
        raise
    write_results(out_dir, result, {"status": "finished", "iteration": s.iterations})
    log.info("%s: %d iterations on %d nodes in %.2f s; final e_k=%.4g R_k=%.4g -> %s", o.name, s.iterations,
             s.nodes, result.seconds, result.error[-1], result.avg_grad_sq_norm[-1], out_dir / "metrics.csv")


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="synthetic")
def main(cfg: DictConfig) -> None:
    run(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    # the Hydra task by reference to the importable module (not __main__), so launchers that
    # pickle it (submitit) can
    from dadam3.synthetic import main as task
    run_cli(task, groups=("optimizer", "topology"), check=partial(check_overrides, "synthetic"))
