"""Machinery shared by every optimizer: node-stacked parameters, the mixer, the sign
convention and the loop contract.

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
* Hyper-parameters: each algorithm declares ``HPARAMS``, name -> :class:`HParam` (its
  default and allowed interval); the constructor checks what it is given against them,
  as ``torch.optim`` does, and the registry, the configs and the synthetic kernels read
  the same table.
* An algorithm is its hyper-parameters (``HPARAMS``), its state buffers and their initial
  values (``STATE``), the per-step numbers it needs (``scalars(group, k)``) and its
  direction, written once as an in-place function of whole buffers:
  ``direction(g, s, out, scratch, *state)`` writes the step direction into ``out``
  (``s``: the scalars as a tensor; ``scratch``: a free buffer). Its skeleton (the two-sequence
  :class:`OptimisticGossip` or the adapt-then-combine :class:`SingleSequenceGossip`) does the
  rest: ``X - eta * direction`` and the gossip.
* Speed: a group's parameters, gradients and state are views of flat ``[n, P]`` buffers
  (:mod:`dadam3.optim.flat`), so a step is a few element-wise ops on whole buffers and one
  mixer call per gossip round. ``compile=True`` (the default on CUDA) runs the skeleton's
  ``update`` (direction, then ``X - eta * direction``) through ``torch.compile``, which fuses
  it into one kernel; the same function runs eagerly otherwise. :func:`step_together` steps several
  optimizers that share a mixer with one exchange per gossip round for all of them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping, Sequence

import torch
from torch._guards import detect_fake_mode

from dadam3.errors import ConfigError, check_range
from dadam3.mixing import Mixer
from dadam3.optim.flat import FlatGroup


@dataclass(frozen=True)
class HParam:
    """A hyper-parameter's default and allowed interval (``None``: unbounded; always finite)."""

    default: float
    low: float | None = 0.0
    high: float | None = None
    low_open: bool = False
    high_open: bool = True

    def check(self, name: str, value: Any) -> float:
        return check_range(f"optimizer.{name}", value, self.low, self.high, self.low_open, self.high_open)


LR = HParam(1e-3, 0.0, None, low_open=True)
UNIT = HParam(0.0, 0.0, 1.0)                     # a decay rate in [0, 1)
EPS = HParam(1e-8)
ADAM_HPARAMS = {"lr": LR, "beta1": HParam(0.5, 0.0, 1.0), "beta2": HParam(0.999, 0.0, 1.0), "eps": EPS}


class NodeOptimizer(torch.optim.Optimizer):
    """Base class: the mixer, the iteration counter ``k`` (steps taken so far) and the flat
    buffers of each parameter group.

    An algorithm subclasses a skeleton and declares ``HPARAMS``, ``STATE`` (name -> initial
    value, a number or the name of a hyper-parameter), ``scalars(group, k)`` and the static
    ``direction(g, s, out, scratch, *state)``; the skeleton's ``compose`` turns the direction
    into the class's ``update`` (once, when the class is defined).
    """

    HPARAMS: ClassVar[dict[str, HParam]] = {}
    STATE: ClassVar[dict[str, float | str]] = {}
    update: ClassVar[Callable[..., None]]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "direction" in cls.__dict__:
            cls.update = staticmethod(cls.compose(cls.direction))

    @staticmethod
    def compose(direction: Callable[..., None]) -> Callable[..., None]:
        raise NotImplementedError

    @classmethod
    def check_hparams(cls, hparams: Mapping[str, Any], owner: str | None = None) -> dict[str, float]:
        """All of ``HPARAMS``: the given values checked, the others at their defaults.

        Raises a one-line ConfigError naming ``optimizer.<key>`` for an unknown key or a
        value outside its interval (``owner`` names the optimizer in the message)."""
        for key, value in hparams.items():
            if key not in cls.HPARAMS:
                raise ConfigError(f"optimizer.{key}", value, f"not an option of {owner or cls.__name__}; "
                                                             f"allowed: {', '.join(cls.HPARAMS)}")
        return {name: hp.check(name, hparams.get(name, hp.default)) for name, hp in cls.HPARAMS.items()}

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
            flat.state = {name: flat.new_buffer(group[init] if isinstance(init, str) else init)
                          for name, init in self._state_init().items()}
            flat.work = torch.empty_like(flat.param_buf)
            flat.scalars = None
            self._bind_state_views(flat)
        device = self.flat[0].param_buf.device if self.flat else torch.device("cpu")
        if compile is None:     # fake tensors (device checks without a GPU) have no memory to run a kernel on
            compile = device.type == "cuda" and torch.cuda.is_available() and \
                not (self.flat and detect_fake_mode((self.flat[0].param_buf,)))
        self.compiled = bool(compile)
        self._update = compiled_update(type(self)) if self.compiled else type(self).update

    def _state_init(self) -> dict[str, float | str]:
        return dict(self.STATE)

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

    def _operator(self, group: dict, flat: FlatGroup) -> torch.Tensor:
        """G of the group as one ``[n, P]`` buffer: the gradients (negated for ``maximize``)."""
        flat.sync()
        return -flat.grad_buf if group["maximize"] else flat.grad_buf

    def _scalar_tensor(self, group: dict, flat: FlatGroup, k: int) -> torch.Tensor:
        """``scalars(group, k)`` and -lr (the skeleton's, last) as a 1-D tensor on the buffers'
        device (an asynchronous copy on CUDA)."""
        values = torch.tensor(self.scalars(group, k) + [-group["lr"]], dtype=flat.param_buf.dtype)
        device = flat.param_buf.device
        if device.type != "cuda":
            return values.to(device)
        if flat.scalars is None or flat.scalars.numel() != values.numel():
            flat.scalars = torch.empty(values.numel(), dtype=values.dtype, device=device)
        if torch.cuda.is_available() and detect_fake_mode((flat.param_buf,)) is None:
            values = values.pin_memory()          # fake tensors (tests without a GPU) cannot be pinned
        return flat.scalars.copy_(values, non_blocking=True)

    def scalars(self, group: dict, k: int) -> list[float]:
        """The numbers ``direction`` reads from ``s`` at step k (none by default)."""
        return []

    def _rounds(self) -> Iterator["MixRound"]:
        """The step as a generator of its gossip rounds (see :func:`step_together`)."""
        raise NotImplementedError

    def _start_rounds(self) -> Iterator["MixRound"]:
        """``start()`` as a generator of its gossip rounds (none by default)."""
        self.started = True
        yield from ()

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


