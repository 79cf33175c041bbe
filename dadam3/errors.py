"""User-facing errors and the checks that raise them.

Every bad input is reported as ONE line that names the key, the value that was given
and what is allowed, e.g.::

    optimizer.beta1=1.5: must be in [0, 1)

A library function names its own argument (``beta1=1.5``); an entry point calls it within
:func:`named_as`, which says the same error in the config's keys.

Every check of a config value lives here (:func:`check_range`, :func:`check_int`,
:func:`check_choice`, :func:`check_bool`). Runs that stop for a reason the user must
act on raise a :class:`RunStopped` subclass with its own exit status.

The entry points' boundary, which turns every exception an entry point ends with into one
line and an exit status, is :mod:`dadam3.run.boundary`.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class ConfigError(ValueError):
    """A config value is unknown, out of range or inconsistent.

    ``ConfigError(key, value, allowed)`` renders as ``"key=value: allowed"``. A message that
    names other arguments gives them as data: ``refs`` maps each argument's name to its value,
    and ``allowed`` is a template in which ``{name}`` is said ``name=value`` and
    ``{name=text}`` is said ``name=text`` (a value to use instead)::

        ConfigError("rows", 4, "must be an integer divisor of {nodes}", refs={"nodes": 6})
        # rows=4: must be an integer divisor of nodes=6

    so that :meth:`renamed` says every name in a caller's keys without reading the text.
    """

    echo = True              # False: a rank other than 0 stops silently (rank 0 says it once)

    def __init__(self, key: str, value: Any, allowed: str, refs: Mapping[str, Any] | None = None,
                 said: Mapping[str, str] | None = None):
        self.key, self.value, self.template = key, value, allowed
        self.refs = dict(refs or {})
        self.said = {name: (said or {}).get(name, name) for name in self.refs}   # argument -> key said
        self.allowed = _render(allowed, self.refs, self.said)
        super().__init__(f"{key}={_shown(value)}: {self.allowed}")

    def renamed(self, names: Mapping[str, str]) -> "ConfigError":
        """The same error with its key and its refs' names said as ``names`` maps them
        (``rows`` -> ``topology.rows``); a name ``names`` lacks stays."""
        error = ConfigError(names.get(self.key, self.key), self.value, self.template, self.refs,
                            {name: names.get(key, key) for name, key in self.said.items()})
        error.echo = self.echo
        return error

    def explained(self, why: str) -> "ConfigError":
        """The same error with ``: why`` after what is allowed."""
        error = ConfigError(self.key, self.value, f"{self.template}: {why}", self.refs, self.said)
        error.echo = self.echo
        return error


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def _render(template: str, refs: Mapping[str, Any], said: Mapping[str, str]) -> str:
    """``template`` with each ``{name}`` of ``refs`` as ``key=value`` and each ``{name=text}``
    as ``key=text`` (``key``: the name as ``said``)."""
    text = template
    for name, value in refs.items():
        text = text.replace("{" + name + "}", f"{said[name]}={_shown(value)}")
        first, *advised = text.split("{" + name + "=")
        text = first + "".join(f"{said[name]}={use}{rest}" for use, _, rest in (a.partition("}") for a in advised))
    return text


@contextlib.contextmanager
def named_as(names: Mapping[str, str]) -> Iterator[None]:
    """Within it, a :class:`ConfigError` naming a callee's argument is raised again in its
    caller's names (:meth:`ConfigError.renamed`): how an entry point says a library
    function's error (``p=0``) in its config keys (``topology.p=0``)."""
    try:
        yield
    except ConfigError as e:
        raise e.renamed(names) from None


def check_range(key: str, value: float, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = True) -> float:
    """Raise :class:`ConfigError` unless ``value`` lies in the stated interval (bools and strings
    are not numbers)."""
    if isinstance(value, (bool, str)):
        raise ConfigError(key, value, "must be a number")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(key, value, "must be a number") from None
    if not math.isfinite(v):
        raise ConfigError(key, value, "must be a finite number")
    bad = (low is not None and (v < low or (low_open and v == low))) or \
          (high is not None and (v > high or (high_open and v == high)))
    if bad:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        lo_s = "-inf" if low is None else f"{low:g}"
        hi_s = "inf" if high is None else f"{high:g}"
        raise ConfigError(key, value, f"must be in {lo}{lo_s}, {hi_s}{hi}")
    return v


