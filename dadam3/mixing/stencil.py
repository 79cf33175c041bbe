"""The stencil kernel of :class:`dadam3.mixing.mixer.LocalMixer` (``kernel="stencil"``): ``X <- W X``
as a sum over the cyclic shifts W uses. Any ``[M, M]`` matrix is a sum of its cyclic diagonals,

    W = Σ_s D_s P_s,    (P_s X)[i] = X[(i + s) mod M],    D_s = diag(W[i, (i + s) mod M]),

so ``(W X)[i] = Σ_{s ∈ S} W[i, i+s] · X[i+s]`` with S the shifts whose diagonal is not all
zero: 3 for a ring, 5 for a torus, M for the complete graph. ``torch.compile`` fuses it into
one kernel per flat buffer that reads each input row and writes each output row once (the
bytes floor, ``2 · M · P · size``), where cuBLAS runs the tiny ``[M, M] × [M, P]`` product as
a gemv far from it. Its order of summation (by shift) is not the ranks' (by node index), so
it is an option for the single-process simulator on CUDA (``kernel="auto"``: sparse graphs).
Eagerly each shift is a ``roll`` and an ``addcmul`` (7.5× the floor for a ring): on the CPU
it is only the reference for the compiled kernel.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch


def cyclic_shifts(W: np.ndarray) -> tuple[tuple[int, ...], np.ndarray]:
    """(shifts s with a nonzero diagonal ``W[i, (i+s) mod M]``, their coefficients ``[S, M]``)."""
    M = W.shape[0]
    rows = np.arange(M)
    shifts, coeffs = [], []
    for s in range(M):
        diagonal = W[rows, (rows + s) % M]
        if np.any(diagonal != 0):
            shifts.append(s)
            coeffs.append(diagonal)
    return tuple(shifts), np.asarray(coeffs, dtype=np.float64).reshape(len(shifts), M)


def stencil_mix(x: torch.Tensor, coeffs: torch.Tensor, shifts: tuple[int, ...], out: torch.Tensor) -> None:
    """``out ← Σ_s coeffs[s] ⊙ roll(x, −s, 0)``: ``x, out [M, P]`` (not aliased), ``coeffs [S, M, 1]``."""
    acc = coeffs[0] * (x if shifts[0] == 0 else torch.roll(x, -shifts[0], 0))
    for c, s in zip(coeffs[1:], shifts[1:]):
        acc = torch.addcmul(acc, c, torch.roll(x, -s, 0))
    out.copy_(acc)


_COMPILED: list[Callable] = []


def compiled_stencil_mix() -> Callable:
    """:func:`stencil_mix` through ``torch.compile`` (one generated kernel per buffer shape and shift set)."""
    if not _COMPILED:
        _COMPILED.append(torch.compile(stencil_mix, fullgraph=True, dynamic=False))
    return _COMPILED[0]


def use_stencil(num_shifts: int, nodes: int) -> bool:
    """The density rule: the stencil's compiled kernel does ``num_shifts`` multiply-adds per element
    where the matmul does ``nodes``; it is chosen for sparse graphs (at most half the shifts
    used: ring, torus, one-peer graphs) and the matmul is kept for dense ones (complete,
    exponential on few nodes, multi-round powers that fill W). A ring (3 shifts) counts as
    sparse at every M."""
    return num_shifts <= 3 or 2 * num_shifts <= nodes
