"""The algorithms, on M node copies stacked along a leading axis, and their registry.

=========  =======================  =====================================================
name       class                    what it is
=========  =======================  =====================================================
adam3      Dadam3, no mixing        Algorithm 1 (one node; needs nodes=1)
dadam3     Dadam3                   Algorithm 2, mixing with the configured topology
cadam3     Dadam3, complete graph   the centralized variant (W = 11^T/M)
dosg       DOSG                     decentralized optimistic SGD (Liu et al. 2020)
cosg       DOSG, complete graph     its centralized variant
oadagrad   OAdagrad                 optimistic AdaGrad (Liu et al. 2020)
dp_oadam   DPOAdam                  optimistic Adam + gossip (Daskalakis et al. 2018)
dadam      DAdam                    simultaneous Adam + gossip (plain baseline)
dsgd       DSGD                     simultaneous SGD + gossip (plain baseline)
=========  =======================  =====================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from dadam3.errors import ConfigError, check_range
from dadam3.mixing import LocalMixer, Mixer
from dadam3.optim.adam3 import Adam3, Dadam3
from dadam3.optim.base import NodeOptimizer, OptimisticGossip, SingleSequenceGossip
from dadam3.optim.oadagrad import OAdagrad
from dadam3.optim.oadam import DPOAdam
from dadam3.optim.osg import DOSG
from dadam3.optim.simultaneous import DAdam, DSGD
from dadam3.topology import build_topology

__all__ = ["Adam3", "Dadam3", "DOSG", "OAdagrad", "DPOAdam", "DAdam", "DSGD", "NodeOptimizer",
           "OptimisticGossip", "SingleSequenceGossip", "OPTIMIZERS", "build_optimizer",
           "validate_hparams", "mixer_for"]

# (low, high, low_open, high_open) of every hyper-parameter
_RANGES = {
    "lr": (0.0, None, True, True),
    "beta1": (0.0, 1.0, False, True),
    "beta2": (0.0, 1.0, False, True),
    "beta3": (0.0, 1.0, False, True),
    "eps": (0.0, None, False, True),
    "delta": (0.0, None, True, True),
    "beta1_decay": (0.0, 1.0, True, False),
    "lambda0": (0.0, None, False, True),
}


@dataclass(frozen=True)
class Spec:
    cls: type
    hparams: tuple[str, ...]
    topology: str | None = None      # forced topology (centralized variants)
    single_node: bool = False


_ADAM3_HP = ("lr", "beta1", "beta2", "beta3", "eps", "beta1_decay", "lambda0")
_ADAM_HP = ("lr", "beta1", "beta2", "eps")
OPTIMIZERS: dict[str, Spec] = {
    "adam3": Spec(Dadam3, _ADAM3_HP, single_node=True),
    "dadam3": Spec(Dadam3, _ADAM3_HP),
    "cadam3": Spec(Dadam3, _ADAM3_HP, topology="complete"),
    "dosg": Spec(DOSG, ("lr",)),
    "cosg": Spec(DOSG, ("lr",), topology="complete"),
    "oadagrad": Spec(OAdagrad, ("lr", "delta")),
    "dp_oadam": Spec(DPOAdam, _ADAM_HP),
    "dadam": Spec(DAdam, _ADAM_HP),
    "dsgd": Spec(DSGD, ("lr",)),
}


def _spec(name: str) -> Spec:
    if name not in OPTIMIZERS:
        raise ConfigError("optimizer", name, f"unknown optimizer; allowed: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def validate_hparams(name: str, hparams: Mapping[str, Any]) -> dict:
    """Check an optimizer's hyper-parameters; returns them as floats.

    Unknown keys and out-of-range values raise a one-line ConfigError naming ``optimizer.<key>``."""
    spec = _spec(name)
    out = {}
    for key, value in hparams.items():
        if key not in spec.hparams:
            raise ConfigError(f"optimizer.{key}", value,
                              f"not an option of optimizer={name}; allowed: {', '.join(spec.hparams)}")
        low, high, low_open, high_open = _RANGES[key]
        out[key] = check_range(f"optimizer.{key}", value, low, high, low_open, high_open)
    return out


def mixer_for(name: str, nodes: int, topology: str = "ring", rounds: int = 1, **topology_kw) -> Mixer | None:
    """The mixer an optimizer runs with: the configured topology, the complete graph for
    the centralized variants, none for the single-node Adam3."""
    spec = _spec(name)
    if spec.single_node:
        if nodes != 1:
            raise ConfigError("nodes", nodes, f"optimizer={name} is the single-node algorithm: use nodes=1 "
                                              "(or optimizer=dadam3 for several nodes)")
        return None
    if spec.topology is not None:
        topology, topology_kw = spec.topology, {}
    return LocalMixer(build_topology(topology, nodes, rounds, **topology_kw))


def build_optimizer(name: str, params, mixer: Mixer | None, **hparams) -> NodeOptimizer:
    """Build optimizer ``name`` over stacked ``params`` (iterable of tensors or param groups)."""
    spec = _spec(name)
    hp = validate_hparams(name, hparams)
    return spec.cls(params, mixer=mixer, **hp)
