"""Benchmark: ``DistributedMixer.mix`` with R ranks on one machine (gloo on CPU by default).

    python scripts/bench_distributed.py [--ranks 1 2 4] [--nodes 8] [--floats 100000]
                                        [--topology ring] [--rounds 1] [--mixes 50]
                                        [--backend gloo|nccl] [--fused] [--train ...]

Each R starts R processes (spawn; one thread each), which join a process group through
``init_from_env`` (``--backend nccl``: one GPU per rank, so R <= the GPUs; tensors on
``cuda:LOCAL_RANK``, timings synchronised) and time ``mix`` on their block of an M-node
float32 buffer of ``--floats`` values per node (1e5: about a tiny GAN's parameters).
Prints the time per mix (slowest rank's mean, after warm-up), the bytes each node sends
per mix (``bytes_sent``, the simulator's count) and the bytes each rank put on the wire
per mix (``wire_bytes``); ``LocalMixer`` on all M nodes in this process for comparison.
Dadam3 mixes twice per optimizer step. On a shared machine the times are only indicative.

``--train``: whole training iterations instead (the trainer of ``python -m dadam3.train``,
``placement=distributed``, built in each rank with the overrides of ``--overrides``; default
the toy WGAN-GP on M nodes, Dadam3): milliseconds per iteration (slowest rank), the share
of it spent inside the mixer (communication and the mixing matmul), and bytes per node and
per rank per iteration; first the simulator (``placement=local``, one process) for comparison.

``--fused``: what one communication round per Dadam3 step would cost instead of two.
X_k = W_k^t A and Z_{k+1} = W_{k+1}^t (X_k - eta D_k) = W_{k+1}^t W_k^t A - eta W_{k+1}^t D_k
(A = X_{k-1} - eta D_k): the second exchange needs the neighbours' X_k, which depend on
*their* neighbours' A, so over the graph's own links the two rounds cannot merge. One
round is possible only over the links of W_{k+1}^t W_k^t (two hops): A to every two-hop
peer, D_k to every one-hop peer, equal to the two rounds up to rounding. Each rank times
the two rounds (two mixes of ``--floats``) against one mix over the two-hop graph
carrying the same bytes (1.5 x ``--floats`` per row: on a ring of M >= 5, A to 4 peers
and D to 2 is 6 rows' worth, as 1.5 rows to 4 peers).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dadam3.distributed import DistributedMixer, init_from_env, shutdown  # noqa: E402
from dadam3.mixing import LocalMixer  # noqa: E402
from dadam3.topologies import Topology, build_topology  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_mixes(mixer, floats: int, mixes: int, per_step: int, device: torch.device) -> dict:
    """Mean seconds, bytes_sent per node and wire bytes of ``per_step`` mixes in a row."""
    x = torch.randn(mixer.local_nodes, floats, device=device)
    y = torch.empty_like(x)
    for k in range(1, 6):                                                     # warm-up
        mixer.mix([x], k, out=[y])
    sent0, wire0 = mixer.bytes_sent.copy(), mixer.wire_bytes
    _sync(device)
    t0 = time.perf_counter()
    for k in range(6, 6 + mixes * per_step):
        mixer.mix([x], k, out=[y])
    _sync(device)
    return dict(seconds=(time.perf_counter() - t0) / mixes,
                bytes_per_node=((mixer.bytes_sent - sent0) / mixes).tolist(),
                wire_bytes=(mixer.wire_bytes - wire0) / mixes, block=[mixer.block.start, mixer.block.stop])


def _two_hop(topology: Topology) -> Topology:
    """The graph of W^2t (a static W) as an explicit topology."""
    W = topology.operator(1)
    return build_topology("explicit", topology.nodes, matrix=(W @ W).tolist())


def _rank(rank: int, world: int, port: int, a: dict, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    device = init_from_env(a["backend"], timeout_s=60).device
    topology = build_topology(a["topology"], a["nodes"], a["rounds"])
    res = _time_mixes(DistributedMixer(topology, timeout_s=60), a["floats"], a["mixes"], 1, device)
    if a["fused"]:
        res["two_rounds"] = _time_mixes(DistributedMixer(topology, timeout_s=60), a["floats"], a["mixes"], 2, device)
        res["one_round"] = _time_mixes(DistributedMixer(_two_hop(topology), timeout_s=60),
                                       a["floats"] * 3 // 2, a["mixes"], 1, device)
    Path(out, f"{rank}.json").write_text(json.dumps(res))
    shutdown()


def _train_rank(rank: int, world: int, port: int, a: dict, out: str) -> None:
    """One rank of the trainer; world = 0: the simulator (placement=local) in one process."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a["threads"])
    placement = (["placement=distributed", "distributed.timeout_s=120", f"distributed.backend={a['backend']}"]
                 if world else [])
    from hydra import compose, initialize_config_dir

    from dadam3.run.config import CONFIG_DIR
    from dadam3.run.schema import train_settings
    from dadam3.train import build_trainer

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*a["overrides"], f"nodes={a['nodes']}", *placement,
                                                      "loop.progress=false", f"threads={a['threads']}",
                                                      *(["device=cuda"] if a["backend"] == "nccl" else [])])
    t = build_trainer(train_settings(cfg), Path(out) / "run")
    mixer, mixing = t.opt_g.mixer, [0.0]
    plain_mix, device = mixer.mix, next(t.G.parameters()).device

    def timed_mix(*args, **kwargs):
        _sync(device)
        t0 = time.perf_counter()
        try:
            return plain_mix(*args, **kwargs)
        finally:
            _sync(device)
            mixing[0] += time.perf_counter() - t0
    mixer.mix = timed_mix
    for _ in range(3):                                                        # warm-up
        t.train_step()
    sent0, wire0, mixing[0] = mixer.bytes_sent.copy(), getattr(mixer, "wire_bytes", 0), 0.0
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(a["iters"]):
        t.train_step()
    _sync(device)
    seconds = (time.perf_counter() - t0) / a["iters"]
    Path(out, f"{rank}.json").write_text(json.dumps(dict(
        seconds=seconds, mixing=mixing[0] / a["iters"],
        bytes_per_node=((mixer.bytes_sent - sent0) / a["iters"]).tolist(),
        wire_bytes=(getattr(mixer, "wire_bytes", 0) - wire0) / a["iters"])))
    shutdown()


