"""The torch.distributed mixer against the simulator, in real processes (gloo on CPU).

Every job starts R processes (spawn), each joins the group through ``init_from_env`` with
the variables torchrun sets, and writes what it computed to a file; the checks run here,
against ``LocalMixer`` in this process. Every job has a hard wall-clock limit: a hang
fails the test instead of hanging the suite.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from dadam3.distributed import DistributedMixer, exit_on_peer_failure, init_from_env, node_blocks, shutdown
from dadam3.errors.config import ConfigError
from dadam3.mixing import LocalMixer
from dadam3.optim import build_optimizer
from dadam3.topologies import build_topology

TOPOLOGIES = [("ring", {}), ("erdos_renyi", {"p": 0.5, "seed": 0}), ("one_peer_exponential", {})]
SHAPES = [(), (3, 4), (7,)]             # per node: tensors [M], [M, 3, 4], [M, 7]
ITERATIONS = 4                          # k = 1..4: every phase of one_peer_exponential (period 3), t = 1, 2
OPTIMIZERS = [("dadam3", dict(lr=0.05, beta1=0.5, beta2=0.9, beta3=0.5)), ("dosg", dict(lr=0.05)),
              ("dp_oadam", dict(lr=0.05, beta1=0.5, beta2=0.9)),
              ("dadam3_shared", dict(lr=0.05, beta1=0.5, beta2=0.9, beta3=0.5)),         # a gossiped scale
              ("dadam3_shared_exact", dict(lr=0.05, beta1=0.5, beta2=0.9, beta3=0.5))]   # Mixer.average
OPT_CASES = [(5, "ring", 1), (6, "one_peer_exponential", 2)]
OPT_STEPS = 5
JOB_LIMIT_S = 120.0                     # hard wall-clock limit of one job (only a hang reaches it)


# --------------------------------------------------------------------------- harness
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(job, rank: int, world: int, port: int, out_dir: str, timeout_s: float, args: tuple) -> None:
    """One rank: stderr to a file, the torchrun variables, init_from_env, the job."""
    err = os.open(os.path.join(out_dir, f"stderr{rank}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(err, 2)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    info = init_from_env("gloo", timeout_s=timeout_s)
    job(info, Path(out_dir), *args)
    shutdown()


def _launch(job, world: int, out_dir: Path, timeout_s: float = 30.0, args: tuple = (),
            limit_s: float = JOB_LIMIT_S, watch_rank0: bool = False) -> tuple[list[int | None], list[float]]:
    """Run ``job`` on ``world`` ranks. Like torchrun, the others are killed as soon as one
    fails; with ``watch_rank0`` only once rank 0 has exited (the failure tests: a peer's
    death must be noticed by rank 0 itself). Returns exit codes and exit times
    (time.time()); fails the test at ``limit_s``."""
    ctx = multiprocessing.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_entry, args=(job, r, world, port, str(out_dir), timeout_s, args))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + limit_s
    exit_time: list[float | None] = [None] * world
    try:
        while any(t is None for t in exit_time):
            for r, p in enumerate(procs):
                if exit_time[r] is None and p.exitcode is not None:
                    exit_time[r] = time.time()
                    if (r == 0) if watch_rank0 else (p.exitcode != 0):
                        for q in procs:
                            if q.exitcode is None:
                                q.kill()
            if time.monotonic() > deadline:
                pytest.fail(f"distributed job {job.__name__} on {world} ranks still running after {limit_s:g} s")
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
            p.join(5)
    return [p.exitcode for p in procs], exit_time


def _node_rows(nodes, shape, *seed) -> torch.Tensor:
    """Rows of the given nodes, each from its own generator (so nothing depends on R)."""
    rows = []
    for i in nodes:
        g = torch.Generator().manual_seed(zlib.crc32(repr((*seed, i)).encode()))
        rows.append(torch.randn(shape, generator=g, dtype=torch.float64))
    return torch.stack(rows)


def _inputs(nodes, M, name, t, k):
    return [_node_rows(nodes, s, M, name, t, k, j) for j, s in enumerate(SHAPES)]


# --------------------------------------------------------------------------- jobs (run in the ranks)
def _equality_job(info, out: Path) -> None:
    """Mixing for every case (mix() on odd k, out= on even k), the optimizers, and the
    hand-count case."""
    rec = {"mix": {}, "opt": {}, "inputs_unchanged": True, "errors": []}
    mixes = 0
    for M in (5, 6):
        for name, kw in TOPOLOGIES:
            for t in (1, 2):
                mixer = DistributedMixer(build_topology(name, M, t, **kw), timeout_s=30)
                got = []
                for k in range(1, ITERATIONS + 1):
                    xs = _inputs(mixer.block, M, name, t, k)
                    before = [x.clone() for x in xs]
                    if k % 2:
                        got.append(mixer.mix(xs, k))
                    else:                                               # out= on even k
                        dest = [torch.full_like(x, float("nan")) for x in xs]
                        assert all(a is b for a, b in zip(mixer.mix(xs, k, out=dest), dest))
                        got.append(dest)
                    mixes += 1
                    rec["inputs_unchanged"] &= all(torch.equal(x, y) for x, y in zip(xs, before))
                rec["mix"][(M, name, t)] = dict(block=mixer.block, out=got, bytes_sent=mixer.bytes_sent.copy(),
                                                wire_bytes=mixer.wire_bytes)
    for M, name, t in OPT_CASES:
        for opt_name, hp in OPTIMIZERS:
            mixer = DistributedMixer(build_topology(name, M, t), timeout_s=30)
            calls, mix = [], mixer.mix
            mixer.mix = lambda *a, **kw: calls.append(1) or mix(*a, **kw)   # count the optimizer's mixes
            rec["opt"][(M, name, t, opt_name)] = _run_optimizer(opt_name, hp, mixer, mixer.block, M)
            mixes += len(calls)
    mixer = DistributedMixer(build_topology("ring", 6), timeout_s=30)  # all M rows where a block belongs
    for bad in (lambda: mixer.mix([torch.zeros(6 if mixer.local_nodes != 6 else 5, 2)]),
                lambda: build_optimizer("dosg", [torch.zeros(6 if mixer.local_nodes != 6 else 5, 2)], mixer)):
        try:
            bad()
        except ValueError as e:
            rec["errors"].append(str(e))
    if info.world_size == 2:                                           # the hand count: M=4 ring
        mixer = DistributedMixer(build_topology("ring", 4), timeout_s=30)
        mixer.mix([torch.zeros(2, 10, dtype=torch.float64)], 1)
        rec["hand"] = dict(bytes_sent=mixer.bytes_sent.copy(), wire_bytes=mixer.wire_bytes)
    rec["mixes"] = mixes
    torch.save(rec, out / f"rank{info.rank}.pt")


def _run_optimizer(opt_name, hp, mixer, nodes, M):
    """OPT_STEPS steps on two stacked players (one maximising) with per-node random grads."""
    a = _node_rows(nodes, (3,), "a", M).requires_grad_()
    b = _node_rows(nodes, (2, 2), "b", M).requires_grad_()
    opt = build_optimizer(opt_name, [{"params": [a]}, {"params": [b], "maximize": True}], mixer, **hp)
    for step in range(1, OPT_STEPS + 1):
        a.grad = _node_rows(nodes, (3,), "ga", M, step)
        b.grad = _node_rows(nodes, (2, 2), "gb", M, step)
        opt.step()
    return dict(params=[a.detach().clone(), b.detach().clone()],
                state=[{key: v.clone() for key, v in opt.state[p].items() if torch.is_tensor(v)} for p in (a, b)],
                k=opt.k)


def _stress_job(info, out: Path, mixes: int) -> None:
    """``mixes`` chained mixes (three topologies in turn), the final rows saved."""
    mixers = [DistributedMixer(build_topology(name, 6, 2, **kw), timeout_s=30) for name, kw in TOPOLOGIES]
    xs = _inputs(mixers[0].block, 6, "stress", 2, 0)
    for n in range(mixes):
        xs = mixers[n % 3].mix(xs, n // 3 + 1)
    torch.save(dict(block=mixers[0].block, out=xs), out / f"rank{info.rank}.pt")


@exit_on_peer_failure
def _failure_job(info, out: Path, mode: str) -> None:
    """M=4 ring on 2 ranks; after 5 good mixes rank 1 exits or sleeps, rank 0 mixes on."""
    mixer = DistributedMixer(build_topology("ring", 4), timeout_s=info.timeout_s)
    x = torch.zeros(2, 10, dtype=torch.float64)
    for k in range(1, 6):
        x = mixer.mix([x], k)[0]
    if info.rank == 1:
        if mode == "exit":
            os._exit(7)
        time.sleep(600)
    (out / "t_before.txt").write_text(repr(time.time()))
    mixer.mix([x], 6)
    (out / "unreachable.txt").write_text("mix returned")


# --------------------------------------------------------------------------- the simulator side
def _reference_mix(M, name, t):
    kw = dict(TOPOLOGIES)[name]
    mixer = LocalMixer(build_topology(name, M, t, **kw))
    outs = []
    for k in range(1, ITERATIONS + 1):
        xs = _inputs(range(M), M, name, t, k)
        outs.append(mixer.mix(xs, k))
    return outs, mixer.bytes_sent.copy()


@pytest.fixture(scope="module")
def equality_run(tmp_path_factory):
    """Run the equality job once per R (cached); returns the ranks' records."""
    cache = {}

    def get(R):
        if R not in cache:
            out = tmp_path_factory.mktemp(f"eq{R}")
            codes, _ = _launch(_equality_job, R, out)
            assert codes == [0] * R, f"ranks exited with {codes}: " + \
                " | ".join((out / f"stderr{r}.txt").read_text()[-400:] for r in range(R))
            cache[R] = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(R)]
        return cache[R]

    return get


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("R", [1, 2, 3])
def test_every_rank_mixes_its_rows_like_the_simulator(equality_run, R):
    recs = equality_run(R)
    for M in (5, 6):
        for name, _ in TOPOLOGIES:
            for t in (1, 2):
                ref, ref_bytes = _reference_mix(M, name, t)
                covered = []
                for rank, rec in enumerate(recs):
                    got = rec["mix"][(M, name, t)]
                    block = got["block"]
                    assert block == node_blocks(M, R)[rank]
                    covered.extend(block)
                    assert len(got["out"]) == len(ref) == ITERATIONS
                    for ref_k, got_k in zip(ref, got["out"]):
                        for x_ref, x in zip(ref_k, got_k):
                            assert x.shape == x_ref[block.start:block.stop].shape
                            torch.testing.assert_close(x, x_ref[block.start:block.stop], rtol=0, atol=1e-10)
                    np.testing.assert_array_equal(got["bytes_sent"], ref_bytes)   # exactly the simulator's count
                assert covered == list(range(M))
    assert all(rec["inputs_unchanged"] for rec in recs)
    # 48 mixes in the loop above; 108 in the optimizers (2 cases x (Dadam3, DOSG, dadam3_shared_exact:
    # 1 at construction + 2 per step; DP-OAdam: 1 per step; dadam3_shared: 1 + 3 per step, its scale
    # gossiped; the exact average is an all-reduce, not a mix)): every rank got through all of them
    assert [rec["mixes"] for rec in recs] == [48 + 2 * (11 + 11 + 5 + 16 + 11)] * R


