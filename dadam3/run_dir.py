"""A run directory and the checkpoint a run resumes from.

``resume=PATH`` (a checkpoint file, a run directory or its ``checkpoints/``) continues
the run that wrote it, in ITS directory. The keys that fix what is being trained
(:data:`FIXED_KEYS`) must be the same as when the checkpoint was written.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from dadam3.checkpoint import load, resolve_resume_path
from dadam3.errors import ConfigError

log = logging.getLogger(__name__)

# keys a resumed run must share with its checkpoint
FIXED_KEYS = ("nodes", "batch_size", "dataset.name", "model.arch", "model.width", "optimizer.name")


def _select(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def open_checkpoint(resume: str | None, config: Mapping[str, Any], run_dir: Path) -> tuple[Path, dict | None]:
    """(the directory the run writes into, the checkpoint to continue from or None)."""
    if resume is None:
        return run_dir, None
    path = resolve_resume_path(resume)
    ckpt = load(path, map_location="cpu")
    saved = ckpt.get("config") or {}
    for key in FIXED_KEYS:
        now, then = _select(config, key), _select(saved, key)
        if saved and now != then:
            raise ConfigError(key, now, f"the checkpoint {path} was made with {key}={then}")
    if ckpt["iteration"] >= _select(config, "iterations"):
        raise ConfigError("iterations", _select(config, "iterations"),
                          f"the checkpoint is already at iteration {ckpt['iteration']}; raise iterations to continue")
    run_dir = path.parent.parent       # continue in the original run directory
    log.info("resuming from %s (iteration %d), writing into %s", path, ckpt["iteration"], run_dir)
    return run_dir, ckpt
