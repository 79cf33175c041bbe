"""Benchmark: one simultaneous WGAN-GP iteration of Dadam3 on M simulated nodes.

    python scripts/bench_gan.py [--device cpu|cuda] [--nodes 1 5 15] [--width W] [--batch B]
                                [--iters N ...] [--warmup K] [--dtype float32|float64]
                                [--threads T] [--peak-tflops P] [--no-tf32]

For each M, on the paper's 32x32 nets (Tables 2-3: arch dcgan32, C=3, nz=100), it measures

* batched: ``wgan_gp_step`` on the node-stacked (G, D) + ``opt_d.step(); opt_g.step()``
  (two Dadam3 optimizers, one per player, sharing one ring mixer; gossip included);
* loop:    ``LoopReference.step`` (a Python loop over M ordinary modules, same optimizers);
* mixing:  the time spent inside ``mixer.mix`` during the batched iteration (the mixer
  instance's ``mix`` is wrapped by a timer that synchronises the device before and after
  each call).  On CUDA the synchronisation would perturb the headline time, so the share
  is taken in a separate instrumented pass (per-iteration mix time / that pass's
  iteration time, median); on CPU execution is synchronous and the timer is installed
  in the main timed pass itself;
* FLOPs:   ``torch.utils.flop_counter.FlopCounterMode`` around one whole iteration
  (forward, backward, the gradient-penalty double backward, the optimizer steps incl.
  the mixing matmuls); that iteration is not timed.  FlopCounterMode counts matmul /
  convolution ops only (element-wise work such as the norms and the Adam-type updates
  is not counted).  The full-width count per sample (width 1, M = 1, batch 1) is taken
  on the ``meta`` device, so it needs no compute and is the same on every machine.

Timing: ``--warmup`` untimed iterations, then per-iteration wall time with the device
synchronised before and after each iteration; the median is reported.  A timed phase
stops early (after at least 3 iterations) once it has used ``--max-seconds``; the
number of iterations actually measured is printed.  On CUDA ``cudnn.benchmark`` and
TF32 (matmul and cuDNN convolutions) are enabled unless ``--no-tf32``, as the trainer's
``cuda.tf32`` does; the gossip matmul stays IEEE float32 either way.

CPU threads: the default is ONE torch thread.  The 2-core machine this was written on is
shared with other jobs, and whenever they keep the cores busy torch's spinning OpenMP
threads make the many small ops of these nets pathologically slow (seen: 5-29x per
iteration with 2 threads, and a 2-thread default run that had not finished after 7
minutes).  With one thread the CPU default (width 0.25, batch 16, M = 1, 5, 15) took about
2 minutes there under that load.  On an idle machine pass ``--threads N``
(``OMP_WAIT_POLICY=PASSIVE`` also tames the spinning).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, conv_backward_flop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))    # the test helpers below

from dadam3.run.start import set_cuda_flags
from dadam3.gan.layer_autotune import autotune_pair
from dadam3.gan.stacked import build_stacked_nets
from dadam3.gan.wgan_gp import wgan_gp_step
from dadam3.optim import build_optimizer, mixer_for, optimizer_spec, step_together
from dadam3.optim.engines import Eager
from loop_reference import LoopReference
from op_census import ByteCensus, ConvCensus

ARCH, CHANNELS, NZ, SIZE = "dcgan32", 3, 100, 32
HPARAMS = optimizer_spec("dadam3").check_hparams({})   # the class's defaults: Table 6 ("Training Parameters")
# TF32 dense tensor-core peak (TFLOP/s), by substring of the device name.
TF32_PEAK = (("H100 PCIe", 378.0), ("H200", 494.7), ("H100", 494.7), ("A100", 156.0))
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class MixTimer:
    """Wraps ``mixer.mix`` of one mixer instance: accumulates synchronised wall time."""

    def __init__(self, mixer, device: torch.device):
        self.mixer, self.device, self.seconds, self.calls = mixer, device, 0.0, 0
        self._orig = mixer.mix

    def _timed(self, tensors, k=1, out=None):
        synchronize(self.device)
        t0 = time.perf_counter()
        out = self._orig(tensors, k, out=out)
        synchronize(self.device)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out

    def __enter__(self):
        self.mixer.mix = self._timed
        return self

    def __exit__(self, *exc):
        del self.mixer.mix          # back to the class method
        return False


def time_iterations(step, device, iters: int, max_seconds: float, mix_timer: MixTimer | None = None):
    """Per-iteration synchronised wall times (s) and, with ``mix_timer``, per-iteration mix times."""
    times, mixes = [], []
    start = time.perf_counter()
    for i in range(iters):
        if mix_timer is not None:
            mix_timer.seconds = 0.0
        synchronize(device)
        t0 = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - t0)
        if mix_timer is not None:
            mixes.append(mix_timer.seconds)
        if i + 1 >= 3 and time.perf_counter() - start > max_seconds:
            break
    return times, mixes


class _GlobalOnly:
    """Stand-in for FlopCounterMode's module tracker: everything is counted under "Global".

    The tracker's module hooks make ``torch.autograd.grad`` w.r.t. a leaf that was a
    module input fail ("A leaf node was passed to _will_engine_execute_node"), which is
    exactly what the loop reference's gradient penalty does; the totals do not depend on it.
    """

    parents = {"Global"}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _conv_backward_flop(*args, out_val=None, **kwargs) -> int:
    """torch's ``conv_backward_flop`` with the weight-gradient term divided by ``groups``.

    torch's formula counts the weight gradient of a grouped convolution as if every
    input channel met every output channel, i.e. ``groups`` times too many FLOPs (its
    forward and input-gradient counts are right).  The node-stacked nets run M nodes as
    ``groups = M`` convolutions, so without this fix the count would grow with M.
    Arguments are aten.convolution_backward's: (grad_output, input, weight, bias_sizes,
    stride, padding, dilation, transposed, output_padding, groups, output_mask).
    """
    names = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation",
             "transposed", "output_padding", "groups", "output_mask")
    bound = dict(zip(names, args), **kwargs)
    full = [bound[n] for n in names]
    mask = list(full[10])
    total = conv_backward_flop(*full, out_val=out_val)
    if not mask[1]:
        return total
    weight = conv_backward_flop(*full[:10], [False, True, False], out_val=out_val)
    return total - weight + weight // int(full[9])


_conv_backward_flop._get_raw = True   # FlopCounterMode: pass tensors, we call torch's wrapped formula


def count_flops(step) -> tuple[int, dict[str, int]]:
    fc = FlopCounterMode(display=False,
                         custom_mapping={torch.ops.aten.convolution_backward: _conv_backward_flop})
    fc.mod_tracker = _GlobalOnly()
    with fc:
        step()
    by_op = {str(k).removeprefix("aten."): int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}
    return int(fc.get_total_flops()), by_op


def copy_rate(device, dtype=torch.float32, n=1 << 28) -> float:
    """Device copy rate in bytes/s (bytes read + written) of one large tensor copy, median of 10."""
    if device.type != "cuda":
        n = 1 << 24
    a, b = torch.empty(n, device=device, dtype=dtype).normal_(), torch.empty(n, device=device, dtype=dtype)
    times = time_iterations(lambda: b.copy_(a), device, 10, 30.0)[0]
    return 2 * a.numel() * a.element_size() / statistics.median(times)


class OpBytes(TorchDispatchMode):
    """Counts aten ops and the bytes they move: every tensor argument read once, every output
    written once (views and metadata ops move nothing). A compiled update (torch.compile or numba)
    is counted by :func:`count_optimizer` as one op reading its inputs and writing what it mutates."""

    FREE = ("view", "_unsafe_view", "as_strided", "select", "slice", "unbind", "detach", "alias", "t",
            "transpose", "expand", "reshape", "unsqueeze", "squeeze", "lift_fresh", "_to_copy_scalar")

    def __init__(self):
        super().__init__()
        self.ops, self.bytes = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name not in self.FREE:
            self.ops += 1
            reads = args[1:] if name == "copy_" else args          # a copy does not read its destination
            reads = (reads, {k: v for k, v in kwargs.items() if k != "out"})
            self.bytes += _nbytes(reads) + _nbytes(out)
        return out


def _nbytes(tree) -> int:
    return sum(t.numel() * t.element_size() for t in torch.utils._pytree.tree_leaves(tree)
               if isinstance(t, torch.Tensor) and t.dim() > 0)


def count_optimizer(opts, counter: OpBytes):
    """Ops and bytes of one joint step of ``opts``; a compiled round update (torch.compile on CUDA,
    numba on the CPU) counts as one op reading g, the base point p, the skeleton's own buffers
    and the state, and writing work, own buffers and state: what the compiled kernel moves."""
    originals = [(opt, opt.engine) for opt in opts if opt.engine.name != "eager"]
    for opt, engine in originals:
        opt.engine = CountedEngine(engine, counter)
    try:
        with counter:
            step_together(list(opts))
    finally:
        for opt, engine in originals:
            opt.engine = engine
    return counter.ops, counter.bytes


class CountedEngine:
    """``engine`` (a compiled one) counted as one op per round and group moving its kernel's bytes."""

    def __init__(self, engine, counter: OpBytes):
        self.engine, self.counter, self.name = engine, counter, engine.name

    def run(self, rnd, group) -> None:
        self.counter.ops += 1
        size = group.grad_buf.numel() * group.grad_buf.element_size()
        n = len(group.own) + len(group.algo_state)
        self.counter.bytes += size * ((2 + n) + (1 + n))
        with torch.utils._python_dispatch._disable_current_modes():
            self.engine.run(rnd, group)


