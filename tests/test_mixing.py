"""The local mixer: W^t along the node axis, the node average kept, bytes counted."""
import numpy as np
import pytest
import torch

from dadam3.mixing import LocalMixer, ieee_fp32_matmul
from dadam3.topologies import TOPOLOGIES, build_topology
from dadam3.topologies.ring import ring


def local_mixer(name, nodes, rounds=1, **kw):
    return LocalMixer(build_topology(name, nodes, rounds, **kw))


def example_options(name, nodes):
    """What a registered topology needs to be built: a user-given W gets the ring's; every
    other builds from its defaults. A topology added to the registry is tested here by itself."""
    return {"matrix": ring(nodes).tolist()} if TOPOLOGIES[name].given else {}


def supported_nodes(name, nodes):
    """The first node count from ``nodes`` on that topology ``name`` declares it supports."""
    return next(n for n in range(nodes, 8 * nodes) if TOPOLOGIES[name].supports(n))


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_mixing_preserves_node_average(name):
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(8, 3, 2, generator=g, dtype=torch.float64), torch.randn(8, 5, generator=g, dtype=torch.float64)]
    assert TOPOLOGIES[name].supports(8), f"{name} has no graph on 8 nodes"
    mixer = local_mixer(name, 8, rounds=2, **example_options(name, 8))
    for k in range(1, 5):
        mixed = mixer.mix(xs, k)
        for x, m in zip(xs, mixed):
            assert m.shape == x.shape
            torch.testing.assert_close(m.mean(0), x.mean(0), rtol=0, atol=1e-12)
        xs = mixed


def test_mixing_equals_loop_over_nodes_with_rounds():
    topo = build_topology("ring", 5, rounds=2)
    W = topo.static_W
    x = torch.randn(5, 4, dtype=torch.float64)
    out = LocalMixer(topo).mix([x])[0]
    ref = x.clone()
    for _ in range(2):
        ref = torch.stack([sum(W[i, j] * ref[j] for j in range(5)) for i in range(5)])
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-14)


def test_complete_mixing_is_consensus_and_inputs_untouched():
    x = torch.randn(4, 3, dtype=torch.float64)
    before = x.clone()
    out = local_mixer("complete", 4).mix([x])[0]
    torch.testing.assert_close(out, x.mean(0, keepdim=True).expand_as(x))
    assert torch.equal(x, before)


def test_bytes_sent_counts_neighbours_rounds_and_payload():
    mixer = local_mixer("ring", 5, rounds=2)
    mixer.mix([torch.zeros(5, 10), torch.zeros(5, 6, dtype=torch.float64)])  # 40 + 48 bytes per node
    np.testing.assert_array_equal(mixer.bytes_sent, 2 * 2 * 88)  # 2 rounds x 2 neighbours
    star = local_mixer("star", 4)
    star.mix([torch.zeros(4, 1)])
    np.testing.assert_array_equal(star.bytes_sent, [12, 4, 4, 4])


def test_single_node_is_identity():
    x = torch.randn(1, 3)
    assert local_mixer("ring", 1).mix([x])[0] is x


@pytest.fixture
def matmul_precision():
    flags = torch.backends.cuda.matmul
    before = flags.fp32_precision
    yield flags
    flags.fp32_precision = before


@pytest.mark.parametrize("setting", ["none", "tf32", "ieee"])
def test_gossip_matmul_precision_is_ieee_on_cuda_and_restored(matmul_precision, setting):
    matmul_precision.fp32_precision = setting
    with ieee_fp32_matmul(torch.device("cuda")):
        assert matmul_precision.fp32_precision == "ieee"
    assert matmul_precision.fp32_precision == setting
    with pytest.raises(KeyError), ieee_fp32_matmul(torch.device("cuda", 0)):
        raise KeyError("inside")
    assert matmul_precision.fp32_precision == setting
    with ieee_fp32_matmul(torch.device("cpu")):
        assert matmul_precision.fp32_precision == setting


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_float32_gossip_is_not_tf32(matmul_precision):
    matmul_precision.fp32_precision = "tf32"
    g = torch.Generator().manual_seed(0)
    x = torch.randn(15, 1 << 16, generator=g, dtype=torch.float64)
    mixer = local_mixer("ring", 15)
    out = mixer.mix([x.float().cuda()])[0].double().cpu()
    ref = mixer.mix([x])[0]
    rel = (out - ref).norm() / ref.norm()
    assert rel < 1e-6, f"relative error {rel:.2e}: the gossip matmul ran in TF32 (about 1e-4)"
    assert matmul_precision.fp32_precision == "tf32"


# ---- the stencil kernel (dadam3.mixing.stencil.stencil_mix) ------------------------------------------

