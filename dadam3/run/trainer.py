"""The simulated multi-node WGAN-GP training loop: all M node copies in one batched computation.

One iteration k (:meth:`WGANTrainer.train_step`) is the GAN's step
(:class:`dadam3.gan.iteration.GANStep`: the step-size warm-up, then the simultaneous form, the
paper's, or the alternating ``n_critic`` form, each draw -> gradients -> clip -> step), then its
per-node values (the losses, the operator norm) go into the logging window. Nothing of the
game is computed here: the loop, the stops, the checkpoints and the logs are.

Around the iteration each component says when it is due (no schedule in the loop): the
records (:class:`dadam3.run.records.Records`, on the logging grid), the evaluation
(:class:`dadam3.metrics.evaluation.Evaluation`), the sample grids
(:class:`dadam3.gan.samples.SampleGrids`) and the checkpointer
(:class:`dadam3.run.state.Checkpointer`). Finiteness is read before anything is
written (:mod:`dadam3.gan.finiteness`). The run's state is one object, saved and loaded as one
(:class:`dadam3.run.state.TrainState`). Early stops: a stop signal after an iteration (checkpoint
saved; :mod:`dadam3.run.signals`), a write that failed (the previous checkpoint kept): each ends
the log with an ``interrupted`` record wherever one can still be written, said once, by rank 0.
"""
from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Any

import torch

from dadam3.distributed.failures import DistributedTimeout
from dadam3.errors.files import WriteFailed, what_to_do
from dadam3.errors.stops import RunStopped, StoppedAtOnce
from dadam3.gan.finiteness import Divergence, FinitenessWatch, TrainingDiverged
from dadam3.gan.iteration import GANStep, StepSettings
from dadam3.gan.stacked import StackedNet
from dadam3.errors.boundary import failure_of
from dadam3.run.checkpoint import CheckpointNotWritten, resume_command
from dadam3.run.divergence import loss_beyond
from dadam3.run.loggers import progress
from dadam3.run.manifest import stamp_manifest
from dadam3.run.records import gathered_net
from dadam3.run.schema import LoopSettings
from dadam3.run.signals import Interrupted, StopSignals, overdue
from dadam3.run.state import RunContext, RunOutputs, TrainState


