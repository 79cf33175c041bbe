"""``python -m dadam3.train``: simulated multi-node WGAN-GP training (Section 5.2-5.3).

The config is checked once into :class:`dadam3.run.schema.TrainConfig` (the settings); the run is
started from it by :func:`dadam3.run.start.start_run` (checks, the run directory claimed, the
state, the logs: :func:`~dadam3.run.start.build_trainer`, re-exported here) and trained by
:class:`dadam3.run.trainer.WGANTrainer`.
Writes into the Hydra run directory: ``metrics.jsonl`` (one record per logged iteration),
``samples/`` (PNG grids from a fixed noise batch, per node and for the node-averaged model),
``checkpoints/last.pt``, ``config_resolved.yaml`` and ``.hydra/``. Examples::

    python -m dadam3.train experiment=toy_gaussians
    python -m dadam3.train dataset=cifar10 dataset.root=~/data optimizer=dadam3 nodes=5
    python -m dadam3.train -m optimizer=dadam3,dosg optimizer.lr=1e-4,5e-5 seed=0,1
    python -m dadam3.train resume=outputs/train/.../run_dir loop.iterations=60000

A resume needs no more than ``resume=DIR`` (or a checkpoint file): the run's configuration comes from
its checkpoint (:func:`dadam3.run.resume_config.resumed_config`), and only keys given on the command line
change anything (each checked against what may change on resume).
"""
from __future__ import annotations

if __name__ == "__main__":          # first: a stop signal while torch and Hydra load is one line
    from dadam3.run.signals import during_start_up
    during_start_up()
    import os
    if os.environ.get("WORLD_SIZE"):  # a rank: c10d's C++ log (stack frames) says nothing our one line does not
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")

import logging
import sys
from functools import partial
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from dadam3.run.config import CONFIG_DIR
from dadam3.run.schema.presets import run_cli
from dadam3.distributed import exit_on_peer_failure, shutdown
from dadam3.errors.boundary import exit_on_failure
from dadam3.run.trainer import WGANTrainer
from dadam3.run.job_log import JobLog
from dadam3.run.hydra_dirs import discard_if_unused
from dadam3.run.command_line import check_command_line
from dadam3.run.signals import StopSignals
from dadam3.run.sweep import sweep_job
from dadam3.run.resume_config import resume_argv
from dadam3.run.start import build_trainer, start_run

__all__ = ["build_trainer", "main", "run", "train_run"]
log = logging.getLogger(__name__)


def train_run(cfg: DictConfig, run_dir: Path) -> WGANTrainer:
    """One run: started (every check, then the run directory's records: :func:`start_run`),
    trained, finished."""
    with JobLog() as job_log:
        trainer = start_run(cfg, run_dir, job_log)
        trainer.fit()
        trainer.finish()
        shutdown()
        log.info("finished %d iterations in %.1f s -> %s", trainer.state.iteration, trainer.state.wall_time(),
                 trainer.run_dir)
    return trainer


@exit_on_peer_failure
@exit_on_failure
def run(cfg: DictConfig, run_dir: Path) -> None:
    """``python -m dadam3.train``: one run; a refusal, a stop or an environmental failure is one
    line and its exit status (the boundary: :func:`dadam3.errors.boundary.exit_on_failure`)."""
    train_run(cfg, run_dir)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        with StopSignals():         # from here a signal is noted; the loop acts on it
            if HydraConfig.get().mode == RunMode.MULTIRUN:
                sweep_job(train_run, cfg, run_dir)
            else:
                run(cfg, run_dir)
    finally:        # Hydra made it before the checks: a refused run, or a resume that continued elsewhere
        discard_if_unused(run_dir)


if __name__ == "__main__":
    # the Hydra task by reference to the importable module (not __main__), so launchers that
    # pickle it (submitit) can
    from dadam3.train import main as task
    sys.argv[1:] = resume_argv(sys.argv[1:])
    run_cli(task, groups=("optimizer", "topology", "dataset", "model", "logger", "loop", "experiment"),
            check=partial(check_command_line, "train"))
