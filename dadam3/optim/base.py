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
* ``mixer=None`` means no communication (W = I).
* An algorithm is written once, as pure element-wise functions in the vocabulary of
  :mod:`dadam3.optim.elementwise`: its hyper-parameters (``HPARAMS``, name -> :class:`HParam`:
  default and allowed interval, checked by the constructor as ``torch.optim`` does), its state
  buffers and their initial values (``STATE``), the named tuple of the numbers a step needs
  (``SCALARS``) and the function computing it (``scalars(h, k)``, ``h`` the hyper-parameters as
  a named tuple), and its ``direction(g, a, *state) -> (direction, *new_state)``. Its skeleton
  (a module of :mod:`dadam3.optim.skeletons`) does the rest: its element-wise phases and its
  gossip rounds.
* Speed: a group's parameters, gradients and state are views of flat ``[n, P]`` buffers
  (:mod:`dadam3.optim.flat`), so a round is one pass over the buffers and one mixer call.
  The pass is ``torch.compile`` of the phase on CUDA (``compile=True``), the same functions
  compiled by numba on the CPU (:mod:`dadam3.optim.numba_pass`, cached on disk across
  processes), and the phase run eagerly on whole tensors otherwise (``compile=False`` on CUDA,
  fake tensors). :func:`~dadam3.optim.together.step_together` steps several optimizers that
  share a mixer with one exchange per gossip round for all of them.
