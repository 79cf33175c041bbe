"""numba's on-disk cache, made safe to fail: :func:`njit_cached` compiles a function with
``cache=True`` where numba finds a writable cache directory (``$NUMBA_CACHE_DIR``, else
``__pycache__`` beside the source, else the user's cache directory) and without a cache
otherwise; and a cache entry that cannot be written (a full disk, the file-size limit) is one
warning line, the compiled code is used in this process: a cache is an optimisation, never a
reason for a run to stop."""
from __future__ import annotations

import logging
from typing import Callable

import numba
from numba.core.caching import Cache

log = logging.getLogger(__name__)
_said: list[str] = []


def _save_overload(self, sig, data, _save=Cache.save_overload) -> None:
    try:
        _save(self, sig, data)
    except OSError as e:
        if not _said:
            _said.append(str(e))
            log.warning("numba's cache not written (%s): compiled for this process only", e)


if getattr(Cache.save_overload, "__name__", "") != "_save_overload":
    Cache.save_overload = _save_overload


def njit_cached(fn: Callable, **options) -> Callable:
    """``numba.njit(cache=True, **options)(fn)``, or without the cache where numba finds no
    writable cache directory."""
    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError as e:                 # numba: "cannot cache function ...: no locator available"
        log.info("numba's cache is not writable here (%s): compiling in this process", e)
        return numba.njit(**options)(fn)
