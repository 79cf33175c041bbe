"""A parameter group's flat buffers: its parameters, gradients and state as views of node-major
``[n, P]`` tensors (each parameter a column range), so a round of an optimizer's step is a few
element-wise passes and one mixer call per buffer (:mod:`dadam3.optim.base`)."""
from __future__ import annotations

from typing import Iterable, Sequence

import torch


# ---- flat buffers: a step is memory-bound, so each group's parameters, gradients and state
# are views of flat node-major [n, P] buffers (each parameter a column range; its shape kept,
# rows strided by P). A round is then a few element-wise passes and one mixer call per buffer.
# A caller that replaces a parameter's data or .grad (p.grad = g) is put back on the views by
# FlatGroup.sync before each step; .grad written in place (as dadam3.gan.wgan_gp does) costs nothing.
class FlatGroup:
    """Parameters, gradients and named state buffers of one group, all ``[n, P]``.

    The optimizer adds what an engine reads (:mod:`dadam3.optim.engines`): ``state`` (name ->
    buffer), ``own`` and ``algo_state`` (the skeleton's and the algorithm's buffers, in the order
    of ``OWN`` and ``STATE``), ``work`` (the value a round mixes) and ``scalars`` (step k's
    numbers, a small tensor on the buffers' device)."""

    def __init__(self, params: Sequence[torch.Tensor]):
        params = list(params)
        first = params[0]
        self.params = params
        self.nodes = first.shape[0]
        self.offsets = [0]
        for p in params:
            self.offsets.append(self.offsets[-1] + p[0].numel())
        self.width = self.offsets[-1]
        with torch.no_grad():
            self.param_buf = torch.empty(self.nodes, self.width, dtype=first.dtype, device=first.device)
            self.grad_buf = torch.zeros_like(self.param_buf)
            self._param_views = self.views(self.param_buf)
            self._grad_views = self.views(self.grad_buf)
            for p, view in zip(params, self._param_views):
                view.copy_(p.detach())
                p.data = view

    def target(self, into: int) -> torch.Tensor:
        """A round's destination: the parameters (``into`` 0) or skeleton buffer ``own[into - 1]``."""
        return self.param_buf if into == 0 else self.own[into - 1]

    def views(self, buf: torch.Tensor) -> list[torch.Tensor]:
        """Each parameter's ``[n, ...]`` view of ``buf``."""
        return [buf[:, a:b].view(p.shape) for p, a, b in zip(self.params, self.offsets, self.offsets[1:])]

    def new_buffer(self, fill: float = 0.0) -> torch.Tensor:
        return torch.full_like(self.param_buf, fill)

    def copy_into(self, buf: torch.Tensor, tensors: Iterable[torch.Tensor]) -> None:
        """Write ``tensors`` (one per parameter, each of its parameter's shape) into ``buf [n, P]``."""
        for view, t in zip(self.views(buf), tensors):
            view.copy_(t)

    @torch.no_grad()
    def sync(self) -> None:
        """Point parameters and gradients back at their views if a caller replaced them."""
        for p, view, gview in zip(self.params, self._param_views, self._grad_views):
            if not same_memory(p, view):
                view.copy_(p.detach())
                p.data = view
            g = p.grad
            if g is None:
                raise RuntimeError("every parameter needs a .grad before step(): the algorithms "
                                   "move all players simultaneously")
            if g is not gview:
                if not same_memory(g, gview):
                    gview.copy_(g)
                p.grad = gview


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same view of the same storage (works on fake tensors too)."""
    return (a.untyped_storage()._cdata == b.untyped_storage()._cdata and a.storage_offset() == b.storage_offset()
            and a.stride() == b.stride() and a.shape == b.shape)
