"""Machinery shared by every optimizer: node-stacked parameters, the mixer, the sign
convention, the loop contract and how an algorithm's math is run.

* Every parameter is a tensor ``[M, ...]``: row i is node i's copy. Under
  torch.distributed a rank holds only its block of rows, ``[mixer.local_nodes, ...]``;
  the updates are element-wise, so only the mixer knows the difference.
* The min-max convention is the paper's: the operator is
  ``G = [grad_theta f, -grad_alpha f]`` and every player descends along it. A
  parameter group with ``maximize=True`` holds maximising players: its ``.grad`` is
  taken as ``grad f`` and negated, so users may write ``f`` once for both players.
* Contract: ``start()`` once moves the parameters to the first gradient point (``Z_1 = X_0 W^t``
  for the optimistic methods: a gossip round, so the constructor never communicates; a resumed
  run loads its state instead). After ``step()`` the parameters hold the point where the next
  gradient must be taken (``Z_{k+1}`` for the optimistic methods, ``X_k`` for the
  single-sequence ones). A loop is just ``start(); (grads at params -> step())*``.
* ``mixer=None`` means no communication (W = I). An algorithm is written once, as pure element-wise
  functions in the vocabulary of :mod:`dadam3.optim.elementwise`: its hyper-parameters (``HPARAMS``,
  name -> :class:`HParam`: default and allowed interval, checked by the constructor as ``torch.optim``
  does), its state buffers and their initial values (``STATE``), the named tuple of the numbers a step
  needs (``SCALARS``) and the function computing it (``scalars(h, k)``, ``h`` the hyper-parameters as
  a named tuple), and its ``direction(g, a, *state) -> (direction, *new_state)``. Its skeleton
  (a module of :mod:`dadam3.optim.skeletons`) does the rest: its ``phase`` (which calls
  ``algorithm.direction``) and its gossip rounds.
* Speed: a group's parameters, gradients and state are views of flat ``[n, P]`` buffers
  (:class:`~dadam3.optim.flat.FlatGroup`), so a round is one pass over the buffers, run by one of three named
  engines (:mod:`dadam3.optim.engines`), and one mixer call.
* The step is ONE loop, :func:`run_rounds` (called by :func:`step_together`): for each round of
  the skeleton, ``engine.run`` runs its ``phase`` in every group of every optimizer, then one
  mixer call gossips all of their buffers (generator and critic: one exchange per round).
* The torch engines read a step's numbers from one small tensor per group on the buffers'
  device, ``flat.scalars`` = ``[*SCALARS, *StepScalars]`` (the algorithm's fields, then the
  gradient's sign and lr), written in place before each step (an asynchronous copy on CUDA): a
  captured CUDA graph of the passes replays with the numbers of each new step.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable, ClassVar, Iterable, Mapping, NamedTuple, Sequence

import torch

from dadam3.errors.config import ConfigError
from dadam3.optim.hparams import HParam
from dadam3.mixing import Mixer
from dadam3.optim.engines import choose_engine
from dadam3.optim.flat import FlatGroup
from dadam3.optim.skeletons import Round, StepScalars


class NoScalars(NamedTuple):
    """The ``SCALARS`` of an algorithm whose direction reads no per-step number."""


class NodeOptimizer(torch.optim.Optimizer):
    """Base class: the mixer, the iteration counter ``k``, the flat buffers of each parameter
    group and the running of a skeleton's rounds.

    A skeleton subclasses it with ``OWN``, ``START`` and ``ROUNDS`` (:mod:`dadam3.optim.skeletons`);
    an algorithm subclasses a skeleton with ``HPARAMS``, ``STATE`` (name -> initial value, a
    number or the name of a hyper-parameter), ``SCALARS`` and the static ``scalars(h, k)`` and
    ``direction(g, a, *state)``. When the class is defined its ``Hyper`` named tuple is made
    from ``HPARAMS``.
    """

    HPARAMS: ClassVar[dict[str, HParam]] = {}
    STATE: ClassVar[dict[str, float | str]] = {}
    SCALARS: ClassVar[type] = NoScalars
    OWN: ClassVar[tuple[str, ...]] = ()
    START: ClassVar[tuple[Round, ...]] = ()
    ROUNDS: ClassVar[tuple[Round, ...]] = ()
    scalars_written_by_caller = False      # True while a CUDA graph of the step is captured / replayed
    Hyper: ClassVar[type]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        shared = set(cls.OWN) & set(cls.STATE)
        if shared:
            raise TypeError(f"{cls.__name__}.STATE names {', '.join(sorted(shared))}, a buffer of its skeleton "
                            f"({', '.join(cls.OWN)}): rename it")
        # importable as <module>.<class>.Hyper, so numba's on-disk cache can name it
        cls.Hyper = namedtuple(f"{cls.__name__}Hyper", list(cls.HPARAMS), module=cls.__module__)
        cls.Hyper.__qualname__ = f"{cls.__qualname__}.Hyper"

    @staticmethod
    def scalars(h, k: int) -> tuple:
        """Step k's numbers that ``direction`` reads, as a ``SCALARS`` (none by default)."""
        return NoScalars()

    @staticmethod
    def direction(g, a, *state) -> tuple:
        raise NotImplementedError

    @classmethod
    def phase(algorithm, which: int, g, t, a, p, own, state) -> tuple:
        """The skeleton's phase ``which`` on one element; calls ``algorithm.direction`` (optim.skeletons)."""
        raise NotImplementedError

    @classmethod
    def check_hparams(cls, hparams: Mapping[str, Any], name: str | None = None) -> dict[str, float]:
        """All of ``HPARAMS``: the given values checked, the others at their defaults.

        Raises a one-line ConfigError naming the key for an unknown key or a value outside
        its interval (``name``: the optimizer's registry name, said as ``name=...``)."""
        for key, value in hparams.items():
            if key not in cls.HPARAMS:
                owner, refs = ("{name}", {"name": name}) if name is not None else (cls.__name__, None)
                raise ConfigError(key, value, f"not an option of {owner}; allowed: {', '.join(cls.HPARAMS)}", refs)
        return {name: hp.check(name, hparams.get(name, hp.default)) for name, hp in cls.HPARAMS.items()}

    @classmethod
    def step_scalars(cls, group: Mapping[str, Any], k: int) -> tuple[tuple, StepScalars]:
        """Step k's (``scalars(h, k)``, :class:`StepScalars`) of ``group``."""
        h = cls.Hyper(**{name: group[name] for name in cls.HPARAMS})
        return cls.scalars(h, k), StepScalars(-1.0 if group.get("maximize") else 1.0, group["lr"])

    @classmethod
    def split_scalars(cls, values) -> tuple[tuple, StepScalars]:
        """The flat scalars ``[*SCALARS, *StepScalars]`` (a sequence) as the two named tuples."""
        n = len(cls.SCALARS._fields)
        return cls.SCALARS(*values[:n]), StepScalars(*values[n:])

    def __init__(self, params: Iterable, mixer: Mixer | None = None, maximize: bool = False,
                 compile: bool | None = None, engine: str = "auto", **hparams):
        super().__init__(params, {**self.check_hparams(hparams), "maximize": maximize})
        self.mixer = mixer
        self.k = 0
        self.started = False
        if mixer is not None:
            # the nodes this process holds: all M, or a rank's block under DistributedMixer
            n = mixer.local_nodes
            size = f"nodes={n}" if n == mixer.nodes else f"{n} (this rank's block of nodes={mixer.nodes})"
            for p in self._params():
                if p.shape[0] != n:
                    raise ValueError(f"parameter of shape {tuple(p.shape)} has no leading node axis "
                                     f"of size {size}")
        self.flat = [FlatGroup(group["params"]) for group in self.param_groups]
        for group, flat in zip(self.param_groups, self.flat):
            init = {**{name: 0.0 for name in self.OWN}, **self.STATE}
            flat.state = {name: flat.new_buffer(group[v] if isinstance(v, str) else v) for name, v in init.items()}
            flat.own = tuple(flat.state[name] for name in self.OWN)
            flat.algo_state = tuple(flat.state[name] for name in self.STATE)
            flat.work = torch.empty_like(flat.param_buf)
            flat.scalars = None
            self._bind_state_views(flat)
        # Eager, Compiled or Numba (dadam3.optim.engines); engine="eager": Eager everywhere
        self.engine = choose_engine(type(self), self.flat[0].param_buf if self.flat else torch.empty(0),
                                    engine, compile)

    def _bind_state_views(self, flat: FlatGroup) -> None:
        """``optimizer.state[p][name]`` = p's view of each flat state buffer."""
        for name, buf in flat.state.items():
            for p, view in zip(flat.params, flat.views(buf)):
                self.state[p][name] = view

    def set_hparams(self, hparams: Mapping[str, Any]) -> None:
        """Set hyper-parameters in every group (checked as in the constructor), e.g. a lower lr
        after loading a checkpoint, whose param_groups hold the values it was saved with."""
        checked = self.check_hparams(hparams)
        for key in hparams:
            for group in self.param_groups:
                group[key] = checked[key]

    # -- helpers ----------------------------------------------------------------------
    def _params(self):
        for group in self.param_groups:
            yield from group["params"]

    def scalars_tensor(self, flat: FlatGroup, k: int) -> torch.Tensor:
        """Step k's ``[*SCALARS, *StepScalars]`` of ``flat``'s group on the buffers' device: on
        CUDA the same tensor every step, written in place by an asynchronous copy (what a captured
        CUDA graph of the rounds reads)."""
        a, t = self.step_scalars(self.param_groups[self.flat.index(flat)], k)
        values = torch.tensor([*a, *t], dtype=flat.param_buf.dtype)
        device = flat.param_buf.device
        if device.type != "cuda":
            return values.to(device)
        if flat.scalars is None or flat.scalars.numel() != values.numel():
            flat.scalars = torch.empty(values.numel(), dtype=values.dtype, device=device)
        flat.scalars.copy_(values.pin_memory(), non_blocking=True)
        return flat.scalars

    def _write_scalars(self, k: int) -> None:
        """Step k's scalars into every ``flat.scalars``: a captured step's caller writes them (IterationGraph)."""
        for flat in self.flat:
            flat.scalars = self.scalars_tensor(flat, k)

    @torch.no_grad()
    def start(self) -> "NodeOptimizer":
        """Move the parameters to the first gradient point; once, before the first gradient of a
        fresh run (not after ``load_state_dict``). Returns the optimizer."""
        start_together([self])
        return self

    @torch.no_grad()
    def step(self, closure=None):
        """One step; ``closure`` (torch.optim's: it sets the gradients at the parameters) is
        called first, and again before a round that takes a fresh gradient (extra-gradient)."""
        loss = _evaluate(closure)
        step_together([self], None if closure is None else lambda: _evaluate(closure))
        return loss

    # -- checkpointing ------------------------------------------------------------------
    def state_dict(self):
        sd = super().state_dict()
        sd["k"] = self.k
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        self.k = int(state_dict.pop("k", 0))
        self.started = True
        super().load_state_dict(state_dict)
        # torch.optim replaced the state tensors by loaded copies: move them into the flat buffers
        with torch.no_grad():
            for flat in self.flat:
                for name, buf in flat.state.items():
                    flat.copy_into(buf, [self.state[p][name] for p in flat.params])
                self._bind_state_views(flat)


