"""``python -m dadam3.train``: simulated multi-node WGAN-GP training (Section 5.2-5.3).

The config is checked once into :class:`dadam3.schema.TrainConfig` (the settings); everything
is built from it here and handed, as plain objects, to :class:`dadam3.gan.trainer.WGANTrainer`.
Writes into the Hydra run directory: ``metrics.jsonl`` (one record per logged iteration),
``samples/`` (PNG grids from a fixed noise batch, per node and for the node-averaged model),
``checkpoints/last.pt``, ``config_resolved.yaml`` and ``.hydra/``. Examples::

    python -m dadam3.train experiment=toy_gaussians
    python -m dadam3.train dataset=cifar10 dataset.root=~/data optimizer=dadam3 nodes=5
    python -m dadam3.train -m optimizer=dadam3,dosg optimizer.lr=1e-4,5e-5 seed=0,1
    python -m dadam3.train resume=outputs/train/.../run_dir loop.iterations=60000

A resume needs no more than ``resume=DIR``: the run's configuration comes from its directory
(the overrides in ``.hydra/``, :func:`resumed_config`), and only keys given on the command
line change anything (each checked against what may change on resume).
"""
from __future__ import annotations

if __name__ == "__main__":          # first: a stop signal while torch and Hydra load is one line
    from dadam3.signals import during_start_up
    during_start_up()
    import os
    if os.environ.get("WORLD_SIZE"):  # a rank: c10d's C++ log (stack frames) says nothing our one line does not
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")

import logging  # noqa: E402
import os
import sys
from functools import partial
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from dadam3.config import CONFIG_DIR, run_cli
from dadam3.cuda_flags import set_cuda_flags
from dadam3.data import NodeSampler, build_dataset
from dadam3.distributed import (DistributedMixer, Placement, agree_on_config, exit_on_peer_failure, init_from_env,
                                 run_fingerprint, shutdown)
from dadam3.errors import ConfigError, WriteFailed, check_usable_dir, exit_on_config_error, named_as, writing
from dadam3.gan.memory import check_fits
from dadam3.gan.own_nets import build_net, stack_own_nets
from dadam3.gan.samples import GeneratorDraws, sample_hook
from dadam3.gan.stacked import build_stacked_nets
from dadam3.gan.trainer import RunContext, WGANTrainer
from dadam3.gan.vmapped import stack_nets
from dadam3.checkpoint import resolve_resume_path, resume_override
from dadam3.job_log import JOB_LOG, JobLog, record_provenance, resume_argv, run_overrides, write_provenance
from dadam3.log_rewind import record_at_resume_point_kept
from dadam3.metrics.evaluation import evaluation_hook
from dadam3.metrics.spec import default_cache_dir
from dadam3.mixing import LocalMixer
from dadam3.optim import build_optimizer, mixer_for, start_together
from dadam3.run_dir import RunDir, claim_run_dir, discard_if_unused
from dadam3.run_logging import NullLogger, build_logger
from dadam3.schema import TrainConfig, check_overrides, config_error, merged_overrides, train_settings
from dadam3.signals import StopSignals
from dadam3.sweep import sweep_job

log = logging.getLogger(__name__)


