"""Start-up checks of a training run that need more than its config: how it was launched,
the directories it will write into, and whether the data set has enough samples for its
nodes. Each refusal is one line naming the config key; nothing is created."""
from __future__ import annotations

import os
from pathlib import Path

from dadam3.errors.config import ConfigError, needs_package
from dadam3.run.paths import check_usable_dir
from dadam3.metrics.spec import default_cache_dir
from dadam3.run.schema import TrainConfig


def check_launch(s: TrainConfig) -> None:
    """A process that torchrun started as one of several ranks must run placement=distributed."""
    world = os.environ.get("WORLD_SIZE", "1")
    if s.placement == "local" and world.isdigit() and int(world) > 1:
        raise ConfigError("placement", "local", f"this process is rank {os.environ.get('RANK', '?')} of WORLD_SIZE="
                                                f"{world} (started by torchrun): set placement=distributed, or start "
                                                "one process without torchrun")


def check_paths(s: TrainConfig) -> None:
    """Directories the run will write into later, and the optional packages and names its
    services need, checked now (nothing is created)."""
    m = s.metrics
    if m.every and (m.fid or m.kid) and s.dataset.is_images:
        check_usable_dir("metrics.cache_dir", m.cache_dir or default_cache_dir())
    if s.logger.kind == "wandb":
        needs_package("wandb", "logger", "wandb", "choose logger=jsonl")
        bad = sorted(set(WANDB_PROJECT_FORBIDDEN) & set(s.logger.project))
        if bad or not s.logger.project.strip() or len(s.logger.project) > 128:
            raise ConfigError("logger.project", s.logger.project, "must be a W&B project name: 1 to 128 characters, "
                                                                  f"none of {' '.join(WANDB_PROJECT_FORBIDDEN)}")


WANDB_PROJECT_FORBIDDEN = ("/", "\\", "#", "?", "%", ":")
# what the run writes into its directory: (name, a directory?, when)
RUN_OUTPUTS = (("metrics.jsonl", False), ("checkpoints", True), ("samples", True), ("config_resolved.yaml", False),
               ("provenance.json", False), ("train.log", False), (".hydra", True), ("run_id", False))


def check_outputs(key: str, run_dir: Path, keep: tuple[str, ...] = ()) -> None:
    """Every path the run writes into ``run_dir`` that exists already (a resumed run's, or a
    user's file where a directory belongs) is of its kind and writable, checked before the
    run starts instead of at its first write. ``keep``: the names overwrite=true deletes."""
    for name, is_dir in RUN_OUTPUTS:
        path = run_dir / name
        if name in keep or not os.path.lexists(path):
            continue
        if is_dir and not path.is_dir():
            raise ConfigError(key, str(run_dir), f"{path} is a file where the run writes a directory; move it away "
                                                 "or choose another directory")
        if not is_dir and path.is_dir():
            raise ConfigError(key, str(run_dir), f"{path} is a directory where the run writes a file; move it away "
                                                 "or choose another directory")
        if not os.access(path, os.W_OK | (os.X_OK if is_dir else 0)):
            raise ConfigError(key, str(run_dir), f"{path} is not writable by this user; fix its permissions or "
                                                 "choose another directory")


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