def _random_rows(M, P=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(M, P, generator=g, dtype=torch.float64), torch.randn(M, 3, 2, generator=g, dtype=torch.float64)]


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("nodes,rounds", [(5, 1), (8, 2), (9, 3)])
def test_stencil_mix_equals_the_matmul_in_float64(name, nodes, rounds):
    """Every topology, multi-round and time-varying schedules (k = 1..6 walks the phases)."""
    nodes = supported_nodes(name, nodes)
    topo = build_topology(name, nodes, rounds, **example_options(name, nodes))
    reference, stencil = LocalMixer(topo), LocalMixer(topo, kernel="stencil")
    xs = _random_rows(nodes)
    for k in range(1, 7):
        out = [torch.full_like(x, float("nan")) for x in xs]
        stencil.mix(xs, k, out=out)
        for o, r in zip(out, reference.mix(xs, k)):
            torch.testing.assert_close(o, r, rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(stencil.bytes_sent, reference.bytes_sent)


class _OpNames(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def test_ordered_and_stencil_run_no_matmul_so_float32_cannot_be_tf32():
    xs = [x.float() for x in _random_rows(15)]
    with _OpNames() as ops:
        LocalMixer(build_topology("ring", 15), kernel="matmul").mix(xs)
    assert ops.names & {"mm", "addmm", "bmm", "matmul"}                   # the reference does ...
    for kernel in ("stencil", "ordered"):
        with _OpNames() as ops:
            LocalMixer(build_topology("ring", 15), kernel=kernel).mix(xs)
        assert not ops.names & {"mm", "addmm", "bmm", "matmul", "baddbmm"}    # ... these do not


def test_auto_kernel_chooses_by_device_and_graph_density():
    from dadam3.mixing.stencil import cyclic_shifts, use_stencil
    shifts = {name: len(cyclic_shifts(build_topology(name, 15).operator(1))[0])
              for name in ("ring", "torus", "complete")}
    assert shifts["ring"] == 3 and shifts["complete"] == 15
    assert use_stencil(shifts["ring"], 15) and use_stencil(shifts["torus"], 15)
    assert not use_stencil(shifts["complete"], 15) and not use_stencil(5, 5)
    assert use_stencil(3, 5)                                  # a ring is sparse at any M
    x = torch.randn(15, 4)
    for name in ("ring", "complete"):                          # on the CPU auto is always the ordered sum
        mixer = LocalMixer(build_topology(name, 15), kernel="auto")
        assert not mixer._uses_stencil(1, x)
        with _OpNames() as ops:
            mixer.mix([x])
        assert "mm" not in ops.names and "index_select" in ops.names
    with pytest.raises(ValueError, match="kernel='gemv'"):
        LocalMixer(build_topology("ring", 5), kernel="gemv")


@pytest.mark.parametrize("name", ["ring", "complete"])
def test_matmul_mix_moves_the_bytes_floor(name):
    """Dispatch-mode count: one mix of [M, P] reads each row once and writes it once (+ W)."""
    from op_census import ByteCensus
    M, P = 15, 4096
    x, out = torch.randn(M, P), torch.empty(M, P)
    mixer = LocalMixer(build_topology(name, M), kernel="matmul")
    mixer.mix([x], out=[out])                      # W cached on first use
    with ByteCensus() as census:
        mixer.mix([x], out=[out])
    floor = 2 * M * P * 4
    assert floor <= census.bytes <= floor + M * M * 4


def test_compiled_stencil_is_one_generated_kernel_and_equal_in_float64():
    """What CUDA runs (torch.compile of the stencil), compiled here for the CPU: one generated
    kernel per flat buffer (each row read once, written once), equal to the matmul."""
    from torch._inductor import metrics

    from dadam3.mixing.stencil import compiled_stencil_mix, cyclic_shifts
    topo = build_topology("ring", 5)
    shifts, coeffs = cyclic_shifts(topo.operator(1))
    x = _random_rows(5, P=1000)[0]
    out = torch.empty_like(x)
    metrics.reset()
    compiled_stencil_mix()(x, torch.as_tensor(coeffs).unsqueeze(-1), shifts, out)
    assert metrics.generated_kernel_count == 1
    torch.testing.assert_close(out, LocalMixer(topo).mix([x])[0], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", ["ring", "complete", "torus", "one_peer_exponential"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ordered_mix_compiled_pass_equals_its_torch_ops_bit_for_bit(name, dtype):
    """The CPU's one-pass numba loop and the torch ops (what a dispatch mode, autograd or CUDA
    see) evaluate the same products and sums in the same order: equal to the bit, also in
    float32, and equal to the matmul reference to rounding."""
    M = 8
    topo = build_topology(name, M)
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(M, 4099, generator=g, dtype=torch.float64) * torch.logspace(-4, 4, 4099, dtype=torch.float64))
    x = x.to(dtype)
    mixer = LocalMixer(topo)
    fast = mixer.mix([x], k=2)[0]
    with _OpNames():
        ops = mixer.mix([x], k=2)[0]
    assert torch.equal(fast, ops)
    ref = LocalMixer(topo, kernel="matmul").mix([x.double()], k=2)[0]
    tol = 1e-5 if dtype == torch.float32 else 1e-13
    torch.testing.assert_close(fast.double(), ref, rtol=tol, atol=tol * ref.abs().max().item())