def build_trainer(s: TrainConfig, run_dir: Path, dir_named: bool = False, nets: tuple | None = None) -> WGANTrainer:
    """Data, nets, optimizers, logger and hooks from the settings; resumes if asked. With
    ``backend=distributed`` this process holds its rank's block of the M nodes. ``nets``: your
    own (generator, critic), one node's ``nn.Module`` each (the generator maps ``[B, model.nz]``
    noise to the data), checked and stacked over the nodes as ``model=custom``'s are.

    Every check that can refuse the run comes first (the config, paths, the ranks' agreement,
    the run directory, data, nets, the checkpoint's content and shape, the evaluation weights);
    only then is the run directory created, locked, cleared for ``overwrite=true``, W&B started
    and ``metrics.jsonl`` created or rewound (:func:`_open_logs`). ``dir_named``: the user named
    ``run_dir`` (a checkpoint that is no run's own may continue there)."""
    _check_launch(s)
    _check_paths(s)
    with named_as({"model": "model.width"}):       # a net without a size key: its width
        check_fits(s, int(os.environ.get("WORLD_SIZE", "1")) if s.backend == "distributed" else 1, s.torch_device)
    placement, device, make_mixer = Placement(s.nodes), s.torch_device, LocalMixer
    if s.backend == "distributed":
        with named_as(s.distributed.keys("distributed.")):
            info = init_from_env(s.distributed.backend, s.distributed.timeout_s)
        agree_on_config(run_fingerprint(s.config), info)
        placement, make_mixer = Placement(s.nodes, info), partial(DistributedMixer, timeout_s=info.timeout_s)
        log.info("%s holds nodes %d..%d of %d", info.describe(), placement.block.start, placement.block.stop - 1, s.nodes)
        device = info.device if info.backend == "nccl" else device
    if device.type == "cuda":
        log.info("CUDA: %s", set_cuda_flags(s.cuda.tf32, s.cuda.cudnn_benchmark))
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    mixer = on_every_rank(placement, lambda: _mixer(s, make_mixer))
    rd = claim_run_dir(run_dir, s.resume, s.config, s.overwrite, placement, dir_named)
    trainer, dataset = on_every_rank(placement, lambda: _build(s, rd, placement, device, mixer, nets))
    trainer.logger = on_every_rank(placement, lambda: _open_logs(s, rd) if placement.is_main else NullLogger())
    nz = trainer.nz
    trainer.sample = sample_hook(dataset, nz, s.seed, device, s.torch_dtype, rd.path / "samples", trainer.logger)
    if rd.checkpoint is not None:
        trainer.log_resumed(rd.changed)
    return trainer


def _mixer(s: TrainConfig, make_mixer):
    """The optimizer's mixer over the configured topology (``mixer_for``'s errors in config keys)."""
    o, t = s.optimizer, s.topology
    with named_as({**t.keys("topology."), "name": "optimizer"}):   # mixer_for says topology= itself
        return mixer_for(o.name, s.nodes, t.name, t.rounds, make_mixer=make_mixer, **t.options)


def _build(s: TrainConfig, rd: RunDir, placement: Placement, device: torch.device, mixer, nets) -> tuple:
    """The trainer (logging nowhere yet) and its data set; a resume loads its checkpoint here,
    so a checkpoint that does not fit is refused before the run directory is touched. Each
    builder's errors name its arguments; they are said here in the config's keys."""
    o, d = s.optimizer, s.dataset
    torch.manual_seed(s.seed)
    with named_as({**d.keys("dataset."), "batch_size": "loop.batch_size"}):
        dataset = build_dataset(d.name, d.root, image_size=d.image_size, download=d.download, train=True,
                                **d.options)
        _check_shards(dataset, s)
        sampler = NodeSampler(dataset, s.nodes, s.loop.batch_size, partition=d.partition, alpha=d.alpha,
                              seed=s.seed, device=device, prefetch=s.prefetch, node_ids=placement.block)
    G, D = _nets(s, len(placement.block), dataset.shape, nets)
    G, D = G.to(device=device, dtype=s.torch_dtype), D.to(device=device, dtype=s.torch_dtype)
    if device.type == "cuda":
        G.use_channels_last(s.cuda.channels_last)
        D.use_channels_last(s.cuda.channels_last)
    fused = None if s.cuda.compile_step else False         # None: fused on CUDA (the optimizers' default)
    opt_g = build_optimizer(o.name, G.parameters(), mixer, compile=fused, start=False, **o.hparams)
    opt_d = build_optimizer(o.name, D.parameters(), mixer, compile=fused, start=False, **o.hparams)
    with named_as(METRICS_KEYS):                # the weights are checked here
        evaluate = evaluation_hook(dataset, s.metrics, GeneratorDraws(G.in_shape[0], s.seed, device, s.torch_dtype))
    full_G = (stack_nets(G.node_module(0), s.nodes, in_shape=G.in_shape, out_shape=G.out_shape)
              if placement.distributed and placement.is_main else None)
    run = RunContext(rd.path, device, s.torch_dtype, placement, mixer, config=dict(s.config), lock=rd, full_G=full_G,
                     seed=s.seed)
    trainer = WGANTrainer(G, D, opt_g, opt_d, sampler, s.loop, run, NullLogger(), evaluate=evaluate)
    if rd.checkpoint is not None:
        _load_checkpoint(trainer, rd.checkpoint, s.resume)
        for opt in (opt_g, opt_d):               # the checkpoint's param_groups hold the old values
            opt.set_hparams(o.hparams)
    else:
        start_together([opt_d, opt_g])           # the first gossip round: Z_1 = X_0 W^t for both players
    return trainer, dataset


