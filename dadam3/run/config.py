"""Helpers shared by the Hydra entry points: config location (``dadam3/configs``, found through
the package) and resolvers. The group options (and the one-line error for an unknown one) are
:mod:`dadam3.run.schema.presets`; the config's keys and values are checked in :mod:`dadam3.run.schema`."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from omegaconf import OmegaConf


# the configs ship with the package (package data; the repository's top-level configs/ links here)
CONFIG_DIR = Path(str(resources.files("dadam3") / "configs")).resolve()

if not OmegaConf.has_resolver("inv_one_plus_sq"):
    # beta2 = 1/(1+c^2) of Section 5.1 follows game.c
    OmegaConf.register_new_resolver("inv_one_plus_sq", lambda c: 1.0 / (1.0 + float(c) * float(c)))


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
