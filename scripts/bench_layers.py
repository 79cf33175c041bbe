"""Layer benchmark: each stacked convolution of dcgan32/dcgan64, in every variant, per precision.

    python scripts/bench_layers.py [--device cpu|cuda] [--archs dcgan32 dcgan64] [--nodes 5 15]
                                   [--width W] [--batch B] [--precisions tf32 bf16 | float32]
                                   [--iters N] [--warmup K] [--cudnn-benchmark-limit L]

For every convolution layer of the node-stacked G and D (input shapes taken from one
forward pass at ``--batch`` per node) it times, for each variant of
:mod:`dadam3.gan.conv_variants` (grouped NCHW — today's default —, grouped NHWC, M separate
convolutions, unfold + bmm):

* ``fwd``: the layer's forward;
* ``train``: what an iteration asks of it — for a critic layer forward + ∇_x with
  ``create_graph`` + the gradients of the penalty-like ``‖∇_x‖² + ‖y‖²`` w.r.t. x and the
  weights (the double backward); for a generator layer forward + backward.

Precisions: ``tf32`` (float32 with TF32 convolutions/matmuls, cudnn.benchmark on), ``bf16``
(under ``torch.autocast``), ``float32`` (IEEE; the CPU default). Times are medians of
synchronised wall times. It prints one row per (layer, variant) and, per layer and
precision, the winner of ``train``; the last lines are the winners as the table that
``StackedNet.use_conv_variants`` takes (one per net, arch, M and precision), so a GPU
session can paste the measured choice. Every variant is float64-equal to grouped NCHW
(``tests/test_gan_conv_variants.py``); this script only times them.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dadam3.run.start import set_cuda_flags
from dadam3.gan.conv_variants import VARIANTS, stacked_conv2d, stacked_conv_transpose2d
from dadam3.gan.stacked import StackedConv2d, StackedConvTranspose2d, build_stacked_nets

IMAGE = {"dcgan32": 32, "dcgan64": 64}


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def conv_inputs(net, x: torch.Tensor) -> list[tuple[int, torch.nn.Module, torch.Tensor]]:
    """(layer index, stacked conv layer, its input) for every convolution of ``net`` on input ``x``."""
    found = []
    hooks = [layer.register_forward_pre_hook(lambda mod, args, j=j: found.append((j, mod, args[0].detach())))
             for j, layer in enumerate(net.layers) if isinstance(layer, (StackedConv2d, StackedConvTranspose2d))]
    with torch.no_grad():
        net(x)
    for h in hooks:
        h.remove()
    return found


def layer_call(layer, variant: str):
    """The stacked layer's computation in ``variant`` as ``f(x, weight, bias)``."""
    if isinstance(layer, StackedConv2d):
        return lambda x, w, b: stacked_conv2d(variant, x, w, b, layer.stride, layer.padding, layer.dilation)
    return lambda x, w, b: stacked_conv_transpose2d(variant, x, w, b, layer.stride, layer.padding,
                                                    layer.output_padding, layer.dilation)


