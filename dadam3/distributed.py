"""torch.distributed: the process group, the nodes a rank holds, and the mixer that
exchanges rows with neighbours.

Layout. M nodes over R ranks (R <= M): rank r holds the contiguous block
``node_blocks(M, R)[r]``; block sizes differ by at most one (the first M mod R blocks
hold one node more). A rank's tensors are its rows of the stacked ones, ``[|B|, ...]``.

Mixing. One gossip round computes a rank's rows of W X from the rows it needs::

    (W X)[B] = W[B, C] X[C],      C = B  U  {j : W[i, j] > 0 for some i in B}

(C sorted; B and each peer's part of C are contiguous in it). So rank r receives from
rank q the rows of the nodes in C n B_q, and sends to q the rows j of B with W[i, j] > 0
for some i in B_q: only rows a neighbour needs, never an all-gather. All tensors of one
``mix`` call (of one dtype and device) travel side by side as the columns of one
``[rows, sum of sizes]`` buffer: one message per round, peer and direction. Round
r = 0..t-1 of iteration k applies the schedule's matrix ``(k-1) t + r`` (mod its
period), the order of ``Topology.operator(k)``, so t rounds give ``(W_k^t X)[B]``.
``bytes_sent`` ([M]) is counted from the topology exactly as ``LocalMixer`` counts it, so
every rank logs the simulator's numbers; ``wire_bytes`` is what this rank really sent.

Primitives. Plain ``isend`` / ``irecv``, posted in one order all ranks agree on, then
each waited on with a deadline:

* peers in ascending rank order; with a peer, the lower rank sends first and then
  receives, the higher one receives first and then sends. Even if every operation ran
  to completion one at a time in posting order (an ungrouped NCCL send may block until
  its receive is posted), the earliest pair (a, b) in (min, max) order that still has
  an operation outstanding has both ranks at that pair, so it completes: no deadlock.
  On gloo, posting never blocks, so all operations of a round are in flight together.
  Messages between two ranks match in posting order (both backends), one per round,
  peer and direction, and a round ends only when all its operations are done.
* not ``batch_isend_irecv``: reported to hang with gloo, and its first call must involve
  every rank of the group, which a neighbour exchange does not.
* not ``all_gather``: every rank would receive all M rows.

Timeouts and failures. gloo: ``work.wait()`` without argument waits at most the
process group's timeout (measured with torch 2.14: "Timed out waiting 3000ms for recv
operation to complete" after 3.0 s), ``work.wait(timeout)`` overrides it, and a peer that
exits is reported at once ("Connection reset by peer"). NCCL: ``work.wait(timeout)``
blocks the CPU until the work is done and raises after ``timeout`` (without it, wait only
orders CUDA streams, and the watchdog kills the process after the group's timeout). The
mixer waits with the rest of a per-round deadline of ``timeout_s`` and raises
:class:`DistributedTimeout`, one line naming this rank, the peer and ``timeout_s``;
``exit_on_peer_failure`` turns it into ``error: ...`` on stderr and exit status 3.
``init_from_env`` gives the process group itself ``timeout_s`` (the backstop for the other
collectives), and forming the group ends after ``timeout_s`` too: a watchdog stops a rank
whose rendezvous hangs (e.g. ``MASTER_PORT`` answered by another program) with one line;
rank 0 failing to listen on an occupied ``MASTER_PORT`` says so (exit status 2). The NCCL path is written from the documentation; this repository's tests
run gloo on CPU.

Not done: fusing Dadam3's two mixes per step into one exchange. With A = X_{k-1} - eta D_k,
X_k = W_k^t A and Z_{k+1} = W_{k+1}^t (X_k - eta D_k) = W_{k+1}^t W_k^t A - eta W_{k+1}^t D_k:
the second input needs the neighbours' X_k, i.e. rows 2t hops away, so one round of this
neighbour exchange cannot carry both. A fused exchange of A from the 2t-hop and D_k from
the t-hop neighbourhood would agree within round-off (measured 4e-16..6e-16 in float64 on
ring, erdos_renyi and one_peer_exponential, M = 8, t = 1, 2; not bitwise) and save one
latency, but sends more rows (ring, t = 1: two of A and one of D per side instead of one
and one), reaches more ranks when blocks are small, and its bytes would no longer follow
the per-round count the simulator logs. Its cost, emulated by one mix over the two-hop graph
carrying the same bytes (``scripts/bench_distributed.py --fused``, numbers in
``results/benchmarks.md``): on CPU with gloo, up to 2x faster at 10^4 values per node, about
even at 10^5, 1.5-1.8x slower at 10^6.
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from dadam3.config import flatten
from dadam3.errors import ConfigError, check_range
from dadam3.mixing import Mixer, ieee_fp32_matmul
from dadam3.topology import Topology

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TIMEOUT_S = 300.0
WATCHDOG_SLACK_S = 1.0        # the rendezvous watchdog fires this long after timeout_s (the group's own first)
EXIT_PEER_FAILURE = 3
# keys every rank may set for itself (its machine's paths and threads): left out of the fingerprint
PER_PROCESS_KEYS = ("device", "threads", "progress", "prefetch", "dataset.root", "dataset.download",
                    "dataset.workers", "metrics.cache_dir", "metrics.inception_weights", "cuda.")


class DistributedTimeout(RuntimeError):
    """A peer did not do its part within ``timeout_s``: it hung, or it died (gloo reports
    a dead peer at once). One line naming this rank, the peer rank(s) and the timeout."""

    def __init__(self, message: str, rank: int, peers: Sequence[int], timeout_s: float):
        self.rank, self.peers, self.timeout_s = rank, tuple(peers), timeout_s
        super().__init__(message)


# --------------------------------------------------------------------------- layout
def node_blocks(M: int, R: int) -> list[range]:
    """Contiguous node blocks of R ranks over M nodes; the first M mod R hold one more.

    node_blocks(5, 2) = [range(0, 3), range(3, 5)]."""
    if int(M) != M or M < 1:
        raise ConfigError("nodes", M, "must be an integer >= 1")
    if int(R) != R or R < 1:
        raise ConfigError("world_size", R, "must be an integer >= 1")
    M, R = int(M), int(R)
    if R > M:
        raise ConfigError("world_size", R, f"at most nodes={M} ranks: every rank holds at least one node")
    q, extra = divmod(M, R)
    return [range(r * q + min(r, extra), (r + 1) * q + min(r + 1, extra)) for r in range(R)]


# --------------------------------------------------------------------------- process group
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


def init_from_env(backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> ProcessGroupInfo:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT; ``env://``).

    ``backend="auto"`` is NCCL when CUDA is available, else gloo. With NCCL the rank's
    device ``cuda:LOCAL_RANK`` is made current before any collective and bound to the
    group (``device_id``). The group's own timeout is ``timeout_s``
    (see the module docstring); a group that does not form in that time raises
    :class:`DistributedTimeout`. Already initialised: describes the existing group.
    """
    timeout_s = check_range("distributed.timeout_s", timeout_s, 0.0, None, low_open=True)
    if backend not in ("auto", "gloo", "nccl"):
        raise ConfigError("distributed.backend", backend, "allowed: auto, gloo, nccl")
    if "RANK" not in os.environ:
        _env_from_submitit()
    rank, world, local_rank = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    if dist.is_initialized():
        backend = dist.get_backend()
    elif backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ConfigError("distributed.backend", backend, "needs CUDA; use gloo on CPU")
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
    addr, port = os.environ.get("MASTER_ADDR", "?"), os.environ.get("MASTER_PORT", "?")
    hung = (f"rank {rank}: the process group of {world} ranks did not form within timeout_s={timeout_s:g} "
            f"(MASTER_ADDR={addr}, MASTER_PORT={port}): a peer never started or died, or another program "
            "answers on MASTER_PORT")
    watchdog = threading.Timer(timeout_s + WATCHDOG_SLACK_S, _exit_now, args=(f"error: {hung}",))
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
        raise DistributedTimeout(f"{hung} ({_first_line(e)})", rank, [], timeout_s) from None
    finally:
        watchdog.cancel()


