"""The start of ``python -m dadam3.train``'s run, one sequence read top to bottom
(:func:`start_run`, then :func:`build_trainer`): the settings (a resume's own config first:
:mod:`dadam3.run.resume_config`; every key checked there, the paths it names and the launch
too), this process among the run's, the run directory claimed, the run's state, the logs (the
job log with them), then the run's records of what it is and where it came from.

Every check that can refuse the run (one line) comes first: the config, the ranks'
agreement, the run directory, data, nets, the checkpoint's content and shape, the evaluation
weights. Only then is the run directory created, locked, cleared for ``overwrite=true``, W&B
started and ``metrics.jsonl`` created or rewound (:func:`open_logs`). The builders' errors name
their arguments; they are said here in the config's keys.
"""
from __future__ import annotations

import logging
import os
from functools import partial
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from dadam3.data import NodeSampler, build_dataset
from dadam3.data.node_sampler import NodeNoise
from dadam3.distributed import DistributedMixer, Placement, agree_on_config, init_from_env, run_fingerprint
from dadam3.errors.config import ConfigError, check_bool, named_as
from dadam3.errors.files import WriteFailed
from dadam3.gan.layer_autotune import autotune_pair
from dadam3.gan.memory import check_fits
from dadam3.gan.own_nets import build_net, stack_own_nets
from dadam3.gan.samples import GeneratorDraws, sample_hook
from dadam3.gan.stacked import build_stacked_nets
from dadam3.gan.vmapped import stack_nets
from dadam3.metrics.evaluation import Evaluation, evaluation_hook
from dadam3.mixing import LocalMixer, Mixer
from dadam3.optim import build_optimizer, mixer_for, start_together
from dadam3.run.state import Checkpointer
from dadam3.run.checkpoint.resume import run_identity
from dadam3.run.config import flatten
from dadam3.run.directory import RunDir, claim_run_dir
from dadam3.run.job_log import JOB_LOG, JobLog, hydra_files, provenance_files, write_files
from dadam3.run.loggers import MultiLogger, build_logger
from dadam3.run.manifest import stamp_manifest
from dadam3.run.records import Records
from dadam3.run.resume_config import resumed_config
from dadam3.run.rewind import LoggingGrid, record_at_resume_point_kept
from dadam3.run.schema.runs import Distributed, TrainConfig
from dadam3.run.schema.settings import train_settings
from dadam3.run.state import RunContext, RunOutputs, TrainState
from dadam3.run.trainer import WGANTrainer

log = logging.getLogger(__name__)

# the evaluation's library arguments -> the config keys that feed them
METRICS_KEYS = {"feature_extractor": "metrics.feature_extractor", "weights_path": "metrics.inception_weights",
                "download": "metrics.download_weights", "num_samples": "metrics.samples",
                "batch_size": "metrics.batch_size"}


def start_run(cfg: DictConfig, run_dir: Path, job_log: JobLog) -> WGANTrainer:
    """The trainer of ``cfg`` (a resume's: its run's config, :func:`resumed_config`) in ``run_dir``,
    with its job log and Hydra's ``.hydra/`` files."""
    dir_named = _dir_named(cfg)
    cfg = resumed_config(cfg)
    s = train_settings(cfg)
    return build_trainer(s, run_dir, dir_named, composed=cfg, job_log=job_log)