def _run_ranks(target, a: dict, ranks: list[int], timeout: float):
    """For each R of ``--ranks``: start R spawned ranks running ``target``, yield (R, their
    results); R = 0: one process told that there is no process group."""
    ctx = multiprocessing.get_context("spawn")
    for R in ranks:
        with tempfile.TemporaryDirectory() as out:
            port = _free_port()
            procs = [ctx.Process(target=target, args=(r, R, port, a, out)) for r in range(max(R, 1))]
            for proc in procs:
                proc.start()
            for proc in procs:
                proc.join(timeout)
                if proc.exitcode is None:
                    proc.kill()
            if any(proc.exitcode != 0 for proc in procs):
                print(f"R={R}: ranks exited with {[proc.exitcode for proc in procs]}")
                a["failed"] = True
                continue
            yield R, [json.loads(Path(out, f"{r}.json").read_text()) for r in range(max(R, 1))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--floats", type=int, default=100_000)
    p.add_argument("--topology", default="ring")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--mixes", type=int, default=50)
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo",
                   help="nccl: one GPU per rank (R <= GPUs), tensors and nets on cuda:LOCAL_RANK")
    p.add_argument("--fused", action="store_true", help="also time one two-hop round against two rounds")
    p.add_argument("--train", action="store_true", help="time whole training iterations of the trainer")
    p.add_argument("--iters", type=int, default=30, help="--train: timed iterations")
    p.add_argument("--threads", type=int, default=1, help="--train: torch threads per rank")
    p.add_argument("--overrides", nargs="*", default=["experiment=toy_gaussians", "loop.n_critic=1", "model.hidden=64"],
                   help="--train: Hydra overrides of python -m dadam3.train")
    a = vars(p.parse_args())
    if a["fused"] and build_topology(a["topology"], a["nodes"], a["rounds"]).time_varying:
        p.error(f"--fused: --topology {a['topology']} is time-varying; static topologies only")
    if a["train"]:
        train_bench(a)
    else:
        mix_bench(a)
    if a.get("failed"):
        sys.exit("some ranks failed (their errors are above)")


