"""Small argument checks that raise :class:`~dadam3.errors.ConfigError`."""
from __future__ import annotations

import numbers
from typing import Any, Sequence

from dadam3.errors import ConfigError


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


def _bounds(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" <= {high}"
    return ""