def _exit_now(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
    os._exit(EXIT_PEER_FAILURE)


def code_version() -> str:
    """A hash of this package's source files: ranks running different code disagree on it."""
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha1()
    for dirpath, dirnames, files in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:12]


def run_fingerprint(config: Mapping[str, Any]) -> dict[str, Any]:
    """What fixes a distributed run, as dotted keys: the config (less :data:`PER_PROCESS_KEYS`)
    and the code version (key ``code``)."""
    flat = flatten(config)
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
                                 f"for longer than timeout_s={info.timeout_s:g} ({_first_line(e)})", info.rank, [],
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
            raise error


def shutdown() -> None:
    """Leave the process group (after a normal end; after a failure just exit)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def exit_on_peer_failure(fn: F) -> F:
    """Decorator for entry points: a :class:`DistributedTimeout` becomes one line
    ``error: ...`` on stderr and exit status 3, at once (``os._exit``): the group may still
    hold the timed-out operation, and a normal interpreter exit would tear it down (NCCL's
    abort can itself hang). torchrun then stops the other ranks."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DistributedTimeout as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(EXIT_PEER_FAILURE)

    return wrapper  # type: ignore[return-value]


def _first_line(e: BaseException, limit: int = 120) -> str:
    """The backend's message on one line, without its source-file prefix, shortened."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------- the mixer
@dataclass(frozen=True)
class _RoundPlan:
    """One gossip round as this rank sees it (for one schedule matrix)."""

    columns: np.ndarray                          # C, sorted node indices
    local: slice                                 # where B sits in C
    weights: np.ndarray                          # W[B, C], float64
    ops: tuple[tuple[int, str, Any], ...]        # (peer, "send", local rows) / (peer, "recv", slice of C)


class DistributedMixer(Mixer):
    """``X[B] <- (W_k^t X)[B]`` for this rank's block B, by point-to-point exchange with
    the ranks that hold neighbours (see the module docstring).

    Args: topology (all M nodes; every rank builds the same one), group (a process group,
    default the world; ranks are group ranks), timeout_s (per gossip round; then
    :class:`DistributedTimeout`).
    Attributes beyond ``Mixer``'s: ``rank``, ``world_size``, ``blocks`` (every rank's node
    range), ``block`` (this rank's), ``local_nodes`` (its size), ``wire_bytes`` (bytes
    this rank sent, cumulative).
    """

    def __init__(self, topology: Topology, group=None, timeout_s: float = DEFAULT_TIMEOUT_S):
        super().__init__(topology)
        if not dist.is_initialized():
            raise RuntimeError("DistributedMixer needs an initialised process group (dadam3.distributed.init_from_env)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.blocks = node_blocks(self.nodes, self.world_size)
        self.block = self.blocks[self.rank]
        self.local_nodes = len(self.block)
        self.timeout_s = check_range("distributed.timeout_s", timeout_s, 0.0, None, low_open=True)
        self.wire_bytes = 0
        self._owner = np.repeat(np.arange(self.world_size), [len(b) for b in self.blocks])
        self._plans: dict[int, _RoundPlan] = {}
        self._weights: dict[tuple, torch.Tensor] = {}
        self._indices: dict[tuple, torch.Tensor] = {}

    # -- plan of one round ---------------------------------------------------------------
    def _plan(self, phase: int) -> _RoundPlan:
        if phase in self._plans:
            return self._plans[phase]
        W = self._round_matrix(phase)
        B = np.arange(self.block.start, self.block.stop)
        needed = np.nonzero((W[B] > 0).any(axis=0))[0]
        columns = np.union1d(B, needed)                                 # sorted
        start = int(np.searchsorted(columns, B[0]))
        local = slice(start, start + len(B))
        ops = []
        for peer in range(self.world_size):                             # ascending: see docstring
            if peer == self.rank:
                continue
            Bq = np.arange(self.blocks[peer].start, self.blocks[peer].stop)
            send_rows = np.nonzero((W[np.ix_(Bq, B)] > 0).any(axis=0))[0]   # rows of B that q needs
            recv_at = np.nonzero(self._owner[columns] == peer)[0]           # contiguous in C
            send = (peer, "send", _rows(send_rows)) if len(send_rows) else None
            recv = (peer, "recv", slice(int(recv_at[0]), int(recv_at[-1]) + 1)) if len(recv_at) else None
            pair = (send, recv) if self.rank < peer else (recv, send)
            ops.extend(op for op in pair if op is not None)
        plan = _RoundPlan(columns, local, W[np.ix_(B, columns)].copy(), tuple(ops))
        self._plans[phase] = plan
        return plan

    def _weights_on(self, phase: int, plan: _RoundPlan, device, dtype) -> torch.Tensor:
        key = (phase, str(device), dtype)
        if key not in self._weights:
            self._weights[key] = torch.as_tensor(plan.weights, device=device, dtype=dtype)
        return self._weights[key]

    # -- the exchange --------------------------------------------------------------------
    def _exchange(self, plan: _RoundPlan, xc: torch.Tensor, k: int, r: int) -> None:
        """Send this rank's rows (``xc[plan.local]``) that peers need; receive into ``xc``."""
        local = xc[plan.local]
        pending = []
        for peer, kind, where in plan.ops:
            try:                                                        # posting fails too once a peer is gone
                if kind == "send":
                    buf = local[where] if isinstance(where, slice) else \
                        local.index_select(0, self._index_on(where, xc.device))
                    work = dist.isend(buf, group=self.group, group_dst=peer)
                    self.wire_bytes += buf.numel() * buf.element_size()
                else:
                    buf = xc[where]
                    work = dist.irecv(buf, group=self.group, group_src=peer)
            except RuntimeError as e:
                raise self._failure(peer, kind, k, r, e) from None
            pending.append((work, peer, kind, buf))                     # buf kept alive until done
        deadline = time.monotonic() + self.timeout_s
        for work, peer, kind, _ in pending:
            remaining = max(deadline - time.monotonic(), 1e-3)
            try:
                done = work.wait(timeout=datetime.timedelta(seconds=remaining))
            except RuntimeError as e:
                raise self._failure(peer, kind, k, r, e) from None
            if done is False:
                raise self._failure(peer, kind, k, r, None)

    def _index_on(self, index: torch.Tensor, device) -> torch.Tensor:
        key = (id(index), str(device))                                  # plans (and their indices) live on
        if key not in self._indices:
            self._indices[key] = index.to(device)
        return self._indices[key]

    def _failure(self, peer: int, kind: str, k: int, r: int, cause: BaseException | None) -> DistributedTimeout:
        b = self.blocks[peer]
        text = "wait returned false" if cause is None else _first_line(cause)
        where = (f"while {'receiving from' if kind == 'recv' else 'sending to'} it at iteration k={k}, "
                 f"gossip round {r + 1}/{self.topology.rounds}")
        backend = dist.get_backend(self.group)
        if "closed" in text.lower() or "reset" in text.lower():
            msg = (f"rank {self.rank}: lost rank {peer} (nodes {b.start}..{b.stop - 1}) {where}: it exited or "
                   f"crashed before timeout_s={self.timeout_s:g} ({backend}: {text})")
        else:
            msg = (f"rank {self.rank}: no answer from rank {peer} (nodes {b.start}..{b.stop - 1}) within "
                   f"timeout_s={self.timeout_s:g} {where}: it hung or died ({backend}: {text})")
        return DistributedTimeout(msg, self.rank, [peer], self.timeout_s)

    # -- mix -----------------------------------------------------------------------------
    def mix(self, tensors: Sequence[torch.Tensor], k: int = 1,
            out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """This rank's rows of W_k^t X (``tensors`` are its rows, ``[local_nodes, ...]``);
        with ``out``, the results are written there."""
        tensors = list(tensors)
        L = self.local_nodes
        for t in tensors:
            if t.dim() == 0 or t.shape[0] != L:
                raise ValueError(f"mixing expects a leading axis of this rank's {L} nodes "
                                 f"({self.block.start}..{self.block.stop - 1}), got shape {tuple(t.shape)}")
        if self.nodes == 1:                                              # as LocalMixer: nothing to mix
            if out is None:
                return tensors
            for o, t in zip(out, tensors):
                if o is not t:
                    o.copy_(t)
            return list(out)
        out = [torch.empty_like(t) for t in tensors] if out is None else list(out)
        if not tensors:
            return out
        self._count_bytes(k, sum(t[0].numel() * t.element_size() for t in tensors))
        groups: dict[tuple, list[int]] = {}
        for i, t in enumerate(tensors):
            groups.setdefault((t.dtype, t.device), []).append(i)
        for (dtype, device), idx in groups.items():
            self._mix_group([tensors[i] for i in idx], [out[i] for i in idx], k, dtype, device)
        return out

    def _mix_group(self, tensors, out, k, dtype, device) -> None:
        """Tensors of one dtype and device, side by side in the columns of one buffer
        ``xc`` = X[C]: t rounds of exchange and ``(W X)[B] = W[B, C] X[C]``."""
        L = self.local_nodes
        offsets = np.concatenate([[0], np.cumsum([t[0].numel() for t in tensors])]).tolist()
        plans = [(phase, self._plan(phase)) for phase in self._round_phases(k)]
        first = plans[0][1]
        if len(plans) == 1 and not first.ops:                            # no peer (R = 1): as LocalMixer
            Wb = self._weights_on(plans[0][0], first, device, dtype)
            with ieee_fp32_matmul(device):
                for t, o in zip(tensors, out):
                    torch.matmul(Wb, t.reshape(L, -1), out=o.view(L, -1))
            return
        if len(tensors) == 1 and len(first.columns) == L:              # nothing to receive: no copy
            xc = tensors[0].reshape(L, -1)
        else:
            xc = torch.empty(len(first.columns), offsets[-1], dtype=dtype, device=device)
            for t, a, b in zip(tensors, offsets[:-1], offsets[1:]):
                xc[first.local, a:b].copy_(t.reshape(L, -1))
        with ieee_fp32_matmul(device):
            for r, (phase, plan) in enumerate(plans):
                self._exchange(plan, xc, k, r)
                Wb = self._weights_on(phase, plan, device, dtype)           # W[B, C]
                if r + 1 < len(plans):                                      # into the next round's X[C]
                    nxt = plans[r + 1][1]
                    xn = torch.empty(len(nxt.columns), offsets[-1], dtype=dtype, device=device)
                    torch.matmul(Wb, xc, out=xn[nxt.local])
                    xc = xn
                else:                                                       # straight into each output
                    for o, a, b in zip(out, offsets[:-1], offsets[1:]):
                        torch.matmul(Wb, xc[:, a:b], out=o.view(L, -1))


def _rows(rows: np.ndarray):
    """A slice when the rows are contiguous (sent without a copy), else an index tensor."""
    if rows[-1] - rows[0] + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return torch.as_tensor(rows, dtype=torch.long)


# ---------------------------------------------------------------- where the nodes of a run live

class Placement:
    """Where the M nodes of a run live: all in this process (the simulator, ``info=None``), or
    rank r of a torch.distributed group holding ``node_blocks(M, R)[r]``. The trainer moves
    per-node values through it: records are gathered to every rank, states and nets to rank 0
    (which logs, samples, evaluates and writes checkpoints), and every decision that ends or
    steers the loop (a NaN on some node, a stop signal) is agreed by all ranks. On one
    process each method returns its argument."""

    def __init__(self, nodes: int, info: ProcessGroupInfo | None = None):
        self.nodes = nodes
        self.distributed = info is not None
        self.rank, self.world_size = (info.rank, info.world_size) if info is not None else (0, 1)
        self.blocks = node_blocks(nodes, self.world_size)
        self.block = self.blocks[self.rank]
        self.is_main = self.rank == 0
        self._device = info.device if info is not None and info.backend == "nccl" else torch.device("cpu")
        self.timeout_s = info.timeout_s if info is not None else None

    def _collective(self, name: str, fn: Callable, *args, **kwargs) -> None:
        """A collective; a peer that died or hung (the group's timeout) becomes DistributedTimeout."""
        try:
            fn(*args, **kwargs)
        except (RuntimeError, dist.DistError) as e:
            raise DistributedTimeout(f"rank {self.rank}: {name} failed: a peer died or hung for longer than "
                                     f"timeout_s={self.timeout_s:g} ({_first_line(e)})", self.rank, [],
                                     self.timeout_s) from None

    def gather_rows(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's rows ``[|block|, ...]`` -> all M rows ``[M, ...]`` (CPU), on every rank."""
        if not self.distributed:
            return t
        parts = [None] * self.world_size
        self._collective("all_gather_object", dist.all_gather_object, parts, t.detach().cpu())
        return torch.cat(parts)

    def gather_to_main(self, obj: Any) -> list | None:
        """Every rank's ``obj`` in rank order on rank 0 (None elsewhere)."""
        if not self.distributed:
            return [obj]
        parts = [None] * self.world_size if self.is_main else None
        self._collective("gather_object", dist.gather_object, obj, parts, dst=0)
        return parts

    def all_objects(self, obj: Any) -> list:
        if not self.distributed:
            return [obj]
        parts = [None] * self.world_size
        self._collective("all_gather_object", dist.all_gather_object, parts, obj)
        return parts

    def agree_max(self, values: Sequence[int]) -> list[int]:
        """Element-wise maximum of ``values`` over the ranks (one small all-reduce)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(list(values), dtype=torch.int64, device=self._device)
        self._collective("all_reduce", dist.all_reduce, t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        if not self.distributed:
            return t
        t = t.to(self._device).clone()
        self._collective("all_reduce", dist.all_reduce, t)
        return t

    def from_main(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        self._collective("broadcast_object_list", dist.broadcast_object_list, box, src=0)
        return box[0]


def stack_node_states(parts: Sequence[Any]) -> Any:
    """Merge the per-rank pieces of a state (rank order): tensors with a leading node axis are
    concatenated along it, dicts merged key by key, lists of per-node items concatenated,
    anything else taken from rank 0."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(parts)) if first.dim() > 0 else first
    if isinstance(first, dict):
        if any(p.keys() != first.keys() for p in parts):      # keyed by node: each rank has its own keys
            return {k: v for p in parts for k, v in p.items()}
        return {k: stack_node_states([p[k] for p in parts]) for k in first}
    if isinstance(first, NodeList):
        return NodeList(item for p in parts for item in p)
    return first


def node_rows(state: Any, block: range) -> Any:
    """The inverse of :func:`stack_node_states`: this block's rows of a full state."""
    if isinstance(state, torch.Tensor):
        return state[block.start:block.stop] if state.dim() > 0 else state
    if isinstance(state, dict):
        return {k: node_rows(v, block) for k, v in state.items()}
    if isinstance(state, NodeList):
        return NodeList(state[block.start:block.stop])
    return state


class NodeList(list):
    """A list with one item per node (e.g. the nodes' generator states)."""