def build_trainer(s: TrainConfig, run_dir: Path, dir_named: bool = False, nets: tuple | None = None, *,
                  composed: DictConfig | None = None, job_log: JobLog | None = None) -> WGANTrainer:
    """The trainer of the run ``s``, resumed if asked, its directory holding the run's records
    (``config_resolved.yaml``, ``provenance.json``). With ``placement=distributed`` this process
    holds its rank's block of the M nodes. ``nets``: your own (generator, critic), one node's
    ``nn.Module`` each (the generator maps ``[B, model.nz]`` noise to the data), checked and
    stacked over the nodes as ``model=custom``'s are. ``dir_named``: the user named ``run_dir``
    (a checkpoint that is no run's own may continue there). A Hydra app's ``composed`` config
    goes into ``.hydra/``; ``job_log`` is attached (``train.log``) with the run's other logs."""
    # 1. this process among the run's (the settings are checked: train_settings)
    where = start_processes(s)
    # 2. the run directory, claimed (nothing written yet) and checked
    rd = claim_run_dir(run_dir, s.resume, s.config, s.overwrite, where.placement, dir_named)
    # 3. the state (a resume's checkpoint loaded into it)
    state, dataset, draws, evaluate = on_every_rank(where.placement, lambda: build_state(s, rd, where, nets))
    # 4. every check passed: the logs
    logger = on_every_rank(where.placement, lambda: open_logs(s, rd) if where.placement.is_main else MultiLogger())
    if job_log is not None:         # rank 0 makes train.log new, then the other ranks append to that file
        on_every_rank(where.placement, lambda: job_log.attach(rd.path / JOB_LOG) if where.placement.is_main else None)
        if not where.placement.is_main:
            job_log.attach(rd.path / JOB_LOG, join=True)
    grid = LoggingGrid(s.loop.log_every, evaluate.every if evaluate is not None else 0)
    records = Records(logger, grid, where.placement)
    if rd.checkpoint is not None:               # the log says where the run continues and what changed
        records.status(state.iteration, "resumed", state.wall_time(), changed=rd.changed)
        rd.checkpoint = None                    # loaded into the state: the run holds no second copy
    outputs = RunOutputs(records, Checkpointer(rd.path, where.placement, s.loop.checkpoint_every, s.config),
                         sample_hook(dataset, draws, rd.path / "samples", s.loop.sample_every, logger), evaluate)
    full_G = (stack_nets(state.G.node_module(0), s.nodes, in_shape=state.G.in_shape, out_shape=state.G.out_shape)
              if where.placement.distributed and where.placement.is_main else None)
    run = RunContext(rd.path, where.device, where.dtype, where.placement, lock=rd, full_G=full_G,
                     graphs=s.cuda.graphs, writes=rd.writes)
    trainer = WGANTrainer(state, s.loop, run, outputs)
    # 5. the run's records of what it is and where it came from; a write that failed stops every rank alike
    failed = _write_run_files(trainer, s.config, composed) if where.placement.is_main else None
    trainer.stop_if_write_failed(failed)
    return trainer


class Where(NamedTuple):
    """Where this process runs: its block of the nodes, its device and dtype, the players' mixer."""
    placement: Placement
    device: torch.device
    dtype: torch.dtype
    mixer: Mixer | None              # None: single-node Adam3


def start_processes(s: TrainConfig) -> Where:
    """This process's device with the CUDA flags and threads set, its place among the run's
    (under torchrun: the ranks joined and agreed on the config), and the players' mixer."""
    world = int(os.environ.get("WORLD_SIZE", "1")) if s.placement == "distributed" else 1
    device, placement, make_mixer = s.torch_device, Placement(s.nodes), LocalMixer
    if device.type == "cuda":           # NCCL's device below is this rank's GPU: CUDA all the same
        log.info("CUDA: %s", set_cuda_flags(s.cuda.tf32, s.cuda.cudnn_benchmark))
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    if s.placement == "distributed":
        fingerprint = run_fingerprint(flatten(s.config))
        with named_as(Distributed.keys("distributed.")):
            info = init_from_env(s.distributed.backend, s.distributed.timeout_s, cuda=device.type == "cuda")
        agree_on_config(fingerprint, info)
        placement, make_mixer = Placement(s.nodes, info), partial(DistributedMixer, timeout_s=info.timeout_s)
        log.info("%s holds nodes %d..%d of %d", info.describe(), placement.block.start, placement.block.stop - 1,
                 s.nodes)
        device = info.device if info.backend == "nccl" else device
    o, t = s.optimizer, s.topology

    def fitting_mixer():    # the run fits this process's memory (a rank's own GPU); the players' mixer
        with named_as({"model": "model.width"}):       # a net without a size key: its width
            check_fits(s, world, device)
        with named_as({**t.keys("topology."), "name": "optimizer"}):   # mixer_for says topology= itself
            return mixer_for(o.name, s.nodes, t.name, t.rounds, make_mixer=make_mixer, **t.options)
    return Where(placement, device, s.torch_dtype, on_every_rank(placement, fitting_mixer))