@pytest.mark.parametrize("R", [1, 2, 3])
def test_tensors_of_the_wrong_size_are_refused_in_one_line(equality_run, R):
    for rank, rec in enumerate(equality_run(R)):
        block = node_blocks(6, R)[rank]
        assert len(rec["errors"]) == 2 and all("\n" not in e for e in rec["errors"])
        assert f"leading axis of this rank's {len(block)} nodes ({block.start}..{block.stop - 1})" in rec["errors"][0]
        held = "nodes=6" if R == 1 else f"{len(block)} (this rank's block of nodes=6)"
        assert rec["errors"][1].endswith(f"has no leading node axis of size {held}")


@pytest.mark.parametrize("R", [1, 2, 3])
def test_optimizers_step_like_the_simulator(equality_run, R):
    recs = equality_run(R)
    for M, name, t in OPT_CASES:
        for opt_name, hp in OPTIMIZERS:
            ref = _run_optimizer(opt_name, hp, LocalMixer(build_topology(name, M, t)), range(M), M)
            for rank, rec in enumerate(recs):
                got = rec["opt"][(M, name, t, opt_name)]
                rows = slice(node_blocks(M, R)[rank].start, node_blocks(M, R)[rank].stop)
                assert got["k"] == ref["k"] == OPT_STEPS
                for p, p_ref in zip(got["params"], ref["params"]):
                    torch.testing.assert_close(p, p_ref[rows], rtol=0, atol=1e-10)
                for st, st_ref in zip(got["state"], ref["state"]):
                    assert st.keys() == st_ref.keys() and len(st) >= 2
                    for key in st:
                        torch.testing.assert_close(st[key], st_ref[key][rows], rtol=0, atol=1e-10,
                                                   msg=lambda m: f"{opt_name} state {key}: {m}")


