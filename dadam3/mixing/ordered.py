"""One gossip round in a fixed summation order, so that results do not depend on how the M
nodes are spread over processes.

A round computes, for every node i of a block B::

    (W X)[i] = sum_{j : W[i, j] > 0} W[i, j] X[j]        summed in ascending node index j

with every product and every partial sum rounded once (``torch.mul`` / ``add_``: no matmul,
no fused multiply-add). The simulator (all M rows) and a rank (its block's rows, from the
rows ``C`` it holds after the exchange) evaluate the same expression in the same order for
each node, so their results agree bit for bit in every dtype, whatever the number of ranks.
A BLAS matmul does not promise this: its blocking (and so its rounding) depends on the
shape of the whole product, e.g. on how many rows a rank holds.

Kernels: on the CPU one compiled numba loop (:func:`_ordered_rows`); on CUDA one Triton kernel
per buffer and round (:mod:`dadam3.mixing.ordered_triton`, no fused multiply-add: the same bits);
elsewhere, under autograd, or without Triton, the torch ops of :meth:`RoundTerms.apply`.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from dadam3.compiled.numba_cache import njit_cached

_TRITON: list = []


def _triton_kernel():
    """:mod:`dadam3.mixing.ordered_triton`, imported on first use; None where Triton is missing."""
    if not _TRITON:
        try:
            from dadam3.mixing import ordered_triton
        except ImportError:          # Triton ships with torch's Linux CUDA wheels only
            ordered_triton = None
        _TRITON.append(ordered_triton)
    return _TRITON[0]


def _ordered_rows(x, index, weight, out):     # pragma: no cover - compiled
    """``out[i, p] = sum_t weight[i, t] * x[index[i, t], p]``, each product and partial sum
    rounded once in ``t`` order (no fastmath: no reordering, no fused multiply-add): the
    values of :meth:`RoundTerms.apply`'s torch ops, in one compiled loop (about the time of
    the BLAS matmul by W on the CPU, where the torch ops take several passes per term)."""
    rows, terms = index.shape
    for i in range(rows):
        w0, j0 = weight[i, 0], index[i, 0]
        for p in range(x.shape[1]):
            out[i, p] = x[j0, p] * w0
        for t in range(1, terms):
            w, j = weight[i, t], index[i, t]
            for p in range(x.shape[1]):
                out[i, p] = out[i, p] + x[j, p] * w


_ordered_rows = njit_cached(_ordered_rows, nogil=True)


class RoundTerms:
    """The nonzero terms of rows of one round's matrix: ``index[i, t]`` (a position among the
    input rows) and ``weight[i, t]``, ascending in node index along ``t``. Rows with fewer
    terms are padded with weight 0 on their last real column (adds an exact +0).

    ``W_rows``: the rows of W to compute (``[L, len(columns)]``, float64); ``columns``: the
    node index of each input row (ascending)."""

    def __init__(self, W_rows: np.ndarray, columns: np.ndarray):
        if np.any(np.diff(columns) <= 0):
            raise ValueError("columns must be strictly ascending node indices")
        nonzero = [np.nonzero(row)[0] for row in W_rows]
        width = max(1, max(len(nz) for nz in nonzero))
        index = np.zeros((len(W_rows), width), dtype=np.int64)
        weight = np.zeros((len(W_rows), width), dtype=np.float64)
        for i, nz in enumerate(nonzero):
            if len(nz):
                index[i, :len(nz)], index[i, len(nz):] = nz, nz[-1]
                weight[i, :len(nz)] = W_rows[i, nz]
        self.index, self.weight = index, weight
        self._on: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def on(self, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(index, weight)`` as tensors on ``device`` (weights in ``dtype``), cached."""
        key = (str(device), dtype)
        if key not in self._on:
            self._on[key] = (torch.as_tensor(self.index, device=device),
                             torch.as_tensor(self.weight, device=device, dtype=dtype))
        return self._on[key]

    @staticmethod
    def _compiled_pass(x: torch.Tensor, out: torch.Tensor) -> bool:
        """The one-pass numba loop applies: plain CPU float tensors, contiguous, no autograd,
        no dispatch mode (op counters and fake tensors see the torch ops)."""
        return (x.device.type == "cpu" and out.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
                and out.dtype == x.dtype and x.dim() == 2 and x.is_contiguous() and out.is_contiguous()
                and not (x.requires_grad or out.requires_grad) and _get_current_dispatch_mode() is None)

    @staticmethod
    def _triton_pass(x: torch.Tensor, out: torch.Tensor):
        """The Triton module where its one-kernel pass applies (CUDA tensors, no autograd; under
        a dispatch mode too: it is one custom op), else None."""
        if x.device.type != "cuda" or x.requires_grad or out.requires_grad:
            return None
        kernel = _triton_kernel()
        return kernel if kernel is not None and kernel.supports(x, out) else None

    def apply(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out[i] = sum_t weight[i, t] * x[index[i, t]]`` in ``t`` order; ``x`` is
        ``[rows, n]``, ``out`` ``[L, n]`` and must not overlap ``x``."""
        index, weight = self.on(x.device, x.dtype)            # cached per device and dtype
        if self._compiled_pass(x, out):
            _ordered_rows(x.numpy(), index.numpy(), weight.numpy(), out.numpy())
            return out
        if self._triton_pass(x, out) is not None:
            torch.ops.dadam3.ordered_round(x, index, weight, out)
            return out
        return self.apply_torch_ops(x, out)

    def apply_torch_ops(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """:meth:`apply` as torch ops (an ``index_select``, a ``mul`` and an ``add`` per term):
        any device, autograd, dispatch modes; the reference of the compiled kernels."""
        index, weight = self.on(x.device, x.dtype)
        torch.mul(x.index_select(0, index[:, 0]), weight[:, :1], out=out)
        for t in range(1, index.shape[1]):
            out.add_(x.index_select(0, index[:, t]).mul_(weight[:, t:t + 1]))
        return out
