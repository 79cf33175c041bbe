"""The schemas of the chosen-option groups: ``dataset``, ``model``, ``topology``, ``logger``,
``optimizer``.

Each option's YAML file (``configs/<group>/<option>.yaml``) names its schema in its
``defaults:`` list (``schema_<kind>``, registered in Hydra's ConfigStore by
:func:`dadam3.run.schema.register`) and sets only what tells the option apart (its name). A
key its schema lacks means nothing for that option and is refused. The fields beyond the
common ones are the builder's own options (``options``), handed to :func:`build_dataset`,
:func:`build_nets` or :func:`build_topology`, which check them for their direct callers too. An
optimizer's schema is made from its registry entry (:func:`optimizer_schema`): its fields are the
algorithm class's ``HPARAMS``, each with its default and its interval as the check.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, make_dataclass
from typing import Any, ClassVar, Mapping, Optional

from dadam3.data import DECODE_WORKERS, FASHION_MNIST_DEBIAN_ROOT
from dadam3.data.fake import MAX_CHANNELS, MAX_LENGTH, FakeImages as FakeImageSet
from dadam3.data.gaussians import GaussianRing
from dadam3.data.node_sampler import NodeSampler
from dadam3.data.partition import PARTITIONS
from dadam3.errors.config import ConfigError, needs_package
from dadam3.optim import ENGINES, OPTIMIZERS, Spec, optimizer_spec
from dadam3.run.loggers import WANDB_MODES
from dadam3.run.schema.fields import (Choice, Int, Num, Option, OptionName, ReadWhenAsked, boolean, default_of,
                                      knob, schema_field, text)
from dadam3.run.schema.topologies import topology_schemas

DATA_ROOT = "${oc.env:DADAM3_DATA,data}"  # torchvision layout


# ---------------------------------------------------------------- dataset

class Dataset(Option):
    """What every data set has; images from files add ``root``, ``download``, ``image_size``."""

    COMMON = ("name", "root", "download", "image_size", "partition", "alpha")
    root: ClassVar[Optional[str]] = None          # no files
    download: ClassVar[bool] = False
    image_size: ClassVar[Optional[int]] = None
    alpha: ClassVar[Optional[float]] = None       # only with partition=dirichlet

    @property
    def is_images(self) -> bool:
        return self.name != "gaussians"


@dataclass
class Images(Dataset):
    """A torchvision data set read from ``root`` (mnist, cifar10, cifar100)."""
    name: str = knob(check=OptionName(("mnist", "cifar10", "cifar100")))
    root: Optional[str] = knob(DATA_ROOT, text, resume=True)
    download: bool = knob(False, boolean, resume=True)       # torchvision's downloader (needs internet)
    image_size: Optional[int] = knob(None, Int(1, none=True))   # null: the paper's (32 or 64)
    # iid (the paper) | split | dirichlet
    partition: str = knob(default_of(NodeSampler, "partition"), Choice(PARTITIONS))
    alpha: float = knob(default_of(NodeSampler, "alpha"), Num(0.0, None, low_open=True))   # dirichlet concentration


@dataclass
class DecodedImages(Images):
    """Image folders decoded on the fly (celeba, imagenette)."""
    name: str = knob(check=OptionName(("celeba", "imagenette")))
    workers: int = knob(DECODE_WORKERS, Int(0), resume=True)  # decode threads (0: in the loading thread)


@dataclass
class FashionMNIST(Images):
    """Fashion-MNIST: $DADAM3_DATA, else the Debian package's directory; a split to train on."""
    name: str = knob(check=OptionName(("fashion_mnist",)))
    root: Optional[str] = knob(f"${{oc.env:DADAM3_DATA,{FASHION_MNIST_DEBIAN_ROOT}}}", text, resume=True)
    split: str = knob("train", Choice(("train", "test")))


@dataclass
class FakeImages(Dataset):
    """Generated images, no files (smoke and speed runs)."""
    name: str = knob(check=OptionName(("fake",)))
    image_size: Optional[int] = knob(default_of(FakeImageSet, "image_size"), Int(1, none=True))
    channels: int = knob(default_of(FakeImageSet, "channels"), Int(1, MAX_CHANNELS))
    length: int = knob(default_of(FakeImageSet, "length"), Int(1, MAX_LENGTH))
    partition: str = knob(default_of(NodeSampler, "partition"), Choice(PARTITIONS))
    alpha: float = knob(default_of(NodeSampler, "alpha"), Num(0.0, None, low_open=True))


