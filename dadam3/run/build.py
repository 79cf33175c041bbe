"""A training run built from its checked settings (:class:`dadam3.run.schema.TrainConfig`): the
processes and mixer, the run directory, the run's state (data, nets, optimizers, noise; a
resume's checkpoint loaded into it), the log, and the trainer handed all of it, complete.

Every check that can refuse the run comes first (the config, paths, the ranks' agreement,
the run directory, data, nets, the checkpoint's content and shape, the evaluation weights);
only then is the run directory created, locked, cleared for ``overwrite=true``, W&B started
and ``metrics.jsonl`` created or rewound (:func:`open_logs`). Each builder's errors name its
arguments; they are said here in the config's keys.
"""
from __future__ import annotations

import logging
import os
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch

from dadam3.run.checkpoint.checkpointer import Checkpointer
from dadam3.run.cuda_flags import set_cuda_flags
from dadam3.data import NodeSampler, build_dataset
from dadam3.data.node_sampler import NodeNoise
from dadam3.distributed import DistributedMixer, Placement, agree_on_config, init_from_env, run_fingerprint
from dadam3.errors.config import ConfigError, named_as
from dadam3.gan.layer_autotune import autotune_pair
from dadam3.gan.memory import check_fits
from dadam3.gan.own_nets import build_net, stack_own_nets
from dadam3.run.records import Records
from dadam3.gan.samples import GeneratorDraws, sample_hook
from dadam3.gan.stacked import build_stacked_nets
from dadam3.run.state import RunContext, RunOutputs, TrainState
from dadam3.run.trainer import WGANTrainer
from dadam3.gan.vmapped import stack_nets
from dadam3.run.rewind import LoggingGrid, record_at_resume_point_kept
from dadam3.metrics.evaluation import Evaluation, evaluation_hook
from dadam3.mixing import LocalMixer, Mixer
from dadam3.optim import build_optimizer, mixer_for, start_together
from dadam3.run.config import flatten
from dadam3.run.checks import check_launch, check_outputs, check_paths, check_shards
from dadam3.run.directory import RunDir, claim_run_dir
from dadam3.run.loggers import NullLogger, build_logger
from dadam3.run.schema import TrainConfig
from dadam3.run.schema.runs import Distributed

log = logging.getLogger(__name__)

# the evaluation's library arguments -> the config keys that feed them
METRICS_KEYS = {"feature_extractor": "metrics.feature_extractor", "weights_path": "metrics.inception_weights",
                "download": "metrics.download_weights", "num_samples": "metrics.samples",
                "batch_size": "metrics.batch_size"}


class Where(NamedTuple):
    """Where this process runs: its block of the nodes, its device and dtype, the players' mixer."""
    placement: Placement
    device: torch.device
    dtype: torch.dtype
    mixer: Mixer | None              # None: single-node Adam3


def build_trainer(s: TrainConfig, run_dir: Path, dir_named: bool = False, nets: tuple | None = None) -> WGANTrainer:
    """The trainer of the run ``s``, resumed if asked. With ``placement=distributed`` this process
    holds its rank's block of the M nodes. ``nets``: your own (generator, critic), one node's
    ``nn.Module`` each (the generator maps ``[B, model.nz]`` noise to the data), checked and
    stacked over the nodes as ``model=custom``'s are. ``dir_named``: the user named ``run_dir``
    (a checkpoint that is no run's own may continue there)."""
    check_launch(s)
    check_paths(s)
    where = start_processes(s)
    rd = claim_run_dir(run_dir, s.resume, s.config, s.overwrite, where.placement, dir_named)
    key = "resume" if rd.checkpoint is not None and not rd.new_id else "hydra.run.dir"
    on_every_rank(where.placement, lambda: check_outputs(key, rd.path, rd.replace) if where.placement.is_main else None)
    state, dataset, draws, evaluate = on_every_rank(where.placement, lambda: build_state(s, rd, where, nets))
    logger = on_every_rank(where.placement, lambda: open_logs(s, rd) if where.placement.is_main else NullLogger())
    grid = LoggingGrid(s.loop.log_every, evaluate.every if evaluate is not None else 0)
    records = Records(logger, grid, where.placement)
    if rd.checkpoint is not None:               # the log says where the run continues and what changed
        records.status(state.iteration, "resumed", state.wall_time(), changed=rd.changed)
    outputs = RunOutputs(records, Checkpointer(rd.path, where.placement, s.loop.checkpoint_every, s.config),
                         sample_hook(dataset, draws, rd.path / "samples", s.loop.sample_every, logger), evaluate)
    full_G = (stack_nets(state.G.node_module(0), s.nodes, in_shape=state.G.in_shape, out_shape=state.G.out_shape)
              if where.placement.distributed and where.placement.is_main else None)
    run = RunContext(rd.path, where.device, where.dtype, where.placement, lock=rd, full_G=full_G,
                     graphs=s.cuda.graphs)
    return WGANTrainer(state, s.loop, run, outputs)


def start_processes(s: TrainConfig) -> Where:
    """This process's place among the run's (under torchrun: the ranks joined and agreed on the
    config), its device with the CUDA flags and threads set, and the players' mixer."""
    world = int(os.environ.get("WORLD_SIZE", "1")) if s.placement == "distributed" else 1
    device, placement, make_mixer = s.torch_device, Placement(s.nodes), LocalMixer
    if s.placement == "distributed":
        fingerprint = run_fingerprint(flatten(s.config))
        with named_as(Distributed.keys("distributed.")):
            info = init_from_env(s.distributed.backend, s.distributed.timeout_s)
        agree_on_config(fingerprint, info)
        placement, make_mixer = Placement(s.nodes, info), partial(DistributedMixer, timeout_s=info.timeout_s)
        log.info("%s holds nodes %d..%d of %d", info.describe(), placement.block.start, placement.block.stop - 1,
                 s.nodes)
        device = info.device if info.backend == "nccl" else device
    if device.type == "cuda":
        log.info("CUDA: %s", set_cuda_flags(s.cuda.tf32, s.cuda.cudnn_benchmark))
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    o, t = s.optimizer, s.topology

    def fitting_mixer():    # the run fits this process's memory (a rank's own GPU); the players' mixer
        with named_as({"model": "model.width"}):       # a net without a size key: its width
            check_fits(s, world, device)
        with named_as({**t.keys("topology."), "name": "optimizer"}):   # mixer_for says topology= itself
            return mixer_for(o.name, s.nodes, t.name, t.rounds, make_mixer=make_mixer, **t.options)
    return Where(placement, device, s.torch_dtype, on_every_rank(placement, fitting_mixer))


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
    opt_g = build_optimizer(o.name, G.parameters(), where.mixer, compile=compiled, start=False, engine=o.engine,
                            **o.hparams)
    opt_d = build_optimizer(o.name, D.parameters(), where.mixer, compile=compiled, start=False, engine=o.engine,
                            **o.hparams)
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
            opt.set_hparams(o.hparams)
    else:
        start_together([opt_d, opt_g])           # the first gossip round: Z_1 = X_0 W^t for both players
    return state, dataset, draws, evaluate


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
        return build_logger(rd.path / "metrics.jsonl", wandb=wandb,
                            resume_from_iteration=None if ckpt is None else ckpt["iteration"],
                            drop_record_at_resume_point=ckpt is not None and not record_at_resume_point_kept(ckpt))
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
