"""Stop signals: SIGINT and SIGTERM end a run after its current iteration, checkpointed.

Three phases of a process started from the command line:

* start-up (imports, before a run exists; :func:`during_start_up`): a signal ends the
  process at once with one line and the interrupted exit status (128 + signal); nothing of a
  run has been written yet;
* a run (:class:`StopSignals`, from the moment the entry point's task starts): the first
  signal is noted; the training loop (and the synthetic game's) reads it between iterations,
  checkpoints and stops (:class:`Interrupted`); a signal noted while the run is still being
  built is acted on after its first iteration;
* an iteration still running :data:`ITERATION_GRACE_S` after the signal (many critic steps:
  :func:`overdue`, checked between them) stops unfinished, as
* a second signal more than :data:`SAME_STOP_S` after the first does: it stops at once
  (:class:`dadam3.errors.StoppedAtOnce`: the iteration under way is not finished; the loop
  writes the ``interrupted`` record it still can). Two signals closer together are one stop:
  a terminal's Ctrl-C reaches every process of its group and a launcher (torchrun, timeout)
  forwards its own a few milliseconds later.

SIGXFSZ is ignored from start-up on, so a write past the file-size limit fails with
``OSError(EFBIG)`` (one line, :func:`dadam3.errors.writing`) instead of killing the process.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from dadam3.errors import RunStopped, StoppedAtOnce

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SAME_STOP_S = 1.0          # signals closer together than this are one stop request
ITERATION_GRACE_S = 10.0   # how long a noted signal waits for the iteration under way to end


def overdue(where: str) -> None:
    """:meth:`StopSignals.overdue` of the one in force (none: nothing to do)."""
    if StopSignals.active is not None:
        StopSignals.active.overdue(where)


def during_start_up() -> None:
    """From now until a :class:`StopSignals` takes over: a stop signal prints one line and ends
    the process with 128 + signal; SIGXFSZ is ignored. Call it first thing in an entry point."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    for sig in STOP_SIGNALS:
        signal.signal(sig, _exit_during_start_up)


def _exit_during_start_up(signum, frame) -> None:
    name = signal.Signals(signum).name
    os.write(2, f"stopped: {name} outside a run (start-up or shut-down): nothing to checkpoint\n".encode())
    os._exit(128 + signum)


class StopSignals:
    """While active, SIGINT and SIGTERM only set ``signum`` (the loop finishes its iteration,
    checkpoints and stops); a second signal later than :data:`SAME_STOP_S` raises
    :class:`StoppedAtOnce`. Nested uses share the outermost one (a signal noted while the run
    is built is seen by the training loop). Outside the main thread it does nothing."""

    active: "StopSignals | None" = None        # the outermost one in force

    def __init__(self):
        self.signum: int | None = None
        self._first = 0.0
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        now = time.monotonic()
        if self.signum is None:
            self.signum, self._first = signum, now
        elif now - self._first > SAME_STOP_S:
            raise StoppedAtOnce(signum, f"second {signal.Signals(signum).name}: stopped at once, without "
                                        "finishing the iteration")

    def overdue(self, where: str) -> None:
        """Inside a long iteration (between its critic steps): a signal noted more than
        :data:`ITERATION_GRACE_S` ago stops the run now, the iteration unfinished."""
        if self.signum is not None and time.monotonic() - self._first > ITERATION_GRACE_S:
            raise StoppedAtOnce(self.signum, f"{signal.Signals(self.signum).name} {ITERATION_GRACE_S:g} s ago and "
                                             f"{where} still running: stopped without finishing it")

    def __enter__(self) -> "StopSignals":
        if StopSignals.active is not None:
            return StopSignals.active
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
            StopSignals.active = self
        return self

    def __exit__(self, *exc) -> None:
        if StopSignals.active is self:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            StopSignals.active = None


class Interrupted(RunStopped):
    """SIGINT or SIGTERM: the run saved a checkpoint after the current iteration and stopped."""

    prefix = "stopped"

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum
