"""The start of ``python -m dadam3.train``'s run, from the config Hydra composed: a resume's
own configuration (:func:`resumed_config`), the checked settings, the trainer built with every
check first (:func:`dadam3.run_build.build_trainer`), then, the run directory held, its job
log and its records of where it came from (``config_resolved.yaml``, ``.hydra/``,
``provenance.json``)."""
from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from dadam3.checkpoint import resolve_resume_path, resume_override
from dadam3.errors import WriteFailed, writing
from dadam3.gan.trainer import WGANTrainer
from dadam3.job_log import JOB_LOG, JobLog, record_provenance, run_overrides, write_provenance
from dadam3.run_build import build_trainer
from dadam3.schema import TrainConfig, config_error, merged_overrides, train_settings


def start_run(cfg: DictConfig, run_dir: Path, job_log: JobLog) -> WGANTrainer:
    """The trainer of ``cfg`` (:func:`resumed_config` with ``resume=``) in ``run_dir``, its
    job log attached on every rank and the run files written by the main one; a write that
    failed stops every rank alike (one line, the ``interrupted`` record)."""
    cfg = resumed_config(cfg)
    s = train_settings(cfg)
    trainer = build_trainer(s, run_dir, _dir_named())
    job_log.attach(trainer.run_dir / JOB_LOG)
    trainer.stop_if_write_failed(_write_run_files(cfg, dict(s.config), trainer) if trainer.placement.is_main
                                 else None)
    return trainer


def resumed_config(cfg: DictConfig) -> DictConfig:
    """With ``resume=``: the config composed from the overrides the run was made and resumed
    with (its ``.hydra/``), then this command line's; without, or for a run without ``.hydra/``,
    ``cfg`` as composed."""
    if not cfg.get("resume"):
        return cfg
    hc = HydraConfig.get()
    base = run_overrides(resolve_resume_path(cfg.resume).parent.parent, TrainConfig.renamed)
    if not base:
        return cfg
    given = merged_overrides(list(hc.overrides.task), [resume_override(cfg.resume)])
    try:
        return hydra.compose(config_name=hc.job.config_name, overrides=merged_overrides(base, given,
                                                                                       ("resume", "overwrite")))
    except Exception as e:
        raise config_error(e) from None


def _dir_named() -> bool:
    """Whether the command line named the run's directory (hydra.run.dir, or a sweep's hydra.sweep.dir)."""
    if not HydraConfig.initialized():
        return False
    hc = HydraConfig.get()
    key = "hydra.sweep.dir" if hc.mode == RunMode.MULTIRUN else "hydra.run.dir"
    return any(o.partition("=")[0] == key for o in hc.overrides.hydra)


def _write_run_files(cfg: DictConfig, resolved: dict, trainer: WGANTrainer) -> WriteFailed | None:
    """``config_resolved.yaml``, ``.hydra/`` and ``provenance.json``; a write that failed is returned."""
    try:
        with writing(trainer.run_dir / "config_resolved.yaml"):
            (trainer.run_dir / "config_resolved.yaml").write_text(OmegaConf.to_yaml(resolved))
        with writing(trainer.run_dir / ".hydra"):
            write_provenance(cfg, trainer.run_dir, resumed_at=trainer.state.iteration or None)
        with writing(trainer.run_dir / "provenance.json"):
            record_provenance(trainer.run_dir, str(trainer.device), trainer.state.iteration)
    except WriteFailed as e:
        return e
    return None
