"""When a training run writes its checkpoint, where, and what stamps it.

Every ``checkpoint_every`` iterations (0: never on a schedule), at the last iteration, and
when the run stops on a signal (:meth:`Checkpointer.due`, as torchtitan's
``checkpointer.save(step, last_step)``); always ``<run_dir>/checkpoints/last.pt``, replaced
atomically, written by rank 0 with all M nodes (:func:`dadam3.run.checkpoint.contents.write_checkpoint`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from dadam3.run.checkpoint.contents import stamped, write_checkpoint
from dadam3.run.checkpoint.files import checkpoint_path
from dadam3.run.checkpoint.resume import run_identity
from dadam3.distributed.placement import Placement


class Checkpointer:
    """Writes ``last.pt`` in ``run_dir`` every ``every`` iterations (0: at the last only); each
    checkpoint holds ``config`` (the run's resolved config, what a resume compares with) and its
    ``identity`` (:func:`dadam3.run.checkpoint.resume.run_identity`)."""

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

    def written(self) -> bool:
        """Whether a checkpoint of this run directory is on disk."""
        return self.path.is_file()
