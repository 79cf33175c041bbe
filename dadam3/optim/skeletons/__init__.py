"""The skeletons an algorithm runs on, one module each, and the vocabulary they are written in.

A skeleton says where the gradient is taken, how a step is formed from the algorithm's
direction and when the gossip happens. It is a subclass of
:class:`~dadam3.optim.base.NodeOptimizer` declaring

* ``OWN``: the names of its own buffers (e.g. ``x``, ``d``), each one value per parameter
  value; an algorithm's ``STATE`` may not reuse them;
* ``START`` and ``ROUNDS``: the :class:`Round` s of ``start()`` and of one step, in order.
  A round is an element-wise *phase* followed by one gossip round ``into <- W_{k+offset}^t work``;
* the classmethod ``phase(algorithm, which, g, t, a, p, own, state) -> (work, own, state)``
  (``algorithm``: the optimizer's class, e.g. ``Dadam3``; named so, not ``cls``, since it is the
  algorithm on the skeleton, not the skeleton): the phase
  numbered ``which`` (a round's ``phase``, a constant of the skeleton's module; each branch of
  its ``if`` is one) on one element. ``g`` is the operator value (the gradient), ``t`` the
  :class:`StepScalars`, ``a`` the algorithm's scalars (its ``SCALARS`` named tuple), ``p`` the
  parameter (the current gradient point), ``own`` and ``state`` tuples of the skeleton's and the
  algorithm's buffer values; it returns the value the round mixes and the new ``own`` and
  ``state`` (``None``: unchanged). A round that takes a step
  calls ``algorithm.direction(g, a, *state) -> (D, *new_state)``, the algorithm's math, by its name.

So a reader (and a debugger, and go-to-definition) goes from the step's loop
(:func:`dadam3.optim.base.run_rounds`) to the engine's ``run``, to the skeleton's ``phase`` and
to the algorithm's ``direction`` by following names. The same ``phase`` and ``direction`` run on
whole flat ``[n, P]`` tensors (eagerly or compiled by ``torch.compile``), one value at a time
in numba's pass over the flat buffers (:mod:`dadam3.optim.numba_compile`) and in the synthetic game's
compiled loop (:mod:`dadam3.games.synthetic_kernels`): numba, which cannot hold a class, gets
the algorithm's jitted ``direction`` under the same name ``algorithm.direction``
(:func:`dadam3.optim.numba_compile.algorithm_math`). Adding a skeleton is one module here, nothing else.
"""
from __future__ import annotations

from typing import NamedTuple

PARAMS = 0          # a round's ``into``: the parameters (the next gradient point)


class StepScalars(NamedTuple):
    """The skeleton's per-step numbers: the gradient's sign (-1 for a maximising group: the
    min-max convention) and the step size eta."""
    sign: float
    lr: float


class Round(NamedTuple):
    """One gossip round: the skeleton's ``phase`` number ``phase`` element-wise, then
    ``into <- W_{k + offset}^t work`` where k is the step (0 for ``start()``) and ``into`` is
    :data:`PARAMS` or 1 + the index of an ``OWN`` buffer (see :func:`into_own`).
    ``gossip=False``: ``into <- work``, a local round (no exchange). ``average=True``: ``into <-
    11^T/M work``, the exact node average (an all-reduce: :meth:`dadam3.mixing.Mixer.average`)
    instead of gossip. ``fresh_gradient``: before the phase, the gradient is taken again at the
    parameters (the step's gradient callback)."""
    phase: int
    into: int
    offset: int
    gossip: bool = True
    fresh_gradient: bool = False
    average: bool = False


def into_own(names: tuple[str, ...], name: str) -> int:
    """A round's ``into`` for the skeleton buffer ``name``."""
    return 1 + names.index(name)
