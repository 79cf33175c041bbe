"""A composed config checked into the run's settings, once: :func:`train_settings` and
:func:`synthetic_settings` (each group option typed as the schema its name selects, every field
checked, frozen); and :func:`may_change_on_resume`, the resume policy read from the fields."""
from __future__ import annotations

from dataclasses import is_dataclass
from types import MappingProxyType
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dadam3.errors.config import ConfigError
from dadam3.run.schema.fields import check_tree, schema_field
from dadam3.run.schema.groups import GROUPS, REGISTRIES, option_schema
from dadam3.run.schema.overrides import config_error
from dadam3.run.schema.runs import SyntheticConfig, TrainConfig


def train_settings(cfg: DictConfig) -> TrainConfig:
    """The composed ``train`` config as checked, frozen :class:`TrainConfig` (one-line ConfigError)."""
    return _settings(cfg, TrainConfig)


def synthetic_settings(cfg: DictConfig) -> SyntheticConfig:
    """The composed ``synthetic`` config as checked, frozen :class:`SyntheticConfig`."""
    return _settings(cfg, SyntheticConfig)


def _settings(cfg: DictConfig, cls: type):
    try:
        cfg = _typed(cfg)
        settings = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), cfg))
        resolved = OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:          # an interpolation that does not resolve, a value of the wrong type
        raise config_error(e) from None
    object.__setattr__(settings, "config", MappingProxyType(resolved))
    return check_tree(settings)


def _typed(cfg: DictConfig) -> DictConfig:
    """``cfg`` with each group option typed as the schema its name selects: a YAML may take its
    values from another option's (``optimizer/adam3.yaml`` from ``dadam3``'s) or name no schema (an
    optimizer added to the registry with a YAML file of its name and values only)."""
    cfg = cfg.copy()
    for group, (key, options) in GROUPS.items():
        section = cfg.get(group)
        if not isinstance(section, DictConfig):
            continue
        schema = option_schema(group, section.get(key))
        if schema is None:
            names = [n for c in options.values() for n in schema_field(c, key).metadata["check"].names]
            where = REGISTRIES.get(group, "a schema of dadam3/run/schema/groups.py")
            raise ConfigError(f"{group}.{key}", section.get(key), f"unknown {group} (not in {where}); allowed: "
                                                                  f"{', '.join(names)}")
        if OmegaConf.get_type(section) is not schema:
            cfg[group] = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.to_container(section))
    return cfg


def may_change_on_resume(dotted_key: str) -> bool:
    """Whether ``dotted_key`` of the train config may differ between a checkpoint and its
    resume (declared beside each field: ``knob(..., resume=True)``). A key the schema does
    not know may not; of a group, a key any of its schemas lets change (an optimizer's
    hyper-parameters, not its name)."""
    group, *rest = dotted_key.split(".")
    if group in GROUPS and rest:
        found = [schema_field(c, rest[0]) for c in GROUPS[group][1].values()]
        return len(rest) == 1 and any(f is not None and f.metadata.get("resume") for f in found)
    cls: Any = TrainConfig
    for part in dotted_key.split("."):
        f = schema_field(cls, part) if is_dataclass(cls) else None     # past a value: no such key
        if f is None:
            return False
        cls = f.default_factory
    return bool(f.metadata.get("resume"))
