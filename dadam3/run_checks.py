"""Start-up checks of a training run that need more than its config: how it was launched,
the directories it will write into, and whether the data set has enough samples for its
nodes. Each refusal is one line naming the config key; nothing is created."""
from __future__ import annotations

import os

from dadam3.errors import ConfigError, check_usable_dir
from dadam3.metrics.spec import default_cache_dir
from dadam3.schema import TrainConfig


def check_launch(s: TrainConfig) -> None:
    """A process that torchrun started as one of several ranks must run placement=distributed."""
    world = os.environ.get("WORLD_SIZE", "1")
    if s.placement == "local" and world.isdigit() and int(world) > 1:
        raise ConfigError("placement", "local", f"this process is rank {os.environ.get('RANK', '?')} of WORLD_SIZE="
                                                f"{world} (started by torchrun): set placement=distributed, or start "
                                                "one process without torchrun")


def check_paths(s: TrainConfig) -> None:
    """Directories the run will write into later, checked now (nothing is created)."""
    m = s.metrics
    if m.every and (m.fid or m.kid) and s.dataset.is_images:
        check_usable_dir("metrics.cache_dir", m.cache_dir or default_cache_dir())


def check_shards(dataset, s: TrainConfig) -> None:
    """Too many nodes for a finite data set cut into disjoint shards: say so (not batch_size)."""
    n = len(dataset) if hasattr(dataset, "__len__") and s.dataset.partition != "iid" else None
    if n is not None and n < s.nodes:
        raise ConfigError("nodes", s.nodes, f"the data set has {n} samples and dataset.partition="
                                            f"{s.dataset.partition} gives each node its own: at most {n} nodes")
    if n is not None and s.dataset.partition == "split" and n // s.nodes < s.loop.batch_size:
        raise ConfigError("loop.batch_size", s.loop.batch_size,
                          f"dataset.partition=split gives each of nodes={s.nodes} only {n // s.nodes} of {n} "
                          f"samples: lower loop.batch_size to <= {n // s.nodes} or nodes to <= "
                          f"{max(1, n // s.loop.batch_size)}")
