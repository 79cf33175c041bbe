"""What a training checkpoint holds, and how it is split across the ranks that hold the nodes.

A checkpoint of ``python -m dadam3.train`` is one dict: the run's state
(:meth:`dadam3.run.state.TrainState.state_dict`: iteration, wall time, the logging window,
both nets and optimizers, the data sampler, the noise generators, bytes sent, the global RNG
states), the log's place (the W&B run id, whether its record is on the logging grid) and the
resolved config, stamped by :func:`stamped` with its kind (:data:`CHECKPOINT_KIND`, what a
resume checks first); :class:`dadam3.run.state.Checkpointer` decides when one is
written and assembles it. It always holds all M nodes, whatever the placement that wrote it: under
torch.distributed each rank's :data:`NODE_ENTRIES` are gathered to rank 0, which writes
(:func:`write_checkpoint`), and a resuming rank takes its own block's rows (:func:`rank_rows`).

Every run directory holds its run id (:data:`RUN_ID_FILE`, written when a run claims it) and
:func:`write_checkpoint` stamps it into each checkpoint written there (``run_id``): a resume
continues in a directory only with a checkpoint of that run (:mod:`dadam3.run.directory`).
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from dadam3.errors.small_files import read_small
from dadam3.run.checkpoint.files import NodeList, atomic_save
from dadam3.distributed.placement import Placement

CHECKPOINT_KIND = "dadam3.train/1"
# entries with one part per node: gathered from the ranks, sliced again on load
NODE_ENTRIES = ("G", "D", "opt_g", "opt_d", "window", "sampler", "noise")
RUN_ID_FILE = "run_id"          # <run_dir>/run_id: the run's id, one line
RUN_ID = re.compile(r"[0-9a-f]{32}")
# every entry a checkpoint of this code may hold -> the types its value may have (a checkpoint with
# another entry, or a value of another type, is refused by dadam3.run.checkpoint.resume.check_checkpoint)
ENTRY_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,), "iteration": (int,), "elapsed": (float, int), "config": (dict,), "run_id": (str,),
    "window": (dict,), "window_count": (int,), "G": (dict,), "D": (dict,), "opt_g": (dict,), "opt_d": (dict,),
    "bytes_sent": (np.ndarray, torch.Tensor, type(None)), "sampler": (dict,), "noise": (list,), "rng": (dict,),
    "wandb_run_id": (str, type(None)), "record_on_grid": (bool,), "identity": (str,),
}


def read_run_id(run_dir: Path) -> str | None:
    """The id in ``run_dir``/:data:`RUN_ID_FILE`, or None (no file, unreadable, not an id). A
    ``run_id`` that is no small regular file (a FIFO, ``/dev/zero``) is one line naming it
    (:func:`dadam3.errors.small_files.read_small`)."""
    try:
        text = read_small(Path(run_dir) / RUN_ID_FILE, 4096).decode("ascii").strip()
    except (OSError, UnicodeError):
        return None
    return text if RUN_ID.fullmatch(text) else None


def resume_override(run_dir: str | Path) -> str:
    """``resume=PATH``, PATH quoted for Hydra's override grammar where it needs it (spaces,
    commas, brackets, quotes)."""
    path = str(run_dir)
    if not re.fullmatch(r"[\w./~+@%:-]+", path):
        path = '"' + path.replace('"', '\\"') + '"'
    return f"resume={path}"


def resume_command(run_dir: str | Path, module: str = "dadam3.train") -> str:
    """The command line that continues the run in ``run_dir``, quoted for the shell and Hydra."""
    return f"python -m {module} {shlex.quote(resume_override(run_dir))}"


def stamped(state: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer's ``state`` (the global RNG states among it) as a checkpoint: with its kind."""
    return {**state, "kind": CHECKPOINT_KIND}


def write_checkpoint(ckpt: dict[str, Any], path: Path, placement: Placement) -> str | None:
    """Rank 0 writes ``ckpt`` with all M nodes (gathered: a collective when distributed),
    atomically, stamped with the id of the run directory it is written in (``path``'s
    grandparent). Returns None, or on every rank alike why it was not written."""
    error = None
    if placement.distributed:
        parts = placement.gather_to_main({k: ckpt[k] for k in NODE_ENTRIES})
        if parts is not None:
            ckpt = {**ckpt, **{k: stack_node_states([p[k] for p in parts]) for k in NODE_ENTRIES}}
    if placement.is_main:
        ckpt = {**ckpt, "run_id": read_run_id(Path(path).parent.parent)}
        try:
            atomic_save(ckpt, path)
        except OSError as e:
            error = e
    (failed,) = placement.agree_max([int(error is not None)])
    if not failed:
        return None
    return f"checkpoint write failed: {error.strerror or error}" if error is not None else "on rank 0"


def rank_rows(ckpt: Mapping[str, Any], block: range) -> dict[str, Any]:
    """A checkpoint of all M nodes with its node entries cut to ``block`` (the sampler takes
    its whole state: it is keyed by node)."""
    return {**ckpt, **{k: node_rows(ckpt[k], block) for k in NODE_ENTRIES if k != "sampler"}}


def stack_node_states(parts: Sequence[Any]) -> Any:
    """Merge the per-rank pieces of a state (rank order): tensors with a leading node axis are
    concatenated along it, dicts merged key by key, lists of per-node items concatenated,
    anything else taken from rank 0."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(parts)) if first.dim() > 0 else first
    if isinstance(first, dict):
        if any(p.keys() != first.keys() for p in parts):      # keyed by node: each rank has its own keys
            return {k: v for p in parts for k, v in p.items()}
        return {k: stack_node_states([p[k] for p in parts]) for k in first}
    if isinstance(first, NodeList):
        return NodeList(item for p in parts for item in p)
    return first


def node_rows(state: Any, block: range) -> Any:
    """The inverse of :func:`stack_node_states`: this block's rows of a full state."""
    if isinstance(state, torch.Tensor):
        return state[block.start:block.stop] if state.dim() > 0 else state
    if isinstance(state, dict):
        return {k: node_rows(v, block) for k, v in state.items()}
    if isinstance(state, NodeList):
        return NodeList(state[block.start:block.stop])
    return state
