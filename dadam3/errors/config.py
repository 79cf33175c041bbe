"""A config value refused, said in the user's words.

Every bad input is reported as ONE line that names the key, the value that was given
and what is allowed, e.g.::

    optimizer.beta1=1.5: must be in [0, 1)

A library function names its own argument (``beta1=1.5``); an entry point calls it within
:func:`named_as`, which says the same error in the config's keys.

Every check of a config value lives here (:func:`check_range`, :func:`check_int`,
:func:`check_choice`, :func:`check_bool`, and :func:`needs_package` for an optional package a
value needs); checks of paths are in :mod:`dadam3.errors.files`.
"""
from __future__ import annotations

import contextlib
import math
import numbers
from typing import Any, Iterator, Mapping, Sequence

from dadam3.errors.pickled import Picklable


class ConfigError(Picklable, ValueError):
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


def _bounds(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" <= {high}"
    return ""


def needs_package(package: str, key: str, value: Any, instead: str) -> None:
    """Refuse (one line naming ``key=value``) unless ``package`` imports; ``instead``: the
    choice that does not need it. Checked at start, before anything is written."""
    import importlib
    try:
        importlib.import_module(package)
    except ImportError as e:
        state = "is not installed" if isinstance(e, ModuleNotFoundError) else "fails to import"
        raise ConfigError(key, value, f"needs the Python package {package}, which {state} ({one_line(e)}): "
                                      f"`pip install {package}`, or {instead}") from None
    except Exception as e:          # a broken install raises anything while importing
        raise ConfigError(key, value, f"needs the Python package {package}, which fails to import "
                                      f"({type(e).__name__}: {one_line(e)}): reinstall it, or {instead}") from None


def one_line(e: BaseException, limit: int = 160) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[:limit] + "..."
