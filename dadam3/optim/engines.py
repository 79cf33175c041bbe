"""The three engines that run a round's phase over one parameter group's flat buffers.

An algorithm's math is written once (its ``direction``, the skeleton's ``phase``, in the
vocabulary of :mod:`dadam3.optim.elementwise`); an engine says how it runs. Each has one
method, ``run(rnd, group)``: round ``rnd``'s phase over the group's flat ``[n, P]`` buffers, the
value to mix into ``group.work``, the new states into their buffers; :func:`dadam3.optim.base.run_rounds`
calls it for every round and group, then mixes.

=================  ============================================  ====================================
engine             how the phase runs                            chosen by ``engine="auto"``
=================  ============================================  ====================================
:class:`Eager`     the phase in Python on whole tensors          elsewhere (fake or meta tensors)
:class:`Compiled`  the same, through ``torch.compile``           on CUDA (``compile=None`` or True)
:class:`Numba`     numba's pass over the buffers, value by value  on the CPU (float32, float64)
=================  ============================================  ====================================

``engine="eager"`` (library argument of :func:`dadam3.optim.build_optimizer`, config key
``optimizer.engine=eager``) runs :class:`Eager` everywhere: a breakpoint in an algorithm's
``direction`` then fires at every step. The three are proven equal in float64 (tests/test_optim_engines.py).
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

import torch

from dadam3.numba_cache import njit_cached

log = logging.getLogger(__name__)

ENGINES = ("auto", "eager")          # the switch a user sets: "auto" picks one of the three below
NUMBA_DTYPES = (torch.float32, torch.float64)    # what the numba pass runs on


def eager_update(algorithm: type, rnd, g, s, p, work, own, state) -> None:
    """Round ``rnd``'s phase of ``algorithm`` (the optimizer's class) on whole flat tensors (``s``:
    the scalars tensor): the value to mix written into ``work``, the new ``own`` and ``state`` into
    their buffers. The skeleton's ``phase`` (and in it ``algorithm.direction``) runs here, in
    Python (or traced by ``torch.compile``)."""
    a, t = algorithm.split_scalars(s.unbind(0))
    value, new_own, new_state = algorithm.phase(rnd.phase, g, t, a, p, own, state)
    work.copy_(value)
    for bufs, new in ((own, new_own), (state, new_state)):
        for buf, v in zip(bufs, new or ()):
            if v is not buf:
                buf.copy_(v)


class Eager:
    """The phase in Python on whole tensors (the plain path; every other one is proven equal to it)."""

    name = "eager"

    def __init__(self, cls: type):
        self.cls = cls

    def run(self, rnd, group) -> None:
        eager_update(self.cls, rnd, group.grad_buf, group.scalars, group.param_buf, group.work, group.own,
                     group.algo_state)


class Compiled:
    """Each round's phase through ``torch.compile``: one generated kernel per buffer shape (the
    scalars are a tensor, so new values do not recompile); compiled once per class."""

    name = "compiled"
    _kernels: dict[type, dict] = {}

    def __init__(self, cls: type):
        self.cls = cls
        if cls not in Compiled._kernels:
            Compiled._kernels[cls] = {rnd: torch.compile(_round_kernel(cls, rnd), fullgraph=True, dynamic=False)
                                      for rnd in cls.START + cls.ROUNDS}
        self.kernels = Compiled._kernels[cls]

    def run(self, rnd, group) -> None:
        self.kernels[rnd](group.grad_buf, group.scalars, group.param_buf, group.work, group.own, group.algo_state)


def _round_kernel(cls: type, rnd) -> Callable[..., None]:
    def update(g, s, p, work, own, state):
        eager_update(cls, rnd, g, s, p, work, own, state)
    # dynamo keeps the graphs of a code object in one cache of at most recompile_limit (8)
    # entries: a code object of its own per class and round (each holds one graph per buffer shape)
    update.__code__ = update.__code__.replace(co_name=f"{cls.__name__}_phase{rnd.phase}")
    return update


class Numba:
    """numba's pass of each round over 1-D numpy views of the (CPU, contiguous) buffers
    (:func:`flat_passes`, below: the same ``phase`` and ``direction``, value by value)."""

    name = "numba"

    def __init__(self, cls: type, passes: dict):
        self.cls, self.passes = cls, passes

    def run(self, rnd, group) -> None:
        a, t = self.cls.split_scalars([float(v) for v in group.scalars.numpy()])   # CPU memory: no torch op
        flat = [b.numpy().reshape(-1) for b in (group.grad_buf, group.param_buf, group.work)]
        self.passes[rnd](flat[0], t, a, flat[1], tuple(b.numpy().reshape(-1) for b in group.own),
                         tuple(b.numpy().reshape(-1) for b in group.algo_state), flat[2])


def choose_engine(cls: type, buf: torch.Tensor, engine: str = "auto", compile: bool | None = None):
    """The engine of optimizer class ``cls`` over buffers like ``buf``: :class:`Eager` for
    ``engine="eager"``; for ``"auto"``, :class:`Compiled` when ``compile`` (None: on CUDA),
    :class:`Numba` on the CPU where numba compiles the math, :class:`Eager` otherwise (tensors
    without memory, meta or fake ones: device checks without a GPU, have none to run a kernel on)."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: must be one of {', '.join(ENGINES)}")
    if engine == "eager":
        return Eager(cls)
    real = has_memory(buf)
    if compile is None:
        compile = buf.device.type == "cuda" and torch.cuda.is_available() and real
    if compile:
        return Compiled(cls)
    if buf.device.type == "cpu" and real and buf.dtype in NUMBA_DTYPES:
        passes = flat_passes(cls, buf.dtype)
        if passes is not None:
            return Numba(cls, passes)
    return Eager(cls)


