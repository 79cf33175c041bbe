"""A peer that hung or died: :class:`DistributedTimeout`, and the entry points' exit for it.

Timeouts. gloo: ``work.wait()`` without argument waits at most the
process group's timeout (measured with torch 2.14: "Timed out waiting 3000ms for recv
operation to complete" after 3.0 s), ``work.wait(timeout)`` overrides it, and a peer that
exits is reported at once ("Connection reset by peer"). NCCL: ``work.wait(timeout)``
blocks the CPU until the work is done and raises after ``timeout`` (without it, wait only
orders CUDA streams, and the watchdog kills the process after the group's timeout). The
mixer waits with the rest of a per-round deadline of ``timeout_s`` and raises
:class:`DistributedTimeout`, one line naming this rank, the peer and ``timeout_s``;
``exit_on_peer_failure`` turns it into ``error: ...`` on stderr and exit status 3.
``init_from_env`` gives the process group itself ``timeout_s`` (the backstop for the other
collectives), and forming the group ends after ``timeout_s`` too: a watchdog stops a rank
whose rendezvous hangs (e.g. ``MASTER_PORT`` answered by another program) with one line;
rank 0 failing to listen on an occupied ``MASTER_PORT`` says so (exit status 2). The NCCL
path is written from the documentation; this repository's tests run gloo on CPU.

Why a decorator of its own beside :func:`dadam3.errors.boundary.exit_on_failure`: a peer failure
ends the process at once (``os._exit``, not ``sys.exit``), and it is no
:class:`dadam3.errors.stops.RunStopped` (a stop every rank agreed on, which the inner decorator
turns into ``sys.exit``): the group may still hold the timed-out operation, and a normal
interpreter exit would tear it down (NCCL's abort can itself hang).
"""
from __future__ import annotations

import functools
import os
import re
import sys
from typing import Any, Callable, Sequence, TypeVar

from dadam3.errors.config import check_range
from dadam3.errors.pickled import Picklable

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_MAX_S = 365 * 86400.0          # a year: datetime.timedelta and the watchdog's timer stay in range


def check_timeout(key: str, value) -> float:
    """A per-round and start-up deadline in seconds: in (0, TIMEOUT_MAX_S] (the schema's check of
    ``distributed.timeout_s``, and the mixer's and start-up's of their ``timeout_s``)."""
    return check_range(key, value, 0.0, TIMEOUT_MAX_S, low_open=True, high_open=False)


EXIT_PEER_FAILURE = 3


class DistributedTimeout(Picklable, RuntimeError):
    """A peer did not do its part within ``timeout_s``: it hung, or it died (gloo reports
    a dead peer at once). One line naming this rank, the peer rank(s) and the timeout; the
    training loop sets ``iteration`` (the one under way), said after the message."""

    def __init__(self, message: str, rank: int, peers: Sequence[int], timeout_s: float):
        self.rank, self.peers, self.timeout_s = rank, tuple(peers), timeout_s
        self.iteration: int | None = None
        super().__init__(message)

    def __str__(self) -> str:
        said = super().__str__()
        return said if self.iteration is None else f"{said}; during training iteration {self.iteration}"


def exit_on_peer_failure(fn: F) -> F:
    """Decorator for entry points: a :class:`DistributedTimeout` becomes one line
    ``error: ...`` on stderr and exit status 3, at once (``os._exit``): the group may still
    hold the timed-out operation, and a normal interpreter exit would tear it down (NCCL's
    abort can itself hang). torchrun then stops the other ranks."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DistributedTimeout as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(EXIT_PEER_FAILURE)

    return wrapper  # type: ignore[return-value]


def first_line(e: BaseException, limit: int = 120) -> str:
    """The backend's message on one line, without its source-file prefix, shortened."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    return text if len(text) <= limit else text[:limit] + "..."


def exit_now(line: str) -> None:
    """Print ``line`` and end the process at once with :data:`EXIT_PEER_FAILURE`."""
    print(line, file=sys.stderr, flush=True)
    os._exit(EXIT_PEER_FAILURE)

