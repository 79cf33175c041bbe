"""The ordered gossip round as one Triton kernel (:mod:`dadam3.mixing.ordered_triton`), checked on
the CPU: the kernel itself in Triton's interpreter (CPU tensors run it there: numpy, one
program at a time), its generated PTX compiled ahead of time for sm_90 (no GPU needed), and the
mixer's dispatch to it on fake CUDA tensors. On a GPU, ``scripts/gpu_round3.sh`` checks the
compiled kernel's float32 bits against the CPU kernel."""
from __future__ import annotations

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton", reason="Triton is not installed (it ships with torch's Linux CUDA wheels)")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from dadam3.mixing import ordered_triton as kernel  # noqa: E402
from dadam3.distributed import node_blocks  # noqa: E402
from op_census import ByteCensus  # noqa: E402
from dadam3.mixing import LocalMixer  # noqa: E402
from dadam3.mixing.ordered import RoundTerms  # noqa: E402
from dadam3.topologies import build_topology  # noqa: E402

CASES = [(5, "ring", {}), (7, "erdos_renyi", {"p": 0.5, "seed": 1}), (6, "one_peer_exponential", {}),
         (4, "complete", {})]
BLOCK = 32            # small blocks: several programs and a masked tail per row at n = 77


def _rows(M, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(M, n, generator=g, dtype=torch.float64) * torch.logspace(-3, 3, n, dtype=torch.float64)
            ).to(dtype)


def _matrix(M, name, kw) -> np.ndarray:
    topo = build_topology(name, M, 1, **kw)
    return topo.matrix(1) if topo.time_varying else topo.static_W


def _interpreted(terms: RoundTerms, x: torch.Tensor) -> torch.Tensor:
    out = torch.full((terms.index.shape[0], x.shape[1]), float("nan"), dtype=x.dtype)
    index, weight = terms.on(x.device, x.dtype)
    kernel.launch(x, index, weight, out, block=BLOCK)
    return out


@pytest.mark.parametrize("M,name,kw", CASES)
def test_interpreted_kernel_is_bit_equal_to_the_cpu_kernel_in_float32_for_any_rank_block(M, name, kw):
    """The simulator's rows (all M) and every rank's rows (its block B from the rows C it holds,
    for R = 1..3) equal the CPU ordered kernel's float32 result bit for bit."""
    W = _matrix(M, name, kw)
    x = _rows(M, 77, torch.float32)
    ref = torch.empty_like(x)
    RoundTerms(W, np.arange(M)).apply(x, ref)                  # numba's loop: the CPU kernel
    assert torch.equal(_interpreted(RoundTerms(W, np.arange(M)), x), ref)
    for R in (2, 3):
        for block in node_blocks(M, R):
            columns = np.nonzero(np.any(W[block.start:block.stop] > 0, axis=0))[0]
            terms = RoundTerms(W[block.start:block.stop][:, columns], columns)
            assert torch.equal(_interpreted(terms, x[columns]), ref[block.start:block.stop]), (R, block)


@pytest.mark.parametrize("M,name,kw", CASES)
def test_interpreted_kernel_equals_the_matmul_in_float64(M, name, kw):
    W = _matrix(M, name, kw)
    x = _rows(M, 77, torch.float64, seed=1)
    got = _interpreted(RoundTerms(W, np.arange(M)), x)
    torch.testing.assert_close(got, torch.as_tensor(W) @ x, rtol=1e-14, atol=1e-14 * x.abs().max().item())


def test_kernel_reads_strided_rows_and_writes_only_its_rows():
    """A column slice of a wider buffer (a rank's chunk) in, a row block of a wider buffer out."""
    W = build_topology("ring", 5, 1).static_W
    wide = _rows(5, 100, torch.float32, seed=2)
    x = wide[:, 10:87]
    target = torch.zeros(7, 120)
    terms = RoundTerms(W, np.arange(5))
    index, weight = terms.on(x.device, x.dtype)
    kernel.launch(x, index, weight, target[1:6, 3:80], block=BLOCK)
    ref = torch.empty(5, 77)
    terms.apply(x.contiguous(), ref)
    assert torch.equal(target[1:6, 3:80], ref)
    target[1:6, 3:80] = 0
    assert not target.any()


def _ptx(fp_fusion: bool) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    signature = {"x_ptr": "*fp32", "index_ptr": "*i64", "weight_ptr": "*fp32", "out_ptr": "*fp32", "rows": "i32",
                 "n": "i32", "x_stride": "i32", "out_stride": "i32", "TERMS": "constexpr", "BLOCK": "constexpr"}
    src = ASTSource(kernel._compiled, signature, constexprs={"TERMS": 3, "BLOCK": kernel.BLOCK})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": fp_fusion}).asm["ptx"]


def test_compiled_kernel_rounds_every_product_and_sum_once():
    """The PTX for sm_90 (compiled ahead of time, no GPU): with fusion off, as :func:`launch`
    asks, every product is a ``mul.rn`` and every sum an ``add.rn``, no ``fma``; with torch's
    and Triton's default (fusion on) the same source becomes fused multiply-adds."""
    if isinstance(kernel._compiled, type(kernel._interpreted)):
        pytest.skip("TRITON_INTERPRET=1: triton.jit gives the interpreter, nothing to compile")
    exact, fused = _ptx(False), _ptx(True)
    assert "fma." not in exact and "mul.rn.f32" in exact and "add.rn.f32" in exact
    assert "fma.rn.f32" in fused


@pytest.mark.parametrize("rounds", [1, 2])
def test_mixer_on_cuda_runs_one_op_per_buffer_and_round_at_the_bytes_floor(rounds):
    """LocalMixer's ordered kernel on (fake) CUDA tensors dispatches the Triton custom op once per
    flat buffer and round; the op census counts its reads and writes: the rows in, the rows out
    (plus the small index and weight tables) — the bytes floor, where the torch ops of the CPU's
    eager form move about 9x that."""
    mixer = LocalMixer(build_topology("ring", 5, rounds))
    with FakeTensorMode():
        bufs = [torch.empty(5, 3000, device="cuda"), torch.empty(5, 1000, device="cuda")]
        outs = [torch.empty_like(b) for b in bufs]
        mixer.mix(bufs, 1, out=outs)        # the first call moves the index and weight tables to the device
        with ByteCensus() as census:
            mixer.mix(bufs, 1, out=outs)
    floor = rounds * sum(2 * b.numel() * b.element_size() for b in bufs)
    assert census.ops == 2 * rounds
    assert floor <= census.bytes <= 1.01 * floor
    with ByteCensus() as eager:             # the same mix through the torch ops (CPU tensors, under a mode)
        mixer.mix([torch.zeros(5, 3000), torch.zeros(5, 1000)], 1)
    assert eager.ops > 6 * rounds and eager.bytes > 5 * floor
