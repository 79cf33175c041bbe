"""Node-stacked normalisation layers (BatchNorm, InstanceNorm) for :mod:`dadam3.gan.stacked`.

Both act per channel, so on the channel-grouped layout ``[B, M·C, ...]`` they compute exactly
each node's statistics; parameters and running statistics are stacked ``[M, C]`` tensors.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

CHANNEL_GROUPED = "channel_grouped"  # [B, M*C, ...] (dadam3.gan.stacked imports it)


def stack_tensors(tensors: Iterable[torch.Tensor | None], as_parameter: bool):
    tensors = list(tensors)
    if tensors[0] is None:
        return None
    stacked = torch.stack([t.detach() for t in tensors]).clone()
    return nn.Parameter(stacked, requires_grad=tensors[0].requires_grad) if as_parameter else stacked


def same_hyperparameters(layers: Sequence[nn.Module], names: Sequence[str]) -> None:
    first = layers[0]
    for other in layers[1:]:
        if type(other) is not type(first) or any(getattr(other, n) != getattr(first, n) for n in names):
            raise ValueError(f"cannot stack {first!r} with {other!r}: nodes must share the architecture")


class StackedBatchNorm(nn.Module):
    """M ``nn.BatchNorm1d/2d``s with per-node statistics.

    Buffers: ``running_mean, running_var [M, C]``, ``num_batches_tracked [M]``; in train
    mode each node's running stats are updated exactly as its own BatchNorm would.
    """

    layout = CHANNEL_GROUPED
    hyper = ("num_features", "eps", "momentum", "affine", "track_running_stats")

    def __init__(self, norms: Sequence[nn.modules.batchnorm._BatchNorm]):
        super().__init__()
        same_hyperparameters(norms, self.hyper)
        for name in self.hyper:
            setattr(self, name, getattr(norms[0], name))
        self.num_nodes = len(norms)
        self.weight = stack_tensors((n.weight for n in norms), True)
        self.bias = stack_tensors((n.bias for n in norms), True)
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            self.register_buffer(name, stack_tensors((getattr(n, name) for n in norms), False))
        if self.momentum is None and self.num_batches_tracked is not None \
                and not bool((self.num_batches_tracked == self.num_batches_tracked[0]).all()):
            raise ValueError("momentum=None (cumulative average) needs equal num_batches_tracked on all nodes")

    def forward(self, h):
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked[0])
        use_batch_stats = self.training or self.running_mean is None
        stats = (lambda t: None if t is None else t.view(-1))     # a view: updates land in the [M, C] buffers
        flat = (lambda t: None if t is None else t.reshape(-1))   # parameters may be strided optimizer views
        return F.batch_norm(h, stats(self.running_mean), stats(self.running_var),
                            flat(self.weight), flat(self.bias), use_batch_stats, factor, self.eps)


class StackedInstanceNorm2d(nn.Module):
    """M ``nn.InstanceNorm2d``s (no running statistics): per-sample, per-channel normalisation,

        y = (h - mean_HW h) / sqrt(var_HW h + eps) * weight_c + bias_c,

    computed as ``F.group_norm`` with one group per channel of the ``[B, M·C, H, W]`` layout."""

    layout = CHANNEL_GROUPED
    hyper = ("num_features", "eps", "affine", "track_running_stats")

    def __init__(self, norms: Sequence[nn.InstanceNorm2d]):
        super().__init__()
        same_hyperparameters(norms, self.hyper)
        if norms[0].track_running_stats:
            raise NotImplementedError("stacked InstanceNorm supports track_running_stats=False only")
        self.eps = norms[0].eps
        self.num_nodes = len(norms)
        self.weight = stack_tensors((n.weight for n in norms), True)
        self.bias = stack_tensors((n.bias for n in norms), True)

    def forward(self, h):
        flat = (lambda t: None if t is None else t.reshape(-1))
        if h.dim() == 4 and not h.is_contiguous() and h.is_contiguous(memory_format=torch.channels_last):
            return self._nhwc(h, flat(self.weight), flat(self.bias))
        # group_norm with one group per channel is instance norm with a per-channel affine;
        # F.instance_norm would run cuDNN's batch norm over B·M·C channels of a few pixels each
        # (40 % of an H100 iteration, docs/benchmarks.md)
        return F.group_norm(h, h.shape[1], flat(self.weight), flat(self.bias), self.eps)

    def _nhwc(self, h, weight, bias):
        """The same normalisation written out, so channels_last activations stay channels_last
        (group_norm's kernels are NCHW only)."""
        var, mean = torch.var_mean(h, dim=(2, 3), unbiased=False, keepdim=True)
        y = (h - mean) * torch.rsqrt(var + self.eps)
        if weight is None:
            return y
        return torch.addcmul(bias.view(1, -1, 1, 1), y, weight.view(1, -1, 1, 1))
