"""Stop signals: SIGINT, SIGTERM, SIGHUP and SIGUSR1 end a run after its current iteration,
checkpointed; SIGQUIT ends it at once.

Which signals, and why: SIGINT (Ctrl-C), SIGTERM (``kill``, a scheduler's stop, torchrun
forwarding a stop) and SIGHUP (the terminal or ssh session closed) each ask the run to stop:
it checkpoints and stops (exit 128 + signal, an ``interrupted`` record). SIGUSR1 is what SLURM
sends before a job's time limit with ``--signal=USR1@SECONDS``: the same checkpointed stop, so
the job can be resumed. SIGQUIT (Ctrl-\\) asks to quit now: the run stops at once, as on a
second signal (:class:`dadam3.errors.stops.StoppedAtOnce`, exit 131), its ``interrupted`` record
written where it can be.

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
  (:class:`dadam3.errors.stops.StoppedAtOnce`: the iteration under way is not finished; the loop
  writes the ``interrupted`` record it still can). Two signals closer together are one stop:
  a terminal's Ctrl-C reaches every process of its group and a launcher (torchrun, timeout)
  forwards its own a few milliseconds later.

SIGXFSZ is ignored from start-up on, so a write past the file-size limit fails with
``OSError(EFBIG)`` (one line, :func:`dadam3.errors.files.writing`) instead of killing the process.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from dadam3.errors.stops import RunStopped, StoppedAtOnce

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
AT_ONCE_SIGNALS = (signal.SIGQUIT,)
SAME_STOP_S = 1.0          # signals closer together than this are one stop request
ITERATION_GRACE_S = 10.0   # how long a noted signal waits for the iteration under way to end


def overdue(where: str) -> None:
    """:meth:`StopSignals.overdue` of the one in force (none: nothing to do)."""
    if StopSignals.active is not None:
        StopSignals.active.overdue(where)


def during_start_up() -> None:
    """From now until a :class:`StopSignals` takes over: a stop signal prints one line and ends
    the process with 128 + signal; SIGXFSZ is ignored. Call it first thing in an entry point."""
    exit_on_signals("outside a run (start-up or shut-down): nothing to checkpoint")


def exit_on_signals(said: str) -> None:
    """Every stop signal (:data:`STOP_SIGNALS`, :data:`AT_ONCE_SIGNALS`) prints
    ``stopped: <SIGNAL> <said>`` and ends the process with 128 + signal; SIGXFSZ is ignored (a
    write past ``ulimit -f`` fails with ``EFBIG``, said in one line). The handlers of a command
    with nothing to checkpoint (the report, the plots; an entry point's start-up, and a sweep's
    main process between its jobs). Child processes (a ``submitit_local`` sweep's jobs) are told
    to stop first and waited for (:func:`_forward_to_children`): none is left training orphaned."""
    def stop(signum, frame) -> None:
        for sig in (*STOP_SIGNALS, *AT_ONCE_SIGNALS):        # a second signal while we wait: at once
            signal.signal(sig, lambda n, f: os._exit(128 + n))
        name = signal.Signals(signum).name
        forwarded = _forward_to_children()
        if forwarded:
            os.write(2, f"stopped: {name}: forwarded as SIGTERM to {forwarded} job process(es) of this sweep, which "
                        "checkpoint and stop; run the sweep again to resume them\n".encode())
        else:
            os.write(2, f"stopped: {name} {said}\n".encode())
        os._exit(128 + signum)

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    for sig in (*STOP_SIGNALS, *AT_ONCE_SIGNALS):
        signal.signal(sig, stop)


FORWARD_WAIT_S = 60.0       # how long a stopped sweep waits for the job processes it told to stop


def _children() -> list[int]:
    """This process's child processes (a launcher's job processes: submitit's local jobs)."""
    try:
        tasks = os.listdir(f"/proc/{os.getpid()}/task")
    except OSError:
        return []
    pids = []
    for t in tasks:
        try:
            with open(f"/proc/{os.getpid()}/task/{t}/children") as f:
                pids += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return pids


def _forward_to_children() -> int:
    """Send SIGTERM (the stop every layer forwards: submitit's job controller to its tasks, which
    checkpoint and stop) to each child process, and wait up to :data:`FORWARD_WAIT_S` for them to
    end, so that none is left training orphaned. Returns how many were told."""
    children = _children()
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + FORWARD_WAIT_S
    waiting = set(children)
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                waiting.discard(pid)
        time.sleep(0.05)
    return len(children)


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
        if signum in AT_ONCE_SIGNALS:
            _at_once(signum, f"{signal.Signals(signum).name}: stopped at once, without finishing the iteration")
        if self.signum is None:
            self.signum, self._first = signum, now
        elif now - self._first > SAME_STOP_S:
            _at_once(signum, f"second {signal.Signals(signum).name}: stopped at once, without finishing the "
                             "iteration")

    def overdue(self, where: str) -> None:
        """Inside a long iteration (between its critic steps): a signal noted more than
        :data:`ITERATION_GRACE_S` ago stops the run now, the iteration unfinished."""
        if self.signum is not None and time.monotonic() - self._first > ITERATION_GRACE_S:
            _at_once(self.signum, f"{signal.Signals(self.signum).name} {ITERATION_GRACE_S:g} s ago and {where} "
                                  "still running: stopped without finishing it")

    def __enter__(self) -> "StopSignals":
        if StopSignals.active is not None:
            return StopSignals.active
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in (*STOP_SIGNALS, *AT_ONCE_SIGNALS)}
            StopSignals.active = self
            StoppedAtOnce.raised = None          # a run in this process starts without an earlier one's stop
        return self

    def __exit__(self, *exc) -> None:
        if StopSignals.active is self:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            StopSignals.active = None


def _at_once(signum: int, message: str) -> None:
    """Raise :class:`StoppedAtOnce`, remembered (``StoppedAtOnce.raised``): a library that turns
    it into an error of its own (torch's writer mid-checkpoint) is still said as this stop
    (:func:`dadam3.errors.files.writing`, :func:`dadam3.errors.boundary.failure_of`)."""
    StoppedAtOnce.raised = StoppedAtOnce(signum, message)
    raise StoppedAtOnce.raised


class Interrupted(RunStopped):
    """A stop signal: the run saved a checkpoint after the current iteration and stopped."""

    prefix = "stopped"

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum
