"""Your own generator and critic (``model=custom``): built from ``{_target_: pkg.mod.Class, **kwargs}``
as Hydra's ``instantiate`` builds objects, checked once at start-up, stacked over the M nodes.

The checks, each one line naming its argument (``generator``/``critic``; the entry point says
them in its config keys) before anything is written:

* the generator maps noise ``[B, nz]`` to ``[B, *data_shape]``;
* the critic maps ``[B, *data_shape]`` to one score per sample, ``[B]`` (not ``[B, 1]``: its
  scores would broadcast against the per-sample penalty);
* the critic holds no batch-coupling normalisation (:data:`COUPLING_NORMS`): WGAN-GP's penalty
  E[(‖∇_x̂ D(x̂)‖₂ − 1)²] takes one gradient per sample x̂_b, which is only that sample's
  gradient when D(x̂_b) does not depend on the other samples of the batch. InstanceNorm,
  LayerNorm and GroupNorm normalise within a sample and are fine.

The shape checks run on a copy of each net on the meta device: no arithmetic, no memory, no
change to the nets' buffers or to the random streams.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import torch
import torch.nn as nn
from hydra.utils import instantiate

from dadam3.errors.config import ConfigError
from dadam3.gan.vmapped import stack_nets

# every batch norm: BatchNorm1d/2d/3d, SyncBatchNorm, LazyBatchNorm1d/2d/3d, torch.ao's quantized
# BatchNorm2d/3d and BNReLU2d/3d, and any subclass of their base (the only batch-coupling layers of torch.nn)
COUPLING_NORMS = (nn.modules.batchnorm._BatchNorm,)
CHECK_BATCH = 2


def build_net(key: str, spec: Mapping[str, Any]) -> nn.Module:
    """``spec['_target_'](**the other keys)`` (nested ``_target_`` specs are built too); one
    line naming ``key`` when the target cannot be imported or called, or is no ``nn.Module``."""
    target = spec.get("_target_")
    try:
        net = instantiate(dict(spec), _convert_="all")
    except Exception as e:          # import failure, refused arguments, the constructor's own error
        cause = e.__cause__ or e
        what = " ".join(str(cause).split())[:200]
        raise ConfigError(f"{key}._target_", target, f"cannot be built: {type(cause).__name__}: {what}") from None
    if not isinstance(net, nn.Module):
        raise ConfigError(f"{key}._target_", target, f"made a {type(net).__name__}, not a torch.nn.Module")
    return net


def check_nets(G: nn.Module, D: nn.Module, nz: int, data_shape: Sequence[int]) -> None:
    """The three start-up checks of the module docstring (one-line ConfigError each)."""
    data_shape = tuple(int(s) for s in data_shape)
    for layer, m in D.named_modules():
        if isinstance(m, COUPLING_NORMS):
            raise ConfigError("critic", type(D).__name__,
                              f"layer {layer} is a {type(m).__name__}, which couples the samples of a batch: "
                              "the per-sample gradient penalty is wrong with it; use InstanceNorm, LayerNorm, "
                              "GroupNorm or no normalisation in the critic")
    b = CHECK_BATCH
    fake = _shape_of("generator", G, (b, int(nz)))
    if fake != (b, *data_shape):
        raise ConfigError("generator", type(G).__name__, f"maps noise [{b}, {nz}] to {list(fake)}; the data are "
                                                      f"{list((b, *data_shape))} (model.nz and the data set's shape)")
    scores = _shape_of("critic", D, (b, *data_shape))
    if scores != (b,):
        raise ConfigError("critic", type(D).__name__, f"maps a batch {list((b, *data_shape))} to {list(scores)}; it "
                                                      f"must give one score per sample, [{b}] (e.g. end with "
                                                      ".flatten())")


def _shape_of(name: str, net: nn.Module, shape: tuple[int, ...]) -> tuple[int, ...]:
    ghost = copy.deepcopy(net).to("meta")
    try:
        with torch.no_grad():
            out = ghost(torch.zeros(shape, device="meta"))
    except Exception as e:
        what = " ".join(str(e).split())[:160]
        raise ConfigError(name, type(net).__name__, f"fails on a batch {list(shape)}: {type(e).__name__}: {what}") \
            from None
    if not isinstance(out, torch.Tensor):
        raise ConfigError(name, type(net).__name__, f"returns a {type(out).__name__}, not a tensor")
    return tuple(out.shape)


def stack_own_nets(G: nn.Module, D: nn.Module, num_nodes: int, nz: int, data_shape: Sequence[int]):
    """``check_nets``, then (G, D) as M identical node copies each (:func:`stack_nets`: the
    grouped-convolution path for the layers it knows, :class:`VmapNet` otherwise)."""
    check_nets(G, D, nz, data_shape)
    data_shape = tuple(int(s) for s in data_shape)
    return (stack_nets(G, num_nodes, in_shape=(int(nz),), out_shape=data_shape),
            stack_nets(D, num_nodes, in_shape=data_shape, out_shape=()))
