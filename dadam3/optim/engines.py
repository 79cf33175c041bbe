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

from typing import Callable

import torch

from dadam3.optim.numba_compile import flat_passes

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
    (:func:`dadam3.optim.numba_compile.flat_passes`: the same ``phase`` and ``direction``, value by value)."""

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
