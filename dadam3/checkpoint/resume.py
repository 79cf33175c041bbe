"""What may change when a run resumes from its checkpoint: the one compatibility policy.

A checkpoint must be one written by ``python -m dadam3.train`` (its kind). Keys that only
steer the run (step sizes and the optimizer's other hyper-parameters, ``loop.iterations``, the
logging / sampling / checkpoint / evaluation periods, the logger, device and threads, ...)
may change and take effect; every other key fixes what is being trained (nodes, nets, data,
topology, dtype, batch size, seed, the optimizer's name, ...) and must be what the
checkpoint was made with. Which is which is declared beside each field of the schema; the
caller passes it in (``may_change``: :func:`dadam3.schema.may_change_on_resume`), with the keys
an earlier version named otherwise (``renamed``: a checkpoint's ``backend`` is ``placement`` now).
"""
from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from dadam3.checkpoint.contents import CHECKPOINT_KIND, ENTRY_TYPES
from dadam3.config import flatten
from dadam3.errors import ConfigError


def check_checkpoint(ckpt: Any, path: Path) -> None:
    """What a checkpoint must be, whatever the run: of ``python -m dadam3.train`` (its kind), with
    only the entries this code writes, each of its type (:data:`~dadam3.checkpoint.contents.ENTRY_TYPES`),
    at an iteration >= 0, with its config, of this version (the ``loop`` group)."""
    if not isinstance(ckpt, dict) or ckpt.get("kind") != CHECKPOINT_KIND:
        raise ConfigError("resume", str(path), "not a checkpoint of python -m dadam3.train "
                                               f"(expected kind {CHECKPOINT_KIND})")
    it = ckpt.get("iteration")
    if type(it) is not int or it < 0 or not isinstance(ckpt.get("config"), dict):
        raise ConfigError("resume", str(path), f"the checkpoint claims iteration {it!r} (an iteration is an "
                                               "integer >= 0) or holds no config: it is damaged or not a run's")
    if "iterations" in ckpt["config"]:       # written before the loop group: its keys were top-level
        raise ConfigError("resume", str(path), "a checkpoint of an older version (top-level iterations, batch_size, "
                                               "...; now loop.*): resume it with that version or start a new run")
    for name, value in ckpt.items():
        if name not in ENTRY_TYPES:
            raise ConfigError("resume", str(path), f"the checkpoint holds an entry {name!r} this code never writes: "
                                                   "it was changed or is another program's; start a new run")
        if type(value) is bool and bool not in ENTRY_TYPES[name] or not isinstance(value, ENTRY_TYPES[name]):
            raise ConfigError("resume", str(path), f"the checkpoint's entry {name!r} is a {type(value).__name__}, "
                                                   f"not a {' or '.join(t.__name__ for t in ENTRY_TYPES[name])}: it "
                                                   "is damaged or another program's; start a new run")


def check_resume(ckpt: Any, path: Path, config: Mapping[str, Any], may_change: Callable[[str], bool],
                 renamed: Mapping[str, str] = MappingProxyType({})) -> dict[str, list]:
    """Refuse checkpoints of other runs or kinds (:func:`check_checkpoint`), changes to keys that
    may not change (``may_change(dotted_key)`` is False), and a checkpoint already at
    ``loop.iterations``; return the changed keys (``key -> [checkpoint's value, now]``) but
    ``resume`` and ``overwrite``. ``renamed``: a key of the checkpoint's config -> its name now."""
    check_checkpoint(ckpt, path)
    saved, now = {renamed.get(k, k): v for k, v in flatten(ckpt["config"]).items()}, flatten(config)
    changed = {}
    for key in sorted(saved.keys() | now.keys()):
        if saved.get(key) == now.get(key):
            continue
        if not may_change(key):
            raise ConfigError(key, now.get(key), f"cannot change on resume: {path} was made with "
                                                 f"{key}={saved.get(key)}; start a new run to change it")
        changed[key] = [saved.get(key), now.get(key)]
    if ckpt["iteration"] >= now["loop.iterations"]:
        raise ConfigError("loop.iterations", now["loop.iterations"], f"the checkpoint is already at iteration "
                                                                     f"{ckpt['iteration']}; raise loop.iterations to "
                                                                     "continue")
    return {k: v for k, v in changed.items() if k not in ("resume", "overwrite")}
