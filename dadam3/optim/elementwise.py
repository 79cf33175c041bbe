"""The element-wise vocabulary an algorithm's math is written in, once, for every back end.

An algorithm's ``direction(g, a, *state) -> (direction, *new_state)`` and ``scalars(h, k)``
(which returns its named tuple ``a`` of per-step numbers) are pure functions written with
arithmetic, comparisons and the functions below, as are the skeletons' phases
(:mod:`dadam3.optim.skeletons`). The same function objects then run

* on whole ``[n, P]`` tensors: eagerly, or compiled into one kernel by ``torch.compile`` (CUDA);
* on one number at a time inside numba loops (:mod:`dadam3.optim.numba_compile`): the CPU's
  numba pass over the flat buffers and the synthetic game's compiled loop
  (:mod:`dadam3.games.synthetic_kernels`),

because :mod:`dadam3.optim.numba_compile` registers a numba implementation of each name here. An
algorithm that needs another primitive adds it here and its numba twin in
:func:`dadam3.optim.numba_compile.register_twins`; a helper function of its own (written in this
vocabulary) is decorated with :func:`helper`.
"""
from __future__ import annotations

import torch


# torch's own functions (so the eager engine calls torch directly: no frame of ours between
# ``direction`` and the kernel); numba gets a twin of each
sqrt = torch.sqrt
maximum = torch.maximum
sign = torch.sign


# functions an algorithm's ``direction`` or ``scalars`` call (e.g. dadam3.optim.adam's), written
# only in this vocabulary: numba compiles them as they are (dadam3.optim.engines)
HELPERS: list = []


def helper(fn):
    """Mark ``fn`` (written in this vocabulary) as a helper an algorithm calls: numba then
    compiles it where it is called. Returns ``fn``."""
    HELPERS.append(fn)
    return fn
