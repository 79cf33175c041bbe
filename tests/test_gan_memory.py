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
    (["dataset.modes=1000000000"], "error: dataset.modes=1000000000: the run needs at least"),
    (["metrics.samples=1000000000", "metrics.every=1"], "error: metrics.samples=1000000000: the run needs at least"),
    (["model.nz=1000000000"], "error: model.nz=1000000000: the run needs at least"),
    (["model.width=100000"], "error: model.width=100000.0: the run needs at least"),
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


def test_the_refusal_names_the_key_whose_value_dominates_the_estimate():
    """Set to 1, the dominant key shrinks the estimate most (nodes, not model.nz, for a big graph)."""
    from dadam3.gan.memory import dominant_key
    cost = lambda v: 8 * v["nodes"] ** 2 + v["nodes"] * v["model.nz"] * 100 + v["metrics.samples"] * 16
    assert dominant_key({"nodes": 5, "model.nz": 10 ** 9, "metrics.samples": 100}, cost) == "model.nz"
    assert dominant_key({"nodes": 10 ** 5, "model.nz": 100, "metrics.samples": 100}, cost) == "nodes"
    assert dominant_key({"nodes": 5, "model.nz": 100, "metrics.samples": 10 ** 12}, cost) == "metrics.samples"
    assert dominant_key({"nodes": 5, "model.width": 0.5}, lambda v: v["nodes"] * v["model.width"]) == "nodes"


def test_the_memory_a_process_may_use_is_the_least_of_meminfo_cgroup_and_ulimit(tmp_path):
    import resource
    from dadam3.gan import memory
    # cgroup v2 (the tightest along the path) and v1 (its "no limit" is a huge number)
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "memory.max").write_text("3000\n")
    (tmp_path / "a" / "memory.current").write_text("1000\n")
    (tmp_path / "a" / "b" / "memory.max").write_text("max\n")
    (tmp_path / "cgroup").write_text("0::/a/b\n")
    assert memory._cgroup_room(tmp_path, tmp_path / "cgroup") == 2000
    (tmp_path / "memory" / "c").mkdir(parents=True)
    (tmp_path / "memory" / "c" / "memory.limit_in_bytes").write_text(str(1 << 62))
    (tmp_path / "cgroup").write_text("4:memory:/c\n")
    assert memory._cgroup_room(tmp_path, tmp_path / "cgroup") is None
    (tmp_path / "memory" / "c" / "memory.limit_in_bytes").write_text("5000")
    (tmp_path / "memory" / "c" / "memory.usage_in_bytes").write_text("4000")
    assert memory._cgroup_room(tmp_path, tmp_path / "cgroup") == 1000
    # ulimit -v: what it leaves beside the address space already mapped
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = int(next(x for x in open("/proc/self/status") if x.startswith("VmSize:")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (1 << 30), hard))
    try:
        room = memory._address_space_room()
        assert (1 << 29) < room <= 1 << 30 and memory.available_bytes(__import__("torch").device("cpu")) <= room
        assert "ulimit -v" in memory.memory_limits()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_the_synthetic_runner_is_estimated_before_its_graph_under_ulimit_v(tmp_path):
    """``python -m dadam3.synthetic nodes=50000`` under ``ulimit -v``: a MemoryError traceback from
    the topology's matrix before; now one line naming nodes, nothing written."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))
    run = tmp_path / "s"
    r = cli("nodes=50000", "iterations=10", f"hydra.run.dir={run}", module="dadam3.synthetic", preexec_fn=limit)
    assert r.returncode == 2, r.stderr[-2000:]
    one_line(r.stderr, "error: nodes=50000: the run needs at least 37.3 GiB (the topology's 50000x50000 matrices)")
    assert "ulimit -v" in r.stderr and not run.exists()