def has_memory(t: torch.Tensor) -> bool:
    """Whether ``t`` has memory a kernel can run on: not a meta tensor nor a fake one (a
    ``FakeTensorMode`` tensor reports its device but keeps its storage on ``meta``)."""
    return t.untyped_storage().device.type != "meta"


# ---- numba: the Numba engine's passes and the synthetic game loop's building blocks ------------
# An algorithm's math compiled by numba, once: the CPU's pass over the flat buffers and the
# building blocks of the synthetic game's loop come from the same ``phase`` and ``direction``
# functions that the torch optimizers run.
#
# :func:`element_pass` runs a skeleton's phase over flat buffers, one value at a time: each value
# is read and written once per round, instead of once per element-wise op of the eager torch
# update. numba compiles the algorithm's functions as they are, with the names of
# :mod:`dadam3.optim.elementwise` resolved to their numba twins (:func:`register_twins`). The
# skeleton's ``phase`` is inlined into the pass with the round's phase number a constant, so
# numba keeps only that round's branch; numba cannot hold a class, so the ``algorithm`` it reads
# ``algorithm.direction`` from is :func:`algorithm_math` (the class's math under the same names).
#
# Compiled once: numba compiles each pass in the first process that needs it and caches it on
# disk (``cache=True``). A cache entry is a module-level function of this package (``body``)
# bound by :func:`bind` to the functions it calls, which are passed in as its global names:
# numba caches a function by its code and argument types and treats globals as constants, so
# the compiled code loads in the next process (a closure over jitted functions, or jitted
# functions passed as arguments, would compile anew in every process). The cache name holds
# the algorithm's class and a digest of its sources and its skeleton's (:func:`math_digest`):
# an edited algorithm compiles afresh, and every algorithm has index files of its own, so
# processes running different algorithms side by side never write the same index (numba
# writes its files by atomic replacement; two processes compiling the same entry write the
# same bytes). Where the cache goes is numba's choice: ``$NUMBA_CACHE_DIR`` if set, else the
# ``__pycache__`` beside the source, else (a read-only install) the user's cache directory
# (``~/.cache/numba``); with none writable it compiles in every process.
#
# numba is imported on first use, so importing the optimizers stays cheap.

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


def element_pass(g, t, a, p, own, state, work):
    """One round's phase at every position j of the flat buffers: ``work[j]`` and the new ``own``
    and ``state`` values written in place (the numba form of :func:`eager_update`). Bound by
    :func:`round_names`: ``PHASE(ALGORITHM, WHICH, ...)`` is ``algorithm.phase(rnd.phase, ...)``."""
    for j in range(work.shape[0]):
        value, new_own, new_state = PHASE(ALGORITHM, WHICH, g[j], t, a, p[j], gather(own, j),  # noqa: F821
                                          gather(state, j))
        work[j] = value
        scatter(own, j, new_own)
        scatter(state, j, new_state)


def flat_pass(g, t, a, p, own, state, work):
    """One round's pass over an optimizer's flat buffers (bound: ``ELEMENT_PASS``, :func:`round_pass`)."""
    ELEMENT_PASS(g, t, a, p, own, state, work)  # noqa: F821 - bound by bind()


def round_pass(cls: type, rnd) -> Callable:
    """:func:`element_pass` for round ``rnd`` of optimizer class ``cls``, inlined where numba calls
    it (the flat pass, the synthetic game's loop)."""
    return bind(element_pass, "element_pass", cache=False, inline="typed", **round_names(cls, rnd))


def round_names(cls: type, rnd) -> dict:
    """The globals :func:`element_pass` is bound with for round ``rnd`` of optimizer class ``cls``:
    ``PHASE``, the skeleton's ``phase`` function, inlined where it is called (so numba keeps
    only the branch of ``WHICH`` = ``rnd.phase``, a constant), and ``ALGORITHM`` = :func:`algorithm_math`."""
    return {"PHASE": _inlined(cls.phase.__func__), "ALGORITHM": algorithm_math(cls), "WHICH": rnd.phase}


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


def bind(body: Callable, name: str, cache: bool = True, inline: str = "never", **names) -> Callable:
    """``body`` compiled by numba with ``names`` as its globals (constants to numba), cached on disk
    under ``name`` (``cache=False``: in this process only); inlined where it is called (no reference
    counting of the arrays passed) before typing for ``inline="always"``, after typing for
    ``"typed"`` (``register_jitable``: ~25 % faster for DP-OAdam's synthetic loop than before)."""
    from numba import njit

    from dadam3.optim.elementwise import HELPERS
    register_twins()
    for helper in HELPERS:              # the helpers of every algorithm imported so far
        jitted(helper)
    fn = types.FunctionType(body.__code__, {**body.__globals__, **names}, body.__name__, body.__defaults__)
    fn.__qualname__ = name
    if inline == "typed":
        from numba.extending import register_jitable
        return register_jitable(inline="always")(fn)
    return njit_cached(fn, inline=inline) if cache else njit(fn, inline=inline)


def jitted(fn: Callable) -> Callable:
    """``fn`` (written in the vocabulary of :mod:`dadam3.optim.elementwise`), registered so that
    numba compiles it where it is called (also where it is passed as an argument: a registered
    function has no run-time value, which a jitted function passed in would have, and numba
    caches no code holding such a value). Returns ``fn``."""
    register_twins()
    if fn not in _REGISTERED:
        from numba.extending import register_jitable
        register_jitable(fn)
        _REGISTERED.add(fn)
    return fn


_REGISTERED: set = set()


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
        passes = {rnd: bind(flat_pass, cache_name("flat_pass", cls, dt, str(i)), ELEMENT_PASS=round_pass(cls, rnd))
                  for i, rnd in enumerate(cls.START + cls.ROUNDS)}
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
    from dadam3.optim.skeletons import StepScalars
    h = cls.Hyper(**{name: float(hp.default) for name, hp in cls.HPARAMS.items()})
    one = [np.zeros(1, dtype=dtype) for _ in range(3 + len(cls.OWN) + len(cls.STATE))]
    own, state = tuple(one[3:3 + len(cls.OWN)]), tuple(one[3 + len(cls.OWN):])
    for run in passes.values():
        run(one[0], StepScalars(1.0, h.lr), cls.scalars(h, 1), one[1], own, state, one[2])