def workloads(layer, variant: str, x: torch.Tensor, critic: bool):
    """(forward only, the iteration's work) as two closures over fresh leaf copies."""
    f = layer_call(layer, variant)
    w = layer.weight.detach().clone().requires_grad_(True)
    b = None if layer.bias is None else layer.bias.detach().clone().requires_grad_(True)
    params = [w] + ([] if b is None else [b])
    x = x.detach().clone().requires_grad_(True)

    def forward():
        with torch.no_grad():
            f(x, w, b)

    def train():
        y = f(x, w, b)
        if critic:
            (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            torch.autograd.grad(gx.float().square().sum() + y.float().square().sum(), [x] + params)
        else:
            torch.autograd.grad(y.float().square().sum(), [x] + params)
    return forward, train


def median_ms(fn, device, iters: int, warmup: int, cast) -> float:
    with cast():
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(iters):
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def precision_setup(precision: str, device):
    """(dtype of the tensors, context factory) for one precision; sets the CUDA flags."""
    if device.type == "cuda":
        set_cuda_flags(tf32=precision == "tf32", cudnn_benchmark=True)
    if precision == "bf16":
        return torch.float32, lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return torch.float32, contextlib.nullcontext


def bench_net(arch: str, M: int, net_name: str, a, device, precision: str) -> dict[int, str]:
    """Times every conv layer of one net; prints rows; returns {layer index: winning variant}."""
    dtype, cast = precision_setup(precision, device)
    torch.manual_seed(0)
    G, D = build_stacked_nets(arch, M, width=a.width)
    net = (G if net_name == "G" else D).to(device=device, dtype=dtype)
    x = (torch.randn(M, a.batch, G.in_shape[0]) if net_name == "G"
         else torch.rand(M, a.batch, 3, IMAGE[arch], IMAGE[arch]) * 2 - 1).to(device=device, dtype=dtype)
    winners = {}
    for j, layer, h in conv_inputs(net, x):
        results = {}
        for variant in a.variants:
            fwd, train = workloads(layer, variant, h, critic=net_name == "D")
            results[variant] = (median_ms(fwd, device, a.iters, a.warmup, cast),
                                median_ms(train, device, a.iters, a.warmup, cast))
        base = results["grouped_nchw"][1] if "grouped_nchw" in results else None
        winners[j] = min(results, key=lambda v: results[v][1])
        for variant, (t_fwd, t_train) in results.items():
            vs = f"{base / t_train:.2f}x" if base else "-"
            mark = " <- winner" if variant == winners[j] else ""
            print(f"| {arch} | {M} | {precision} | {net_name}{j} | {tuple(h.shape)} | {variant} | "
                  f"{t_fwd:.3f} | {t_train:.3f} | {vs} |{mark}", flush=True)
    return winners


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--archs", nargs="+", default=list(IMAGE), choices=list(IMAGE))
    p.add_argument("--nodes", type=int, nargs="+", default=[5, 15])
    p.add_argument("--width", type=float, default=None, help="channel multiplier (default: 1 on CUDA, 1/8 on CPU)")
    p.add_argument("--batch", type=int, default=None, help="batch per node (default: 64 on CUDA, 4 on CPU)")
    p.add_argument("--precisions", nargs="+", default=None, choices=["tf32", "bf16", "float32"],
                   help="default: tf32 bf16 on CUDA, float32 on CPU")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--iters", type=int, default=None, help="timed repetitions (default: 20 on CUDA, 3 on CPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed repetitions (default: 5 on CUDA, 1 on CPU)")
    p.add_argument("--threads", type=int, default=1, help="CPU torch threads")
    p.add_argument("--cudnn-benchmark-limit", type=int, default=None,
                   help="torch.backends.cudnn.benchmark_limit (0: try every algorithm)")
    a = p.parse_args()
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available here")
    a.width = a.width if a.width is not None else (1.0 if cuda else 0.125)
    a.batch = a.batch if a.batch is not None else (64 if cuda else 4)
    a.precisions = a.precisions or (["tf32", "bf16"] if cuda else ["float32"])
    a.iters = a.iters if a.iters is not None else (20 if cuda else 3)
    a.warmup = a.warmup if a.warmup is not None else (5 if cuda else 1)
    torch.set_num_threads(a.threads)
    if a.cudnn_benchmark_limit is not None:
        torch.backends.cudnn.benchmark_limit = a.cudnn_benchmark_limit
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    print(f"Command: python {' '.join(sys.argv)}")
    print(f"device {name}, torch {torch.__version__}, width {a.width}, batch {a.batch} per node, "
          f"{a.iters} timed / {a.warmup} warm-up repetitions, cudnn.benchmark_limit "
          f"{torch.backends.cudnn.benchmark_limit}")
    print("\n| arch | M | precision | layer | input shape | variant | fwd ms | train ms | NCHW/variant |")
    print("|---|---|---|---|---|---|---|---|---|")
    tables = []
    for arch in a.archs:
        for M in a.nodes:
            for precision in a.precisions:
                for net_name in ("G", "D"):
                    tables.append((arch, M, precision, net_name, bench_net(arch, M, net_name, a, device, precision)))
    print("\nwinners (StackedNet.use_conv_variants tables; grouped_nchw is the default):")
    for arch, M, precision, net_name, winners in tables:
        print(f"{arch} M={M} {precision} {net_name}: {winners}")


if __name__ == "__main__":
    main()
