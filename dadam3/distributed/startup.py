"""Start-up and shut-down of a torch.distributed run: the rank's environment (torchrun's
variables, or submitit's job under Hydra's submitit launcher), joining the process group
within ``timeout_s``, and every rank agreeing on the config and code before anything is built.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.distributed as dist

from dadam3.distributed.failures import DEFAULT_TIMEOUT_S, DistributedTimeout, check_timeout, exit_now, first_line
from dadam3.errors.config import ConfigError

BACKENDS = ("auto", "gloo", "nccl")     # auto: nccl for a run on CUDA, else gloo (distributed.backend's choices)
WATCHDOG_SLACK_S = 1.0        # the rendezvous watchdog fires this long after timeout_s (the group's own first)
# keys every rank may set for itself (its machine's paths and threads): left out of the fingerprint
PER_PROCESS_KEYS = ("device", "threads", "progress", "prefetch", "dataset.root", "dataset.download",
                    "dataset.workers", "metrics.cache_dir", "metrics.inception_weights", "cuda.")



@dataclass(frozen=True)
class ProcessGroupInfo:
    """Who this process is in the group (what ``init_from_env`` set up)."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    timeout_s: float

    def describe(self) -> str:
        return (f"rank {self.rank}/{self.world_size} (local rank {self.local_rank}, {self.backend}, "
                f"{self.device}, timeout {self.timeout_s:g} s)")


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise ConfigError("distributed", f"{name} unset",
                          "launch with torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)")
    try:
        return int(value)
    except ValueError:
        raise ConfigError(name, value, "must be an integer (set by torchrun)") from None


def _env_from_submitit() -> None:
    """Under Hydra's submitit launcher (SLURM or local) there is no torchrun: take rank, world
    size, local rank and the first host of the job from submitit's job environment."""
    try:
        import submitit
        job = submitit.JobEnvironment()
    except (ImportError, RuntimeError):
        return                   # neither torchrun nor submitit: _env_int names what is missing
    os.environ.setdefault("RANK", str(job.global_rank))
    os.environ.setdefault("WORLD_SIZE", str(job.num_tasks))
    os.environ.setdefault("LOCAL_RANK", str(job.local_rank))
    os.environ.setdefault("MASTER_ADDR", job.hostnames[0])
    os.environ.setdefault("MASTER_PORT", str(20000 + int(re.sub(r"\D", "", str(job.job_id)) or 0) % 20000))


