"""Stop signals: SIGINT and SIGTERM end a run after its current iteration, checkpointed.

:class:`StopSignals` notes the signal (the training loop and the synthetic game's loop read
it between iterations); :class:`Interrupted` is how the training run then stops.
"""
from __future__ import annotations

import signal
import threading
from typing import Any

from dadam3.errors import RunStopped

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """While active, SIGINT and SIGTERM only set ``signum`` (the loop finishes its iteration,
    checkpoints and stops); a second signal falls back to the previous handler. Outside the
    main thread (where Python allows no handlers) it does nothing."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Interrupted(RunStopped):
    """SIGINT or SIGTERM: the run saved a checkpoint after the current iteration and stopped."""

    prefix = "stopped"

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum
