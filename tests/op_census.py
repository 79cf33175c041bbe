"""Counting what a piece of code dispatches: convolution calls by kind, and bytes moved by ops (a
test and benchmark helper, not part of the package: ``tests/`` imports it as ``op_census``,
``scripts/`` put ``tests/`` on ``sys.path`` for it).

Both are ``TorchDispatchMode``s, so they see the aten ops that autograd actually runs,
including those of the double backward, on any device (the meta device included).
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_CONVOLUTIONS = {torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default,
                 torch.ops.aten._convolution.default}


class ConvCensus(TorchDispatchMode):
    """Counts convolution calls: ``calls`` (all ``aten.convolution``/``convolution_backward``) and
    ``dilated_ungrouped`` (forward convolutions with ``groups = 1`` and a dilation > 1 — the calls
    torch's double-backward formula makes per group of a grouped convolution); ``by_groups``
    counts calls by their ``groups`` argument, ``by_op`` by aten op name, ``by_layout`` by the
    memory format of the activation operand (the input; for ``convolution_backward`` its
    ``input`` argument): ``nhwc``, ``nchw``, ``either`` (both at once: one pixel or one
    channel) or ``strided`` — on CUDA each ``nchw`` call of a grouped convolution costs cuDNN
    an NCHW↔NHWC conversion of its operands."""

    def __init__(self):
        super().__init__()
        self.calls = 0
        self.dilated_ungrouped = 0
        self.by_groups: Counter = Counter()
        self.by_op: Counter = Counter()
        self.by_layout: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CONVOLUTIONS:
            self.calls += 1
            groups = int(args[9] if func is torch.ops.aten.convolution_backward.default else args[8])
            self.by_groups[groups] += 1
            self.by_op[func.__name__] += 1
            self.by_layout[layout(args[1] if func is torch.ops.aten.convolution_backward.default else args[0])] += 1
            if func is not torch.ops.aten.convolution_backward.default:
                dilation = args[5]
                if groups == 1 and any(int(d) > 1 for d in dilation):
                    self.dilated_ungrouped += 1
        return func(*args, **kwargs)


def layout(t: torch.Tensor) -> str:
    """``nhwc`` / ``nchw`` / ``either`` (both, or one pixel: the same element order) / ``strided``
    (neither) of a 4-d tensor."""
    if t.shape[-2:].numel() == 1:
        return "either"
    nhwc, nchw = t.is_contiguous(memory_format=torch.channels_last), t.is_contiguous()
    return "either" if nhwc and nchw else "nhwc" if nhwc else "nchw" if nchw else "strided"


def _tensor_bytes(tree) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(tree) if isinstance(t, torch.Tensor))


class ByteCensus(TorchDispatchMode):
    """Bytes each dispatched op reads (its tensor arguments) plus writes (its tensor results),
    summed in ``bytes`` (an ``out=`` argument counts as written, not read; an in-place op's
    target as read and written); ``ops`` counts the ops. Views, metadata queries
    (``prim.device``, which fake tensors dispatch) and allocations (``empty_like``: no
    kernel) move nothing and are not counted. The memory traffic of memory-bound code such
    as the gossip, assuming no operand stays in cache."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not _is_view(func):
            self.ops += 1
            reads = (args, {k: v for k, v in kwargs.items() if k != "out"})
            self.bytes += _tensor_bytes(reads) + _tensor_bytes(out)
        return out


_ALLOCATIONS = {torch.ops.aten.empty_like.default, torch.ops.aten.empty.memory_format,
                torch.ops.aten.empty_strided.default}


def _is_view(func) -> bool:
    if func.namespace == "prim" or func in _ALLOCATIONS:
        return True
    schema = func._schema
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