def set_cuda_flags(tf32: bool, cudnn_benchmark: bool) -> str:
    """Set torch's TF32 flags (matmul and cuDNN convolution: operands rounded to 10 mantissa bits
    on the tensor cores, about 7x the float32 rate on Hopper, accumulated in float32; the gossip
    ignores them: :func:`dadam3.mixing.ieee_fp32_matmul`) and ``cudnn.benchmark``; returns a
    one-line description of what is now set."""
    for name, value in (("tf32", tf32), ("cudnn_benchmark", cudnn_benchmark)):
        check_bool(name, value)
    precision = "tf32" if tf32 else "ieee"
    be = torch.backends
    be.cuda.matmul.fp32_precision = precision
    be.cudnn.conv.fp32_precision = precision
    be.cudnn.benchmark = cudnn_benchmark
    return (f"matmul fp32_precision={be.cuda.matmul.fp32_precision}, cudnn.conv fp32_precision="
            f"{be.cudnn.conv.fp32_precision}, cudnn.benchmark={be.cudnn.benchmark}")


def build_state(s: TrainConfig, rd: RunDir, where: Where,
                nets: tuple | None) -> tuple[TrainState, object, GeneratorDraws, Evaluation | None]:
    """The run's state (a resume's checkpoint loaded: one that does not fit is refused before
    the run directory is touched), its data set, what the samples and the evaluation draw from
    its generator, and the evaluation."""
    o, d, device, dtype = s.optimizer, s.dataset, where.device, where.dtype
    torch.manual_seed(s.seed)
    with named_as({**d.keys("dataset."), "batch_size": "loop.batch_size"}):
        dataset = build_dataset(d.name, d.root, image_size=d.image_size, download=d.download, train=True,
                                **d.options)
        check_shards(dataset, s)
    channels_last = s.cuda.channels_last and device.type == "cuda"
    G, D = build_nets(s, len(where.placement.block), dataset.shape, nets, channels_last)
    G, D = G.to(device=device, dtype=dtype), D.to(device=device, dtype=dtype)
    if s.cuda.autotune_layers and device.type == "cuda":       # each convolution's layout by measurement
        autotune_pair(G, D, s.loop.batch_size, autocast=s.loop.autocast == "bf16")
    draws = GeneratorDraws(G.in_shape[0], s.seed, device, dtype)
    compiled = None if s.cuda.compile_step else False      # None: compiled on CUDA (the optimizers' default)
    hparams = o.hparams
    opt_g, opt_d = (build_optimizer(o.name, net.parameters(), where.mixer, compile=compiled, start=False,
                                    engine=o.engine, **hparams) for net in (G, D))
    with named_as(METRICS_KEYS):                # the weights are checked here
        evaluate = evaluation_hook(dataset, s.metrics, draws)
    with named_as({**d.keys("dataset."), "batch_size": "loop.batch_size"}):
        sampler = NodeSampler(dataset, s.nodes, s.loop.batch_size, partition=d.partition, alpha=d.alpha,
                              seed=s.seed, device=device, prefetch=s.prefetch, node_ids=where.placement.block)
    noise = NodeNoise(s.seed, where.placement.block, device)      # each node's generator noise, its own stream
    state = TrainState(G, D, opt_g, opt_d, sampler, noise, where.placement.block, where.mixer)
    if rd.checkpoint is not None:
        load_state(state, rd.checkpoint, s.resume)
        for opt in (opt_g, opt_d):               # the checkpoint's param_groups hold the old values
            opt.set_hparams(hparams)
    else:
        start_together([opt_d, opt_g])           # the first gossip round: Z_1 = X_0 W^t for both players
    return state, dataset, draws, evaluate


def check_shards(dataset, s: TrainConfig) -> None:
    """Too many nodes for a finite data set cut into disjoint shards: say so (not batch_size)."""
    n = len(dataset) if hasattr(dataset, "__len__") and s.dataset.partition != "iid" else None
    if n is not None and n < s.nodes:
        raise ConfigError("nodes", s.nodes, f"the data set has {n} samples and dataset.partition="
                                            f"{s.dataset.partition} gives each node its own: at most {n} nodes")
    if n is not None and s.dataset.partition == "split" and n // s.nodes < s.loop.batch_size:
        raise ConfigError("loop.batch_size", s.loop.batch_size,
                          f"dataset.partition=split gives each of nodes={s.nodes} only {n // s.nodes} of {n} "
                          f"samples: lower loop.batch_size to <= {n // s.nodes} or nodes to <= "
                          f"{max(1, n // s.loop.batch_size)}")


