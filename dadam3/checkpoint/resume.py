"""What may change when a run resumes from its checkpoint: the one compatibility policy.

A checkpoint must be one written by ``python -m dadam3.train`` (its kind). Keys that only
steer the run (step sizes and the optimizer's other hyper-parameters, ``iterations``, the
logging / sampling / checkpoint / evaluation periods, the logger, device and threads, ...)
may change and take effect; every other key fixes what is being trained (nodes, nets, data,
topology, dtype, batch size, seed, the optimizer's name, ...) and must be what the
checkpoint was made with. :func:`may_change_on_resume` is the one place that says which.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from dadam3.checkpoint.contents import CHECKPOINT_KIND
from dadam3.config import flatten
from dadam3.errors import ConfigError

# dotted keys (or prefixes ending in ".") that may differ between a checkpoint and its resume
CHANGEABLE = ("optimizer.", "iterations", "log_every", "sample_every", "checkpoint_every", "n_critic",
              "gp_lambda", "metrics.", "logger.", "progress", "threads", "prefetch", "device", "cuda.",
              "resume", "overwrite", "dataset.root", "dataset.download", "dataset.workers", "backend",
              "distributed.", "autocast")
NOT_CHANGEABLE = ("optimizer.name",)


def may_change_on_resume(key: str) -> bool:
    """Whether the config key ``key`` (dotted, e.g. ``optimizer.lr``) may differ between a
    checkpoint and the run that resumes it: a key that only steers the run, not one that fixes
    what is being trained (see the module docstring)."""
    return key not in NOT_CHANGEABLE and any(key == c or (c.endswith(".") and key.startswith(c))
                                             for c in CHANGEABLE)


def check_resume(ckpt: Any, path: Path, config: Mapping[str, Any]) -> dict[str, list]:
    """Refuse checkpoints of other runs or kinds, changes to keys that may not change, and a
    checkpoint already at ``iterations``; return the changed keys (``key -> [checkpoint's
    value, now]``) but ``resume`` and ``overwrite``."""
    if not isinstance(ckpt, dict) or ckpt.get("kind") != CHECKPOINT_KIND:
        raise ConfigError("resume", str(path), "not a checkpoint of python -m dadam3.train "
                                               f"(expected kind {CHECKPOINT_KIND})")
    saved, now = flatten(ckpt.get("config") or {}), flatten(config)
    changed = {}
    for key in sorted(saved.keys() | now.keys()):
        if saved.get(key) == now.get(key):
            continue
        if not may_change_on_resume(key):
            raise ConfigError(key, now.get(key), f"cannot change on resume: {path} was made with "
                                                 f"{key}={saved.get(key)}; start a new run to change it")
        changed[key] = [saved.get(key), now.get(key)]
    if ckpt["iteration"] >= now["iterations"]:
        raise ConfigError("iterations", now["iterations"],
                          f"the checkpoint is already at iteration {ckpt['iteration']}; raise iterations to continue")
    return {k: v for k, v in changed.items() if k not in ("resume", "overwrite")}