class WGANTrainer:
    """Trains node-stacked G, D with two node optimizers (one per player) sharing one mixer,
    from the run's ``state`` (:class:`TrainState`), the ``loop`` settings, where the run lives
    (``run``) and what it writes (``outputs``)."""

    def __init__(self, state: TrainState, settings: LoopSettings, run: RunContext, outputs: RunOutputs):
        self.state, self.s, self.run = state, settings, run
        self.records, self.checkpointer = outputs.records, outputs.checkpointer
        self.samples, self.evaluate = outputs.samples, outputs.evaluate
        self.run_dir, self.placement, self.device, self.dtype = Path(run.run_dir), run.placement, run.device, run.dtype
        self.M = state.G.num_nodes
        self.finite = FinitenessWatch(list(state.block), self.placement)
        self.step = GANStep(state, StepSettings(settings.batch_size, settings.n_critic, settings.gp_lambda,
                                                settings.clip_grad_norm, settings.lr_warmup,
                                                settings.autocast == "bf16", run.graphs),
                            run.device, run.dtype, self.finite)

    # the players, read from the state
    G = property(lambda self: self.state.G)
    D = property(lambda self: self.state.D)
    opt_g = property(lambda self: self.state.opt_g)
    opt_d = property(lambda self: self.state.opt_d)
    sampler = property(lambda self: self.state.sampler)

    # ------------------------------------------------------------------ one iteration
    def train_step(self) -> dict[str, torch.Tensor]:
        """Iteration k -> k + 1 (the GAN's step, a stop signal checked between its critic steps):
        its per-node values [M], which also go into the logging window."""
        out = self.step(self.state.iteration + 1, overdue)
        self.state.window.add(out)                      # the records
        return out

    # ------------------------------------------------------------------ the loop
    def fit(self) -> None:
        bar = progress(self.s.iterations, initial=self.state.iteration, desc="train",
                       disable=not (self.s.progress and self.placement.is_main))
        try:
            with StopSignals() as stop:
                self._loop(bar, stop)
        except StoppedAtOnce as e:               # a second signal: the record it can still have
            e.echo = self.placement.is_main
            self._terminal_record("interrupted", f"{e}; last checkpoint: {self._last_checkpoint()}")
            raise
        except DistributedTimeout as e:          # a peer died or hung: the survivors end the log
            e.iteration = self.state.iteration + 1
            self._terminal_record("interrupted", f"peer failure: {e}; last checkpoint: {self._last_checkpoint()}")
            raise
        except BaseException as e:               # what the boundary says (dadam3.errors.boundary.failure_of)
            if not (isinstance(e, RunStopped) and getattr(e, "recorded", False)):   # the trainer's own: recorded
                said = failure_of(e)
                what = said[1] if said is not None else f"internal error: {type(e).__name__}: {e}"
                self._terminal_record("interrupted", f"{what}; last checkpoint: {self._last_checkpoint()}")
            raise
        finally:
            bar.close()

    def _loop(self, bar, stop: StopSignals) -> None:
        """Iterations until ``iterations``, or until a stop signal (then checkpoint and stop)."""
        st = self.state
        while st.iteration < self.s.iterations:
            self.train_step()
            (signum,) = self.placement.agree_max([stop.signum or 0])
            st.iteration += 1
            k, last = st.iteration, st.iteration == self.s.iterations
            evaluate = self.evaluate is not None and self.evaluate.due(k, last)
            log = self.records.due(k, last, evaluate)
            sample = self.samples is not None and self.samples.due(k, last)
            save = self.checkpointer.due(k, last, stopping=bool(signum))
            if log or sample or save:
                self._check_finite()                    # before anything is written
            if log or sample:
                self.stop_if_write_failed(self._write_outputs(k, log, evaluate, sample, bar))
            if save:
                self.save_checkpoint()
            bar.update(1)
            if signum and not last:
                self._interrupted(signum)

    def _write_outputs(self, k: int, log: bool, evaluate: bool, sample: bool, bar) -> WriteFailed | None:
        """Iteration k's record and sample grids. Every collective runs whatever fails here; a
        write that failed is returned (and the writes after it skipped)."""
        failed = None
        try:
            if log:
                self._log(k, evaluate, bar)
        except WriteFailed as e:
            failed = e
        G = self._gathered_G() if sample else None
        try:
            if sample and self.placement.is_main and failed is None:
                self.samples.write(G, k)
        except WriteFailed as e:
            failed = e
        return failed

    def _log(self, k: int, evaluate: bool, bar) -> None:
        """The record of iteration k (with the evaluation's scores when it is due)."""
        rec = self.records.record(k, self.state)
        breach = loss_beyond(rec, self.s.diverge_above)      # divergence that is not NaN (every rank alike)
        if breach is not None:
            self._diverged(Divergence(breach.message, breach.node, k))
        if evaluate:
            G = self._gathered_G()
            if self.placement.is_main:
                rec.update(self.evaluate.score(G, k))
        self.records.logger.log(rec, step=k)
        bar.set_postfix(loss_d=f"{rec['loss_d']:.3g}", loss_g=f"{rec['loss_g']:.3g}")

    def _gathered_G(self) -> StackedNet | None:
        """All M nodes' generator on rank 0 (None on other ranks); a collective when distributed."""
        return gathered_net(self.G, self.run.full_G, self.placement)

    def _check_finite(self) -> None:
        """Stop, naming node and iteration, if a loss or parameter went NaN/Inf (every rank alike)."""
        bad = self.finite.check((("generator", self.G), ("critic", self.D)), self.state.iteration)
        if bad is not None:
            self._diverged(bad)

    def _diverged(self, bad: Divergence) -> None:
        kept = (f"; last good checkpoint: {self.checkpointer.path}" if self.checkpointer.path.is_file()
                else "; no checkpoint was written yet")
        self.records.status(bad.iteration, "diverged", self.state.wall_time(), node=bad.node, message=bad.message)
        raise self._agreed(TrainingDiverged(bad.message + kept))

    def finish(self) -> None:
        """The final ``finished`` record; closes the logger and releases the run directory."""
        self.records.status(self.state.iteration, "finished", self.state.wall_time())
        self.records.logger.finish()
        if self.run.lock is not None:
            self.run.lock.release()

    # ------------------------------------------------------------------ early stops (see the module docstring)
    def _continue_with(self) -> str:
        if not self.checkpointer.path.is_file():
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
                                             f"{self._last_checkpoint()}; {what_to_do(reason)} and "
                                             f"{self._continue_with()}"))

    def _checkpoint_failed(self, path: Path, reason: str) -> None:
        if StoppedAtOnce.raised is not None:      # a second signal during the write, not the disk
            raise StoppedAtOnce.raised
        k = self.state.iteration
        kept = "the previous checkpoint is kept" if path.is_file() else "no checkpoint was written yet"
        self._terminal_record("interrupted", reason)
        raise self._agreed(CheckpointNotWritten(f"{path} after iteration {k} ({reason}); {kept}; {what_to_do(reason)} "
                                                f"and {self._continue_with()}"))

    def _interrupted(self, signum: int) -> None:
        """After the checkpoint: the record, then every rank waits for rank 0 to have written it
        (so the ranks exit together: a launcher sees one clean stop, not a rank gone early)."""
        name, k = signal.Signals(signum).name, self.state.iteration
        self.records.status(k, "interrupted", self.state.wall_time(), signal=name)
        self.records.logger.finish()
        self.placement.agree_max([0])
        raise self._agreed(Interrupted(f"{name} after iteration {k}; checkpoint saved; {self._continue_with()}",
                                       signum))

    def _last_checkpoint(self) -> str:
        path = self.checkpointer.path
        return str(path) if path.is_file() else "none written yet"

    def _terminal_record(self, status: str, reason: str) -> None:
        """The log's last record, where it can still be written (its disk may be full too)."""
        k, wall = self.state.iteration, self.state.wall_time()
        for act in (lambda: self.records.status(k, status, wall, reason=reason), self.records.logger.finish):
            with contextlib.suppress(Exception):        # stderr says the reason in any case
                act()

    def _agreed(self, stop: RunStopped) -> RunStopped:
        """A stop every rank agreed on is printed by rank 0 only (its record is written)."""
        stop.echo = self.placement.is_main
        stop.recorded = True
        return stop

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> dict[str, Any]:
        """This rank's checkpoint: the run's state and the log's place (dadam3.run.checkpoint)."""
        k = self.state.iteration
        return self.checkpointer.contents({**self.state.state_dict(), **self.records.state_dict(k)})

    def save_checkpoint(self) -> Path:
        """Rank 0 writes the checkpoint of all M nodes (a collective when distributed). A write
        that fails stops every rank alike (:class:`CheckpointNotWritten`)."""
        failure = self.checkpointer.save(self.checkpoint())
        if failure is not None:
            self._checkpoint_failed(self.checkpointer.path, failure)
        if self.placement.is_main:      # what the run wrote so far, stamped: overwrite=true deletes only that
            stamp_manifest(self.run_dir, self.run.writes)
        return self.checkpointer.path
