"""A hyper-parameter's default and allowed interval, and the defaults several algorithms share.

The defaults are the ONE source of every hyper-parameter's value (``optimizer=NAME`` is made
from the registry): the paper's Table 6 (the WGAN-GP experiments). The synthetic game of
Section 5.1 uses others, set by a class's ``SYNTHETIC``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dadam3.errors.config import ConfigError, check_range


@dataclass(frozen=True)
class HParam:
    """A hyper-parameter's default and allowed interval (``None``: unbounded; always finite)."""

    default: float
    low: float | None = 0.0
    high: float | None = None
    low_open: bool = False
    high_open: bool = True
    why: str = ""             # said after the interval when a value is refused

    def check(self, name: str, value: Any) -> float:
        """``value`` as a float in the interval, else a one-line ConfigError naming ``name``
        (``why`` said after the interval, not after "must be a number")."""
        check_range(name, value)                     # a finite number
        try:
            return check_range(name, value, self.low, self.high, self.low_open, self.high_open)
        except ConfigError as e:
            if not self.why:
                raise
            raise e.explained(self.why) from None


LR = HParam(5e-5, 0.0, None, low_open=True)                        # Table 6: eta = 5e-5
EPS = HParam(1e-8, 0.0, None, low_open=True,
             why="the first step divides a zero gradient by sqrt(0) + eps")