* The torch passes read a step's numbers from one small tensor per group on the buffers'
  device, ``flat.scalars`` = ``[*SCALARS, *StepScalars]`` (the algorithm's fields, then the
  gradient's sign and lr), written in place before each step (an asynchronous copy on CUDA): a
  captured CUDA graph of the passes replays with the numbers of each new step.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping, NamedTuple

import torch

from dadam3.errors import ConfigError, check_range
from dadam3.mixing import Mixer
from dadam3.optim import numba_pass
from dadam3.optim.flat import FlatGroup
from dadam3.optim.skeletons import PARAMS, Round, StepScalars
from dadam3.optim.together import MixRound, start_together, step_together


@dataclass(frozen=True)
class HParam:
    """A hyper-parameter's default and allowed interval (``None``: unbounded; always finite)."""

    default: float
    low: float | None = 0.0
    high: float | None = None
    low_open: bool = False
    high_open: bool = True
    why: str = ""             # said after the interval when a value is refused

    def check(self, name: str, value: Any) -> float:
        """``value`` as a float in the interval, else a one-line ConfigError naming ``name``
        (``why`` said after the interval, not after "must be a number")."""
        check_range(name, value)                     # a finite number
        try:
            return check_range(name, value, self.low, self.high, self.low_open, self.high_open)
        except ConfigError as e:
            if not self.why:
                raise
            raise e.explained(self.why) from None


# The defaults are the ONE source of every hyper-parameter's value (configs/optimizer/*.yaml
# name the algorithm only): the paper's Table 6 (the WGAN-GP experiments). The synthetic game
# of Section 5.1 uses others, set in configs/synthetic_optimizer/.
LR = HParam(5e-5, 0.0, None, low_open=True)                        # Table 6: eta = 5e-5
EPS = HParam(1e-8, 0.0, None, low_open=True,
             why="the first step divides a zero gradient by sqrt(0) + eps")
ADAM_HPARAMS = {"lr": LR, "beta1": HParam(0.5, 0.0, 1.0), "beta2": HParam(0.999, 0.0, 1.0), "eps": EPS}
NUMBA_DTYPES = (torch.float32, torch.float64)    # what the numba pass runs on


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

    @classmethod
    def update(cls, rnd: Round, g, s, p, work, own, state) -> None:
        """Round ``rnd``'s phase on whole flat tensors (``s``: the scalars tensor): the value to
        mix written into ``work``, the new ``own`` and ``state`` into their buffers."""
        a, t = cls.split_scalars(s.unbind(0))
        value, new_own, new_state = rnd.phase(cls.direction, g, t, a, p, own, state)
        work.copy_(value)
        for bufs, new in ((own, new_own), (state, new_state)):
            for buf, v in zip(bufs, new or ()):
                if v is not buf:
                    buf.copy_(v)

    def __init__(self, params: Iterable, mixer: Mixer | None = None, maximize: bool = False,
                 compile: bool | None = None, **hparams):
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
            flat.work = torch.empty_like(flat.param_buf)
            flat.scalars = None
            self._bind_state_views(flat)
        self.engine, self._update = self._choose_update(compile)

    def _choose_update(self, compile: bool | None) -> tuple[str, Callable[..., None]]:
        """("compiled" | "numba" | "eager", the update ``(round, g, s, p, work, own, state)``):
        ``torch.compile`` when asked (by default on CUDA), numba on the CPU, the eager
        :meth:`update` otherwise. Tensors without memory (meta or fake tensors: device checks
        without a GPU) have none to run a kernel on."""
        buf = self.flat[0].param_buf if self.flat else torch.empty(0)
        real = _has_memory(buf)
        if compile is None:
            compile = buf.device.type == "cuda" and torch.cuda.is_available() and real
        if compile:
            return "compiled", compiled_update(type(self))
        if buf.device.type == "cpu" and real and buf.dtype in NUMBA_DTYPES:
            passes = numba_pass.flat_passes(type(self), buf.dtype)
            if passes is not None:
                return "numba", _on_numpy(type(self), passes)
        return "eager", type(self).update

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

    def _write_scalars(self, k: int) -> None:
        """Step k's ``[*SCALARS, *StepScalars]`` of each group into its ``flat.scalars`` on the
        buffers' device: on CUDA the same tensor every step, written in place by an asynchronous
        copy (what a captured CUDA graph of the rounds reads)."""
        for group, flat in zip(self.param_groups, self.flat):
            a, t = self.step_scalars(group, k)
            values = torch.tensor([*a, *t], dtype=flat.param_buf.dtype)
            device = flat.param_buf.device
            if device.type != "cuda":
                flat.scalars = values.to(device)
                continue
            if flat.scalars is None or flat.scalars.numel() != values.numel():
                flat.scalars = torch.empty(values.numel(), dtype=values.dtype, device=device)
            flat.scalars.copy_(values.pin_memory(), non_blocking=True)

    def _run_rounds(self, rounds: tuple[Round, ...], k: int) -> Iterator[MixRound]:
        """Each round's phase in every group, then its gossip (step k; 0 for start(), whose
        phases read no scalars: they get step 1's). ``scalars_written_by_caller``: a captured CUDA
        graph of the step (:class:`dadam3.gan.cuda_graph.IterationGraph`) writes them before each replay."""
        if not self.scalars_written_by_caller:
            self._write_scalars(max(k, 1))
        for rnd in rounds:
            for flat in self.flat:
                self._update(rnd, flat.grad_buf, flat.scalars, flat.param_buf, flat.work,
                             tuple(flat.state[name] for name in self.OWN),
                             tuple(flat.state[name] for name in self.STATE))
            into = [f.param_buf if rnd.into == PARAMS else f.state[self.OWN[rnd.into - 1]] for f in self.flat]
            yield MixRound([f.work for f in self.flat], into, k + rnd.offset)

    def _rounds(self) -> Iterator[MixRound]:
        """The step as a generator of its gossip rounds (see :func:`step_together`)."""
        self.k += 1
        for flat in self.flat:
            flat.sync()
        yield from self._run_rounds(self.ROUNDS, self.k)

    def _start_rounds(self) -> Iterator[MixRound]:
        """``start()`` as a generator of its gossip rounds."""
        self.started = True
        yield from self._run_rounds(self.START, 0)

    @torch.no_grad()
    def start(self) -> "NodeOptimizer":
        """Move the parameters to the first gradient point; once, before the first gradient of a
        fresh run (not after ``load_state_dict``). Returns the optimizer."""
        start_together([self])
        return self

    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        step_together([self])
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


def _has_memory(t: torch.Tensor) -> bool:
    """Whether ``t`` has memory a kernel can run on: not a meta tensor nor a fake one (a
    ``FakeTensorMode`` tensor reports its device but keeps its storage on ``meta``)."""
    return t.untyped_storage().device.type != "meta"


def _on_numpy(cls: type, passes: dict[Round, Callable[..., None]]) -> Callable[..., None]:
    """The numba ``passes`` (one per round) called on 1-D numpy views of the (CPU, contiguous)
    buffers, with the scalars as :meth:`NodeOptimizer.split_scalars`' named tuples."""
    def update(rnd, g, s, p, work, own, state):
        a, t = cls.split_scalars([float(v) for v in s.numpy()])     # a CPU tensor's memory: no torch op
        flat = [b.numpy().reshape(-1) for b in (g, p, work)]
        passes[rnd](flat[0], t, a, flat[1], tuple(b.numpy().reshape(-1) for b in own),
                    tuple(b.numpy().reshape(-1) for b in state), flat[2])
    return update


_COMPILED: dict[type, Callable[..., None]] = {}


def compiled_update(cls: type) -> Callable[..., None]:
    """``cls.update`` with each round's phase through ``torch.compile`` (one generated kernel
    per buffer shape; the scalars are a tensor, so new values do not recompile), cached per class."""
    if cls not in _COMPILED:
        kernels = {rnd: torch.compile(_round_update(cls, rnd), fullgraph=True, dynamic=False)
                   for rnd in cls.START + cls.ROUNDS}

        def update(rnd, g, s, p, work, own, state):
            kernels[rnd](g, s, p, work, own, state)
        _COMPILED[cls] = update
    return _COMPILED[cls]


def _round_update(cls: type, rnd: Round) -> Callable[..., None]:
    def update(g, s, p, work, own, state):
        cls.update(rnd, g, s, p, work, own, state)
    # dynamo keeps the graphs of a code object in one cache of at most recompile_limit (8)
    # entries: a code object of its own per class and round (each holds one graph per buffer shape)
    update.__code__ = update.__code__.replace(co_name=f"{cls.__name__}_{rnd.phase.__name__}")
    return update


def _evaluate(closure):
    """torch.optim's closure convention: re-evaluate the loss (with grad) if one is given."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
