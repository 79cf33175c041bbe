"""Values that cannot fit or never end (:mod:`dadam3.gan.memory`'s estimate, the schema's bounds):
refused in one line before anything is written or allocated; the estimate counts the nets on the
meta device."""
import pytest

from trainer_runs import TOY, cli, one_line


@pytest.mark.parametrize("args, start", [
    (["nodes=100000"], "error: nodes=100000: the run needs at least 74.5 GiB (the 100000x100000 mixing matrix)"),
    (["loop.batch_size=100000000"], "error: loop.batch_size=100000000: the run needs at least"),
    (["model.hidden=100000000"], "error: model.hidden=100000000: the run needs at least"),
    (["loop.n_critic=1000000000"], "error: loop.n_critic=1000000000: must be an integer in [1, 1000]"),
    (["topology=torus", "nodes=4", "topology.rows=abc"],
     "error: topology.rows=abc: must be an integer divisor of nodes, or null (the most square factorisation)"),
])
def test_values_that_cannot_fit_or_never_end_are_one_line_before_anything(tmp_path, args, start):
    run = tmp_path / "run"
    r = cli(*TOY, *args, f"hydra.run.dir={run}")
    assert r.returncode == 2, r.stderr[-2000:]
    one_line(r.stderr, start)
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()


def test_the_memory_estimate_counts_the_nets_on_the_meta_device():
    """The meta-device count equals the real nets' parameters; activations scale with the batch."""
    from dadam3.gan.memory import net_costs
    from dadam3.gan.nets import build_nets
    G, D = build_nets("mlp", hidden=4, nz=3)
    params, acts = net_costs("mlp", 10, {"hidden": 4, "nz": 3}, {})
    assert params == sum(p.numel() for net in (G, D) for p in net.parameters())
    assert net_costs("mlp", 20, {"hidden": 4, "nz": 3}, {}) == (params, 2 * acts) and acts >= 10 * (4 + 4 + 2 + 1)