def build_nets(s: TrainConfig, num_nodes: int, data_shape: tuple, nets: tuple | None, channels_last: bool) -> tuple:
    """(G, D) stacked over this process's nodes: the paper's (model=dcgan32|dcgan64|mlp; with
    ``channels_last`` their convolutions on NHWC activations), or your own (model=custom, or
    ``build_trainer(nets=...)``) checked by :mod:`dadam3.gan.own_nets`."""
    if nets is None and s.model.arch != "custom":
        image_shape = dict(channels=data_shape[0], image_size=data_shape[-1]) if s.dataset.is_images else {}
        with named_as({**s.model.keys("model."), "channels": "dataset.channels", "image_size": "dataset.image_size"}):
            G, D = build_stacked_nets(s.model.arch, num_nodes, **s.model.options, **image_shape)
        return (G.use_channels_last(), D.use_channels_last()) if channels_last else (G, D)
    with named_as({f"{n}{k}": f"model.{n}{k}" for n in ("generator", "critic") for k in ("", "._target_")}):
        if nets is None:
            nets = build_net("generator", s.model.generator), build_net("critic", s.model.critic)
        return stack_own_nets(*nets, num_nodes, s.model.nz, data_shape)


def load_state(state: TrainState, ckpt: dict, resume: str) -> None:
    """A checkpoint of the right kind whose content or shapes do not fit this run is one line."""
    try:
        state.load_state_dict(ckpt)
    except ConfigError:
        raise
    except Exception as e:          # KeyError (a missing entry), shapes, emptied param_groups, ...
        what = f"missing entry {e}" if isinstance(e, KeyError) else " ".join(str(e).split())[:160]
        raise ConfigError("resume", resume, f"the checkpoint does not fit this run ({type(e).__name__}: "
                                            f"{what}); it is damaged or from other code") from None


def open_logs(s: TrainConfig, rd: RunDir):
    """Rank 0, every check passed: claim the directory, then start W&B, then create or rewind
    metrics.jsonl (rewound to the checkpoint when resuming). A W&B that will not start leaves no
    trace of this run in the directory."""
    fresh_wandb = not (rd.path / "wandb").exists()
    rd.commit()
    lg, ckpt = s.logger, rd.checkpoint
    wandb = None if lg.kind != "wandb" else dict(
        project=lg.project, group=lg.group, job_type=lg.job_type, mode=lg.mode, name=lg.name,
        config=dict(s.config), run_id=(ckpt or {}).get("wandb_run_id"))
    try:
        logger = build_logger(rd.path / "metrics.jsonl", wandb=wandb,
                              resume_from_iteration=None if ckpt is None else ckpt["iteration"],
                              drop_record_at_resume_point=ckpt is not None and not record_at_resume_point_kept(ckpt))
    except BaseException:
        rd.undo(("wandb",) if fresh_wandb else ())
        raise
    return logger


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


def _dir_named(cfg: DictConfig) -> bool:
    """Whether the command line named the run's directory: hydra.run.dir (a resume of a run
    elsewhere branches there: :func:`dadam3.run.directory.check_run_dir`), or a sweep's hydra.sweep.dir
    but for a sweep over ``resume=`` (its jobs continue their runs in place)."""
    if not HydraConfig.initialized():
        return False
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN and cfg.get("resume"):
        return False
    key = "hydra.sweep.dir" if hc.mode == RunMode.MULTIRUN else "hydra.run.dir"
    return any(o.partition("=")[0] == key for o in hc.overrides.hydra)


def _write_run_files(trainer: WGANTrainer, resolved: Mapping[str, Any],
                     composed: DictConfig | None) -> WriteFailed | None:
    """``config_resolved.yaml``, ``provenance.json`` and, given Hydra's ``composed`` config,
    ``.hydra/``: their contents first, then the writes; a write that failed is returned."""
    run_dir, k = trainer.run_dir, trainer.state.iteration
    files = {run_dir / "config_resolved.yaml": OmegaConf.to_yaml(dict(resolved)),
             **(hydra_files(composed, run_dir, resumed_at=k or None) if composed is not None else {}),
             **provenance_files(run_dir, str(trainer.device), k, run_identity(resolved))}
    try:
        write_files(files)
    except WriteFailed as e:
        return e
    finally:                                    # what was written, stamped even when a later write failed
        stamp_manifest(run_dir, trainer.run.writes)
    return None
