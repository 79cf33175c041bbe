"""The local mixer: W^t along the node axis, the node average kept, bytes counted."""
import numpy as np
import pytest
import torch

from dadam3.mixing import LocalMixer, ieee_fp32_matmul
from dadam3.topology import build_topology


def local_mixer(name, nodes, rounds=1, **kw):
    return LocalMixer(build_topology(name, nodes, rounds, **kw))


TOPOLOGIES = ["ring", "complete", "torus", "star", "exponential", "erdos_renyi", "one_peer_exponential"]


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_mixing_preserves_node_average(name):
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(8, 3, 2, generator=g, dtype=torch.float64), torch.randn(8, 5, generator=g, dtype=torch.float64)]
    mixer = local_mixer(name, 8, rounds=2)
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
