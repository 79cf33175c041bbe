"""The config schema, declared once: dataclasses registered as Hydra structured configs.

* :mod:`dadam3.schema.runs` — the two entry points' schemas (``train``, ``synthetic``) and
  their fixed sections (``loop``, ``metrics``, ``cuda``, ``distributed``, ``game``);
  :mod:`dadam3.schema.groups` — one schema per kind of group option (data sets, nets,
  topologies, loggers). The optimizer group is a mapping whose schema is the algorithm
  class's ``HPARAMS`` (:mod:`dadam3.optim`).
* Each field declares its default, its check and whether it may change on resume
  (:func:`dadam3.schema.fields.knob`); the YAML files in ``configs/`` name their schema
  node in ``defaults:`` and set only what is not a default.
* :func:`train_settings` / :func:`synthetic_settings` turn a composed config into the
  checked, frozen schema objects (the runs' settings); :func:`compose` and
  :func:`check_overrides` refuse an unknown or meaningless key with one line before Hydra
  composes (:mod:`dadam3.schema.overrides`); :func:`may_change_on_resume` is the resume policy.
"""
from __future__ import annotations

from dataclasses import is_dataclass
from types import MappingProxyType
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from dadam3.optim import OPTIMIZERS
from dadam3.schema.fields import check_tree, schema_field
from dadam3.schema.groups import GROUPS
from dadam3.schema.overrides import ROOTS, check_overrides, compose, config_error, merged_overrides
from dadam3.schema.runs import LoopSettings, OptimizerChoice, SyntheticConfig, TrainConfig

__all__ = ["TrainConfig", "SyntheticConfig", "LoopSettings", "OptimizerChoice", "train_settings",
           "synthetic_settings", "may_change_on_resume", "register", "compose", "check_overrides",
           "config_error", "merged_overrides"]


def register() -> None:
    """Store every schema node in Hydra's ConfigStore: ``<entry>_schema`` (the primary
    configs' first default), ``<group>/schema_<kind>`` (the group options') and
    ``optimizer/schema_<name>`` (each optimizer's hyper-parameters at its class's defaults: the
    YAML names the algorithm, the values come from ``HPARAMS`` only)."""
    cs = ConfigStore.instance()
    for name, cls in ROOTS.items():
        cs.store(name=f"{name}_schema", node=cls)
    cs.store(group="loop", name="schema", node=LoopSettings)
    for group, (_, options) in GROUPS.items():
        for name, cls in options.items():
            cs.store(group=group, name=name, node=cls)
    for name, spec in OPTIMIZERS.items():       # optimizer/schema_<name>: its class's HPARAMS defaults
        cs.store(group="optimizer", name=f"schema_{name}",
                 node={"name": name, **{k: hp.default for k, hp in spec.cls.HPARAMS.items()}})


def train_settings(cfg: DictConfig) -> TrainConfig:
    """The composed ``train`` config as checked, frozen :class:`TrainConfig` (one-line ConfigError)."""
    return _settings(cfg, TrainConfig)


def synthetic_settings(cfg: DictConfig) -> SyntheticConfig:
    """The composed ``synthetic`` config as checked, frozen :class:`SyntheticConfig`."""
    return _settings(cfg, SyntheticConfig)


def _settings(cfg: DictConfig, cls: type):
    try:
        settings = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), cfg))
        resolved = OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:          # an interpolation that does not resolve, a value of the wrong type
        raise config_error(e) from None
    object.__setattr__(settings, "config", MappingProxyType(resolved))
    return check_tree(settings)


def may_change_on_resume(dotted_key: str) -> bool:
    """Whether ``dotted_key`` of the train config may differ between a checkpoint and its
    resume (declared beside each field: ``knob(..., resume=True)``). A key the schema does
    not know may not; of the optimizer, every hyper-parameter may, its name may not."""
    parts = dotted_key.split(".")
    cls: Any = TrainConfig
    for i, part in enumerate(parts):
        if cls is TrainConfig and part in GROUPS and len(parts) > 1:
            found = [schema_field(c, parts[1]) for c in GROUPS[part][1].values()]
            return len(parts) == 2 and any(f is not None and f.metadata.get("resume") for f in found)
        f = schema_field(cls, part)
        if f is None:
            return False
        if part == "optimizer" and cls is TrainConfig:
            return len(parts) == 2 and parts[1] != "name"
        if i == len(parts) - 1:
            return bool(f.metadata.get("resume"))
        cls = f.default_factory if is_dataclass(f.default_factory) else None
        if cls is None:
            return False
    return False


register()
