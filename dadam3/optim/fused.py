"""One algorithm's math, compiled by numba: the CPU's fused optimizer update and the
synthetic game's per-node step come from the same ``direction`` and ``scalars``.

:func:`fused_update` turns a skeleton's update (``direction``, then ``X - eta * direction``)
into one numba loop over the flat buffers: each value is read and written once per step,
instead of once per element-wise op of the eager torch update. The loop body is the
skeleton's (:data:`BODIES`); the algorithm's functions are compiled as they are, with the names
of :mod:`dadam3.optim.elementwise` resolved to their numba twins.

numba is imported on first use, so importing the optimizers stays cheap.
"""
from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger(__name__)

# the loop over one flat buffer: ``out`` is the algorithm's return (direction, *new state);
# the scalars end with (sign, -eta): sign -1 for a maximising group's gradient
BODIES = {
    "optimistic": ("g, s, x, d, work", "d[j] = out[0]\n        work[j] = x[j] + out[0] * neg_lr"),
    "single": ("g, s, p, work", "work[j] = p[j] + out[0] * neg_lr"),
}
_TEMPLATE = """
def update({args}{state}):
    sign = s[s.shape[0] - 2]
    neg_lr = s[s.shape[0] - 1]
    for j in range(g.shape[0]):
        out = direction(g[j] * sign, s{state_j})
{writes}
        {body}
"""
_JITTED: dict = {}
_registered = False


def register_twins() -> None:
    """numba implementations of :mod:`dadam3.optim.elementwise`'s functions (once)."""
    global _registered
    if _registered:
        return
    import math

    from numba.extending import overload, register_jitable

    from dadam3.optim import elementwise as ew

    overload(ew.sqrt)(lambda x: lambda x: math.sqrt(x))
    overload(ew.maximum)(lambda a, b: lambda a, b: max(a, b))
    overload(ew.sign)(lambda x: lambda x: 1.0 if x > 0 else (-1.0 if x < 0 else x))
    for helper in ew.HELPERS:
        register_jitable(helper)
    _registered = True


def jitted(fn: Callable) -> Callable:
    """``fn`` (written in the vocabulary of :mod:`dadam3.optim.elementwise`) compiled by numba,
    inlined where it is called."""
    if fn not in _JITTED:
        register_twins()
        from numba import njit
        _JITTED[fn] = njit(inline="always")(fn)
    return _JITTED[fn]


def fused_update(skeleton: str, direction: Callable, n_state: int) -> Callable:
    """The numba update of ``skeleton`` ("optimistic" or "single") for ``direction`` with
    ``n_state`` state buffers; called on 1-D numpy views of the flat buffers."""
    key = (skeleton, direction, n_state)
    if key not in _JITTED:
        names = [f"state{i}" for i in range(n_state)]
        args, body = BODIES[skeleton]
        src = _TEMPLATE.format(args=args, state="".join(f", {n}" for n in names),
                               state_j="".join(f", {n}[j]" for n in names),
                               writes="".join(f"        {n}[j] = out[{i + 1}]\n" for i, n in enumerate(names)),
                               body=body)
        namespace = {"direction": jitted(direction)}
        exec(compile(src, f"<fused {skeleton} update of {direction.__qualname__}>", "exec"), namespace)
        from numba import njit
        _JITTED[key] = njit(namespace["update"])
    return _JITTED[key]


def numba_step(cls) -> tuple[Callable, Callable] | None:
    """Optimizer class ``cls``'s (fused update, scalars) compiled by numba, or None when numba is
    missing or cannot compile its math (tried once, on one value; the reason is logged)."""
    if cls not in _STEPS:
        _STEPS[cls] = None
        try:
            from numba.core.errors import NumbaError
        except ImportError:          # pragma: no cover - numba is a dependency; a broken install runs torch
            log.info("numba is not importable: optimizers run their eager torch update on the CPU")
            return None
        update, scalars = fused_update(cls.SKELETON, cls.direction, len(cls.STATE)), jitted(cls.scalars)
        try:
            _trial(update, scalars, cls)
        except NumbaError as e:
            log.info("%s: numba cannot compile its math, so it runs eagerly (%s)", cls.__name__,
                     str(e).strip().splitlines()[0])
            return None
        _STEPS[cls] = (update, scalars)
    return _STEPS[cls]


_STEPS: dict[type, tuple[Callable, Callable] | None] = {}


def _trial(update: Callable, scalars: Callable, cls) -> None:
    """One update on zeros: compiles the algorithm's math or raises numba's error."""
    import numpy as np
    h = cls.Hyper(**{name: float(hp.default) for name, hp in cls.HPARAMS.items()})
    a = [np.zeros(1) for _ in range(len(cls.STATE) + 4)]
    s = np.array(scalars(h, 1) + (1.0, -h.lr))
    skeleton_buffers = len(BODIES[cls.SKELETON][0].split(",")) - 2
    update(a[0], s, *a[1:1 + skeleton_buffers], *a[4:])
