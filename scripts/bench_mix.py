"""Benchmark: one gossip round of both players' flat buffers, per kernel, against its bytes floor.

    python scripts/bench_mix.py [--device cuda|cpu] [--nodes 5 15] [--width W] [--topology ring]
                                [--iters N]

The buffers are those of the paper's dcgan32 pair (C=3, nz=100; width 1 on CUDA, 0.25 on the
CPU), float32, M rows each, mixed by ``LocalMixer.mix`` with the run's topology (one round).
For each M it prints, per kernel:

* ``kernels``: on CUDA, the device kernels one mix launches (torch.profiler); ``ops`` and
  ``bytes``: the op census (``tests/op_census.py``: ``ByteCensus``) of one mix, bytes against
  the floor ``2 · M · P · 4`` (every row read once, written once). On the CPU the census of
  the CUDA dispatch is taken on fake CUDA tensors (``FakeTensorMode``: what the mixer hands to
  the device, without one); the CPU's numba kernel does not run under a dispatch mode;
* the optimizer's ops / bytes per iteration (both players' Dadam3 steps with their gossip
  rounds; :func:`optimizer_census`), the issue's breakdown column;
* ``ms``: median wall time of one mix (the device synchronised around each), and ``x floor``:
  that time over the floor's bytes at the measured copy rate (one large ``copy_``).

Kernels: ``ordered`` (the default: one Triton kernel per buffer on CUDA, numba's loop on the
CPU), ``ordered-torch-ops`` (the same sums as torch ops: round 2's CUDA form), ``matmul``.
On CUDA it also checks that the ordered kernel's float32 result equals the CPU kernel's bit for bit.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))    # the test helpers below

from dadam3.gan.stacked import build_stacked_nets
from dadam3.mixing import LocalMixer, ieee_fp32_matmul
from dadam3.topologies import build_topology
from op_census import ByteCensus


def player_sizes(width: float) -> list[int]:
    """Parameters per node of dcgan32's G and D (the optimizers' flat buffers)."""
    G, D = build_stacked_nets("dcgan32", 1, channels=3, width=width, nz=100)
    return [sum(p[0].numel() for p in net.parameters()) for net in (G, D)]


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, iters: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_rate(device) -> float:
    n = (1 << 28) if device.type == "cuda" else (1 << 24)
    a, b = torch.randn(n, device=device), torch.empty(n, device=device)
    return 2 * 4 * n / timed(lambda: b.copy_(a), device, 10)


def kernels_per_call(fn, device) -> int | None:
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync(device)
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def census(fn) -> tuple[int, int]:
    with ByteCensus() as c:
        fn()
    return c.ops, c.bytes


def optimizer_census(M: int, width: float, device) -> tuple[int, float]:
    """Ops and bytes (in units of 4·P, P both players' values) of one joint Dadam3 step of both
    players, by bench_gan's census (a compiled update counts as one op). On the CPU the gossip
    is counted as CUDA dispatches it — one Triton custom op per buffer and round (run here in
    Triton's interpreter) — instead of numba's pass, which no dispatch mode sees."""
    from bench_gan import OpBytes, count_optimizer, make_batched
    from dadam3.mixing import ordered as ordered_mix
    step, _, _, parts = make_batched(M, width, 2, device, torch.float32, "ring")
    step()                            # the steady state: .grad is the flat buffer's view from here on
    parts["grads"]()
    patched = ordered_mix.RoundTerms.__dict__["_triton_pass"]      # the staticmethod itself
    if device.type == "cpu":
        module = ordered_mix._triton_kernel()
        ordered_mix.RoundTerms._triton_pass = staticmethod(lambda x, out: module)
    try:
        ops, nbytes = count_optimizer(parts["opts"], OpBytes())
    finally:
        ordered_mix.RoundTerms._triton_pass = patched
    values = sum(f.param_buf.numel() for f in parts["flats"])
    return ops, nbytes / (4 * values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--nodes", type=int, nargs="+", default=[5, 15])
    p.add_argument("--width", type=float, default=None)
    p.add_argument("--topology", default="ring")
    p.add_argument("--iters", type=int, default=None, help="timed mixes (default 50 on CUDA, 10 on the CPU)")
    a = p.parse_args()
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    width = a.width if a.width is not None else (1.0 if cuda else 0.25)
    iters = a.iters or (50 if cuda else 10)
    if not cuda:
        torch.set_num_threads(1)
    sizes = player_sizes(width)
    rate = copy_rate(device)
    print(f"command: {' '.join(sys.argv)}")
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name(device) if cuda else 'cpu'}, "
          f"dcgan32 width {width}: P = {sizes[0]} (G) + {sizes[1]} (D) per node, float32, {a.topology}, one round; "
          f"copy rate {rate / 1e9:.0f} GB/s")
    print("| M | kernel | kernels per mix | ops per mix (census) | census bytes / floor | ms per mix "
          "| x floor (time) |")
    print("|---|---|---|---|---|---|---|")
    for M in a.nodes:
        mixer = LocalMixer(build_topology(a.topology, M, 1))
        gen = torch.Generator().manual_seed(M)
        bufs = [torch.randn(M, n, generator=gen).to(device) for n in sizes]
        outs = [torch.empty_like(b) for b in bufs]
        floor = sum(2 * b.numel() * b.element_size() for b in bufs)
        terms = mixer._terms(0)

        def torch_ops():
            for b, o in zip(bufs, outs):
                terms.apply_torch_ops(b, o)

        def ordered():
            mixer.kernel = "ordered"
            mixer.mix(bufs, 1, out=outs)

        def matmul():
            mixer.kernel = "matmul"
            mixer.mix(bufs, 1, out=outs)

        for name, fn in (("ordered", ordered), ("ordered-torch-ops", torch_ops), ("matmul", matmul)):
            if name == "ordered" and not cuda:
                from torch._subclasses.fake_tensor import FakeTensorMode
                with FakeTensorMode():          # the CUDA dispatch, counted without a device
                    fb = [torch.empty(M, n, device="cuda") for n in sizes]
                    fo = [torch.empty_like(b) for b in fb]
                    mixer.mix(fb, 1, out=fo)
                    ops, nbytes = census(lambda: mixer.mix(fb, 1, out=fo))
                ops_s = f"{ops} (CUDA dispatch, fake tensors)"
            else:
                fn()
                ops, nbytes = census(fn)
                ops_s = str(ops)
            kernels = kernels_per_call(fn, device)
            t = timed(fn, device, iters)
            print(f"| {M} | {name} | {'-' if kernels is None else kernels} | {ops_s} | {nbytes / floor:.2f} | "
                  f"{1e3 * t:.3f} | {t / (floor / rate):.2f} |", flush=True)
        if cuda:
            ordered()
            got = [o.cpu() for o in outs]
            ref = [torch.empty(b.shape) for b in bufs]
            for b, r in zip(bufs, ref):
                terms.apply(b.cpu(), r)                 # numba: the CPU kernel
            same = all(torch.equal(g, r) for g, r in zip(got, ref))
            with ieee_fp32_matmul(device):
                W = torch.as_tensor(np.asarray(mixer.topology.operator(1)), device=device, dtype=torch.float64)
                err = max((o.double() - W @ b.double()).abs().max().item() for o, b in zip(outs, bufs))
            print(f"M={M}: ordered on CUDA equals the CPU kernel bit for bit (float32): {same}; "
                  f"max |ordered - float64 matmul| = {err:.2e}", flush=True)
        ops, passes = optimizer_census(M, width, device)
        print(f"M={M}: optimizer ops / bytes per iteration (both players' Dadam3 steps, census): "
              f"{ops} / {passes:.1f} x 4P", flush=True)


if __name__ == "__main__":
    main()