def test_bytes_by_hand_ring_of_four_on_two_ranks(equality_run):
    """M=4 ring, R=2, one float64 tensor of n=10 per node, one mix.

    bytes_sent: every node sends its 8n bytes to its 2 neighbours: 16n each.
    wire_bytes: rank 0 holds nodes 0, 1 and rank 1 holds 2, 3. Node 0's neighbours are 3
    and 1, node 1's are 0 and 2: rank 1 needs both of rank 0's rows (both are boundary
    nodes), and rank 0 both of rank 1's. Each rank sends 2 rows x 8n = 16n bytes once
    (a row goes to a rank once, however many of its nodes need it). The other half of
    bytes_sent (0 <-> 1, 2 <-> 3) stays inside a rank."""
    n = 10
    recs = equality_run(2)
    for rec in recs:
        np.testing.assert_array_equal(rec["hand"]["bytes_sent"], [2 * 8 * n] * 4)
        assert rec["hand"]["wire_bytes"] == 2 * 8 * n
    assert sum(rec["hand"]["wire_bytes"] for rec in recs) == rec["hand"]["bytes_sent"].sum() - 4 * 8 * n


def test_wire_bytes_are_the_rows_other_ranks_need(equality_run):
    """wire_bytes = sum over rounds of (rows j of this rank, rank q != this one) such that
    some node of q has W[i, j] > 0, times a node's bytes: counted edge by edge here."""
    row = 8 * sum(int(np.prod(s)) for s in SHAPES)                     # bytes of one node's rows
    for R in (1, 2, 3):
        for rank, rec in enumerate(equality_run(R)):
            for (M, name, t), got in rec["mix"].items():
                topo = build_topology(name, M, t, **dict(TOPOLOGIES)[name])
                owner = [q for q, b in enumerate(node_blocks(M, R)) for _ in b]
                expected = 0
                for k in range(1, ITERATIONS + 1):
                    for r in range(t):
                        W = topo.matrix((k - 1) * t + r)
                        pairs = {(j, owner[i]) for i in range(M) for j in got["block"]
                                 if W[i, j] > 0 and owner[i] != rank}
                        expected += len(pairs) * row
                assert got["wire_bytes"] == expected
                if R == 1:
                    assert expected == 0