def check_int(key: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``; bools and non-integral numbers are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(key, value, "must be an integer" + _bounds(low, high))
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise ConfigError(key, value, "must be an integer" + _bounds(low, high))
    return v


def check_choice(key: str, value: Any, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed`` (exact match)."""
    if value not in allowed:
        raise ConfigError(key, value, f"unknown value; allowed: {', '.join(allowed)}")
    return value


def check_bool(key: str, value: Any) -> bool:
    """``value`` if it is a bool (YAML true/false); 0/1 and strings are refused."""
    if not isinstance(value, bool):
        raise ConfigError(key, value, "must be true or false")
    return value


def check_usable_dir(key: str, path: Any) -> Path:
    """``path`` as a directory this process can write into: an existing writable directory, or
    one it could create (its nearest existing ancestor is a writable directory). Creates nothing."""
    p = Path(os.path.expanduser(str(path)))
    if p.exists():
        if not p.is_dir():
            raise ConfigError(key, str(path), "exists and is not a directory; choose a directory path")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(key, str(path), "is not writable by this user; choose another directory")
        return p
    ancestor = next(a for a in p.absolute().parents if a.exists())
    if not ancestor.is_dir():
        raise ConfigError(key, str(path), f"cannot be created: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(key, str(path), f"cannot be created: {ancestor} is not writable by this user")
    return p


def check_writable_file(key: str, path: Any) -> Path:
    """``path`` as a file this process can write (its directory usable, see
    :func:`check_usable_dir`; an existing ``path`` a writable file). Creates nothing."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_dir():
        raise ConfigError(key, str(path), "is a directory; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(key, str(path), "exists and is not writable by this user")
    try:
        check_usable_dir(key, p.parent)
    except ConfigError as e:
        raise ConfigError(key, str(path), f"its directory {e.template}", e.refs) from None
    return p


def _bounds(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" <= {high}"
    return ""


class RunStopped(RuntimeError):
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
    """(exit status, one line, whether this process prints it) of a :class:`ConfigError` or a
    :class:`RunStopped`: the one exit path of both entry points and of a sweep's jobs."""
    if isinstance(e, ConfigError):
        return 2, f"error: {e}", e.echo
    if isinstance(e, RunStopped):
        return e.exit_code, f"{e.prefix}: {e}", e.echo
    raise TypeError(f"not a run-stopping error: {type(e).__name__}")


class DataFileError(RunStopped):
    """A data file (an image of the data set, a run's record read by the report or the plots)
    cannot be decoded: one line naming the file (and line), why, and what to do."""

    prefix = "error: unreadable file"

    def __init__(self, path: Any, reason: str, line: int | None = None,
                 advice: str = "the file is damaged or not what its name says: replace or remove it"):
        self.path, self.reason, self.line_number = Path(path), reason, line
        where = f"{path}" if line is None else f"{path}, line {line}"
        super().__init__(f"{where}: {reason}; {advice}")


def needs_package(package: str, key: str, value: Any, instead: str) -> None:
    """Refuse (one line naming ``key=value``) unless ``package`` imports; ``instead``: the
    choice that does not need it. Checked at start, before anything is written."""
    import importlib
    try:
        importlib.import_module(package)
    except ImportError as e:
        state = "is not installed" if isinstance(e, ModuleNotFoundError) else "fails to import"
        raise ConfigError(key, value, f"needs the Python package {package}, which {state} ({_one_line(e)}): "
                                      f"`pip install {package}`, or {instead}") from None
    except Exception as e:          # a broken install raises anything while importing
        raise ConfigError(key, value, f"needs the Python package {package}, which fails to import "
                                      f"({type(e).__name__}: {_one_line(e)}): reinstall it, or {instead}") from None


def _one_line(e: BaseException, limit: int = 160) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[:limit] + "..."


class WriteFailed(RunStopped):
    """A file of the run could not be written (disk full, file-size limit, a directory where
    the file should be, ...): one line naming the file and the reason."""

    prefix = "error: write failed"

    def __init__(self, path: Any, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path}: {reason}")


def write_failure_reason(e: BaseException, path: Any) -> str:
    """Why writing ``path`` failed, in a few words. The ``OSError`` itself where there is one
    (also behind a library's own error: torch's zip writer says ``unexpected pos``, PIL
    ``_idat has no attribute fileno``, after the write failed); otherwise the file system's
    free space and the file-size limit say which it was."""
    import errno
    import resource
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            return f"{cause.strerror or os.strerror(cause.errno)} ({errno.errorcode.get(cause.errno, cause.errno)})"
        cause = cause.__cause__ or cause.__context__
    text = " ".join(str(e).split())[:120] or type(e).__name__
    place = next((a for a in (Path(path), *Path(path).absolute().parents) if a.exists()), Path("/"))
    st = os.statvfs(place)
    if st.f_bavail * st.f_frsize < 1 << 20:
        return f"No space left on device (ENOSPC; {type(e).__name__}: {text})"
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        return f"the file-size limit (ulimit -f, {limit} bytes) was reached ({type(e).__name__}: {text})"
    return f"{type(e).__name__}: {text}"


@contextlib.contextmanager
def writing(path: Any, whole_file: bool = False) -> Iterator[None]:
    """Within it, any exception while writing ``path`` is :class:`WriteFailed` naming it (a
    library may report a failed write as any kind of exception). ``whole_file``: the block
    writes all of ``path`` (an image), so a failure removes what it left of it."""
    try:
        yield
    except WriteFailed:
        raise
    except BaseException as e:
        if whole_file:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if StoppedAtOnce.raised is not None and e is not StoppedAtOnce.raised:
            raise StoppedAtOnce.raised from None     # a second signal that a library made another error of
        if not isinstance(e, Exception):
            raise
        raise WriteFailed(path, write_failure_reason(e, path)) from None


class StoppedAtOnce(BaseException):
    """A second stop signal, or one an iteration has not reached the end of in time: the run
    stops where it is, without a checkpoint of the iteration under way (a BaseException, like
    KeyboardInterrupt, so no ``except Exception`` keeps it)."""

    raised: "StoppedAtOnce | None" = None     # the one a stop-signal handler raised in this process

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.exit_code = 128 + signum
        self.echo = True

    def line(self) -> str:
        return f"stopped: {self}"