class MixRound:
    """One gossip round of a step: ``outs <- W_k^t tensors`` (a plain copy without a mixer)."""

    def __init__(self, tensors: list[torch.Tensor], outs: list[torch.Tensor], k: int):
        self.tensors, self.outs, self.k = tensors, outs, k


@torch.no_grad()
def step_together(optimizers: Sequence[NodeOptimizer]) -> None:
    """Step ``optimizers`` (e.g. the generator's and the critic's) at once: each gossip round
    mixes all of their buffers in ONE mixer call, so under torch.distributed a round sends one
    message per neighbour for all players. Same results as stepping them one by one.

    Optimizers with different mixers, classes or iteration counters are stepped one by one."""
    for opt in optimizers:
        if not opt.started:
            raise RuntimeError(f"{type(opt).__name__}.step() before start(): call start() (or "
                               "start_together) once before the first gradient of a fresh run")
    _together(list(optimizers), lambda opt: opt._rounds())


@torch.no_grad()
def start_together(optimizers: Sequence[NodeOptimizer]) -> None:
    """``start()`` of several optimizers sharing a mixer, with one exchange for all of them."""
    _together(list(optimizers), lambda opt: opt._start_rounds())


def _together(optimizers: list[NodeOptimizer], rounds_of: Callable[[NodeOptimizer], Iterator["MixRound"]]) -> None:
    """Run the optimizers' gossip-round generators side by side, one mixer call per round."""
    first = optimizers[0]
    if any(o.mixer is not first.mixer or type(o) is not type(first) or o.k != first.k for o in optimizers):
        for opt in optimizers:
            _together([opt], rounds_of)
        return
    rounds = [rounds_of(opt) for opt in optimizers]
    while True:
        requests = [next(r, None) for r in rounds]
        if requests[0] is None:
            return
        tensors = [t for req in requests for t in req.tensors]
        outs = [o for req in requests for o in req.outs]
        if first.mixer is None:
            for o, t in zip(outs, tensors):
                o.copy_(t)
        else:
            first.mixer.mix(tensors, requests[0].k, out=outs)