def test_peer_exiting_mid_run_stops_the_other_rank_with_one_line(tmp_path):
    codes, exit_time = _launch(_failure_job, 2, tmp_path, timeout_s=3.0, args=("exit",), limit_s=60,
                               watch_rank0=True)
    _check_failure(tmp_path, codes, exit_time, timeout_s=3.0, rank1_code=7)


def test_peer_hanging_mid_run_times_out_with_one_line(tmp_path):
    codes, exit_time = _launch(_failure_job, 2, tmp_path, timeout_s=3.0, args=("hang",), limit_s=60,
                               watch_rank0=True)
    elapsed = _check_failure(tmp_path, codes, exit_time, timeout_s=3.0, rank1_code=-9)  # killed by the harness
    assert elapsed >= 3.0 - 0.1, "gave up before timeout_s on a peer that was only slow"


def _check_failure(out: Path, codes, exit_time, timeout_s: float, rank1_code: int) -> float:
    assert codes == [3, rank1_code]
    assert not (out / "unreachable.txt").exists()
    errors = [line for line in (out / "stderr0.txt").read_text().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, (out / "stderr0.txt").read_text()
    msg = errors[0]
    assert "rank 0" in msg and "rank 1" in msg and f"timeout_s={timeout_s:g}" in msg and "mixing step 6" in msg
    elapsed = exit_time[0] - float((out / "t_before.txt").read_text())
    assert elapsed < timeout_s + 2.0, f"rank 0 exited {elapsed:.1f} s after the failing mix began"
    print(f"rank 0 exited {elapsed:.2f} s after the failing mix began: {msg}")
    return elapsed


@pytest.mark.slow
def test_many_chained_mixes_without_a_hang(tmp_path):
    mixes = 300
    _launch(_stress_job, 3, tmp_path, args=(mixes,), limit_s=JOB_LIMIT_S)
    mixers = [LocalMixer(build_topology(name, 6, 2, **kw)) for name, kw in TOPOLOGIES]
    xs = _inputs(range(6), 6, "stress", 2, 0)
    for n in range(mixes):
        xs = mixers[n % 3].mix(xs, n // 3 + 1)
    for r in range(3):
        rec = torch.load(tmp_path / f"rank{r}.pt", weights_only=False)
        for x, x_ref in zip(rec["out"], xs):
            torch.testing.assert_close(x, x_ref[rec["block"].start:rec["block"].stop], rtol=0, atol=1e-10)


@pytest.mark.slow
def test_benchmark_script_runs_and_counts_the_bytes_by_hand():
    """scripts/bench_distributed.py at tiny sizes (its numbers are in docs/benchmarks.md).
    Ring of 6, 100 float32 per node, R = 2 (blocks 0..2, 3..5): a node sends its row to 2
    neighbours (800 B per mix); each rank sends the 2 boundary rows (800 B). Two rounds
    per Dadam3 step double both; the one two-hop round sends 1.5 x 100 floats to 4 peers
    (2400 B per node) and, per rank, the 3 rows the other rank needs (1800 B)."""
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "scripts/bench_distributed.py", "--ranks", "2", "--nodes", "6",
                        "--floats", "100", "--mixes", "2", "--fused"],
                       cwd=root, capture_output=True, text=True, timeout=JOB_LIMIT_S)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"R=2: .* bytes_sent per node per mix 800\.\.800, wire bytes per rank per mix \['800', '800'\]",
                     r.stdout), r.stdout
    assert re.search(r"two rounds: .* bytes_sent per node 1\.6e\+03, wire bytes per rank \['1\.6e\+03', '1\.6e\+03'\]",
                     r.stdout), r.stdout
    assert re.search(r"one round : .* bytes_sent per node 2\.4e\+03, wire bytes per rank \['1\.8e\+03', '1\.8e\+03'\]",
                     r.stdout), r.stdout
    r = subprocess.run([sys.executable, "scripts/bench_distributed.py", "--train", "--ranks", "2", "--nodes", "3",
                        "--iters", "1"], cwd=root, capture_output=True, text=True, timeout=JOB_LIMIT_S)
    assert r.returncode == 0 and re.search(r"simulator: +[\d.]+ ms/iteration", r.stdout) \
        and re.search(r"R=2: +[\d.]+ ms/iteration .* in the mixer +[\d.]+ %", r.stdout), \
        r.stdout + r.stderr[-2000:]


