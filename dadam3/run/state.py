"""What a training run is at iteration k, as one object: :class:`TrainState`.

Both players' node-stacked nets and node optimizers, the nodes' data sampler and noise
streams (:class:`dadam3.data.node_sampler.NodeNoise`), the mixer's byte counts, the iteration, the wall time of earlier
processes and the logging window. :meth:`TrainState.state_dict` is everything a run needs to
continue bit-identically (the global RNG states too) and :meth:`TrainState.load_state_dict`
takes it back, whatever placement wrote it; what a checkpoint adds around it (its kind, the
run's config) and how it is split over ranks is :mod:`dadam3.run.checkpoint`'s concern.

Beside it, what the trainer is handed with it: where the run lives (:class:`RunContext`) and what
it writes (:class:`RunOutputs`), the checkpoints among them (:class:`Checkpointer`: when, where, and
what stamps them). The global RNG states are plain tensors, ints, floats, strings, lists and dicts
(:func:`capture_rng_state`), so a checkpoint loads with ``torch.load(..., weights_only=True)``.
"""
from __future__ import annotations

import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from dadam3.data.node_sampler import NodeNoise
from dadam3.distributed.placement import Placement
from dadam3.gan.samples import SampleGrids
from dadam3.gan.stacked import StackedNet
from dadam3.metrics.evaluation import Evaluation
from dadam3.mixing import Mixer
from dadam3.run.checkpoint import NodeList, checkpoint_path, rank_rows, stamped, write_checkpoint
from dadam3.run.checkpoint.resume import run_identity
from dadam3.run.records import LoggingWindow, Records


@dataclass
class TrainState:
    """The run at iteration ``iteration``: this process's block ``block`` of the M nodes."""

    G: StackedNet
    D: StackedNet
    opt_g: Any
    opt_d: Any
    sampler: Any                              # dadam3.data.NodeSampler
    noise: NodeNoise
    block: range
    mixer: Mixer | None = None                # the players' mixer: bytes each node sent (None: Adam3)
    iteration: int = 0
    elapsed: float = 0.0                      # wall seconds of all earlier processes
    window: LoggingWindow = field(default_factory=LoggingWindow)
    started: float = field(default_factory=time.perf_counter)

    def wall_time(self) -> float:
        return self.elapsed + time.perf_counter() - self.started

    def state_dict(self) -> dict[str, Any]:
        """This rank's entries of a checkpoint (dadam3.run.checkpoint.contents.NODE_ENTRIES are per node)."""
        return {
            "iteration": self.iteration, "elapsed": self.wall_time(),
            "window": {k: v.cpu() for k, v in self.window.sums.items()}, "window_count": self.window.count,
            "G": self.G.state_dict(), "D": self.D.state_dict(),
            "opt_g": self.opt_g.state_dict(), "opt_d": self.opt_d.state_dict(),
            "bytes_sent": None if self.mixer is None else self.mixer.bytes_sent.copy(),
            "sampler": self.sampler.state_dict(), "noise": NodeList(self.noise.state_dict()),
            "rng": capture_rng_state(),
        }

    def load_state_dict(self, ckpt: Mapping[str, Any]) -> None:
        """Continue from a checkpoint of all M nodes (this block's rows of it)."""
        ckpt = rank_rows(ckpt, self.block)
        self.G.load_state_dict(ckpt["G"])
        self.D.load_state_dict(ckpt["D"])
        self.opt_g.load_state_dict(ckpt["opt_g"])
        self.opt_d.load_state_dict(ckpt["opt_d"])
        if self.mixer is not None and ckpt["bytes_sent"] is not None:
            self.mixer.bytes_sent[:] = ckpt["bytes_sent"]
        self.sampler.load_state_dict(ckpt["sampler"])
        self.noise.load_state_dict(ckpt["noise"])
        restore_rng_state(ckpt["rng"])
        device = self.noise.device
        self.window = LoggingWindow({k: v.to(device) for k, v in ckpt["window"].items()}, ckpt["window_count"])
        self.iteration, self.elapsed, self.started = ckpt["iteration"], ckpt["elapsed"], time.perf_counter()


@dataclass(frozen=True)
class RunContext:
    """Where a trainer's run lives."""

    run_dir: Path
    device: torch.device
    dtype: torch.dtype
    placement: Placement
    lock: Any = None                      # the run directory (dadam3.run.directory.RunDir), released at the end
    full_G: StackedNet | None = None      # rank 0 under torch.distributed: all M nodes, for the hooks
    graphs: bool = False                  # cuda.graphs: the iteration as a replayed CUDA graph
    writes: tuple[str, ...] = ()          # the top-level names it creates (its manifest's), stamped as written


@dataclass(frozen=True)
class RunOutputs:
    """What the run writes, each deciding when it is due: records, checkpoints, and optionally
    sample grids and evaluations."""

    records: Records
    checkpointer: Checkpointer
    samples: SampleGrids | None = None
    evaluate: Evaluation | None = None


class Checkpointer:
    """Writes ``<run_dir>/checkpoints/last.pt`` (replaced atomically, by rank 0, all M nodes) every
    ``every`` iterations (0: never on a schedule), at the last one and on a stop signal (as
    torchtitan's ``checkpointer.save(step, last_step)``); each holds ``config`` (the run's
    resolved config, what a resume compares with) and its ``identity`` (:func:`run_identity`)."""

    def __init__(self, run_dir: Path, placement: Placement, every: int, config: Mapping[str, Any]):
        self.path, self.placement, self.every, self.config = checkpoint_path(run_dir), placement, every, dict(config)

    def due(self, k: int, last: bool, stopping: bool = False) -> bool:
        """Whether iteration ``k`` ends with a checkpoint (``stopping``: a stop signal came)."""
        return bool(self.every and k % self.every == 0) or last or stopping

    def contents(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` (this rank's) as a checkpoint: with the run's config and the kind."""
        return stamped({**state, "config": self.config, "identity": run_identity(self.config)})

    def save(self, ckpt: dict[str, Any]) -> str | None:
        """Rank 0 writes ``ckpt`` (a collective when distributed); None, or on every rank alike
        why it was not written."""
        return write_checkpoint(ckpt, self.path, self.placement)


def capture_rng_state() -> dict[str, Any]:
    """Every global random generator a run draws from: ``torch`` (CPU), ``cuda`` (one per
    visible device), ``numpy`` (the legacy global state) and ``python`` (``random``)."""
    np_name, np_key, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    py_version, py_internal, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": str(np_name), "key": torch.from_numpy(np_key.astype(np.int64)),
                  "pos": int(np_pos), "has_gauss": int(np_has_gauss),
                  "cached_gaussian": float(np_gauss)},
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`. CUDA states are restored on ``min(saved, visible)``
    devices; another device count warns (resuming on other hardware is legitimate but no longer
    bit-reproducible)."""
    torch.set_rng_state(state["torch"].cpu())
    cuda_states = list(state.get("cuda", []))
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if len(cuda_states) != visible and (cuda_states or visible):
        warnings.warn(f"checkpoint has CUDA RNG states for {len(cuda_states)} device(s), "
                      f"{visible} visible now; restoring the first {min(len(cuda_states), visible)}",
                      stacklevel=2)
    for i, s in enumerate(cuda_states[:visible]):
        torch.cuda.set_rng_state(s.cpu(), device=i)
    n = state["numpy"]
    np.random.set_state((n["name"], n["key"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
