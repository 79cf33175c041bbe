"""The schemas of the two entry points: ``configs/train.yaml`` (:class:`TrainConfig`) and
``configs/synthetic.yaml`` (:class:`SyntheticConfig`), with their fixed sections.

Checked by :func:`dadam3.run.schema.train_settings` / :func:`~dadam3.run.schema.synthetic_settings`,
these objects are the runs' settings: typed, frozen, read by the entry points only.
"""
from __future__ import annotations

import os
from dataclasses import MISSING as NO_DEFAULT, dataclass, fields
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Mapping, Optional

import torch
from omegaconf import MISSING

from dadam3.distributed.failures import DEFAULT_TIMEOUT_S, check_timeout
from dadam3.distributed.startup import BACKENDS, init_from_env
from dadam3.run.divergence import DIVERGE_ABOVE
from dadam3.errors.config import ConfigError, named_as
from dadam3.gan.wgan_gp import GP_LAMBDA
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_run import ENGINES, run_synthetic
from dadam3.metrics.spec import FEATURE_EXTRACTORS, IS_SPLITS, FidelitySpec, default_cache_dir
from dadam3.run.paths import check_usable_dir
from dadam3.run.schema.fields import Choice, Int, Num, Section, boolean, default_of, knob, text
from dadam3.run.schema.fields import SEED_MAX

DTYPES = {"float32": torch.float32, "float64": torch.float64}
THREADS_MAX = 1024


