"""Machinery shared by every optimizer: node-stacked parameters, the mixer, the sign
convention and the loop contract.

* Every parameter is a tensor ``[M, ...]``: row i is node i's copy. Under
  torch.distributed a rank holds only its block of rows, ``[mixer.local_nodes, ...]``;
  the updates are element-wise, so only the mixer knows the difference.
* The min-max convention is the paper's: the operator is
  ``G = [grad_theta f, -grad_alpha f]`` and every player descends along it. A
  parameter group with ``maximize=True`` holds maximising players: its ``.grad`` is
  taken as ``grad f`` and negated, so users may write ``f`` once for both players.
* Contract: after ``step()`` the parameters hold the point where the next
  gradient must be taken (``Z_{k+1}`` for the optimistic methods, ``X_k`` for the
  single-sequence ones). A loop is just ``grads at params -> step()``.
* ``mixer=None`` means no communication (W = I).
* Hyper-parameters: each algorithm declares ``HPARAMS``, name -> :class:`HParam` (its
  default and allowed interval); the constructor checks what it is given against them,
  as ``torch.optim`` does, and the registry, the configs and the synthetic kernels read
  the same table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping

import torch

from dadam3.errors.config import ConfigError, check_range
from dadam3.mixing import Mixer


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
    """Base class: holds the mixer and the iteration counter ``k`` (steps taken so far)."""

    HPARAMS: ClassVar[dict[str, HParam]] = {}

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

    def __init__(self, params: Iterable, hparams: Mapping[str, Any], mixer: Mixer | None = None,
                 maximize: bool = False):
        super().__init__(params, {**self.check_hparams(hparams), "maximize": maximize})
        self.mixer = mixer
        self.k = 0
        if mixer is not None:
            # the nodes this process holds: all M, or a rank's block under DistributedMixer
            n = mixer.local_nodes
            size = f"nodes={n}" if n == mixer.nodes else f"{n} (this rank's block of nodes={mixer.nodes})"
            for p in self._params():
                if p.shape[0] != n:
                    raise ValueError(f"parameter of shape {tuple(p.shape)} has no leading node axis "
                                     f"of size {size}")

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

    def _grads(self):
        """(group, param, operator component G) for every parameter that has a gradient."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    raise RuntimeError("every parameter needs a .grad before step(): the algorithms "
                                       "move all players simultaneously")
                yield group, p, (-p.grad if group["maximize"] else p.grad)

    def _mix_into(self, tensors: list[torch.Tensor], out: list[torch.Tensor], k: int) -> None:
        """out <- W_k^t tensors (a plain copy without a mixer)."""
        if self.mixer is None:
            for o, t in zip(out, tensors):
                o.copy_(t)
        else:
            self.mixer.mix(tensors, k, out=out)

    # -- checkpointing ------------------------------------------------------------------
    def state_dict(self):
        sd = super().state_dict()
        sd["k"] = self.k
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        self.k = int(state_dict.pop("k", 0))
        super().load_state_dict(state_dict)


