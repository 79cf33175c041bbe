"""Benchmark: ``DistributedMixer.mix`` on CPU with gloo, R ranks on one machine.

    python scripts/bench_distributed.py [--ranks 1 2 4] [--nodes 8] [--floats 100000]
                                        [--topology ring] [--rounds 1] [--mixes 50]

Each R starts R processes (spawn; one thread each), which join a gloo group through
``init_from_env`` and time ``mix`` on their block of an M-node float32 buffer of
``--floats`` values per node (1e5: about a tiny GAN's parameters). Prints the time per
mix (slowest rank's mean, after warm-up), the bytes each node sends per mix
(``bytes_sent``, the simulator's count) and the bytes each rank put on the wire per mix
(``wire_bytes``); ``LocalMixer`` on all M nodes in this process for comparison.
Dadam3 mixes twice per iteration. On a shared machine the times are only indicative.

``--train``: whole training iterations instead (the trainer of ``python -m dadam3.train``,
``backend=distributed``, built in each rank with the overrides of ``--overrides``; default
the toy WGAN-GP on M nodes, Dadam3): milliseconds per iteration (slowest rank), the share
of it spent inside the mixer (communication and the mixing matmul), and bytes per node and
per rank per iteration.
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
from dadam3.topology import build_topology  # noqa: E402


def _rank(rank: int, world: int, port: int, a: dict, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    init_from_env("gloo", timeout_s=60)
    mixer = DistributedMixer(build_topology(a["topology"], a["nodes"], a["rounds"]), timeout_s=60)
    x = torch.randn(mixer.local_nodes, a["floats"])
    y = torch.empty_like(x)
    for k in range(1, 6):                                                     # warm-up
        mixer.mix([x], k, out=[y])
    sent0, wire0 = mixer.bytes_sent.copy(), mixer.wire_bytes
    t0 = time.perf_counter()
    for k in range(6, 6 + a["mixes"]):
        mixer.mix([x], k, out=[y])
    seconds = (time.perf_counter() - t0) / a["mixes"]
    Path(out, f"{rank}.json").write_text(json.dumps(dict(
        seconds=seconds, bytes_per_node=((mixer.bytes_sent - sent0) / a["mixes"]).tolist(),
        wire_bytes=(mixer.wire_bytes - wire0) / a["mixes"], block=[mixer.block.start, mixer.block.stop])))
    shutdown()


def _train_rank(rank: int, world: int, port: int, a: dict, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from hydra import compose, initialize_config_dir

    from dadam3.config import CONFIG_DIR
    from dadam3.settings import train_settings
    from dadam3.train import build_trainer

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*a["overrides"], f"nodes={a['nodes']}", "backend=distributed",
                                                      "distributed.timeout_s=120", "progress=false"])
    t = build_trainer(train_settings(cfg), Path(out) / "run")
    mixer, mixing = t.opt_g.mixer, [0.0]
    plain_mix = mixer.mix

    def timed_mix(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return plain_mix(*args, **kwargs)
        finally:
            mixing[0] += time.perf_counter() - t0
    mixer.mix = timed_mix
    for _ in range(3):                                                        # warm-up
        t.train_step()
    sent0, wire0, mixing[0] = mixer.bytes_sent.copy(), mixer.wire_bytes, 0.0
    t0 = time.perf_counter()
    for _ in range(a["iters"]):
        t.train_step()
    seconds = (time.perf_counter() - t0) / a["iters"]
    Path(out, f"{rank}.json").write_text(json.dumps(dict(
        seconds=seconds, mixing=mixing[0] / a["iters"], bytes_per_node=((mixer.bytes_sent - sent0) / a["iters"]).tolist(),
        wire_bytes=(mixer.wire_bytes - wire0) / a["iters"], block=[mixer.block.start, mixer.block.stop])))
    shutdown()


def _run_ranks(target, a: dict, timeout: float):
    """For each R of ``--ranks``: start R spawned ranks running ``target``, yield (R, their results)."""
    ctx = multiprocessing.get_context("spawn")
    for R in a["ranks"]:
        with tempfile.TemporaryDirectory() as out:
            port = _free_port()
            procs = [ctx.Process(target=target, args=(r, R, port, a, out)) for r in range(R)]
            for proc in procs:
                proc.start()
            for proc in procs:
                proc.join(timeout)
                if proc.exitcode is None:
                    proc.kill()
            if any(proc.exitcode != 0 for proc in procs):
                print(f"R={R}: ranks exited with {[proc.exitcode for proc in procs]}")
                continue
            yield R, [json.loads(Path(out, f"{r}.json").read_text()) for r in range(R)]


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
    p.add_argument("--train", action="store_true", help="time whole training iterations of the trainer")
    p.add_argument("--iters", type=int, default=30, help="--train: timed iterations")
    p.add_argument("--overrides", nargs="*", default=["experiment=toy_gaussians", "n_critic=1", "model.hidden=64"],
                   help="--train: Hydra overrides of python -m dadam3.train")
    a = vars(p.parse_args())
    if a["train"]:
        return train_bench(a)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"M={a['nodes']} {a['topology']}, t={a['rounds']}, {a['floats']:.0e} float32 per node, "
          f"{a['mixes']} timed mixes")
    torch.set_num_threads(1)
    local = LocalMixer(build_topology(a["topology"], a["nodes"], a["rounds"]))
    x = torch.randn(a["nodes"], a["floats"])
    y = torch.empty_like(x)
    for k in range(1, 6):
        local.mix([x], k, out=[y])
    t0 = time.perf_counter()
    for k in range(6, 6 + a["mixes"]):
        local.mix([x], k, out=[y])
    print(f"LocalMixer (one process, all {a['nodes']} nodes): {1e3 * (time.perf_counter() - t0) / a['mixes']:7.2f} ms/mix")
    for R, res in _run_ranks(_rank, a, 600):
        per_node = res[0]["bytes_per_node"]
        wire = [r["wire_bytes"] for r in res]
        print(f"R={R}: {1e3 * max(r['seconds'] for r in res):7.2f} ms/mix (slowest rank; "
              f"{2e3 * max(r['seconds'] for r in res):.2f} ms per Dadam3 iteration), "
              f"bytes_sent per node per mix {min(per_node):.3g}..{max(per_node):.3g}, "
              f"wire bytes per rank per mix {[f'{w:.3g}' for w in wire]}")


def train_bench(a: dict) -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"trainer with {' '.join(a['overrides'])}, M={a['nodes']}, {a['iters']} timed iterations, 1 thread per rank")
    for R, res in _run_ranks(_train_rank, a, 900):
        slowest = max(res, key=lambda r: r["seconds"])
        per_node = res[0]["bytes_per_node"]
        print(f"R={R}: {1e3 * slowest['seconds']:8.2f} ms/iteration (slowest rank), in the mixer "
              f"{100 * slowest['mixing'] / slowest['seconds']:5.1f} %, bytes_sent per node per iteration "
              f"{min(per_node):.3g}..{max(per_node):.3g}, wire bytes per rank per iteration "
              f"{[format(r['wire_bytes'], '.3g') for r in res]}")


if __name__ == "__main__":
    main()
