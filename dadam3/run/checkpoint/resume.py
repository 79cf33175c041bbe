"""What may change when a run resumes from its checkpoint: the one compatibility policy.

A checkpoint must be one written by ``python -m dadam3.train`` (its kind). Keys that only
steer the run (step sizes and the optimizer's other hyper-parameters, ``loop.iterations``, the
logging / sampling / checkpoint / evaluation periods, the logger, device and threads, ...)
may change and take effect; every other key fixes what is being trained (nodes, nets, data,
topology, dtype, batch size, seed, the optimizer's name, ...) and must be what the
checkpoint was made with. Which is which is declared beside each field of the schema; the
caller passes it in (``may_change``: :func:`dadam3.run.schema.may_change_on_resume`). A checkpoint
of an earlier format is refused in one line naming it (:func:`earlier_format`).

A run's identity is its resolved config less the keys that do not change what it computes
(:data:`NOT_IDENTITY`): :func:`run_identity` hashes it (stored with the run: its
``provenance.json`` segments and every checkpoint), :func:`identity_diff` names the keys in
which two configs are different runs (a sweep job against the run in its directory).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Mapping

from dadam3.run.checkpoint.contents import CHECKPOINT_KIND, ENTRY_TYPES
from dadam3.run.config import flatten
from dadam3.errors.config import ConfigError

OPTION_KEYS = ("name", "arch", "kind")      # the key naming a group's option (dataset.name, model.arch, ...)
# a checkpoint's entries a resume reads outside the state's load (which names a missing one itself)
READ_ON_RESUME = ("record_on_grid",)

# keys (a key and everything under it) that are no part of a run's identity, and why
NOT_IDENTITY = {
    "resume": "how the run is started", "overwrite": "how the run is started",
    "loop.iterations": "an extension continues the same run (its first iterations are unchanged)",
    "loop.log_every": "when records are written", "loop.sample_every": "when sample grids are written",
    "loop.checkpoint_every": "when checkpoints are written", "loop.progress": "a progress bar",
    "device": "where the same computation runs", "threads": "how fast", "prefetch": "how fast",
    "placement": "how the nodes are spread over processes (equal results by design)",
    "distributed": "the process group's transport and time-out",
    "cuda.cudnn_benchmark": "a fast path", "cuda.compile_step": "a fast path proven equal to the plain one",
    "cuda.channels_last": "a memory format", "cuda.graphs": "a fast path proven equal to the plain one",
    "logger": "where the records go (jsonl, W&B project, names, mode)",
    "metrics.batch_size": "how an evaluation is batched", "metrics.cache_dir": "where features are cached",
    "metrics.download_weights": "whether weights may be fetched",
    "dataset.root": "where the same data is read from", "dataset.download": "whether it may be fetched",
    "dataset.workers": "decode threads",
    "engine": "the synthetic loop's engine (numba proven equal to torch)",
}


def identity_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` flattened, without the keys of :data:`NOT_IDENTITY`."""
    return {k: v for k, v in flatten(config).items()
            if not any(k == x or k.startswith(x + ".") for x in NOT_IDENTITY)}


