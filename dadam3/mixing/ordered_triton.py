"""The ordered gossip round (:mod:`dadam3.mixing.ordered`) as ONE Triton kernel per flat buffer
and round, for CUDA tensors.

It computes what :meth:`dadam3.mixing.ordered.RoundTerms.apply` computes::

    out[i, p] = (...((x[j_0, p] * w_i0) + x[j_1, p] * w_i1) + ...) + x[j_T-1, p] * w_i,T-1

with ``j_t = index[i, t]``, ``w_it = weight[i, t]`` ascending in node index, every product and
every partial sum rounded once: the kernel is compiled with ``enable_fp_fusion=False`` (no
fused multiply-add, which would round a product and a sum together), so its float32 result is
bit-equal to the CPU kernel's and, as there, independent of how the nodes are spread over ranks.

Bytes: a program owns one block of ``BLOCK`` columns and computes every output row of it, so it
reads the input rows' block from DRAM once (the repeated reads of a row by later terms and rows
hit the cache) and writes each output row once: ``(rows read + rows written) · n · size``, the
bytes floor of a round (``2 · M · n · size`` in the simulator), where the torch ops of the eager
form (an ``index_select``, a ``mul`` and an ``add`` per term) move about 9× that.

The launch is the custom op ``torch.ops.dadam3.ordered_round`` (mutates ``out``), so dispatch
modes see one op per buffer and round (the op censuses count it with its bytes), fake tensors
propagate through it (``register_fake``), and a CUDA graph captures it like any kernel. On CPU
tensors the same kernel runs in Triton's interpreter (``TRITON_INTERPRET=1`` semantics: numpy,
one program at a time) — the tests' way to check it without a GPU; the mixers never send CPU
tensors here (numba's loop is the CPU kernel).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

BLOCK = 1024          # columns per program (4 KiB of float32 per row)
LAUNCHES = [0]        # kernel launches in this process (the benchmark's count per mix)


def _ordered_round_kernel(x_ptr, index_ptr, weight_ptr, out_ptr, rows, n, x_stride, out_stride,
                          TERMS: tl.constexpr, BLOCK: tl.constexpr):
    """Program ``b``: columns ``[b·BLOCK, (b+1)·BLOCK)`` of every output row, terms in ``t`` order."""
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    for i in range(rows):
        row = tl.cast(i, tl.int64)
        j = tl.load(index_ptr + row * TERMS)
        w = tl.load(weight_ptr + row * TERMS)
        acc = tl.load(x_ptr + j * x_stride + cols, mask=mask) * w
        for t in tl.static_range(1, TERMS):
            j = tl.load(index_ptr + row * TERMS + t)
            w = tl.load(weight_ptr + row * TERMS + t)
            acc = acc + tl.load(x_ptr + j * x_stride + cols, mask=mask) * w
        tl.store(out_ptr + row * out_stride + cols, acc, mask=mask)


_compiled = triton.jit(_ordered_round_kernel)
_interpreted = _compiled if isinstance(_compiled, InterpretedFunction) else InterpretedFunction(_ordered_round_kernel)


def supports(x: torch.Tensor, out: torch.Tensor) -> bool:
    """The kernel applies: float32/float64 2-d tensors on one device with unit column stride."""
    return (x.dtype in (torch.float32, torch.float64) and out.dtype == x.dtype and x.dim() == out.dim() == 2
            and x.device == out.device and x.stride(1) == 1 and out.stride(1) == 1 and x.shape[1] == out.shape[1])


def launch(x: torch.Tensor, index: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
           block: int = BLOCK) -> None:
    """``out[i] = Σ_t weight[i, t] · x[index[i, t]]`` in ``t`` order, one kernel: ``x [R, n]``,
    ``index [L, T]`` (int64, positions among x's rows), ``weight [L, T]`` (x's dtype),
    ``out [L, n]`` (not overlapping x). CUDA tensors run the compiled kernel, CPU tensors the
    interpreter."""
    rows, terms = index.shape
    n = x.shape[1]
    if rows == 0 or n == 0:
        return
    kernel = _interpreted if x.device.type == "cpu" else _compiled
    LAUNCHES[0] += 1
    kernel[(triton.cdiv(n, block),)](x, index.contiguous(), weight.contiguous(), out, rows, n, x.stride(0),
                                     out.stride(0), TERMS=terms, BLOCK=block, enable_fp_fusion=False)


@torch.library.custom_op("dadam3::ordered_round", mutates_args=("out",))
def ordered_round(x: torch.Tensor, index: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
    """One ordered gossip round into ``out`` (see :func:`launch`), as one dispatched op."""
    launch(x, index, weight, out)


@ordered_round.register_fake
def _(x, index, weight, out) -> None:
    return None
