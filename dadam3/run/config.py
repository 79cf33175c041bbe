"""Helpers shared by the Hydra entry points: config location (``dadam3/configs``, found through
the package), resolvers, and a one-line
error for an unknown group choice on the command line (before Hydra prints its
multi-line one). The config's keys and values are checked in :mod:`dadam3.run.schema`."""
from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from omegaconf import OmegaConf

from dadam3.errors.boundary import exit_on_failure
from dadam3.errors.config import ConfigError

# the configs ship with the package (package data; the repository's top-level configs/ links here)
CONFIG_DIR = Path(str(resources.files("dadam3") / "configs")).resolve()

if not OmegaConf.has_resolver("inv_one_plus_sq"):
    # beta2 = 1/(1+c^2) of Section 5.1 follows game.c
    OmegaConf.register_new_resolver("inv_one_plus_sq", lambda c: 1.0 / (1.0 + float(c) * float(c)))


def group_choices(group: str) -> list[str]:
    """``group``'s options from every search path (:mod:`dadam3.run.presets`)."""
    from dadam3.run import presets
    return presets.group_choices(group)


def check_group_choices(argv: Sequence[str], groups: Sequence[str]) -> None:
    """Raise a one-line ConfigError for ``group=value`` overrides naming no config file."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key.lstrip("+~") not in groups or "(" in value:
            continue
        key = key.lstrip("+~")
        allowed = group_choices(key)
        for v in value.split(","):
            if v.strip() not in allowed:
                raise ConfigError(key, v.strip(), f"unknown {key}; allowed: {', '.join(allowed)}")


def run_cli(hydra_main, groups: Sequence[str], check: Callable[[Sequence[str]], None]) -> None:
    """Entry-point wrapper: pre-check group choices, then every other override with ``check``
    (:func:`dadam3.run.schema.check_overrides`), then hand over to Hydra. The user's config
    directories (``--config-dir``, ``hydra.searchpath``) count for both checks."""
    from dadam3.run import presets
    presets.use_searchpath(sys.argv[1:])
    exit_on_failure(check_group_choices)(sys.argv[1:], groups)
    exit_on_failure(check)(sys.argv[1:])
    exit_on_failure(hydra_main)()          # a second stop signal in a sweep, a launcher's failure: one line


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
