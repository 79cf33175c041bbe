"""``python -m dadam3.train``: simulated multi-node WGAN-GP training (Section 5.2-5.3).

The config is checked once into :class:`dadam3.settings.TrainSettings`; everything is
built from it here and handed, as plain objects, to :class:`dadam3.gan.trainer.WGANTrainer`.
Writes into the Hydra run directory: ``metrics.jsonl`` (one record per logged iteration),
``samples/`` (PNG grids from a fixed noise batch, per node and for the node-averaged model),
``checkpoints/last.pt``, ``config_resolved.yaml`` and ``.hydra/``. Examples::

    python -m dadam3.train experiment=toy_gaussians
    python -m dadam3.train dataset=cifar10 dataset.root=~/data optimizer=dadam3 nodes=5
    python -m dadam3.train -m optimizer=dadam3,dosg optimizer.lr=1e-4,5e-5 seed=0,1
    python -m dadam3.train resume=outputs/train/.../run_dir iterations=60000
"""
from __future__ import annotations

import logging
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from dadam3.config import CONFIG_DIR, run_cli
from dadam3.cuda_flags import set_cuda_flags
from dadam3.data import NodeSampler, build_dataset
from dadam3.errors import exit_on_config_error
from dadam3.gan.samples import sample_hook
from dadam3.gan.stacked import build_stacked_nets
from dadam3.gan.trainer import WGANTrainer
from dadam3.metrics.evaluation import evaluation_hook
from dadam3.optim import build_optimizer, mixer_for
from dadam3.run_dir import on_logging_grid, open_run_dir
from dadam3.run_logging import build_logger
from dadam3.settings import TrainSettings, train_settings

log = logging.getLogger(__name__)


def build_trainer(s: TrainSettings, run_dir: Path) -> WGANTrainer:
    """Data, nets, optimizers, logger and hooks from the settings; resumes if asked."""
    if s.device.type == "cuda":
        log.info("CUDA: %s", set_cuda_flags(s.cuda_tf32, s.cuda_cudnn_benchmark))
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    o, t, d = s.optimizer, s.topology, s.data
    mixer = mixer_for(o.name, s.nodes, t.name, t.rounds, **t.options)
    rd = open_run_dir(run_dir, s.resume, s.config, s.overwrite)
    run_dir, ckpt = rd.path, rd.checkpoint

    torch.manual_seed(s.seed)
    dataset = build_dataset(d.name, d.root, image_size=d.image_size, download=d.download, train=True, **d.options)
    sampler = NodeSampler(dataset, s.nodes, s.loop.batch_size, partition=d.partition, alpha=d.alpha,
                          seed=s.seed, device=s.device, prefetch=s.prefetch)
    image_shape = dict(channels=dataset.shape[0], image_size=dataset.shape[-1]) if d.is_images else {}
    G, D = build_stacked_nets(s.model.arch, s.nodes, **s.model.options, **image_shape)
    G, D = G.to(device=s.device, dtype=s.dtype), D.to(device=s.device, dtype=s.dtype)
    opt_g = build_optimizer(o.name, G.parameters(), mixer, **o.hparams)
    opt_d = build_optimizer(o.name, D.parameters(), mixer, **o.hparams)

    nz = G.in_shape[0]
    evaluate = evaluation_hook(dataset, s.metrics, nz, s.seed, s.device, s.dtype)   # checks weights before the log
    lg = s.logger
    wandb = None if lg.kind != "wandb" else dict(
        project=lg.project, group=lg.group, job_type=lg.job_type, mode=lg.mode, name=lg.name,
        config=dict(s.config), run_id=(ckpt or {}).get("wandb_run_id"))
    logger = build_logger(run_dir / "metrics.jsonl", wandb=wandb,
                          resume_from_iteration=None if ckpt is None else ckpt["iteration"],
                          drop_record_at_resume_point=ckpt is not None and not on_logging_grid(ckpt["iteration"],
                                                                                               ckpt["config"]))
    trainer = WGANTrainer(G, D, opt_g, opt_d, sampler, s.loop, run_dir, logger, s.device, s.dtype,
                          sample=sample_hook(dataset, nz, s.seed, s.device, s.dtype, run_dir / "samples", logger),
                          evaluate=evaluate,
                          config=dict(s.config), run_dir_lock=rd)
    if ckpt is not None:
        trainer.load_checkpoint(ckpt)
        for opt in (opt_g, opt_d):               # the checkpoint's param_groups hold the old values
            opt.set_hparams(o.hparams)
        trainer.log_resumed(rd.changed)
    return trainer


@exit_on_config_error
def run(cfg: DictConfig, run_dir: Path) -> None:
    trainer = build_trainer(train_settings(cfg), run_dir)
    (trainer.run_dir / "config_resolved.yaml").write_text(OmegaConf.to_yaml(trainer.config))
    trainer.fit()
    trainer.finish()
    log.info("finished %d iterations in %.1f s -> %s", trainer.state.iteration, trainer.wall_time(), trainer.run_dir)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> None:
    run(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    run_cli(main, groups=("optimizer", "topology", "dataset", "model", "logger", "experiment"))
