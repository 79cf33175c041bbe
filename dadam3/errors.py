"""User-facing configuration errors.

Every bad input is reported as ONE line that names the config key, the value
that was given and what is allowed, e.g.::

    optimizer.beta1=1.5: must be in [0, 1)

Entry points catch :class:`ConfigError`, print ``error: <message>`` to stderr
and exit with status 2, so users never see a long traceback for a typo.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class ConfigError(ValueError):
    """A config value is unknown, out of range or inconsistent.

    ``ConfigError(key, value, allowed)`` renders as ``"key=value: allowed"``.
    """

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: {allowed}" if not isinstance(value, str)
                         else f"{key}={value}: {allowed}")


def check_range(key: str, value: float, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = True) -> float:
    """Raise :class:`ConfigError` unless ``value`` lies in the stated interval."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(key, value, "must be a number") from None
    if v != v:  # NaN
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


def exit_on_config_error(fn: F) -> F:
    """Decorator for entry points: a :class:`ConfigError` becomes one line on stderr + exit 2."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
