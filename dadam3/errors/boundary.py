"""The boundary of every entry point (train, synthetic, report, plot, the launcher, a sweep's
jobs): :func:`exit_on_failure` wraps it, and :func:`failure_of` is the one place that says how
an exception ends a process:

* a refusal (:class:`~dadam3.errors.config.ConfigError`, exit 2), a stop the run chose
  (:class:`~dadam3.errors.stops.RunStopped`: divergence, a failed write, a signal: its own status);
* a stop signal (``stopped: SIGNAL``, 128 + signal), also a second signal that a library turned
  into an error of its own (``StoppedAtOnce.raised``: torch's writer mid-checkpoint);
* every environmental failure -- an ``OSError`` of any errno (named file, advice by errno),
  memory (``MemoryError``, an allocator's or CUDA's out-of-memory), a file that cannot be
  decoded, a missing or broken package -- as ONE line (exit 1; a package: 2).

Anything else is a bug: its traceback is shown. The traceback of an environmental failure goes
to the run's job log (:class:`dadam3.run.job_log.JobLog`), or to stderr too with
``DADAM3_TRACEBACK=1``.
"""
from __future__ import annotations

import functools
import gzip
import json
import os
import signal
import sys
import time
import zipfile
import zlib
from typing import Any, Callable, TypeVar

from dadam3.errors.config import ConfigError, one_line
from dadam3.errors.stops import RunStopped, StoppedAtOnce, stop_report

F = TypeVar("F", bound=Callable[..., Any])


def exit_on_failure(fn: F) -> F:
    """Decorator for entry points, the boundary (see the module docstring): an exception that
    :func:`failure_of` knows becomes one line on stderr and its exit status; a bug propagates."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BaseException as e:
            said = failure_of(e)
            if said is None or isinstance(e, SystemExit):
                raise
            code, line, echo = said
            if os.environ.get("DADAM3_TRACEBACK") and not isinstance(e, (ConfigError, RunStopped)):
                import traceback
                traceback.print_exception(e)
            if echo and isinstance(e, ConfigError) and _another_rank_of_this_machine():
                _leave_it_to_local_rank_0(code)
            if echo:
                print(line, file=sys.stderr, flush=True)
            _exit(code)

    return wrapper  # type: ignore[return-value]


LINGER_S = 15.0     # how long a rank other than a machine's first waits for the first to say a refusal


def _another_rank_of_this_machine() -> bool:
    """Under torchrun: this process is not its machine's first rank (``LOCAL_RANK`` > 0)."""
    return os.environ.get("LOCAL_RANK", "0") != "0"