def resolve_device(name: Any) -> torch.device:
    """``auto`` (CUDA when there is one), ``cpu``, ``cuda`` or ``cuda:N``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError("device", name, "allowed: auto, cpu, cuda, cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError("device", name, "allowed: auto, cpu, cuda, cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", name, "CUDA is not available on this machine; use device=cpu or auto")
    return device


def device_name(key: str, value: Any) -> str:
    resolve_device(value)
    return value


@dataclass
class Distributed(Section):
    """placement=distributed only."""
    # auto: nccl for a run on CUDA (device), else gloo
    backend: str = knob(default_of(init_from_env, "backend"), Choice(BACKENDS), resume=True)
    # a rank that died or hangs makes the others stop with one line after this long
    timeout_s: float = knob(DEFAULT_TIMEOUT_S, check_timeout, resume=True)


@dataclass
class Cuda(Section):
    """Applied only when the run is on a CUDA device."""
    tf32: bool = knob(True, boolean, resume=True)             # float32 convs/matmuls on TF32 (gossip stays fp32)
    cudnn_benchmark: bool = knob(True, boolean, resume=True)  # cuDNN times its algorithms once per shape
    compile_step: bool = knob(True, boolean, resume=True)     # the optimizer update compiled (torch.compile) on CUDA
    channels_last: bool = knob(False, boolean, resume=True)   # NHWC convolutions
    graphs: bool = knob(False, boolean, resume=True)          # gradient evaluation as a replayed CUDA graph
    # each stacked convolution's layout (grouped NCHW / NHWC, unfold+bmm) timed at start-up, per layer
    autotune_layers: bool = knob(False, boolean, resume=True)


@dataclass
class Metrics(Section):
    """What an evaluation computes and how often (torch-fidelity)."""
    every: int = knob(1000, Int(0), resume=True)              # evaluation period (0: never)
    samples: int = knob(5000, Int(1), resume=True)            # per node and for the averaged model
    batch_size: int = knob(250, Int(1), resume=True)
    inception: bool = knob(False, boolean, resume=True)       # inception score (IS)
    fid: bool = knob(False, boolean, resume=True)             # against the data set's training images
    kid: bool = knob(False, boolean, resume=True)
    feature_extractor: str = knob("inception", Choice(tuple(FEATURE_EXTRACTORS)), resume=True)
    # a second scorer: IS and FID again under it (not KID), logged as <key>_<second_extractor> (null: none)
    second_extractor: Optional[str] = knob(None, Choice(tuple(FEATURE_EXTRACTORS), none=True), resume=True)
    inception_weights: Optional[str] = knob(None, text, resume=True)   # torch-fidelity's .pth file
    download_weights: bool = knob(default_of(FidelitySpec, "download"), boolean, resume=True)
    per_node: bool = knob(True, boolean, resume=True)         # every node as well as the averaged model
    cache_dir: Optional[str] = knob(None, text, resume=True)  # null: $DADAM3_CACHE or ~/.cache/dadam3

    @property
    def any_image_metric(self) -> bool:
        return self.inception or self.fid or self.kid


N_CRITIC_MAX = 1000         # critic steps per iteration (WGAN-GP recipes use 5)
ITERATIONS_MAX = 2 ** 62    # an iteration count the int64 counters and log points hold


@dataclass
class LoopSettings(Section):
    """The ``loop`` group: what the training loop reads (:class:`dadam3.run.trainer.WGANTrainer`)."""
    iterations: int = knob(30000, Int(1, ITERATIONS_MAX), resume=True)        # Table 6
    batch_size: int = knob(64, Int(1))                        # per node (Table 6)
    n_critic: int = knob(1, Int(1, N_CRITIC_MAX), resume=True)   # 1: the paper's simultaneous game
    gp_lambda: float = knob(GP_LAMBDA, Num(0.0), resume=True)   # WGAN-GP penalty weight
    log_every: int = knob(50, Int(1), resume=True)
    sample_every: int = knob(1000, Int(1), resume=True)
    checkpoint_every: int = knob(1000, Int(0), resume=True)   # 0: only at the end
    progress: bool = knob(True, boolean, resume=True)         # tqdm bar with it/s and ETA
    # null: float32 (TF32 on CUDA) | bf16: forward/backward under torch.autocast (state and gossip stay fp32)
    autocast: Optional[str] = knob(None, Choice(("bf16",), none=True), resume=True)
    # a logged loss with |value| beyond this stops the run as diverged (0: off; dadam3.run.divergence)
    diverge_above: float = knob(DIVERGE_ABOVE, Num(0.0), resume=True)
    # per node and player, gradients scaled to global norm <= this before the step (0: off; gan/clipping.py)
    clip_grad_norm: float = knob(0.0, Num(0.0), resume=True)
    # linear lr warm-up over this many iterations: iteration k steps with lr · min(1, k / N), both players,
    # every optimizer alike (0: off; gan/iteration.py)
    lr_warmup: int = knob(0, Int(0), resume=True)


@dataclass
class TrainConfig(Section):
    """``python -m dadam3.train``; ``config`` is the resolved config (stored in checkpoints)."""
    nodes: int = knob(5, Int(1))                              # M node copies
    placement: str = knob("local", Choice(("local", "distributed")), resume=True)   # distributed: under torchrun
    distributed: Distributed = knob(factory=Distributed)
    seed: int = knob(0, Int(0, SEED_MAX))
    device: str = knob("auto", device_name, resume=True)      # auto | cpu | cuda | cuda:N
    dtype: str = knob("float32", Choice(tuple(DTYPES)))
    threads: Optional[int] = knob(None, Int(1, THREADS_MAX, none=True), resume=True)   # null: torch's default
    prefetch: bool = knob(False, boolean, resume=True)        # the next batch in a background thread
    resume: Optional[str] = knob(None, text, resume=True)     # a checkpoint file or a run directory
    overwrite: bool = knob(False, boolean, resume=True)       # a fresh run may delete another run's files
    loop: LoopSettings = knob(factory=LoopSettings)
    cuda: Cuda = knob(factory=Cuda)
    metrics: Metrics = knob(factory=Metrics)
    dataset: Any = knob(MISSING)                              # groups: their schemas in dadam3.run.schema.groups
    model: Any = knob(MISSING)
    optimizer: Any = knob(MISSING, resume=True)               # but optimizer.name
    topology: Any = knob(MISSING)
    logger: Any = knob(MISSING)
    config: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def cross_check(self, prefix: str) -> None:
        data, arch = self.dataset, self.model.arch
        if data.is_images and arch == "mlp":
            raise ConfigError("model", "mlp", f"dataset {data.name} is images; use model=dcgan32 or model=dcgan64")
        if not data.is_images and arch not in ("mlp", "custom"):     # custom: checked against the data at start-up
            raise ConfigError("model", arch, f"dataset {data.name} is 2-D points; use model=mlp")
        _check_meaningful_for_points(self)
        _check_only_with(self)
        _check_launch(self.placement)
        if self.loop.lr_warmup > self.loop.iterations:
            raise ConfigError("loop.lr_warmup", self.loop.lr_warmup, f"longer than the run (loop.iterations="
                                                                     f"{self.loop.iterations}): its step size would "
                                                                     "never reach optimizer.lr; at most that")
        m = self.metrics
        if data.is_images and m.every and m.any_image_metric and m.samples < IS_SPLITS:
            raise ConfigError("metrics.samples", m.samples,
                              f"must be >= {IS_SPLITS} for IS/FID/KID (the inception score's {IS_SPLITS} splits)")
        if data.is_images and m.every and (m.fid or m.kid):          # torch-fidelity's cache of real-data features
            check_usable_dir("metrics.cache_dir", m.cache_dir or default_cache_dir())
        if self.loop.autocast is not None and self.dtype != "float32":
            raise ConfigError("loop.autocast", self.loop.autocast, f"needs dtype=float32 (dtype={self.dtype}); "
                                                                   "use loop.autocast=null")
        if self.resume is not None and not self.resume.strip():
            raise ConfigError("resume", self.resume, "is empty (an unset variable?): give a checkpoint file or a "
                                                     "run directory, or leave resume out for a fresh run")
        self.optimizer.check_topology(self.topology.name)


# the metrics keys of an image evaluation only; 2-D points are scored by modes covered and the
# share of high-quality samples, which read metrics.every and metrics.samples
IMAGE_METRICS_KEYS = ("inception", "fid", "kid", "feature_extractor", "second_extractor", "inception_weights",
                      "download_weights",
                      "batch_size", "per_node", "cache_dir")


def _alpha_used(c: Any) -> bool:
    return getattr(c.dataset, "partition", None) == "dirichlet"


# a key (with what lies under it) -> when it means something (a test on the composed config or the
# settings) and how that is said: given on the command line otherwise, even at its default, it is
# refused (dadam3.run.schema.overrides.check_overrides); set by a preset, it is refused unless it is its
# default (the cross checks); a resume that makes it meaningless drops the run's value
# (dadam3.run.resume_config.with_stored)
ONLY_WITH: dict[str, tuple[Callable[[Any], bool], str]] = {
    "distributed": (lambda c: c.placement == "distributed", "placement=distributed"),
    "cuda": (lambda c: on_cuda(c.device), "a CUDA device (not device=cpu, nor device=auto without CUDA)"),
    **{f"metrics.{key}": (lambda c: c.metrics.every > 0, "metrics.every > 0 (metrics.every=0: no evaluation)")
       for key in IMAGE_METRICS_KEYS},
    "dataset.alpha": (_alpha_used, "dataset.partition=dirichlet"),
}


def only_with(config: Any, key: str) -> str | None:
    """What ``key`` needs (:data:`ONLY_WITH`) when ``config`` (composed or settings) lacks it; None
    when the key means something there (or no rule names it, or the config cannot tell)."""
    for name, (test, said) in ONLY_WITH.items():
        if key == name or key.startswith(name + "."):
            try:
                return None if test(config) else said
            except (AttributeError, KeyError, TypeError):
                return None
    return None


def _check_only_with(s: TrainConfig) -> None:
    """A key of :data:`ONLY_WITH` that means nothing in ``s`` is refused when it is not its default
    (a preset set it; given on the command line, :func:`~dadam3.run.schema.overrides.check_overrides`
    refused it already)."""
    for name, (test, said) in ONLY_WITH.items():
        if test(s):
            continue
        section, _, key = name.partition(".")
        part = getattr(s, section)
        for f in (f for f in fields(part) if key in ("", f.name)):
            value = getattr(part, f.name)
            if value != (f.default_factory() if f.default is NO_DEFAULT else f.default):
                raise ConfigError(f"{section}.{f.name}", str(value).lower() if isinstance(value, bool) else value,
                                  f"only used with {said}")


def _check_launch(placement: str) -> None:
    """A process that torchrun started as one of several ranks must run placement=distributed."""
    world = os.environ.get("WORLD_SIZE", "1")
    if placement == "local" and world.isdigit() and int(world) > 1:
        raise ConfigError("placement", "local", f"this process is rank {os.environ.get('RANK', '?')} of WORLD_SIZE="
                                                f"{world} (started by torchrun): set placement=distributed, or start "
                                                "one process without torchrun")


def _check_meaningful_for_points(s: TrainConfig) -> None:
    """With 2-D points (dataset=gaussians), keys that only mean something for images are
    refused when set (a default is fine), and the MLP's data dimension must be the points'."""
    if s.dataset.is_images:
        return
    defaults = Metrics()
    for key in IMAGE_METRICS_KEYS:
        if getattr(s.metrics, key) != getattr(defaults, key):
            value = getattr(s.metrics, key)
            raise ConfigError(f"metrics.{key}", str(value).lower() if isinstance(value, bool) else value,
                              f"means nothing for dataset={s.dataset.name} (2-D points: the evaluation is modes "
                              "covered and high-quality share, set by metrics.every and metrics.samples)")
    if s.model.arch == "mlp" and s.model.data_dim != 2:
        raise ConfigError("model.data_dim", s.model.data_dim, f"must be 2: dataset={s.dataset.name} is 2-D points")


def on_cuda(device: Any) -> bool:
    """Whether ``device`` runs on CUDA on this machine (``auto``: when there is CUDA)."""
    return device.startswith("cuda") or device == "auto" and torch.cuda.is_available()


@dataclass
class Game(Section):
    """The synthetic game of Section 5.1 (:class:`~dadam3.games.synthetic.SyntheticGame` checks c, k, spread)."""
    c: float = knob(SyntheticGame.c)          # Section 5.1 (the class's defaults)
    k: float = knob(SyntheticGame.k)
    spread: float = knob(SyntheticGame.spread)    # heterogeneous nodes (beyond the paper); 0: Section 5.1

    def cross_check(self, prefix: str) -> None:
        with named_as(self.keys(prefix)):
            SyntheticGame(self.c, self.k, self.spread)


@dataclass
class SyntheticConfig(Section):
    """``python -m dadam3.synthetic``."""
    nodes: int = knob(5, Int(1))                  # Section 5.1: M = 5 nodes on a ring
    iterations: int = knob(10_000_000, Int(1, ITERATIONS_MAX))    # Section 5.1: N = 10^7
    seed: int = knob(default_of(run_synthetic, "seed"), Int(0, SEED_MAX))
    # numba: the compiled loop, proven equal to torch | torch | eager: torch with the optimizers' eager engine
    engine: str = knob(default_of(run_synthetic, "engine"), Choice(ENGINES))
    overwrite: bool = knob(False, boolean)                      # replace an earlier run's results in hydra.run.dir
    game: Game = knob(factory=Game)
    optimizer: Any = knob(MISSING)
    topology: Any = knob(MISSING)

    def cross_check(self, prefix: str) -> None:
        self.optimizer.check_topology(self.topology.name)
        if self.optimizer.engine != "auto":         # the game runs its own loops: its switch is engine=
            raise ConfigError("optimizer.engine", self.optimizer.engine, "the synthetic game's switch is "
                                                                         "engine=eager (its torch loop, eagerly)")
