"""numba's compilation of an algorithm's math: the CPU engine's pass over the flat buffers, and
the building blocks of the synthetic game's compiled loop (:mod:`dadam3.games.synthetic_kernels`).

The same ``phase`` and ``direction`` functions that the torch optimizers run are compiled here,
value by value. :func:`element_pass` runs a skeleton's phase over flat buffers: each value is read
and written once per round instead of once per element-wise op of the eager update. numba
compiles the algorithm's functions as they are, with the names of :mod:`dadam3.optim.elementwise`
resolved to their numba twins (:func:`register_twins`). The skeleton's ``phase`` is inlined into
the pass with the round's phase number a constant, so numba keeps only that round's branch; numba
cannot hold a class, so the ``algorithm`` it reads ``algorithm.direction`` from is
:func:`algorithm_math` (the class's math under the same names).

Everything a compiled function calls is a name its source defines: the passes are closures over
the compiled functions they call (:func:`element_pass`, :func:`flat_pass`). numba keys its cache of
a closure on the pickled values it closes over, which differ in every process (a compiled
function pickles with an id of its own), so a closure is cached here by :class:`DigestCache`
under its code and a digest of the sources it is made from (:func:`math_digest`): an edited
algorithm compiles afresh, every algorithm has index files of its own (processes running
different algorithms side by side never write the same index), and the compiled code loads in the
next process. Where the cache goes is numba's choice: ``$NUMBA_CACHE_DIR`` if set, else the
``__pycache__`` beside this file, else (a read-only install) the user's cache directory; with none
writable it compiles in every process. numba is imported on first use.
"""
from __future__ import annotations

import hashlib
import inspect
import logging
import math
import sys
import types
from functools import lru_cache
from typing import Callable

log = logging.getLogger(__name__)
_registered = False


def register_twins() -> None:
    """numba implementations of :mod:`dadam3.optim.elementwise`'s functions and the tuple
    helpers :func:`gather` and :func:`scatter` (once)."""
    global _registered
    if _registered:
        return
    from numba.extending import overload

    from dadam3.optim import elementwise as ew

    overload(ew.sqrt)(lambda x: lambda x: math.sqrt(x))
    overload(ew.maximum)(lambda a, b: lambda a, b: max(a, b))
    overload(ew.sign)(lambda x: lambda x: 1.0 if x > 0 else (-1.0 if x < 0 else x))
    overload(gather)(_gather)
    overload(scatter)(_scatter)
    _registered = True


def gather(bufs: tuple, j: int) -> tuple:
    return tuple(b[j] for b in bufs)               # the tuple of bufs[i][j]


def scatter(bufs: tuple, j: int, values: tuple | None) -> None:
    for b, v in zip(bufs, values or ()):           # bufs[i][j] = values[i] (nothing for values=None)
        b[j] = v


def _gather(bufs, j):
    if len(bufs) == 0:
        return lambda bufs, j: ()
    return lambda bufs, j: (bufs[0][j],) + gather(bufs[1:], j)


def _scatter(bufs, j, values):
    from numba.core import types as nt
    if isinstance(values, nt.NoneType) or len(bufs) == 0:
        return lambda bufs, j, values: None

    def impl(bufs, j, values):
        bufs[0][j] = values[0]
        scatter(bufs[1:], j, values[1:])
    return impl


@lru_cache(maxsize=None)
def element_pass(cls: type, rnd) -> Callable:
    """Round ``rnd``'s phase of optimizer class ``cls`` at every position j of the flat buffers:
    ``work[j]`` and the new ``own`` and ``state`` values written in place (the numba form of
    :func:`dadam3.optim.engines.eager_update`); inlined where numba calls it, after typing (the
    flat pass, the synthetic game's loop; ~25 % faster for DP-OAdam's loop than a call)."""
    from numba.extending import register_jitable
    phase, algorithm, which = _inlined(cls.phase.__func__), algorithm_math(cls), rnd.phase
    prepare()

    def pass_(g, t, a, p, own, state, work):
        for j in range(work.shape[0]):
            value, new_own, new_state = phase(algorithm, which, g[j], t, a, p[j], gather(own, j), gather(state, j))
            work[j] = value
            scatter(own, j, new_own)
            scatter(state, j, new_state)
    return register_jitable(inline="always")(pass_)


def flat_pass(cls: type, rnd, dtype: str) -> Callable:
    """One round's pass over an optimizer's flat buffers of ``dtype`` (1-D arrays), compiled and
    cached: ``pass(g, t, a, p, own, state, work)``."""
    inner = element_pass(cls, rnd)

    def flat_pass(g, t, a, p, own, state, work):
        inner(g, t, a, p, own, state, work)
    index = (cls.START + cls.ROUNDS).index(rnd)
    return compiled(flat_pass, cache_name("flat_pass", cls, dtype, str(index)), math_digest(cls))


@lru_cache(maxsize=None)
def _inlined(fn: Callable) -> Callable:
    from numba import njit
    return njit(inline="always")(fn)