def _leave_it_to_local_rank_0(code: int) -> None:
    """A refusal is said once per machine: every rank torchrun started checks the same command
    line and config and refuses it alike, so a rank other than the first waits, silent, up to
    :data:`LINGER_S` for torchrun to stop it (the first rank said it and exited): then it exits
    silently with the same status. A refusal only this rank met is said after the wait."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: _exit(code))
    time.sleep(LINGER_S)


# what an OSError's errno calls for (the file is named before it)
_OS_ADVICE = {
    "ENOSPC": "the file system is full: free space, then run the command again",
    "EDQUOT": "the disk quota is used up: free space, then run the command again",
    "EFBIG": "the file-size limit (ulimit -f) was reached: raise it, then run the command again",
    "EACCES": "permission denied: fix the permissions or choose another path",
    "EPERM": "operation not permitted: fix the permissions or choose another path",
    "EROFS": "the file system is read-only: choose a writable path",
    "ENOENT": "it does not exist (removed while the command ran?): restore it or choose another path",
    "ENOTDIR": "a part of the path is not a directory: choose another path",
    "EISDIR": "it is a directory, where a file belongs: remove it or choose another path",
    "EMFILE": "too many open files: raise the limit (ulimit -n)",
    "ENFILE": "too many open files on this machine: close some, then run the command again",
    "ENOMEM": "out of memory: lower the values that size the run, or free memory",
    "EIO": "an input/output error: the disk or network file system failed; check it",
    "EADDRINUSE": "the address is in use by another program: choose a free port",
    "ETIMEDOUT": "a network operation timed out: check the network, then run the command again",
    "ECONNREFUSED": "the connection was refused: is the service running?",
    "ENETUNREACH": "the network is unreachable: check the network or work offline",
}
_DECODE_ERRORS = (UnicodeDecodeError, json.JSONDecodeError, gzip.BadGzipFile, zipfile.BadZipFile, zlib.error,
                  EOFError)
_DECODE_ERROR_NAMES = ("UnidentifiedImageError", "DecompressionBombError")     # PIL's, not imported here
_OUT_OF_MEMORY = ("can't allocate memory", "out of memory", "cannot allocate memory", "std::bad_alloc")


def failure_of(e: BaseException) -> tuple[int, str, bool] | None:
    """(exit status, one line, whether this process prints it) of an exception an entry point
    ends with, or None for a bug (its traceback is due). A second stop signal that a library
    turned into another exception (torch's writer makes one of anything) is said as the stop."""
    if StoppedAtOnce.raised is not None and not isinstance(e, ConfigError):
        return stop_report(StoppedAtOnce.raised)
    if isinstance(e, (ConfigError, RunStopped, StoppedAtOnce)):
        return stop_report(e)
    if isinstance(e, KeyboardInterrupt):        # SIGINT where no handler of ours was in force
        return 130, "stopped: SIGINT", True
    for cause in _causes(e):
        if isinstance(cause, MemoryError) or type(cause).__name__ == "OutOfMemoryError" or (
                isinstance(cause, RuntimeError) and any(t in str(cause).lower() for t in _OUT_OF_MEMORY)):
            return 1, (f"error: out of memory ({type(cause).__name__}: {one_line(cause, 120)}): lower the values "
                       "that size the run (nodes, batch size, model width, evaluation samples) or free memory; "
                       "the start-up estimate could not see this one"), True
    for cause in _causes(e):
        if isinstance(cause, _DECODE_ERRORS) or type(cause).__name__ in _DECODE_ERROR_NAMES:
            return 1, (f"error: a file could not be decoded ({type(cause).__name__}: {one_line(cause, 120)}): "
                       "a damaged or truncated file; replace it"), True
    for cause in _causes(e):
        if isinstance(cause, OSError):
            return 1, f"error: {_os_line(cause)}", True
    for cause in _causes(e):
        if isinstance(cause, ImportError):
            name = cause.name or "?"
            return 2, (f"error: the Python package {name} is missing or broken ({one_line(cause, 120)}): "
                       f"install it (`pip install {name.split('.')[0]}`) or choose a config that does not "
                       "need it"), True
    return None


def _causes(e: BaseException) -> list[BaseException]:
    out, seen = [], set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        out.append(cause)
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return out


def _open_file_of(e: BaseException) -> str:
    """The file an ``OSError`` without a file name was about: the name of an open file object
    in the innermost frames it passed (a ``close`` or ``flush`` that failed names nothing)."""
    import io
    tb, frames = e.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames[-3:]):
        for value in frame.f_locals.values():
            if isinstance(value, io.IOBase) and isinstance(getattr(value, "name", None), str):
                return value.name
    return ""


def _os_line(e: OSError) -> str:
    """``file: what happened (ERRNO): what to do``."""
    import errno as errno_names
    name = errno_names.errorcode.get(e.errno or 0, "")
    what = e.strerror or one_line(e, 120)
    files = " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None) or _open_file_of(e)
    advice = _OS_ADVICE.get(name, "check the file and the system, then run the command again")
    return f"{files + ': ' if files else ''}{what}{f' ({name})' if name else ''}: {advice}"


def _exit(code: int) -> None:
    """``sys.exit(code)``; in a rank whose process group is still up (a stop every rank agreed
    on, its records written), ``os._exit`` after flushing: the interpreter's own exit would tear
    down gloo's threads mid-flight (`terminate called without an active exception`, SIGABRT)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        import logging
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