@dataclass
class Gaussians(Dataset):
    """The 2-D ring of Gaussians (Metz et al. 2017): an endless source, every node draws from all."""
    name: str = knob(check=OptionName(("gaussians",)))
    modes: int = knob(default_of(GaussianRing, "modes"), Int(1))
    radius: float = knob(default_of(GaussianRing, "radius"), Num(0.0, None, low_open=True))
    std: float = knob(default_of(GaussianRing, "std"), Num(0.0, None, low_open=True))
    partition: str = knob("iid", Choice(("iid",)))


# ---------------------------------------------------------------- model

class Model(Option):
    COMMON = ("arch",)


@dataclass
class DCGAN(Model):
    """The paper's DCGAN pairs (dcgan32: Tables 2-3; dcgan64: Tables 4-5)."""
    arch: str = knob(check=OptionName(("dcgan32", "dcgan64")))
    width: float = knob(1.0, Num(0.0, None, low_open=True))   # channel multiplier (tests use small widths)
    nz: int = knob(100, Int(1))
    init: Optional[str] = knob(None, Choice(("dcgan", "default"), none=True))   # null: dcgan
    bias_before_norm: bool = knob(False, boolean)
    instance_norm_affine: bool = knob(True, boolean)


@dataclass
class MLP(Model):
    """A small ReLU MLP pair for 2-D data."""
    arch: str = knob(check=OptionName(("mlp",)))
    hidden: int = knob(128, Int(1))
    nz: int = knob(8, Int(1))
    width: float = knob(1.0, Num(0.0, None, low_open=True))   # multiplies hidden
    data_dim: int = knob(2, Int(1))
    init: Optional[str] = knob(None, Choice(("dcgan", "default"), none=True))   # null: default


@dataclass(frozen=True)
class Target:
    """A net to build: ``{_target_: pkg.module.Class, **keyword arguments}`` (Hydra's
    ``instantiate`` convention). Its keyword arguments are the target's own: any key may be added
    (``+model.critic.width=4``); the target checks them when the run builds it."""
    free_keys = True

    def __call__(self, key: str, value: Any) -> dict:
        target = value.get("_target_") if isinstance(value, Mapping) else None
        if not isinstance(target, str) or "." not in target.strip("."):
            raise ConfigError(f"{key}._target_", target, f"names your net as a dotted path, e.g. "
                                                         f"{key}._target_=mypkg.nets.Net (importable: on PYTHONPATH)")
        return dict(value)


@dataclass
class Custom(Model):
    """Your own nets (``model=custom``): any ``nn.Module`` pair, stacked over the nodes by
    :func:`dadam3.gan.stack_nets` and checked at start-up (:mod:`dadam3.gan.own_nets`)."""
    arch: str = knob(check=OptionName(("custom",)))
    nz: int = knob(100, Int(1))                       # the noise size: the generator maps [B, nz] to the data
    generator: Any = knob(check=Target(), factory=lambda: {"_target_": None, "nz": "${..nz}"})
    critic: Any = knob(check=Target(), factory=lambda: {"_target_": None})


# ---------------------------------------------------------------- logger

@dataclass
class Jsonl(Option):
    """metrics.jsonl and sample PNGs in the run directory."""
    kind: str = knob(check=OptionName(("jsonl",)), resume=True)


WANDB_PROJECT_FORBIDDEN = ("/", "\\", "#", "?", "%", ":")


def wandb_project(key: str, value: Any) -> str:
    """A name W&B takes for a project: 1 to 128 characters, none of :data:`WANDB_PROJECT_FORBIDDEN`."""
    name = text(key, value)
    if name is None or not name.strip() or len(name) > 128 or set(WANDB_PROJECT_FORBIDDEN) & set(name):
        raise ConfigError(key, value, "must be a W&B project name: 1 to 128 characters, none of "
                                      f"{' '.join(WANDB_PROJECT_FORBIDDEN)}")
    return name