@torch.no_grad()
def step_together(optimizers: Sequence[NodeOptimizer], gradients: Callable[[], Any] | None = None) -> None:
    """Step ``optimizers`` (e.g. the generator's and the critic's) at once: each gossip round
    mixes all of their buffers in ONE mixer call, so under torch.distributed a round sends one
    message per neighbour for all players. Same results as stepping them one by one.
    ``gradients()``: sets every player's gradient at the current parameters; a skeleton whose
    round takes a ``fresh_gradient`` calls it (needs one batch: same mixer, class and k).

    Optimizers with different mixers, classes or iteration counters are stepped one by one."""
    batches = _batches(optimizers)
    for opt in optimizers:
        if not opt.started:
            raise RuntimeError(f"{type(opt).__name__}.step() before start(): call start() (or "
                               "start_together) once before the first gradient of a fresh run")
        if gradients_per_step(type(opt)) > 1 and (gradients is None or len(batches) > 1):
            raise RuntimeError(f"{type(opt).__name__} takes {gradients_per_step(type(opt))} gradients per step: "
                               "step all players together, with a gradient callback (step(closure))")
    for batch in batches:
        for opt in batch:
            opt.k += 1
            for flat in opt.flat:
                flat.sync()
        run_rounds(batch, type(batch[0]).ROUNDS, batch[0].k, gradients)