class OptimisticGossip(NodeOptimizer):
    """The two-sequence structure shared by Dadam3, DOSG and OAdagrad:

        Z_k = (X_{k-1} - eta D_{k-1}) W^t          (gradient point; the params)
        G_k = operator at Z_k
        D_k = direction(G_k, state)                  (algorithm-specific)
        X_k = (X_{k-1} - eta D_k) W^t

    with D_0 = 0, so Z_1 = X_0 W^t; X_0 is the parameters' value at construction.
    Per group the state holds ``x`` (X), ``d`` (D) and the algorithm's own buffers, all flat.
    The algorithm's ``direction`` writes D_k into ``d`` (and its state in place); ``update``
    adds ``X_{k-1} - eta D_k`` into ``work``; the mixer reads ``work`` for X_k, then
    ``X_k - eta D_k`` (written into ``work`` again) for Z_{k+1}.
    """

    @staticmethod
    def compose(direction):
        def update(g, s, x, d, work, *state):
            direction(g, s, d, work, *state)                  # D_k (work: scratch)
            torch.addcmul(x, d, s[-1], out=work)              # X_{k-1} - eta D_k
        return update

    def __init__(self, params, mixer: Mixer | None = None, maximize: bool = False,
                 compile: bool | None = None, **hparams):
        super().__init__(params, mixer, maximize, compile, **hparams)

    def _start_rounds(self):
        self.started = True
        for flat in self.flat:
            flat.state["x"].copy_(flat.param_buf)                                            # X_0
        yield MixRound([f.state["x"] for f in self.flat], [f.param_buf for f in self.flat], 1)  # Z_1 = X_0 W^t

    def _state_init(self):
        return {"x": 0.0, "d": 0.0, **self.STATE}

    def _rounds(self):
        self.k += 1
        k = self.k
        for group, flat in zip(self.param_groups, self.flat):
            st = flat.state
            self._update(self._operator(group, flat), self._scalar_tensor(group, flat, k),
                         st["x"], st["d"], flat.work, *(st[name] for name in self.STATE))
        yield MixRound([f.work for f in self.flat], [f.state["x"] for f in self.flat], k)      # X_k
        for group, flat in zip(self.param_groups, self.flat):
            torch.add(flat.state["x"], flat.state["d"], alpha=-group["lr"], out=flat.work)      # X_k - eta D_k
        yield MixRound([f.work for f in self.flat], [f.param_buf for f in self.flat], k + 1)  # Z_{k+1}


class SingleSequenceGossip(NodeOptimizer):
    """One sequence, adapt-then-combine: the gradient is taken at X_{k-1} (the params),

        X_k = local_step(X_{k-1}, G_k) W^t

    The algorithm's ``direction`` writes its step direction into ``tmp``; ``update`` adds
    ``X_{k-1} - eta * direction`` into ``work``, which the mixer reads.
    """

    @staticmethod
    def compose(direction):
        def update(g, s, p, work, tmp, *state):
            direction(g, s, tmp, work, *state)                # the step direction (work: scratch)
            torch.addcmul(p, tmp, s[-1], out=work)            # X_{k-1} - eta * direction
        return update

    def __init__(self, params, mixer: Mixer | None = None, maximize: bool = False,
                 compile: bool | None = None, **hparams):
        super().__init__(params, mixer, maximize, compile, **hparams)
        for flat in self.flat:
            flat.tmp = torch.empty_like(flat.param_buf)

    def _rounds(self):
        self.k += 1
        k = self.k
        for group, flat in zip(self.param_groups, self.flat):
            st = flat.state
            self._update(self._operator(group, flat), self._scalar_tensor(group, flat, k),
                         flat.param_buf, flat.work, flat.tmp, *(st[name] for name in self.STATE))
        yield MixRound([f.work for f in self.flat], [f.param_buf for f in self.flat], k)


_COMPILED: dict[type, Callable[..., None]] = {}


def compiled_update(cls: type) -> Callable[..., None]:
    """``cls.update`` through ``torch.compile`` (one fused kernel per buffer shape), cached per class."""
    if cls not in _COMPILED:
        _COMPILED[cls] = torch.compile(cls.update, fullgraph=True, dynamic=False)
    return _COMPILED[cls]


def _evaluate(closure):
    """torch.optim's closure convention: re-evaluate the loss (with grad) if one is given."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def adam_scalars(group: dict, k: int) -> list[float]:
    """[1 - b1, 1 - b2, 1 / (1 - b1^k), 1 / sqrt(1 - b2^k), eps] for :func:`adam_direction_`."""
    b1, b2 = group["beta1"], group["beta2"]
    return [1 - b1, 1 - b2, 1 / (1 - b1 ** k), 1 / math.sqrt(1 - b2 ** k), group["eps"]]


def adam_direction_(g, s, m, v, out) -> None:
    """Bias-corrected Adam direction (Kingma & Ba 2015) into ``out``, m and v in place:
    m_k = b1 m + (1-b1) g, v_k = b2 v + (1-b2) g^2, D = (m_k/(1-b1^k)) / (sqrt(v_k/(1-b2^k)) + eps).
    ``s`` = :func:`adam_scalars`."""
    m.lerp_(g, s[0])
    v.lerp_(g * g, s[1])
    torch.sqrt(v, out=out).mul_(s[3]).add_(s[4])                 # sqrt(v_hat) + eps
    torch.div(m, out, out=out).mul_(s[2])                          # m_hat / (sqrt(v_hat) + eps)
