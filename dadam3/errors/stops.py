"""How a run stops early for a reason the user must act on: :class:`RunStopped` (each kind with its
exit status and prefix), :class:`StoppedAtOnce` (a second stop signal: exit 128 + the signal), and
:func:`stop_report`, the one exit path (status, one line) of a refusal or a stop.
"""
from __future__ import annotations

from dadam3.errors.config import ConfigError
from dadam3.errors.pickled import Picklable


class RunStopped(Picklable, RuntimeError):
    """A run ended early for a reason the user must act on; ``exit_code`` is its status.
    ``echo = False``: exit with the status but print nothing (a rank other than 0 stopping
    for a reason every rank agreed on: rank 0 says it once)."""

    exit_code = 1
    prefix = "error"
    echo = True


class Diverged(RunStopped):
    """A loss, gradient or parameter became NaN/Inf; the message names node and iteration."""

    exit_code = 3
    prefix = "error: training diverged"


def stop_report(e: BaseException) -> tuple[int, str, bool]:
    """(exit status, one line, whether this process prints it) of a :class:`ConfigError`, a
    :class:`RunStopped` or a :class:`StoppedAtOnce`: the one exit path of both entry points and of
    a sweep's jobs."""
    if isinstance(e, ConfigError):
        return 2, f"error: {e}", e.echo
    if isinstance(e, RunStopped):
        return e.exit_code, f"{e.prefix}: {e}", e.echo
    if isinstance(e, StoppedAtOnce):
        return e.exit_code, f"stopped: {e}", e.echo
    raise TypeError(f"not a run-stopping error: {type(e).__name__}")


class StoppedAtOnce(Picklable, BaseException):
    """A second stop signal, or one an iteration has not reached the end of in time: the run
    stops where it is, without a checkpoint of the iteration under way (a BaseException, like
    KeyboardInterrupt, so no ``except Exception`` keeps it)."""

    raised: "StoppedAtOnce | None" = None     # the one a stop-signal handler raised in this process

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.exit_code = 128 + signum
        self.echo = True
