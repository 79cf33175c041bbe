"""What a training run is at iteration k, as one object: :class:`TrainState`.

Both players' node-stacked nets and node optimizers, the nodes' data sampler and noise
streams (:class:`dadam3.data.node_sampler.NodeNoise`), the mixer's byte counts, the iteration, the wall time of earlier
processes and the logging window. :meth:`TrainState.state_dict` is everything a run needs to
continue bit-identically (the global RNG states too) and :meth:`TrainState.load_state_dict`
takes it back, whatever placement wrote it; what a checkpoint adds around it (its kind, the
run's config) and how it is split over ranks is :mod:`dadam3.run.checkpoint`'s concern.

Beside it, what the trainer is handed with it: where the run lives (:class:`RunContext`) and what
it writes (:class:`RunOutputs`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from dadam3.data.node_sampler import NodeNoise
from dadam3.distributed.placement import Placement
from dadam3.gan.samples import SampleGrids
from dadam3.gan.stacked import StackedNet
from dadam3.metrics.evaluation import Evaluation
from dadam3.mixing import Mixer
from dadam3.run.checkpoint import NodeList, capture_rng_state, rank_rows, restore_rng_state
from dadam3.run.checkpoint.checkpointer import Checkpointer
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


@dataclass(frozen=True)
class RunOutputs:
    """What the run writes, each deciding when it is due: records, checkpoints, and optionally
    sample grids and evaluations."""

    records: Records
    checkpointer: Checkpointer
    samples: SampleGrids | None = None
    evaluate: Evaluation | None = None