def run_identity(config: Mapping[str, Any]) -> str:
    """The run's identity: a hash (16 hex digits of SHA-256) of :func:`identity_view`."""
    text = json.dumps(identity_view(config), sort_keys=True, default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identity_diff(stored: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, list]:
    """The identity keys in which ``stored`` and ``config`` differ: ``key -> [stored, config]``."""
    a, b = identity_view(stored), identity_view(config)
    return {k: [a.get(k), b.get(k)] for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def stored_config(ckpt: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's config, flattened."""
    return flatten(ckpt["config"])


def earlier_format(ckpt: Mapping[str, Any]) -> str | None:
    """The earlier format a checkpoint of ``python -m dadam3.train`` is of (None: this code's): one
    written before the ``loop`` group, before ``placement=`` (its ``backend=``), or before run ids."""
    if "iterations" in ckpt["config"]:
        return "before the loop group: top-level iterations, batch_size, ...; now loop.*"
    if "backend" in ckpt["config"]:
        return "before placement=: its backend= key"
    if not isinstance(ckpt.get("run_id"), str):
        return "before run ids: it names no run"
    return None


def check_checkpoint(ckpt: Any, path: Path) -> None:
    """What a checkpoint must be, whatever the run: of ``python -m dadam3.train`` (its kind), with
    only the entries this code writes, each of its type (:data:`~dadam3.run.checkpoint.contents.ENTRY_TYPES`),
    those read outside the state's load among them (:data:`READ_ON_RESUME`),
    at an iteration >= 0, with its config, of this format (:func:`earlier_format`)."""
    if not isinstance(ckpt, dict) or ckpt.get("kind") != CHECKPOINT_KIND:
        raise ConfigError("resume", str(path), "not a checkpoint of python -m dadam3.train "
                                               f"(expected kind {CHECKPOINT_KIND})")
    it = ckpt.get("iteration")
    if type(it) is not int or it < 0 or not isinstance(ckpt.get("config"), dict):
        raise ConfigError("resume", str(path), f"the checkpoint claims iteration {it!r} (an iteration is an "
                                               "integer >= 0) or holds no config: it is damaged or not a run's")
    earlier = earlier_format(ckpt)
    if earlier is not None:
        raise ConfigError("resume", str(path), f"a checkpoint of an earlier format ({earlier}): resume it with the "
                                               "version that wrote it, or start a new run")
    missing = [name for name in READ_ON_RESUME if name not in ckpt]
    if missing:
        raise ConfigError("resume", str(path), f"the checkpoint lacks the entry {missing[0]!r} that this code "
                                               "writes in every checkpoint: it is damaged or another program's; "
                                               "start a new run")
    for name, value in ckpt.items():
        if name not in ENTRY_TYPES:
            raise ConfigError("resume", str(path), f"the checkpoint holds an entry {name!r} this code never writes: "
                                                   "it was changed or is another program's; start a new run")
        if type(value) is bool and bool not in ENTRY_TYPES[name] or not isinstance(value, ENTRY_TYPES[name]):
            raise ConfigError("resume", str(path), f"the checkpoint's entry {name!r} is a {type(value).__name__}, "
                                                   f"not a {' or '.join(t.__name__ for t in ENTRY_TYPES[name])}: it "
                                                   "is damaged or another program's; start a new run")


def check_resume(ckpt: Any, path: Path, config: Mapping[str, Any], may_change: Callable[[str], bool]
                 ) -> dict[str, list]:
    """For a checkpoint ``ckpt`` read from ``path`` (:func:`~dadam3.run.resume_config.read_resume`:
    of this code's kind, checked), refuse changes to keys that may not change
    (``may_change(dotted_key)`` is False: one line naming every such key), and a checkpoint
    already at ``loop.iterations``; return the changed keys (``key -> [checkpoint's value, now]``) but
    ``resume`` and ``overwrite``."""
    saved, now = stored_config(ckpt), flatten(config)
    changed, refused = {}, []
    for key in sorted(saved.keys() | now.keys()):
        if saved.get(key) == now.get(key):
            continue
        if not may_change(key):
            refused.append(key)
        changed[key] = [saved.get(key), now.get(key)]
    if refused:           # a group's option first (dataset.name, model.arch, ...): the others follow from it
        key, *more = sorted(refused, key=lambda k: (k.count(".") != 1 or k.rpartition(".")[2] not in OPTION_KEYS, k))
        also = "; nor can " + ", ".join(f"{k} (made with {saved.get(k)!r}, now {now.get(k)!r})" for k in more[:5]) \
            + (f" and {len(more) - 5} more" if len(more) > 5 else "") if more else ""
        raise ConfigError(key, now.get(key), f"cannot change on resume: {path} was made with {key}={saved.get(key)}"
                                             f"{also}; start a new run to change {'them' if more else 'it'}")
    if ckpt["iteration"] >= now["loop.iterations"]:
        raise ConfigError("loop.iterations", now["loop.iterations"], f"the checkpoint is already at iteration "
                                                                     f"{ckpt['iteration']}; raise loop.iterations to "
                                                                     "continue")
    return {k: v for k, v in changed.items() if k not in ("resume", "overwrite")}
