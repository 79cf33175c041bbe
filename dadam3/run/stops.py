"""How a training run stops early: the log's terminal record, one line, every rank alike.

:class:`RunStops` is a part of :class:`dadam3.run.trainer.WGANTrainer` (it uses the trainer's
``records``, ``state``, ``placement``, ``run_dir`` and ``wall_time``): a stop signal after an
iteration (:class:`~dadam3.run.signals.Interrupted`, checkpoint saved), a write that failed
(:class:`~dadam3.errors.files.WriteFailed`, :class:`~dadam3.run.checkpoint.CheckpointNotWritten`: the
previous checkpoint kept). Each ends the log with an ``interrupted`` record wherever one can
still be written, and is said once, by rank 0.
"""
from __future__ import annotations

import contextlib
import signal
from pathlib import Path

from dadam3.run.checkpoint import CheckpointNotWritten, checkpoint_path, resume_command
from dadam3.errors.files import WriteFailed
from dadam3.errors.stops import RunStopped, StoppedAtOnce
from dadam3.run.signals import Interrupted


class RunStops:
    """The trainer's early stops (see the module docstring)."""

    def _continue_with(self) -> str:
        if not checkpoint_path(self.run_dir).is_file():
            return "start the run again"
        return f"continue with `{resume_command(self.run_dir)}`"

    def stop_if_write_failed(self, failed: WriteFailed | None) -> None:
        """Every rank stops alike if a write failed on one (a collective when distributed): the
        ``interrupted`` record with the reason where it can still be written, one line."""
        (any_failed,) = self.placement.agree_max([int(failed is not None)])
        if not any_failed:
            return
        if StoppedAtOnce.raised is not None:      # a second signal, not the disk: said as the stop
            raise StoppedAtOnce.raised
        path, reason = (failed.path, failed.reason) if failed is not None else (self.run_dir, "on rank 0")
        self._terminal_record("interrupted", f"write failed: {path}: {reason}")
        raise self._agreed(WriteFailed(path, f"{reason} at iteration {self.state.iteration}; last checkpoint: "
                                             f"{self._last_checkpoint()}; free space and {self._continue_with()}"))

    def _checkpoint_failed(self, path: Path, reason: str) -> None:
        if StoppedAtOnce.raised is not None:      # a second signal during the write, not the disk
            raise StoppedAtOnce.raised
        k = self.state.iteration
        kept = "the previous checkpoint is kept" if path.is_file() else "no checkpoint was written yet"
        self._terminal_record("interrupted", reason)
        raise self._agreed(CheckpointNotWritten(f"{path} after iteration {k} ({reason}); {kept}; free space and "
                                                f"{self._continue_with()}"))

    def _interrupted(self, signum: int) -> None:
        """After the checkpoint: the record, then every rank waits for rank 0 to have written it
        (so the ranks exit together: a launcher sees one clean stop, not a rank gone early)."""
        name, k = signal.Signals(signum).name, self.state.iteration
        self.records.status(k, "interrupted", self.wall_time(), signal=name)
        self.records.logger.finish()
        self.placement.agree_max([0])
        raise self._agreed(Interrupted(f"{name} after iteration {k}; checkpoint saved; {self._continue_with()}",
                                       signum))

    def _last_checkpoint(self) -> str:
        path = checkpoint_path(self.run_dir)
        return str(path) if path.is_file() else "none written yet"

    def _terminal_record(self, status: str, reason: str) -> None:
        """The log's last record, where it can still be written (its disk may be full too)."""
        k = self.state.iteration
        record = {"iteration": k, "status": status, "reason": reason, "time": self.wall_time()}
        for act in (lambda: self.records.logger.log(record, step=k), self.records.logger.finish):
            with contextlib.suppress(Exception):        # stderr says the reason in any case
                act()

    def _agreed(self, stop: RunStopped) -> RunStopped:
        """A stop every rank agreed on is printed by rank 0 only (its record is written)."""
        stop.echo = self.placement.is_main
        stop.recorded = True
        return stop