# --------------------------------------------------------------------------- no processes
def test_node_blocks_are_contiguous_and_balanced():
    assert node_blocks(5, 2) == [range(0, 3), range(3, 5)]
    assert node_blocks(6, 3) == [range(0, 2), range(2, 4), range(4, 6)]
    for M in range(1, 12):
        for R in range(1, M + 1):
            blocks = node_blocks(M, R)
            assert [i for b in blocks for i in b] == list(range(M))
            sizes = [len(b) for b in blocks]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_more_ranks_than_nodes_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"^world_size=4: at most nodes=3 ranks") as e:
        node_blocks(3, 4)
    assert "\n" not in str(e.value)


def test_init_outside_torchrun_is_a_one_line_config_error(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match=r"RANK unset: launch with torchrun"):
        init_from_env("gloo")
    with pytest.raises(ConfigError, match=r"^backend=mpi: allowed: auto, gloo, nccl$"):
        init_from_env("mpi")


def test_auto_is_gloo_for_a_run_on_the_cpu_where_cuda_is_available(monkeypatch):
    """``distributed.backend=auto`` follows the run's device, not the machine: NCCL would move a
    ``device=cpu`` run to ``cuda:LOCAL_RANK``."""
    import dadam3.distributed.startup as startup
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.distributed.is_nccl_available", lambda: True)
    joined = []

    def join(backend, rank, world, timeout_s, device):
        joined.append((backend, device))
        raise KeyboardInterrupt            # no process group made here
    monkeypatch.setattr(startup, "_init_group", join)
    with pytest.raises(KeyboardInterrupt):
        init_from_env("auto", cuda=False)
    assert joined == [("gloo", torch.device("cpu"))]
    with pytest.raises(ConfigError, match=r"^backend=nccl: needs CUDA; use gloo on CPU$"):
        init_from_env("nccl", cuda=False)


def test_a_timeout_says_its_iteration_as_data():
    """The training loop sets the iteration under way on the error; the message is not rewritten."""
    from dadam3.distributed.failures import DistributedTimeout
    e = DistributedTimeout("rank 1: no answer from rank 0 within timeout_s=5", 1, [0], 5.0)
    assert str(e) == "rank 1: no answer from rank 0 within timeout_s=5" and e.iteration is None
    e.iteration = 7
    assert str(e) == "rank 1: no answer from rank 0 within timeout_s=5; during training iteration 7"
    assert e.args == ("rank 1: no answer from rank 0 within timeout_s=5",) and (e.rank, e.peers) == (1, (0,))