class OptimisticGossip(NodeOptimizer):
    """The two-sequence structure shared by Dadam3, DOSG and OAdagrad:

        Z_k = (X_{k-1} - eta D_{k-1}) W^t          (gradient point; the params)
        G_k = operator at Z_k
        D_k = direction(G_k, state)                  (algorithm-specific)
        X_k = (X_{k-1} - eta D_k) W^t

    with D_0 = 0, so Z_1 = X_0 W^t; X_0 is the parameters' value at construction.
    Per parameter the state holds ``x`` (X), ``d`` (D) and the algorithm's own buffers.
    Subclasses implement ``_init_direction_state`` and ``_write_direction`` (writes D_k into
    ``state["d"]``). Instead of allocating temporaries, the step keeps one scratch tensor
    per parameter: X - eta D is written there and the mixer reads it, for X_k and then
    for Z_{k+1}.
    """

    def __init__(self, params, hparams: Mapping[str, Any], mixer: Mixer | None = None,
                 maximize: bool = False):
        super().__init__(params, hparams, mixer, maximize)
        self._work: dict[torch.Tensor, torch.Tensor] = {}    # scratch per parameter, not state
        with torch.no_grad():
            ps = list(self._params())
            for group in self.param_groups:
                for p in group["params"]:
                    st = self.state[p]
                    st["x"] = p.detach().clone()
                    st["d"] = torch.zeros_like(p)
                    st.update(self._init_direction_state(p, group))
            self._mix_into([self.state[p]["x"] for p in ps], ps, 1)

    def _init_direction_state(self, p: torch.Tensor, group: dict) -> dict:
        return {}

    def _write_direction(self, g: torch.Tensor, state: dict, group: dict, k: int, work: torch.Tensor) -> None:
        """Write D_k into ``state["d"]`` in place; ``work`` is scratch of p's shape (free to overwrite)."""
        raise NotImplementedError

    def _scratch(self, p: torch.Tensor) -> torch.Tensor:
        work = self._work.get(p)
        if work is None or work.shape != p.shape or work.dtype != p.dtype or work.device != p.device:
            work = self._work[p] = torch.empty_like(p)
        return work

    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        self.k += 1
        k = self.k
        params, states, lrs, before_mixing = [], [], [], []   # before_mixing: X - eta D, to be mixed
        for group, p, g in self._grads():
            st, work = self.state[p], self._scratch(p)
            self._write_direction(g, st, group, k, work)                                # D_k
            torch.add(st["x"], st["d"], alpha=-group["lr"], out=work)                   # X_{k-1} - eta D_k
            params.append(p)
            states.append(st)
            lrs.append(group["lr"])
            before_mixing.append(work)
        self._mix_into(before_mixing, [st["x"] for st in states], k)                    # X_k
        for st, lr, work in zip(states, lrs, before_mixing):
            torch.add(st["x"], st["d"], alpha=-lr, out=work)                            # X_k - eta D_k
        self._mix_into(before_mixing, params, k + 1)                                     # Z_{k+1}
        return loss


class SingleSequenceGossip(NodeOptimizer):
    """One sequence, adapt-then-combine: the gradient is taken at X_{k-1} (the params),

        X_k = local_step(X_{k-1}, G_k) W^t

    Subclasses implement ``_local_step`` (returns the point before mixing).
    """

    def __init__(self, params, hparams: Mapping[str, Any], mixer: Mixer | None = None,
                 maximize: bool = False):
        super().__init__(params, hparams, mixer, maximize)
        for p in self._params():
            self.state[p].update(self._init_state(p))

    def _init_state(self, p: torch.Tensor) -> dict:
        return {}

    def _local_step(self, p: torch.Tensor, g: torch.Tensor, state: dict, group: dict, k: int) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        self.k += 1
        ps, x_half = [], []
        for group, p, g in self._grads():
            x_half.append(self._local_step(p, g, self.state[p], group, self.k))
            ps.append(p)
        self._mix_into(x_half, ps, self.k)
        return loss


def _evaluate(closure):
    """torch.optim's closure convention: re-evaluate the loss (with grad) if one is given."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def adam_direction(g: torch.Tensor, st: dict, group: dict, k: int) -> torch.Tensor:
    """Bias-corrected Adam direction (Kingma & Ba 2015), updating st["m"], st["v"] in place:
    m_k = b1 m + (1-b1) g, v_k = b2 v + (1-b2) g^2, D = (m_k/(1-b1^k)) / (sqrt(v_k/(1-b2^k)) + eps)."""
    b1, b2 = group["beta1"], group["beta2"]
    st["m"].mul_(b1).add_(g, alpha=1 - b1)
    st["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
    return (st["m"] / (1 - b1 ** k)) / ((st["v"] / (1 - b2 ** k)).sqrt() + group["eps"])
