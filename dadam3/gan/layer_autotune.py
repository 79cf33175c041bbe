"""Each stacked convolution's layout chosen by measurement at start-up (``cuda.autotune_layers``).

Which way of running the M nodes' convolutions is fastest depends on the layer's shape, the
card, the cuDNN version and the precision (issue 34: on an H200 grouped NHWC won every critic
layer in TF32, NCHW three generator layers, bf16 a mix). Like ``cudnn.benchmark``, a short
measurement decides: for every stacked (transposed) convolution with ``groups = 1``, each
candidate of :data:`CANDIDATES` (:mod:`dadam3.gan.conv_variants`) runs the layer's forward and
backward on an input of the layer's own shape — for the critic the gradient penalty's pattern
(∇_x of the output with its graph, then the gradients of its squared norm: the double
backward), for the generator the first-order backward — once untimed (cuDNN's own algorithm
search), then ``reps`` timed repetitions; the fastest median wins, a tie goes to the earlier
candidate (grouped NCHW, the default). The choice is
cached per layer shape, dtype, device (name, cuDNN version) and precision for the process, so a
second net of the same shapes costs nothing, and logged (``train.log``), one line per layer
with every candidate's time. ``separate`` (M convolutions) is not a candidate: it never won.

The timer is a parameter (``timer(run, reps) -> seconds``) so that the selection is tested with
a deterministic one; the default synchronises the device around each repetition.
"""
from __future__ import annotations

import contextlib
import logging
import statistics
import time
from typing import Callable

import torch

from dadam3.gan.stacked import StackedNet, _StackedConv

CANDIDATES = ("grouped_nchw", "grouped_nhwc", "unfold_bmm")
REPS = 3
_CACHE: dict[tuple, str] = {}
log = logging.getLogger(__name__)

Timer = Callable[[Callable[[], None], int], float]


def device_timer(run: Callable[[], None], reps: int) -> float:
    """Median wall time of ``reps`` calls of ``run`` after one untimed call, synchronised on CUDA."""
    def sync():
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    run()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _layer_inputs(net: StackedNet, example: torch.Tensor) -> dict[int, torch.Size]:
    """Input shape of each tunable convolution layer (by its index in ``net.layers``) for ``example``."""
    shapes: dict[int, torch.Size] = {}
    hooks = [layer.register_forward_pre_hook(lambda _m, args, j=j: shapes.__setitem__(j, args[0].shape))
             for j, layer in enumerate(net.layers) if isinstance(layer, _StackedConv) and layer.groups == 1]
    try:
        with torch.no_grad():
            net(example)
    finally:
        for h in hooks:
            h.remove()
    return shapes


def _key(layer: _StackedConv, shape, dtype, device, autocast: bool) -> tuple:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    cudnn = torch.backends.cudnn.version() if device.type == "cuda" else None
    return (type(layer).__name__, tuple(shape), tuple(layer.weight.shape), layer.stride, layer.padding,
            layer.dilation, getattr(layer, "output_padding", None), dtype, name, cudnn, autocast)


def autotune_layers(net: StackedNet, example: torch.Tensor, label: str = "net", *, autocast: bool = False,
                    double_backward: bool = False, timer: Timer = device_timer, reps: int = REPS,
                    cache: dict | None = None) -> dict[int, str]:
    """Time every candidate layout of each tunable convolution of ``net`` on inputs of the shapes
    ``example`` (the net's input batch) produces, set the winners (``net.use_conv_variants``) and
    return them ``{layer index: variant}``. ``double_backward``: time the penalty's pattern (the
    critic's workload)."""
    cache = _CACHE if cache is None else cache
    cast = (torch.autocast(example.device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext())
    table: dict[int, str] = {}
    for j, shape in _layer_inputs(net, example).items():
        layer = net.layers[j]
        key = (*_key(layer, shape, example.dtype, example.device, autocast), double_backward)
        if key not in cache:
            x = torch.randn(shape, device=example.device, dtype=example.dtype, requires_grad=True)
            saved, times = layer.variant, {}
            try:
                for variant in CANDIDATES:
                    layer.variant = variant

                    def run(layer=layer, x=x):
                        with cast:
                            y = layer(x)
                        if double_backward:      # the penalty: ∇_x D, then the gradient of its norm
                            (gx,) = torch.autograd.grad(y.float().sum(), x, create_graph=True)
                            torch.autograd.grad(gx.float().square().sum() + y.float().square().sum(),
                                                [x, layer.weight])
                        else:
                            torch.autograd.grad(y.float().square().sum(), [x, layer.weight])
                    times[variant] = timer(run, reps)
            finally:
                layer.variant = saved
            cache[key] = min(CANDIDATES, key=lambda v: (times[v], CANDIDATES.index(v)))
            log.info("cuda.autotune_layers: %s layer %d (%s, input %s): %s  [%s]", label, j, type(layer).__name__,
                     "x".join(map(str, shape)), cache[key],
                     ", ".join(f"{v} {1e3 * t:.3f} ms" for v, t in times.items()))
        table[j] = cache[key]
    net.use_conv_variants(table)
    return table


def autotune_pair(G, D, batch: int, autocast: bool = False) -> None:
    """:func:`autotune_layers` for a run's nets (``StackedNet``s; other nets are left as they
    are), on inputs of the run's shapes: the noise ``[M, batch, *G.in_shape]`` and the images
    ``[M, batch, *D.in_shape]``, on the nets' device and dtype."""
    for net, label in ((G, "G"), (D, "D")):
        if isinstance(net, StackedNet):
            p = next(net.parameters())
            example = torch.randn(net.num_nodes, batch, *net.in_shape, device=p.device, dtype=p.dtype)
            autotune_layers(net, example, label, autocast=autocast, double_backward=net is D)