def _nets(s: TrainConfig, num_nodes: int, data_shape: tuple, nets: tuple | None) -> tuple:
    """(G, D) stacked over this process's nodes: the paper's (model=dcgan32|dcgan64|mlp), or your
    own (model=custom, or ``build_trainer(nets=...)``) checked by :mod:`dadam3.gan.own_nets`."""
    if nets is None and s.model.arch != "custom":
        image_shape = dict(channels=data_shape[0], image_size=data_shape[-1]) if s.dataset.is_images else {}
        with named_as({**s.model.keys("model."), "channels": "dataset.channels", "image_size": "dataset.image_size"}):
            return build_stacked_nets(s.model.arch, num_nodes, **s.model.options, **image_shape)
    with named_as({f"{n}{k}": f"model.{n}{k}" for n in ("generator", "critic") for k in ("", "._target_")}):
        if nets is None:
            nets = build_net("generator", s.model.generator), build_net("critic", s.model.critic)
        return stack_own_nets(*nets, num_nodes, s.model.nz, data_shape)


# the evaluation's library arguments -> the config keys that feed them
METRICS_KEYS = {"feature_extractor": "metrics.feature_extractor", "weights_path": "metrics.inception_weights",
                "download": "metrics.download_weights", "num_samples": "metrics.samples",
                "batch_size": "metrics.batch_size"}


def _load_checkpoint(trainer: WGANTrainer, ckpt: dict, resume: str) -> None:
    """A checkpoint of the right kind whose content or shapes do not fit this run is one line."""
    try:
        trainer.load_checkpoint(ckpt)
    except ConfigError:
        raise
    except Exception as e:          # KeyError (a missing entry), shapes, emptied param_groups, ...
        what = f"missing entry {e}" if isinstance(e, KeyError) else " ".join(str(e).split())[:160]
        raise ConfigError("resume", resume, f"the checkpoint does not fit this run ({type(e).__name__}: "
                                            f"{what}); it is damaged or from other code") from None


def _check_launch(s: TrainConfig) -> None:
    """A process that torchrun started as one of several ranks must run backend=distributed."""
    world = os.environ.get("WORLD_SIZE", "1")
    if s.backend == "local" and world.isdigit() and int(world) > 1:
        raise ConfigError("backend", "local", f"this process is rank {os.environ.get('RANK', '?')} of WORLD_SIZE="
                                              f"{world} (started by torchrun): set backend=distributed, or start "
                                              "one process without torchrun")


def _check_paths(s: TrainConfig) -> None:
    """Directories the run will write into later, checked now (nothing is created)."""
    m = s.metrics
    if m.every and (m.fid or m.kid) and s.dataset.is_images:
        check_usable_dir("metrics.cache_dir", m.cache_dir or default_cache_dir())


def _check_shards(dataset, s: TrainConfig) -> None:
    """Too many nodes for a finite data set cut into disjoint shards: say so (not batch_size)."""
    n = len(dataset) if hasattr(dataset, "__len__") and s.dataset.partition != "iid" else None
    if n is not None and n < s.nodes:
        raise ConfigError("nodes", s.nodes, f"the data set has {n} samples and dataset.partition={s.dataset.partition} "
                                            f"gives each node its own: at most {n} nodes")
    if n is not None and s.dataset.partition == "split" and n // s.nodes < s.loop.batch_size:
        raise ConfigError("loop.batch_size", s.loop.batch_size,
                          f"dataset.partition=split gives each of nodes={s.nodes} only {n // s.nodes} of {n} samples: "
                          f"lower loop.batch_size to <= {n // s.nodes} or nodes to <= {max(1, n // s.loop.batch_size)}")