@dataclass
class Wandb(Option):
    """The same records to W&B too (local files are always written)."""
    kind: str = knob(check=OptionName(("wandb",)), resume=True)
    mode: Optional[str] = knob(None, Choice(WANDB_MODES, none=True), resume=True)   # null: $WANDB_MODE, else online
    project: str = knob("dadam3", wandb_project, resume=True)
    group: Optional[str] = knob("${dataset.name}-M${nodes}-${topology.name}", text, resume=True)
    job_type: Optional[str] = knob("${optimizer.name}", text, resume=True)
    name: Optional[str] = knob(None, text, resume=True)

    def cross_check(self, prefix: str) -> None:
        needs_package("wandb", "logger", "wandb", "choose logger=jsonl")
        if self.mode is None:                     # the config, else the environment
            self.mode = Choice(WANDB_MODES)(f"{prefix}mode", os.environ.get("WANDB_MODE") or "online")


# ---------------------------------------------------------------- optimizer

class OptimizerOption(Option):
    """An ``optimizer`` option: its name (a key of :data:`dadam3.optim.OPTIMIZERS`) and the
    hyper-parameters of its algorithm (the class's ``HPARAMS``: defaults and intervals)."""

    COMMON = ("name", "engine")

    @property
    def hparams(self) -> Mapping[str, float]:
        return self.options

    def check_topology(self, topology: str) -> None:
        """A centralized variant (cadam3, cosg) runs on its own graph: a config naming another
        would record a topology the run never used."""
        forced = optimizer_spec(self.name).topology
        if forced is not None and topology != forced:
            raise ConfigError("topology", topology, f"optimizer={self.name} runs on topology={forced} (its preset "
                                                    f"selects it); drop topology={topology}")
        if optimizer_spec(self.name).single_node and topology != "ring":     # ring: the config's default
            raise ConfigError("topology", topology, f"means nothing for optimizer={self.name}, the single-node "
                                                    f"algorithm (nodes=1, no mixing); drop topology={topology}")


@functools.cache
def optimizer_schema(spec: Spec) -> type:
    """The schema of optimizer ``spec.name``: ``name``, ``engine``, then one field per
    hyper-parameter (its ``HParam``'s default, and its check; each may change on resume)."""
    hparams = [(key, float, knob(hp.default, hp.check, resume=True)) for key, hp in spec.cls.HPARAMS.items()]
    # auto: torch.compile on CUDA, numba on the CPU | eager: the phase in Python everywhere, so a
    # breakpoint in the algorithm's direction fires (dadam3/optim/engines.py)
    engine = ("engine", str, knob("auto", Choice(ENGINES), resume=True))
    cls = make_dataclass(f"OptimizerOption_{spec.name}",
                         [("name", str, knob(check=OptionName((spec.name,)))), engine, *hparams],
                         bases=(OptimizerOption,))
    cls.__module__ = __name__            # found again by the module's __getattr__ (pickle, submitit)
    return cls


def __getattr__(name: str) -> type:
    """A schema made from a registry (an optimizer's, a topology's) by its class name: how pickle
    finds it again (a launcher such as submitit pickles the composed config and the settings)."""
    made = [cls for _, options in GROUPS.values() for cls in options.values() if cls.__name__ == name]
    if not made:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return made[0]


def optimizer_schemas() -> dict[str, type]:
    """``schema_<name>`` -> :func:`optimizer_schema` for every optimizer of the registry."""
    return {f"schema_{name}": optimizer_schema(spec) for name, spec in OPTIMIZERS.items()}


def option_schema(group: str, name: Any) -> type | None:
    """The schema of ``group``'s option ``name`` (the class whose name check allows it; None if none)."""
    key, options = GROUPS[group]
    return next((cls for cls in options.values() if name in schema_field(cls, key).metadata["check"].names), None)


# group -> the registry its option names come from (said when a name is refused)
REGISTRIES = {"topology": "dadam3.topologies.TOPOLOGIES", "optimizer": "dadam3.optim.OPTIMIZERS"}

# group -> (the key naming the option, {schema name: class}); the YAML files name the schemas
GROUPS: dict[str, tuple[str, Mapping[str, type]]] = {
    "dataset": ("name", {"schema_images": Images, "schema_decoded_images": DecodedImages,
                         "schema_fashion_mnist": FashionMNIST, "schema_fake": FakeImages,
                         "schema_gaussians": Gaussians}),
    "model": ("arch", {"schema_dcgan": DCGAN, "schema_mlp": MLP, "schema_custom": Custom}),
    "topology": ("name", ReadWhenAsked(topology_schemas)),
    "logger": ("kind", {"schema_jsonl": Jsonl, "schema_wandb": Wandb}),
    "optimizer": ("name", ReadWhenAsked(optimizer_schemas)),
}