@contextlib.contextmanager
def eager_updates(opts):
    """The optimizers' plain (eager) engine while inside."""
    saved = [opt.engine for opt in opts]
    for opt in opts:
        opt.engine = Eager(type(opt))
    try:
        yield
    finally:
        for opt, engine in zip(opts, saved):
            opt.engine = engine


CONVERSIONS = ("nchwToNhwc", "nhwcToNchw")   # cuDNN's layout conversion kernels (by name)


def norm_share(step, device, iters: int = 3) -> tuple[float, float, float]:
    """(share of device time in normalisation ops, device ms per iteration, cuDNN layout
    conversion kernels per iteration) by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for _ in range(iters):
            step()
        synchronize(device)
    total = norm = conversions = 0.0
    for evt in prof.key_averages():
        t = evt.self_device_time_total if device.type == "cuda" else evt.self_cpu_time_total
        total += t
        if "norm" in evt.key.lower() and "vector_norm" not in evt.key and "linalg" not in evt.key:
            norm += t
        if any(name in evt.key for name in CONVERSIONS):
            conversions += evt.count
    return (norm / total if total else 0.0), total / iters / 1e3, conversions / iters


DADAM3_PASSES = 17   # 4-byte passes over the stacked values per Dadam3 step (docs: docs/benchmarks.md)


def breakdown(M, parts, step, device, iters, max_seconds, rate_bytes, peak, t_iter) -> str:
    """One markdown row: each part of the iteration against its floor."""
    t = {k: statistics.median(time_iterations(parts[k], device, iters, max_seconds)[0]) for k in
         ("grads", "optimize", "mix")}
    values = sum(f.param_buf.numel() for f in parts["flats"])
    size = parts["flats"][0].param_buf.element_size()
    opt_floor = DADAM3_PASSES * values * size / rate_bytes
    mix_floor = 2 * values * size / rate_bytes
    with eager_updates(parts["opts"]):
        g_flops, _ = count_flops(parts["grads"])
    g_floor = g_flops / (peak * 1e12) if peak else None
    share, _, conversions = norm_share(step, device)
    ops, nbytes = count_optimizer(parts["opts"], OpBytes())
    mem = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    g_s = f"{1e3 * t['grads']:.1f} ({1e3 * g_floor:.1f}; {100 * g_floor / t['grads']:.0f}%)" if g_floor \
        else f"{1e3 * t['grads']:.1f} ({g_flops / 1e9:.1f} GFLOP)"
    line = (f"| {M} | {1e3 * t_iter:.1f} | {g_s} | {1e3 * t['optimize']:.2f} ({1e3 * opt_floor:.2f}; "
            f"{t['optimize'] / opt_floor:.1f}x) | {1e3 * t['mix']:.2f} ({1e3 * mix_floor:.2f}; "
            f"{t['mix'] / mix_floor:.1f}x) | {100 * share:.1f}% | {ops} / {nbytes / (size * values):.1f} x {size}P "
            f"| {mem:.2f} | {conversions:.0f} |")
    print(f"M={M} breakdown: {line}", flush=True)
    return line


def census_line(M: int, parts) -> str:
    """Dispatch-mode counts of one gradient evaluation (convolution calls, the per-group loop
    of torch's double backward) and of one mix of both players (bytes against the floor; the
    ordered mixer's Triton kernel on CUDA is one custom op per buffer; on the CPU the ordered
    and stencil mixers are counted as their torch ops: numba's pass and torch.compile's
    kernels do not run under a dispatch mode)."""
    with ConvCensus() as conv:
        parts["grads"]()
    with ByteCensus() as mix:
        parts["mix"]()
    floor = sum(2 * f.param_buf.numel() * f.param_buf.element_size() for f in parts["flats"])
    return (f"M={M} census: {conv.calls} convolution calls per wgan_gp_step ({conv.dilated_ungrouped} dilated "
            f"groups=1: torch's per-group loop), by groups {dict(sorted(conv.by_groups.items()))}; one mix of "
            f"both players {mix.ops} ops, {mix.bytes / max(floor, 1):.2f} x its bytes floor "
            "(dispatch count of the torch ops)")


def make_inputs(M: int, batch: int, device, dtype):
    """Fixed real batch (uniform in [-1, 1]), noise z and interpolation weights eps."""
    gen = torch.Generator().manual_seed(1)
    real = (torch.rand(M, batch, CHANNELS, SIZE, SIZE, generator=gen) * 2 - 1).to(device, dtype)
    z = torch.randn(M, batch, NZ, generator=gen).to(device, dtype)
    eps = torch.rand(M, batch, generator=gen).to(device, dtype)
    return real, z, eps


def make_nets(M: int, width: float, device, dtype):
    torch.manual_seed(0)             # the batched and the loop path start from the same nets
    G, D = build_stacked_nets(ARCH, M, identical_init=True, channels=CHANNELS, width=width, nz=NZ)
    return G.to(device=device, dtype=dtype), D.to(device=device, dtype=dtype)


VARIANTS = dict(channels_last=False, stock_conv_backward=False, gossip_kernel="ordered", autotune_layers=False)


def make_batched(M: int, width: float, batch: int, device, dtype, topology: str, autocast: str | None = None,
                 compile: bool | None = None, variants: dict | None = None):
    """The batched iteration: wgan_gp_step on the stacked nets, then both Dadam3 steps together
    (one mixer call per gossip round for both players). Returns the iteration and its parts.
    ``variants``: overrides of :data:`VARIANTS` (NHWC convolutions, torch's own double backward,
    the gossip kernel)."""
    v = {**VARIANTS, **(variants or {})}
    channels_last, stock_conv_backward, gossip_kernel = v["channels_last"], v["stock_conv_backward"], v["gossip_kernel"]
    G, D = make_nets(M, width, device, dtype)
    G.use_channels_last(channels_last)
    D.use_channels_last(channels_last)
    G.use_first_order_backward(not stock_conv_backward)
    D.use_first_order_backward(not stock_conv_backward)
    if v["autotune_layers"]:              # each convolution's layout by measurement (cuda.autotune_layers)
        autotune_pair(G, D, batch, autocast=autocast == "bf16")
    mixer = mixer_for("dadam3", M, topology=topology)
    if hasattr(mixer, "kernel"):          # LocalMixer (M > 1): ordered | matmul | stencil | auto
        mixer.kernel = gossip_kernel
    opt_g = build_optimizer("dadam3", G.parameters(), mixer, compile=compile, **HPARAMS)
    opt_d = build_optimizer("dadam3", D.parameters(), mixer, compile=compile, **HPARAMS)
    real, z, eps = make_inputs(M, batch, device, dtype)
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if autocast == "bf16" else contextlib.nullcontext()

    def grads():
        with cast:
            wgan_gp_step(G, D, real, z, eps)

    def optimize():
        step_together([opt_d, opt_g])

    def step():
        grads()
        optimize()

    n_params = sum(p[0].numel() for p in G.parameters()), sum(p[0].numel() for p in D.parameters())
    flats = [f for opt in (opt_d, opt_g) for f in opt.flat]
    scratch = [torch.empty_like(f.param_buf) for f in flats]

    def mix():      # one gossip round of both players' buffers (the optimizers do two per step)
        mixer.mix([f.param_buf for f in flats], 1, out=scratch)

    parts = dict(grads=grads, optimize=optimize, mix=mix, opts=(opt_d, opt_g), flats=flats)
    return step, mixer, n_params, parts


def make_loop(M: int, width: float, batch: int, device, dtype, topology: str):
    """The loop reference over M ordinary module pairs (same initial nets, same optimizers)."""
    G, D = make_nets(M, width, device, dtype)
    Gs, Ds = G.to_modules(), D.to_modules()
    del G, D
    mixer = mixer_for("dadam3", M, topology=topology)
    loop = LoopReference(Gs, Ds, lambda ps: build_optimizer("dadam3", ps, mixer, compile=False, **HPARAMS))
    real, z, eps = make_inputs(M, batch, device, dtype)
    return lambda: loop.step(real, z, eps)


def full_width_flops() -> dict:
    """Per-sample FLOPs of one iteration at width 1 (M = 1, batch 1) on the meta device."""
    meta = torch.device("meta")
    batched, _, n_params, _ = make_batched(1, 1.0, 1, meta, torch.float32, "ring", compile=False)
    loop = make_loop(1, 1.0, 1, meta, torch.float32, "ring")
    out = {"batched": count_flops(batched), "loop": count_flops(loop), "params": n_params}
    # one forward pass of each net, per sample, for reading the totals
    G, D = build_stacked_nets(ARCH, 1, channels=CHANNELS, width=1.0, nz=NZ)
    G, D = G.to(meta), D.to(meta)
    with torch.no_grad():
        out["G_fwd"] = count_flops(lambda: G(torch.empty(1, 1, NZ, device=meta)))[0]
        out["D_fwd"] = count_flops(lambda: D(torch.empty(1, 1, CHANNELS, SIZE, SIZE, device=meta)))[0]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 5, 15], help="values of M")
    p.add_argument("--width", type=float, default=None, help="channel multiplier (default: 1 on CUDA, 0.25 on CPU)")
    p.add_argument("--batch", type=int, default=None, help="batch per node (default: 64 on CUDA, 16 on CPU)")
    p.add_argument("--iters", type=int, nargs="+", default=None,
                   help="timed iterations, one value for all M or one per M "
                        "(default: 50 on CUDA; on CPU 20/10/5 for M<=1/M<=5/M>5)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations (default: 10 on CUDA, 2 on CPU)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop a timed phase after this long (>= 3 iterations; default 120 on CUDA, 40 on CPU)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--topology", default="ring")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (default: 1 on CPU, see above; torch's default on CUDA)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="device peak for the utilisation column (default on CUDA/float32/TF32: by device name)")
    p.add_argument("--no-tf32", action="store_true", help="on CUDA, keep fp32 matmuls/convs in IEEE fp32")
    p.add_argument("--skip-loop", action="store_true", help="do not time the loop reference")
    p.add_argument("--autocast", choices=["bf16"], default=None, help="gradient evaluation under bf16 autocast")
    p.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                   help="compile the optimizer update with torch.compile (auto: on CUDA)")
    p.add_argument("--no-breakdown", action="store_true", help="skip the per-part breakdown")
    p.add_argument("--channels-last", action="store_true", help="NHWC convolutions (StackedNet.use_channels_last)")
    p.add_argument("--stock-conv-backward", action="store_true",
                   help="the critic's convolutions with torch's own double backward (its per-group loop; "
                        "before issue 25 round 2) instead of dadam3.gan.grouped_conv's first-order one")
    p.add_argument("--autotune-layers", action="store_true",
                   help="each stacked convolution's layout timed at start-up (dadam3.gan.layer_autotune), "
                        "as cuda.autotune_layers=true does")
    p.add_argument("--gossip-kernel", choices=["ordered", "matmul", "stencil", "auto"], default="ordered",
                   help="LocalMixer kernel: the sum in node order every rank uses (default; one numba pass on "
                        "the CPU, one Triton kernel on CUDA), "
                        "the [M,M]x[M,P] matmul, the neighbour stencil (compiled by torch.compile on CUDA), "
                        "or auto (stencil on CUDA for sparse graphs)")
    a = p.parse_args()
    t_start = time.perf_counter()

    device = torch.device(a.device)
    cuda = device.type == "cuda"
    dtype = DTYPES[a.dtype]
    width = a.width if a.width is not None else (1.0 if cuda else 0.25)
    batch = a.batch if a.batch is not None else (64 if cuda else 16)
    warmup = a.warmup if a.warmup is not None else (10 if cuda else 2)
    max_seconds = a.max_seconds if a.max_seconds is not None else (120.0 if cuda else 40.0)
    if a.iters is None:
        iters = [50 if cuda else (20 if m <= 1 else 10 if m <= 5 else 5) for m in a.nodes]
    elif len(a.iters) == 1:
        iters = a.iters * len(a.nodes)
    elif len(a.iters) == len(a.nodes):
        iters = a.iters
    else:
        p.error("--iters takes one value or one per --nodes value")
    threads = a.threads if a.threads is not None else (None if cuda else 1)
    if threads is not None:
        torch.set_num_threads(threads)

    # ---- machine ------------------------------------------------------------------------
    print(f"command: {' '.join([Path(sys.executable).name] + sys.argv)}")
    print(f"torch {torch.__version__}, python {platform.python_version()}, "
          f"torch threads {torch.get_num_threads()}, dtype {a.dtype}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    omp = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS") if k in os.environ}
    print(f"cpu: {cpu_model()}, {cores} cores usable ({os.cpu_count()} logical)"
          + (f", env {omp}" if omp else ""))
    if hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
        print(f"load average (1 min) at start: {load:.2f} on {cores} cores"
              + ("  <- other processes are running: timings will be noisy; torch's OpenMP threads "
                 "suffer most when the cores are oversubscribed (keep --threads 1)"
                 if not cuda and load > 0.5 * cores else ""))
    peak = a.peak_tflops
    if cuda:
        props = torch.cuda.get_device_properties(device)
        tf32 = set_cuda_flags(tf32=not a.no_tf32, cudnn_benchmark=True)
        print(f"gpu: {props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB, "
              f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
        print(f"cudnn.benchmark=True; TF32 {'allowed' if not a.no_tf32 else 'disabled'} ({tf32})")
        if peak is None and dtype == torch.float32 and not a.no_tf32:
            peak = next((v for key, v in TF32_PEAK if key in props.name), None)
        print(f"assumed peak: {f'{peak} TFLOP/s (TF32 dense)' if peak else 'unknown (pass --peak-tflops)'}"
              + (" [given]" if a.peak_tflops else ""))
    print(f"nets: {ARCH} (C={CHANNELS}, nz={NZ}, {SIZE}x{SIZE}), width {width}, batch {batch} per node, "
          f"Dadam3 {HPARAMS}, {a.topology} mixer shared by the two optimizers")
    print(f"timing: {warmup} warm-up its (+1 untimed FLOP-counting it), median of synchronised per-it "
          f"wall times; mixing share: mixer.mix wrapped with synchronising timers "
          f"({'separate instrumented pass' if cuda else 'in the timed pass; CPU is synchronous'})")

    # ---- full-width FLOPs (meta device) ---------------------------------------------------
    fw = full_width_flops()
    ops = ", ".join(f"{k} {v / 1e9:.3f}" for k, v in fw["batched"][1].items())
    print(f"full width (1.0), per sample (M=1, batch 1, meta device): batched iteration "
          f"{fw['batched'][0] / 1e9:.3f} GFLOP ({ops}); loop reference {fw['loop'][0] / 1e9:.3f} GFLOP; "
          f"one forward: G {fw['G_fwd'] / 1e9:.3f}, D {fw['D_fwd'] / 1e9:.3f} GFLOP; "
          f"params G {fw['params'][0] / 1e6:.2f} M, D {fw['params'][1] / 1e6:.2f} M per node")
    print()

    # ---- per M ----------------------------------------------------------------------------
    rows, breakdowns = [], []
    rate_bytes = copy_rate(device, dtype)
    print(f"measured copy rate: {rate_bytes / 1e9:.0f} GB/s (bytes read + written, one large copy)")
    for M, n_it in zip(a.nodes, iters):
        # (a) batched: FLOP count (= first, untimed iteration), warm-up, timed pass(es)
        compile_ = {"auto": None, "on": True, "off": False}[a.compile]
        batched, mixer, _, parts = make_batched(M, width, batch, device, dtype, a.topology, a.autocast, compile_,
                                                dict(channels_last=a.channels_last, gossip_kernel=a.gossip_kernel,
                                                     autotune_layers=a.autotune_layers,
                                                     stock_conv_backward=a.stock_conv_backward))
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(max(1, warmup // 2)):       # compiles the optimizer update before the FLOP count
            batched()
        with eager_updates(parts["opts"]):      # a compiled frame does not run under the FLOP counter's mode
            flops, by_op = count_flops(batched)
        print(census_line(M, parts), flush=True)
        for _ in range(warmup):
            batched()
        timer = MixTimer(mixer, device)
        if cuda:      # headline time without the synchronising mix timer, then an instrumented pass
            t_b, _ = time_iterations(batched, device, n_it, max_seconds)
            with timer:
                t_i, m_i = time_iterations(batched, device, n_it, max_seconds, timer)
        else:         # synchronous execution: the timer does not change what it measures
            with timer:
                t_b, m_i = time_iterations(batched, device, n_it, max_seconds, timer)
            t_i = t_b
        mem = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
        if not a.no_breakdown:
            breakdowns.append(breakdown(M, parts, batched, device, n_it, max_seconds, rate_bytes, peak,
                                        statistics.median(t_b)))
        del batched, mixer, timer, parts
        # (b) loop reference, built after the batched path is freed
        t_l, loop_flops, mem_l = None, None, None
        if not a.skip_loop:
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            loop = make_loop(M, width, batch, device, dtype, a.topology)
            loop_flops, _ = count_flops(loop)
            for _ in range(warmup):
                loop()
            t_l, _ = time_iterations(loop, device, n_it, max_seconds)
            mem_l = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
            del loop
        if cuda:
            torch.cuda.empty_cache()

        share = statistics.median(m / t for m, t in zip(m_i, t_i))
        mix_ms = 1e3 * statistics.median(m_i)
        tb = statistics.median(t_b)
        rate = flops / tb / 1e9
        row = dict(M=M, batched_ms=1e3 * tb, n_b=len(t_b),
                   loop_ms=None if t_l is None else 1e3 * statistics.median(t_l),
                   n_l=0 if t_l is None else len(t_l), mix_ms=mix_ms, share=share, gflop=flops / 1e9,
                   gflop_sample=flops / 1e9 / (M * batch), rate=rate,
                   loop_gflop=None if loop_flops is None else loop_flops / 1e9)
        rows.append(row)
        ratio = f"{row['batched_ms'] / row['loop_ms']:.3f}" if t_l is not None else "-"
        loop_s = f"{row['loop_ms']:9.1f} ms/it (n={row['n_l']})" if t_l is not None else "skipped"
        util = f" = {100 * rate / 1e3 / peak:.1f}% of peak" if peak else ""
        mix_note = "" if M > 1 else " (M=1: mixer is the identity)"
        mem_s = "" if mem is None else f"  peak mem batched {mem:.2f} GiB" + \
            ("" if mem_l is None else f", loop {mem_l:.2f} GiB")
        print(f"M={M:<3d} batched {row['batched_ms']:9.1f} ms/it (n={row['n_b']})  loop {loop_s}  "
              f"batched/loop {ratio}  mixing {mix_ms:.2f} ms/it = {100 * share:.1f}%{mix_note}  "
              f"{row['gflop']:.2f} GFLOP/it ({row['gflop_sample']:.3f}/sample; "
              + ", ".join(f"{k} {v / 1e9:.2f}" for k, v in by_op.items())
              + (f"; loop {row['loop_gflop']:.2f}" if loop_flops is not None else "")
              + f")  achieved {rate:.1f} GFLOP/s{util}{mem_s}", flush=True)

    print(f"\ntotal wall time {time.perf_counter() - t_start:.0f} s")

    if breakdowns:
        print()
        print("| M | iteration ms | gradients ms (FLOP floor, share of peak) | optimizer steps ms (bytes floor; "
              "x floor) | one mix of both players ms (floor; x floor) | norm layers' share of device time "
              "| optimizer ops / bytes per iteration | peak GiB | cuDNN layout conversions per iteration |")
        print("|---|---|---|---|---|---|---|---|---|")
        for b in breakdowns:
            print(b)

    # ---- markdown table -------------------------------------------------------------------
    print()
    print("| M | batched ms/it (n) | loop ms/it (n) | batched/loop | mixing ms/it (share) "
          "| GFLOP/it (per sample) | achieved GFLOP/s" + (" (% of peak)" if peak else "") + " |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        loop_c = f"{r['loop_ms']:.1f} ({r['n_l']})" if r["loop_ms"] is not None else "-"
        ratio = f"{r['batched_ms'] / r['loop_ms']:.2f}" if r["loop_ms"] is not None else "-"
        util = f" ({100 * r['rate'] / 1e3 / peak:.1f}%)" if peak else ""
        print(f"| {r['M']} | {r['batched_ms']:.1f} ({r['n_b']}) | {loop_c} | {ratio} | "
              f"{r['mix_ms']:.2f} ({100 * r['share']:.1f}%) | {r['gflop']:.2f} ({r['gflop_sample']:.3f}) | "
              f"{r['rate']:.1f}{util} |")


if __name__ == "__main__":
    main()
