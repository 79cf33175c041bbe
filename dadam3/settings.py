"""The runs' settings: the Hydra config checked ONCE, at the entry point, into frozen objects.

``train_settings(cfg)`` and ``synthetic_settings(cfg)`` read every key an entry point
uses, check it (one-line :class:`~dadam3.errors.ConfigError` naming key, value and what
is allowed) and return typed, frozen dataclasses. Nothing past the entry point reads the
config: library code gets these objects' plain fields. Group options that belong to one
builder (a data set's own keys, a net's width, a topology's ``p``) travel as a read-only
mapping and are checked by that builder, which is also what users call directly.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import torch
from omegaconf import DictConfig, OmegaConf

from dadam3.config import CONFIG_DIR
from dadam3.data.partition import PARTITIONS
from dadam3.errors import ConfigError, check_bool, check_choice, check_int, check_range
from dadam3.metrics.spec import FEATURE_EXTRACTORS
from dadam3.optim import optimizer_spec
from dadam3.run_logging import WANDB_MODES

DTYPES = {"float32": torch.float32, "float64": torch.float64}
LOGGER_KINDS = ("jsonl", "wandb")
POINT_DATASETS = ("gaussians",)          # 2-D points (model=mlp); every other data set is images


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class DataSettings:
    name: str
    root: str | None
    image_size: int | None
    download: bool
    partition: str
    alpha: float
    options: Mapping[str, Any]       # the data set's own keys, checked by build_dataset

    @property
    def is_images(self) -> bool:
        return self.name not in POINT_DATASETS


@dataclass(frozen=True)
class ModelSettings:
    arch: str
    options: Mapping[str, Any]       # width, nz, hidden, ...: checked by build_nets


@dataclass(frozen=True)
class OptimizerSettings:
    name: str
    hparams: Mapping[str, float]     # every hyper-parameter, checked, defaults filled in


@dataclass(frozen=True)
class TopologySettings:
    name: str
    rounds: int
    options: Mapping[str, Any]       # rows, p, seed, matrix, file: checked by build_topology


@dataclass(frozen=True)
class LoggerSettings:
    kind: str                        # jsonl | wandb
    mode: str | None = None          # wandb: online | offline | disabled
    project: str | None = None
    group: str | None = None
    job_type: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class MetricsSettings:
    every: int                       # evaluation period (0: never)
    samples: int
    batch_size: int
    inception: bool                  # IS
    inception_weights: str | None
    download_weights: bool
    per_node: bool
    fid: bool = False
    kid: bool = False
    feature_extractor: str = "inception"     # a key of FEATURE_EXTRACTORS
    cache_dir: str | None = None

    @property
    def any_image_metric(self) -> bool:
        return self.inception or self.fid or self.kid


@dataclass(frozen=True)
class LoopSettings:
    """What the training loop itself reads (:class:`dadam3.gan.trainer.WGANTrainer`)."""
    iterations: int
    batch_size: int                  # per node
    n_critic: int = 1
    gp_lambda: float = 10.0
    log_every: int = 50
    sample_every: int = 1000
    checkpoint_every: int = 1000     # 0: only at the end
    eval_every: int = 0
    seed: int = 0
    progress: bool = True
    autocast: str | None = None      # None: float32 (TF32 on CUDA) | "bf16": forward/backward under torch.autocast


@dataclass(frozen=True)
class TrainSettings:
    nodes: int
    backend: str                     # local | distributed
    distributed_backend: str         # auto | gloo | nccl
    distributed_timeout_s: float
    seed: int
    device: torch.device
    dtype: torch.dtype
    threads: int | None
    prefetch: bool
    resume: str | None
    overwrite: bool
    cuda_tf32: bool
    cuda_cudnn_benchmark: bool
    cuda_compile_step: bool
    cuda_channels_last: bool
    data: DataSettings
    model: ModelSettings
    optimizer: OptimizerSettings
    topology: TopologySettings
    logger: LoggerSettings
    metrics: MetricsSettings
    loop: LoopSettings
    config: Mapping[str, Any] = field(repr=False)     # the resolved config, stored in checkpoints


@dataclass(frozen=True)
class SyntheticSettings:
    nodes: int
    iterations: int
    seed: int
    backend: str
    game_c: float
    game_k: float
    optimizer: OptimizerSettings
    topology: TopologySettings


# ---------------------------------------------------------------- from the Hydra config

SEED_MAX = 2**32 - 1                      # what every generator a run seeds accepts
TIMEOUT_MAX_S = 365 * 86400.0
THREADS_MAX = 1024
IS_SPLITS = 10                            # the inception score's splits: at least this many samples
# keys of the chosen group option beyond its YAML file's (its builder's other options)
MODEL_OPTIONS = {"mlp": ("width", "data_dim", "init"),
                 "dcgan32": ("init", "bias_before_norm", "instance_norm_affine"),
                 "dcgan64": ("init", "bias_before_norm", "instance_norm_affine")}
GROUP_KEYS = {"dataset": "name", "model": "arch", "topology": "name", "logger": "kind"}


def check_known_keys(c: Mapping[str, Any], config_name: str = "train",
                     groups: Mapping[str, str] = MappingProxyType(GROUP_KEYS)) -> None:
    """Every key of the resolved config is one the entry point reads: a top-level or nested key
    of ``configs/<config_name>.yaml``, or a key of the chosen group option's YAML file (plus
    its builder's other options, e.g. :data:`MODEL_OPTIONS`); a typo added with ``+`` and a key
    that means nothing for the chosen data set, net or topology are one line."""
    base = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{config_name}.yaml"))
    base.pop("defaults", None)
    base.pop("hydra", None)
    for key, value in c.items():
        if key in groups or key == "optimizer":
            continue                             # optimizer: its hparams are checked by the optimizer
        if key not in base:
            raise ConfigError(key, value, f"unknown key{_did_you_mean(key, [*base, *groups, 'optimizer'])}")
        if isinstance(value, Mapping) and isinstance(base[key], Mapping):
            for sub, v in value.items():
                if sub not in base[key]:
                    raise ConfigError(f"{key}.{sub}", v, f"unknown key{_did_you_mean(sub, base[key])}")
    for group, name_key in groups.items():
        if group not in c:
            continue
        choice = c[group].get(name_key)
        path = CONFIG_DIR / group / f"{choice}.yaml"
        if not path.is_file():
            continue                             # an unknown choice: its own check names it
        known = list(OmegaConf.load(path)) + list(MODEL_OPTIONS.get(choice, ()) if group == "model" else ())
        for sub, v in c[group].items():
            if sub not in known:
                raise ConfigError(f"{group}.{sub}", v, f"means nothing for {group}={choice} (its keys: "
                                                       f"{', '.join(known)}){_did_you_mean(sub, known)}")


def _did_you_mean(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f"; did you mean {close[0]}?" if close else ""


def train_settings(cfg: DictConfig) -> TrainSettings:
    """Check every key ``python -m dadam3.train`` reads; see the module docstring."""
    c = OmegaConf.to_container(cfg, resolve=True)
    check_known_keys(c)
    nodes = check_int("nodes", c["nodes"], 1)
    seed = check_int("seed", c["seed"], 0, SEED_MAX)
    data = _data(c["dataset"])
    model = _model(c["model"], data)
    m = c["metrics"]
    metrics = MetricsSettings(every=check_int("metrics.every", m["every"], 0),
                              samples=check_int("metrics.samples", m["samples"], 1),
                              batch_size=check_int("metrics.batch_size", m["batch_size"], 1),
                              inception=check_bool("metrics.inception", m["inception"]),
                              inception_weights=m.get("inception_weights"),
                              download_weights=check_bool("metrics.download_weights", m["download_weights"]),
                              per_node=check_bool("metrics.per_node", m["per_node"]),
                              fid=check_bool("metrics.fid", m.get("fid", False)),
                              kid=check_bool("metrics.kid", m.get("kid", False)),
                              feature_extractor=check_choice("metrics.feature_extractor",
                                                             m.get("feature_extractor", "inception"),
                                                             tuple(FEATURE_EXTRACTORS)),
                              cache_dir=m.get("cache_dir"))
    loop = LoopSettings(iterations=check_int("iterations", c["iterations"], 1),
                        batch_size=check_int("batch_size", c["batch_size"], 1),
                        n_critic=check_int("n_critic", c["n_critic"], 1),
                        gp_lambda=check_range("gp_lambda", c["gp_lambda"], 0.0, None),
                        log_every=check_int("log_every", c["log_every"], 1),
                        sample_every=check_int("sample_every", c["sample_every"], 1),
                        checkpoint_every=check_int("checkpoint_every", c["checkpoint_every"], 0),
                        eval_every=metrics.every, seed=seed,
                        progress=check_bool("progress", c["progress"]),
                        autocast=_autocast(c.get("autocast"), c["dtype"]))
    threads = c.get("threads")
    dist_cfg = c.get("distributed") or {}
    _check_meaningful(c, data, metrics)
    return TrainSettings(
        nodes=nodes, seed=seed, backend=check_choice("backend", c.get("backend", "local"), ("local", "distributed")),
        distributed_backend=check_choice("distributed.backend", dist_cfg.get("backend", "auto"), ("auto", "gloo", "nccl")),
        distributed_timeout_s=check_range("distributed.timeout_s", dist_cfg.get("timeout_s", 300), 0.0,
                                          TIMEOUT_MAX_S, low_open=True, high_open=False),
        device=resolve_device(c["device"]),
        dtype=DTYPES[check_choice("dtype", c["dtype"], tuple(DTYPES))],
        threads=None if threads is None else check_int("threads", threads, 1, THREADS_MAX),
        prefetch=check_bool("prefetch", c.get("prefetch", False)),
        resume=None if c.get("resume") in (None, "") else str(c["resume"]),
        overwrite=check_bool("overwrite", c.get("overwrite", False)),
        cuda_tf32=check_bool("cuda.tf32", c["cuda"]["tf32"]),
        cuda_cudnn_benchmark=check_bool("cuda.cudnn_benchmark", c["cuda"]["cudnn_benchmark"]),
        cuda_compile_step=check_bool("cuda.compile_step", c["cuda"].get("compile_step", True)),
        cuda_channels_last=check_bool("cuda.channels_last", c["cuda"].get("channels_last", False)),
        data=data, model=model, optimizer=_optimizer(c["optimizer"]), topology=_topology(c["topology"]),
        logger=_logger(c["logger"]), metrics=metrics, loop=loop, config=_frozen(c))


AUTOCAST = ("bf16",)


def _autocast(value: Any, dtype: str) -> str | None:
    """``autocast``: null (float32) or bf16 (only over float32 parameters)."""
    if value is None:
        return None
    if value not in AUTOCAST:
        raise ConfigError("autocast", value, f"unknown value; allowed: null, {', '.join(AUTOCAST)}")
    if dtype != "float32":
        raise ConfigError("autocast", value, f"needs dtype=float32 (dtype={dtype}); use autocast=null")
    return value


def synthetic_settings(cfg: DictConfig) -> SyntheticSettings:
    """Check every key ``python -m dadam3.synthetic`` reads."""
    c = OmegaConf.to_container(cfg, resolve=True)
    check_known_keys({k: v for k, v in c.items()}, "synthetic", {"topology": "name"})
    return SyntheticSettings(nodes=check_int("nodes", c["nodes"], 1),
                             iterations=check_int("iterations", c["iterations"], 1),
                             seed=check_int("seed", c["seed"], 0, SEED_MAX),
                             backend=check_choice("backend", c["backend"], ("kernel", "torch")),
                             game_c=check_range("game.c", c["game"]["c"], 1.0, 1e100, high_open=False),
                             game_k=check_range("game.k", c["game"]["k"], 0.0, 1e100, high_open=False),
                             optimizer=_optimizer(c["optimizer"]), topology=_topology(c["topology"]))


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


def _optimizer(o: dict) -> OptimizerSettings:
    o = dict(o)
    name = o.pop("name")
    hparams = optimizer_spec(name).check_hparams(o)
    if "eps" in hparams and not hparams["eps"] > 0:
        raise ConfigError("optimizer.eps", hparams["eps"], "must be > 0: the first step divides a zero "
                                                            "gradient by sqrt(0) + eps")
    return OptimizerSettings(name, _frozen(hparams))


def _topology(t: dict) -> TopologySettings:
    t = dict(t)
    name = t.pop("name")
    if "require_symmetric" in t:
        check_bool("topology.require_symmetric", t["require_symmetric"])
    if "seed" in t:
        check_int("topology.seed", t["seed"], 0, SEED_MAX)
    if t.get("p") is not None:
        check_range("topology.p", t["p"], 0.0, 1.0, low_open=True, high_open=False)
    return TopologySettings(name, check_int("topology.rounds", t.pop("rounds", 1), 1), _frozen(t))


def _check_meaningful(c: Mapping[str, Any], data: DataSettings, metrics: MetricsSettings) -> None:
    """Values set for something the run does not do, and evaluations too small to compute."""
    if data.partition != "dirichlet" and data.alpha != 0.5:
        raise ConfigError("dataset.alpha", data.alpha, f"only used with dataset.partition=dirichlet "
                                                       f"(partition={data.partition})")
    if c.get("backend", "local") == "local":
        dist_cfg = c.get("distributed") or {}
        for key, default in (("backend", "auto"), ("timeout_s", 300)):
            if dist_cfg.get(key, default) != default:
                raise ConfigError(f"distributed.{key}", dist_cfg[key], "only used with backend=distributed")
    if data.is_images and metrics.every and metrics.any_image_metric and metrics.samples < IS_SPLITS:
        raise ConfigError("metrics.samples", metrics.samples,
                          f"must be >= {IS_SPLITS} for IS/FID/KID (the inception score's {IS_SPLITS} splits)")


def _data(d: dict) -> DataSettings:
    d = dict(d)
    name = d.pop("name")
    size = d.pop("image_size", None)
    return DataSettings(name=name, root=d.pop("root", None),
                        image_size=None if size is None else check_int("dataset.image_size", size, 1),
                        download=check_bool("dataset.download", d.pop("download", False)),
                        partition=check_choice("dataset.partition", d.pop("partition", "iid"), PARTITIONS),
                        alpha=check_range("dataset.alpha", d.pop("alpha", 0.5), 0.0, None, low_open=True),
                        options=_frozen(d))


def _model(m: dict, data: DataSettings) -> ModelSettings:
    m = dict(m)
    arch = m.pop("arch")
    if data.is_images and arch == "mlp":
        raise ConfigError("model", "mlp", f"dataset {data.name} is images; use model=dcgan32 or model=dcgan64")
    if not data.is_images and arch != "mlp":
        raise ConfigError("model", arch, f"dataset {data.name} is 2-D points; use model=mlp")
    for key in ("bias_before_norm", "instance_norm_affine"):
        if key in m:
            check_bool(f"model.{key}", m[key])
    for key in ("nz", "hidden", "data_dim"):
        if m.get(key) is not None:
            check_int(f"model.{key}", m[key], 1)
    if "width" in m:
        check_range("model.width", m["width"], 0.0, None, low_open=True)
    return ModelSettings(arch, _frozen(m))


def _logger(lg: dict) -> LoggerSettings:
    kind = check_choice("logger", lg.get("kind"), LOGGER_KINDS)
    if kind == "jsonl":
        return LoggerSettings(kind)
    mode = lg.get("mode") or os.environ.get("WANDB_MODE") or "online"   # the config, else the environment
    return LoggerSettings(kind, mode=check_choice("logger.mode", mode, WANDB_MODES),
                          project=lg.get("project"), group=lg.get("group"), job_type=lg.get("job_type"),
                          name=lg.get("name"))