def gradients_per_step(cls: type) -> int:
    """How many gradients a step of optimizer class ``cls`` takes (1 + its fresh-gradient rounds)."""
    return 1 + sum(rnd.fresh_gradient for rnd in cls.ROUNDS)


@torch.no_grad()
def start_together(optimizers: Sequence[NodeOptimizer]) -> None:
    """``start()`` of several optimizers sharing a mixer, with one exchange for all of them."""
    for batch in _batches(optimizers):
        for opt in batch:
            opt.started = True
        run_rounds(batch, type(batch[0]).START, 0)


def run_rounds(optimizers: Sequence[NodeOptimizer], rounds: tuple[Round, ...], k: int,
               gradients: Callable[[], Any] | None = None) -> None:
    """THE step (k >= 1) or start (k = 0) of ``optimizers`` (one class, one mixer, one k): each
    round's phase in every group of every optimizer (after ``gradients()`` for a round with a
    ``fresh_gradient``), then one gossip round for all of them, ``into <- W_{k + offset}^t work``
    (the exact node average for an ``average`` round; a plain copy without a mixer or for a local round)."""
    groups = [(opt, flat) for opt in optimizers for flat in opt.flat]
    for opt, flat in groups:
        if not opt.scalars_written_by_caller:                    # a replayed CUDA graph's caller wrote them
            flat.scalars = opt.scalars_tensor(flat, max(k, 1))    # start()'s phases read none: step 1's
    mixer = optimizers[0].mixer
    for rnd in rounds:
        if rnd.fresh_gradient:
            with torch.enable_grad():
                gradients()
            for _, flat in groups:
                flat.sync()
        for opt, flat in groups:
            opt.engine.run(rnd, flat)
        works = [flat.work for _, flat in groups]
        intos = [flat.target(rnd.into) for _, flat in groups]
        if mixer is None or not rnd.gossip:
            for into, work in zip(intos, works):
                into.copy_(work)
        elif rnd.average:
            mixer.average(works, out=intos)
        else:
            mixer.mix(works, k + rnd.offset, out=intos)


def _batches(optimizers: Sequence[NodeOptimizer]) -> list[list[NodeOptimizer]]:
    """All ``optimizers`` in one batch if they share mixer, class and k, else each alone."""
    first = optimizers[0]
    if any(o.mixer is not first.mixer or type(o) is not type(first) or o.k != first.k for o in optimizers):
        return [[opt] for opt in optimizers]
    return [list(optimizers)]


def _evaluate(closure):
    """torch.optim's closure convention: re-evaluate the loss (with grad) if one is given."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