def mix_bench(a: dict) -> None:
    print(f"{_machine(a)}; M={a['nodes']} {a['topology']}, t={a['rounds']}, {a['floats']:.0e} float32 per node, "
          f"{a['mixes']} timed mixes")
    torch.set_num_threads(1)
    device = torch.device("cuda", 0) if a["backend"] == "nccl" else torch.device("cpu")
    local = LocalMixer(build_topology(a["topology"], a["nodes"], a["rounds"]))
    x = torch.randn(a["nodes"], a["floats"], device=device)
    y = torch.empty_like(x)
    for k in range(1, 6):
        local.mix([x], k, out=[y])
    _sync(device)
    t0 = time.perf_counter()
    for k in range(6, 6 + a["mixes"]):
        local.mix([x], k, out=[y])
    _sync(device)
    print(f"LocalMixer (one process, all {a['nodes']} nodes): "
          f"{1e3 * (time.perf_counter() - t0) / a['mixes']:7.2f} ms/mix")
    for R, res in _run_ranks(_rank, a, a["ranks"], 600):
        per_node = res[0]["bytes_per_node"]
        wire = [r["wire_bytes"] for r in res]
        print(f"R={R}: {1e3 * max(r['seconds'] for r in res):7.2f} ms/mix (slowest rank; "
              f"{2e3 * max(r['seconds'] for r in res):.2f} ms per Dadam3 optimizer step), "
              f"bytes_sent per node per mix {min(per_node):.3g}..{max(per_node):.3g}, "
              f"wire bytes per rank per mix {[f'{w:.3g}' for w in wire]}")
        if a["fused"] and R > 1:
            for name in ("two_rounds", "one_round"):
                part = [r[name] for r in res]
                print(f"    {name.replace('_', ' '):10}: {1e3 * max(r['seconds'] for r in part):7.2f} ms per Dadam3 "
                      f"optimizer step (slowest rank), bytes_sent per node {max(part[0]['bytes_per_node']):.3g}, "
                      f"wire bytes per rank {[format(r['wire_bytes'], '.3g') for r in part]}")


def _machine(a: dict) -> str:
    gpus = f", {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return (f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores{gpus}, "
            f"torch {torch.__version__}, {a['backend']}")


def train_bench(a: dict) -> None:
    print(f"{_machine(a)}; trainer with {' '.join(a['overrides'])}, M={a['nodes']}, {a['iters']} timed iterations, "
          f"{a['threads']} torch thread(s) per rank")
    for R, res in _run_ranks(_train_rank, a, [0, *a["ranks"]], 900):
        slowest = max(res, key=lambda r: r["seconds"])
        per_node = res[0]["bytes_per_node"]
        print(f"{'simulator' if R == 0 else f'R={R}'}: {1e3 * slowest['seconds']:8.2f} ms/iteration (slowest rank), "
              f"in the mixer {100 * slowest['mixing'] / slowest['seconds']:5.1f} %, bytes_sent per node per iteration "
              f"{min(per_node):.3g}..{max(per_node):.3g}, wire bytes per rank per iteration "
              f"{[format(r['wire_bytes'], '.3g') for r in res]}")


if __name__ == "__main__":
    main()
