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
from functools import partial
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from dadam3.config import CONFIG_DIR, run_cli
from dadam3.cuda_flags import set_cuda_flags
from dadam3.data import NodeSampler, build_dataset
from dadam3.distributed import DistributedMixer, Placement, exit_on_peer_failure, init_from_env, shutdown
from dadam3.errors import exit_on_config_error
from dadam3.gan.samples import sample_hook
from dadam3.gan.stacked import StackedNet, build_stacked_nets
from dadam3.gan.trainer import WGANTrainer
from dadam3.metrics.evaluation import evaluation_hook
from dadam3.mixing import LocalMixer
from dadam3.optim import build_optimizer, mixer_for
from dadam3.run_dir import claim_run_dir, on_logging_grid
from dadam3.run_logging import NullLogger, build_logger
from dadam3.settings import TrainSettings, train_settings

log = logging.getLogger(__name__)


def build_trainer(s: TrainSettings, run_dir: Path) -> WGANTrainer:
    """Data, nets, optimizers, logger and hooks from the settings; resumes if asked. With
    ``backend=distributed`` this process holds its rank's block of the M nodes."""
    placement, device, make_mixer = Placement(s.nodes), s.device, LocalMixer
    if s.backend == "distributed":
        info = init_from_env(s.distributed_backend, s.distributed_timeout_s)
        placement, make_mixer = Placement(s.nodes, info), partial(DistributedMixer, timeout_s=info.timeout_s)
        log.info("%s holds nodes %d..%d of %d", info.describe(), placement.block.start, placement.block.stop - 1, s.nodes)
        device = info.device if info.backend == "nccl" else device
    if device.type == "cuda":
        log.info("CUDA: %s", set_cuda_flags(s.cuda_tf32, s.cuda_cudnn_benchmark))
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    o, t, d = s.optimizer, s.topology, s.data
    mixer = mixer_for(o.name, s.nodes, t.name, t.rounds, make_mixer=make_mixer, **t.options)
    rd = claim_run_dir(run_dir, s.resume, s.config, s.overwrite, placement)
    run_dir, ckpt = rd.path, rd.checkpoint

    torch.manual_seed(s.seed)
    dataset = build_dataset(d.name, d.root, image_size=d.image_size, download=d.download, train=True, **d.options)
    sampler = NodeSampler(dataset, s.nodes, s.loop.batch_size, partition=d.partition, alpha=d.alpha,
                          seed=s.seed, device=device, prefetch=s.prefetch, node_ids=placement.block)
    image_shape = dict(channels=dataset.shape[0], image_size=dataset.shape[-1]) if d.is_images else {}
    G, D = build_stacked_nets(s.model.arch, len(placement.block), **s.model.options, **image_shape)
    G, D = G.to(device=device, dtype=s.dtype), D.to(device=device, dtype=s.dtype)
    fused = None if s.cuda_compile_step else False         # None: fused on CUDA (the optimizers' default)
    opt_g = build_optimizer(o.name, G.parameters(), mixer, compile=fused, **o.hparams)
    opt_d = build_optimizer(o.name, D.parameters(), mixer, compile=fused, **o.hparams)

    nz = G.in_shape[0]
    evaluate = evaluation_hook(dataset, s.metrics, nz, s.seed, device, s.dtype)   # checks weights before the log
    logger = _logger(s, run_dir, ckpt) if placement.is_main else NullLogger()
    trainer = WGANTrainer(G, D, opt_g, opt_d, sampler, s.loop, run_dir, logger, device, s.dtype,
                          sample=sample_hook(dataset, nz, s.seed, device, s.dtype, run_dir / "samples", logger),
                          evaluate=evaluate, config=dict(s.config), run_dir_lock=rd, placement=placement,
                          full_G=StackedNet.replicate(G.node_module(0), s.nodes)
                          if placement.distributed and placement.is_main else None)
    if ckpt is not None:
        trainer.load_checkpoint(ckpt)
        for opt in (opt_g, opt_d):               # the checkpoint's param_groups hold the old values
            opt.set_hparams(o.hparams)
        trainer.log_resumed(rd.changed)
    return trainer


def _logger(s: TrainSettings, run_dir: Path, ckpt: dict | None):
    """metrics.jsonl (rewound to the checkpoint when resuming) and, with logger=wandb, wandb."""
    lg = s.logger
    wandb = None if lg.kind != "wandb" else dict(
        project=lg.project, group=lg.group, job_type=lg.job_type, mode=lg.mode, name=lg.name,
        config=dict(s.config), run_id=(ckpt or {}).get("wandb_run_id"))
    return build_logger(run_dir / "metrics.jsonl", wandb=wandb,
                        resume_from_iteration=None if ckpt is None else ckpt["iteration"],
                        drop_record_at_resume_point=ckpt is not None and not _record_on_grid(ckpt))


def _record_on_grid(ckpt: dict) -> bool:
    """Whether the record at the checkpoint's iteration is one an uninterrupted run writes too
    (the trainer says so in the checkpoint; checkpoints older than that key: from the config)."""
    if "record_on_grid" in ckpt:
        return ckpt["record_on_grid"]
    return on_logging_grid(ckpt["iteration"], ckpt["config"])


@exit_on_peer_failure
@exit_on_config_error
def run(cfg: DictConfig, run_dir: Path) -> None:
    trainer = build_trainer(train_settings(cfg), run_dir)
    if trainer.placement.is_main:
        (trainer.run_dir / "config_resolved.yaml").write_text(OmegaConf.to_yaml(trainer.config))
    trainer.fit()
    trainer.finish()
    shutdown()
    log.info("finished %d iterations in %.1f s -> %s", trainer.state.iteration, trainer.wall_time(), trainer.run_dir)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> None:
    run(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    # the Hydra task by reference to the importable module (not __main__), so launchers that
    # pickle it (submitit) can
    from dadam3.train import main as task
    run_cli(task, groups=("optimizer", "topology", "dataset", "model", "logger", "experiment"))
