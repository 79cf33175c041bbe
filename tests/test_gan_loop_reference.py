"""The batched M-node WGAN-GP iteration (stacked nets + node optimizers with gossip)
against the loop reference over M ordinary modules, in float64: same losses, gradient
penalty, gradients, BatchNorm running statistics and parameters after several steps."""
import pytest
import torch

from dadam3.gan import build_stacked_nets
from loop_reference import LoopReference
from dadam3.optim import build_optimizer, mixer_for
from stacked_compare import assert_steps_match_loop

M, B = 3, 4


@pytest.mark.parametrize("optimizer, topology", [("dadam3", "ring"), ("dosg", "complete"),
                                                 ("dp_oadam", "ring"), ("oadagrad", "star"), ("extra_adam", "star")])
@pytest.mark.parametrize("arch, kw", [("dcgan32", dict(channels=3, width=1 / 32)),
                                      ("dcgan64", dict(channels=3, width=1 / 32)),
                                      ("mlp", dict(hidden=8))])
def test_batched_step_equals_loop_reference_after_gossip_steps(optimizer, topology, arch, kw):
    torch.manual_seed(0)
    G, D = build_stacked_nets(arch, M, identical_init=False, **kw)   # distinct nodes: mixing matters
    G, D = G.double(), D.double()
    hp = {"lr": 1e-2} if optimizer != "dadam3" else {"lr": 1e-2, "beta1": 0.5, "beta2": 0.9, "beta3": 0.5}
    ref_mixer = mixer_for(optimizer, M, topology)      # one mixer: the players step together
    ref = LoopReference(G.to_modules(), D.to_modules(), lambda ps: build_optimizer(optimizer, ps, ref_mixer, **hp))
    mixer = mixer_for(optimizer, M, topology)
    opt_g = build_optimizer(optimizer, G.parameters(), mixer, **hp)
    opt_d = build_optimizer(optimizer, D.parameters(), mixer, **hp)
    gen = torch.Generator().manual_seed(1)
    sample_shape = (2,) if arch == "mlp" else (3, 32 if arch == "dcgan32" else 64, 32 if arch == "dcgan32" else 64)

    def batches():
        for _ in range(3):
            real = torch.rand(M, B, *sample_shape, generator=gen, dtype=torch.float64) * 2 - 1
            z = torch.randn(M, B, G.in_shape[0], generator=gen, dtype=torch.float64)
            yield real, z, torch.rand(M, B, generator=gen, dtype=torch.float64)
    assert_steps_match_loop(G, D, opt_g, opt_d, ref, batches())
    loop_buffers = {name: torch.stack([dict(g.named_buffers())[name] for g in ref.Gs])
                    for name, _ in ref.Gs[0].named_buffers()}
    for name, buf in G.named_buffers():
        torch.testing.assert_close(buf, loop_buffers[name], rtol=1e-10, atol=1e-12)
    if arch != "mlp":
        assert any("running_mean" in n for n in loop_buffers)