@lru_cache(maxsize=None)
def algorithm_math(cls: type) -> types.ModuleType:
    """What numba reads as ``algorithm`` in a skeleton's ``phase``: a namespace holding ``cls``'s
    ``direction`` (registered with :func:`jitted`). numba cannot hold a class, and it reads the
    attributes of a module as constants."""
    math_ns = types.ModuleType(f"{cls.__module__}.{cls.__qualname__}")
    math_ns.direction = jitted(cls.direction)
    return math_ns


def prepare() -> None:
    """The twins and the helpers of every algorithm imported so far, registered with numba."""
    from dadam3.optim.elementwise import HELPERS
    register_twins()
    for helper in HELPERS:
        jitted(helper)


def jitted(fn: Callable) -> Callable:
    """``fn`` (written in the vocabulary of :mod:`dadam3.optim.elementwise`), registered so that
    numba compiles it where it is called. Returns ``fn``."""
    register_twins()
    if fn not in _REGISTERED:
        from numba.extending import register_jitable
        register_jitable(fn)
        _REGISTERED.add(fn)
    return fn


_REGISTERED: set = set()


def compiled(fn: Callable, name: str, digest: str) -> Callable:
    """``fn`` (a closure over compiled functions) compiled by numba and cached on disk under
    ``name`` by :class:`DigestCache` (where a cache directory is writable)."""
    from numba import njit
    prepare()
    fn.__qualname__ = name
    dispatcher = njit(fn)
    try:
        dispatcher._cache = DigestCache(fn, digest)
    except RuntimeError as e:                 # numba: "cannot cache function ...: no locator available"
        log.info("numba's cache is not writable here (%s): compiling in this process", e)
    return dispatcher


def _digest_cache_class():
    from numba.core.caching import FunctionCache

    class _DigestCache(FunctionCache):
        """numba's cache of a closure, keyed on its signature, the machine, its code and the digest
        of the sources it is made from (not on the pickled values it closes over)."""

        def __init__(self, py_func, digest: str):
            super().__init__(py_func)
            self._digest = digest

        def _index_key(self, sig, codegen):
            code = hashlib.sha256(self._py_func.__code__.co_code).hexdigest()
            return sig, codegen.magic_tuple(), (code, self._digest)
    return _DigestCache


def DigestCache(py_func, digest: str):
    """A numba cache for ``py_func`` keyed on ``digest`` (see :func:`_digest_cache_class`)."""
    return _digest_cache_class()(py_func, digest)


@lru_cache(maxsize=None)
def math_digest(cls: type) -> str:
    """A digest of the sources an optimizer class's compiled code comes from: the modules of
    its class hierarchy (the algorithm and its skeleton), of its ``direction`` and ``scalars``,
    the element-wise vocabulary, the skeletons' vocabulary and this module."""
    from dadam3.optim import elementwise, skeletons
    modules = {c.__module__ for c in cls.__mro__} | {cls.direction.__module__, cls.scalars.__module__}
    paths = sorted({inspect.getsourcefile(m) for m in (sys.modules[name] for name in modules)
                    if getattr(m, "__file__", None)} | {inspect.getsourcefile(m) for m in (elementwise, skeletons)}
                   | {__file__})
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def cache_name(kind: str, cls: type, *parts: str) -> str:
    """The name numba's cache files of ``kind`` for ``cls`` get (one set per algorithm and version)."""
    return ".".join((kind, cls.__module__.replace(".", "_"), cls.__qualname__, *parts, math_digest(cls)))


def flat_passes(cls: type, dtype) -> dict | None:
    """Optimizer class ``cls``'s numba pass of each round (``START`` and ``ROUNDS``) over flat
    buffers of ``dtype``, called ``pass(g, t, a, p, own, state, work)`` on 1-D arrays; None when
    numba cannot compile its math (tried once, on one value; the reason is logged)."""
    key = (cls, str(dtype))
    if key not in _PASSES:
        _PASSES[key] = None
        from numba.core.errors import NumbaError
        dt = str(dtype).rpartition(".")[2]
        passes = {rnd: flat_pass(cls, rnd, dt) for rnd in cls.START + cls.ROUNDS}
        try:
            _trial(passes, cls, dt)
        except NumbaError as e:
            log.info("%s: numba cannot compile its math, so it runs eagerly (%s)", cls.__name__,
                     str(e).strip().splitlines()[0])
            return None
        _PASSES[key] = passes
    return _PASSES[key]


_PASSES: dict[tuple, dict | None] = {}


def _trial(passes: dict, cls: type, dtype: str) -> None:
    """Each pass once on one value (zeros): compiles (or loads) it or raises numba's error."""
    import numpy as np
    h = cls.Hyper(**{name: float(hp.default) for name, hp in cls.HPARAMS.items()})
    one = [np.zeros(1, dtype=dtype) for _ in range(3 + len(cls.OWN) + len(cls.STATE))]
    own, state = tuple(one[3:3 + len(cls.OWN)]), tuple(one[3 + len(cls.OWN):])
    a, t = cls.step_scalars(h._asdict(), 1)          # the skeleton's form of step 1's numbers
    a, t = cls.split_scalars([*a, *t])
    for run in passes.values():
        run(one[0], t, a, one[1], own, state, one[2])