def _open_logs(s: TrainConfig, rd: RunDir):
    """Rank 0, every check passed: claim the directory, then start W&B, then create or rewind
    metrics.jsonl. A W&B that will not start leaves no trace of this run in the directory."""
    fresh_wandb = not (rd.path / "wandb").exists()
    rd.commit()
    try:
        return _logger(s, rd.path, rd.checkpoint)
    except BaseException:
        rd.undo(("wandb",) if fresh_wandb else ())
        raise


def on_every_rank(placement: Placement, build):
    """``build()``, with every rank stopping alike when one refuses (its one line said once, by
    the lowest such rank) instead of the others waiting for it."""
    error = None
    try:
        result = build()
    except ConfigError as e:
        if not placement.distributed:
            raise
        error, result = e, None
    if placement.distributed:
        errors = placement.all_objects(error)
        first = next((r for r, e in enumerate(errors) if e is not None), None)
        if first is not None:
            e = errors[first]
            e.echo = placement.rank == first
            raise e
    return result


def _logger(s: TrainConfig, run_dir: Path, ckpt: dict | None):
    """metrics.jsonl (rewound to the checkpoint when resuming) and, with logger=wandb, wandb."""
    lg = s.logger
    wandb = None if lg.kind != "wandb" else dict(
        project=lg.project, group=lg.group, job_type=lg.job_type, mode=lg.mode, name=lg.name,
        config=dict(s.config), run_id=(ckpt or {}).get("wandb_run_id"))
    return build_logger(run_dir / "metrics.jsonl", wandb=wandb,
                        resume_from_iteration=None if ckpt is None else ckpt["iteration"],
                        drop_record_at_resume_point=ckpt is not None and not record_at_resume_point_kept(ckpt))


def resumed_config(cfg: DictConfig) -> DictConfig:
    """With ``resume=``: the config composed from the overrides the run was made and resumed
    with (its ``.hydra/``), then this command line's; without, or for a run without ``.hydra/``,
    ``cfg`` as composed."""
    if not cfg.get("resume"):
        return cfg
    hc = HydraConfig.get()
    base = run_overrides(resolve_resume_path(cfg.resume).parent.parent)
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


def train_run(cfg: DictConfig, run_dir: Path) -> WGANTrainer:
    """One run: checks, then (every check passed) the directory's records and provenance, training."""
    with JobLog() as job_log:
        cfg = resumed_config(cfg)
        trainer = build_trainer(train_settings(cfg), run_dir, _dir_named())
        job_log.attach(trainer.run_dir / JOB_LOG)
        trainer.stop_if_write_failed(_write_run_files(cfg, trainer) if trainer.placement.is_main else None)
        trainer.fit()
        trainer.finish()
        shutdown()
        log.info("finished %d iterations in %.1f s -> %s", trainer.state.iteration, trainer.wall_time(),
                 trainer.run_dir)
    return trainer


def _write_run_files(cfg: DictConfig, trainer: WGANTrainer) -> WriteFailed | None:
    """``config_resolved.yaml``, ``.hydra/`` and ``provenance.json``; a write that failed is returned."""
    try:
        with writing(trainer.run_dir / "config_resolved.yaml"):
            (trainer.run_dir / "config_resolved.yaml").write_text(OmegaConf.to_yaml(trainer.config))
        with writing(trainer.run_dir / ".hydra"):
            write_provenance(cfg, trainer.run_dir, resumed_at=trainer.state.iteration or None)
        with writing(trainer.run_dir / "provenance.json"):
            record_provenance(trainer.run_dir, str(trainer.device), trainer.state.iteration)
    except WriteFailed as e:
        return e
    return None


@exit_on_peer_failure
@exit_on_config_error
def run(cfg: DictConfig, run_dir: Path) -> None:
    """``python -m dadam3.train``: one run; a refusal or stop is one line and its exit status."""
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
            check=partial(check_overrides, "train"))
