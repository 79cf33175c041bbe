"""One parameter group's tensors as views of flat node-major buffers ``[n, P]``.

An optimizer step is memory-bound: it should read and write each value once, in a few
kernels, whatever the number of parameter tensors. So every parameter of a group is made a
view of one buffer ``params [n, P]`` (n: the nodes this process holds, P: the group's values
per node, each parameter a contiguous column range), its ``.grad`` a view of ``grads [n, P]``,
and each state buffer (X, D, moments) is one ``[n, P]`` tensor whose per-parameter views are
what ``optimizer.state[p]`` shows. An update is then a handful of element-wise ops on whole
buffers and a gossip round one mixer call per buffer (one matmul along the node axis).

The views keep every parameter's shape ``[n, ...]`` (rows are strided by P): modules read
them as before (a stacked convolution's weight reshape becomes a copy, which the forward
pass made anyway in the channel-grouped layout only for non-contiguous weights).
Gradients become views at the first step (a parameter's ``.grad`` is None until a caller sets
it, as in torch). If a caller replaces a parameter's data or ``.grad`` (``p.grad = g``;
``Module.load_state_dict`` copies into the views and keeps them), :meth:`FlatGroup.sync`
copies the new tensor into the buffer and points the parameter back at its view before each
step; ``.grad`` written in place (``p.grad.copy_(g)``, as :mod:`dadam3.gan.wgan_gp` does)
costs nothing more.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch


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