def init_from_env(backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S,
                  cuda: bool | None = None) -> ProcessGroupInfo:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT; ``env://``).

    ``cuda``: whether the run computes on CUDA (None: whenever CUDA is available).
    ``backend="auto"`` is NCCL for such a run, else gloo; NCCL for a run on the CPU is refused.
    With NCCL the rank's device ``cuda:LOCAL_RANK`` is made current before any collective and
    bound to the group (``device_id``). The group's own timeout is ``timeout_s``
    (see the module docstring); a group that does not form in that time raises
    :class:`DistributedTimeout`. Already initialised: describes the existing group.
    """
    timeout_s = check_timeout("timeout_s", timeout_s)
    if backend not in BACKENDS:
        raise ConfigError("backend", backend, f"allowed: {', '.join(BACKENDS)}")
    if "RANK" not in os.environ:
        _env_from_submitit()
    rank, world, local_rank = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    if dist.is_initialized():
        backend = dist.get_backend()
    elif backend == "auto":
        on_cuda = torch.cuda.is_available() and cuda is not False
        backend = "nccl" if on_cuda and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available() or cuda is False:
            raise ConfigError("backend", backend, "needs CUDA; use gloo on CPU")
        if local_rank >= torch.cuda.device_count():
            raise ConfigError("LOCAL_RANK", local_rank,
                              f"only {torch.cuda.device_count()} CUDA device(s): one rank per GPU")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        _init_group(backend, rank, world, timeout_s, device)
    return ProcessGroupInfo(dist.get_rank(), dist.get_world_size(), local_rank, backend, device, timeout_s)


def _init_group(backend: str, rank: int, world: int, timeout_s: float, device: torch.device) -> None:
    """``init_process_group`` that ends within ``timeout_s``: rank 0 on an occupied MASTER_PORT is
    a ConfigError; a rendezvous that fails or hangs is :class:`DistributedTimeout` (the watchdog
    prints it and exits, as :func:`exit_on_peer_failure` does, if the backend does not return)."""
    kw = {"device_id": device} if backend == "nccl" else {}
    # Imported after the group forms (the memory check's first meta-device forward imports it),
    # torch._dynamo keeps the default group alive past destroy_process_group (torch 2.14), and
    # gloo's threads then race the interpreter's exit: SIGABRT, `terminate called without an
    # active exception`. Imported first, the group dies in shutdown().
    import torch._dynamo  # noqa: F401
    addr, port = os.environ.get("MASTER_ADDR", "?"), os.environ.get("MASTER_PORT", "?")
    hung = (f"rank {rank}: the process group of {world} ranks did not form within timeout_s={timeout_s:g} "
            f"(MASTER_ADDR={addr}, MASTER_PORT={port}): a peer never started or died, or another program "
            "answers on MASTER_PORT")
    watchdog = threading.Timer(timeout_s + WATCHDOG_SLACK_S, exit_now, args=(f"error: {hung}",))
    watchdog.daemon = True
    watchdog.start()
    try:
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s), **kw)
    except (dist.DistStoreError, dist.DistNetworkError, RuntimeError) as e:
        text = str(e)
        if "EADDRINUSE" in text or "address already in use" in text.lower():
            raise ConfigError("MASTER_PORT", port, f"rank {rank} cannot listen on {addr}:{port}: it is in use by "
                                                   "another program; choose a free port (torchrun --master-port=P) "
                                                   "or use torchrun --standalone") from None
        raise DistributedTimeout(f"{hung} ({first_line(e)})", rank, [], timeout_s) from None
    finally:
        watchdog.cancel()


def code_version() -> str:
    """A hash of the dadam3 package's source files: ranks running different code disagree on it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha1()
    for dirpath, dirnames, files in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:12]


def run_fingerprint(flat: Mapping[str, Any]) -> dict[str, Any]:
    """What fixes a distributed run, as dotted keys: the config ``flat`` (as dotted keys, less
    :data:`PER_PROCESS_KEYS`) and the code version (key ``code``)."""
    keep = {k: v for k, v in flat.items()
            if not any(k == p or (p.endswith(".") and k.startswith(p)) for p in PER_PROCESS_KEYS)}
    return {"code": code_version(), **keep}


def agree_on_config(fingerprint: Mapping[str, Any], info: ProcessGroupInfo) -> None:
    """Every rank compares its :func:`run_fingerprint` with rank 0's before anything is built; a
    difference stops every rank with one line (printed by rank 0) naming the first such key."""
    parts = [None] * info.world_size
    try:
        dist.all_gather_object(parts, dict(fingerprint))
    except (RuntimeError, dist.DistError) as e:
        raise DistributedTimeout(f"rank {info.rank}: comparing the ranks' configs failed: a peer died or hung "
                                 f"for longer than timeout_s={info.timeout_s:g} ({first_line(e)})", info.rank, [],
                                 info.timeout_s) from None
    ref = parts[0]
    for r, fp in enumerate(parts[1:], 1):
        key = next((k for k in sorted(ref.keys() | fp.keys()) if ref.get(k, "<unset>") != fp.get(k, "<unset>")), None)
        if key is not None:
            what = "code (dadam3 sources)" if key == "code" else "config"
            error = ConfigError(key, fp.get(key, "<unset>"),
                                f"rank {r} was started with this but rank 0 with {key}={ref.get(key, '<unset>')}: "
                                f"every rank must run the same {what}")
            error.echo = info.rank == 0
            shutdown()      # every rank got here together: leave the group before exiting, so no
            raise error     # gloo thread is torn down mid-exit (`terminate called without an active exception`)


def shutdown() -> None:
    """Leave the process group (after a normal end; after a failure just exit)."""
    if dist.is_initialized():
        dist.destroy_process_group()
