"""``DistributedMixer``: the :class:`dadam3.mixing.Mixer` of a rank under torch.distributed,
exchanging rows point to point with the ranks that hold neighbours.

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

Timeouts. Each round's waits share a deadline of ``timeout_s``; a peer that does not answer in
time, or is gone, is :class:`DistributedTimeout` (:mod:`dadam3.distributed.failures` says how
each backend reports it).

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
``docs/benchmarks.md``): on CPU with gloo, up to 2x faster at 10^4 values per node, about
even at 10^5, 1.5-1.8x slower at 10^6.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist

from dadam3.distributed.failures import DEFAULT_TIMEOUT_S, DistributedTimeout, check_timeout, first_line
from dadam3.distributed.placement import node_blocks
from dadam3.mixing import Mixer
from dadam3.mixing.ordered import RoundTerms
from dadam3.topologies import Topology


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
        self.timeout_s = check_timeout("timeout_s", timeout_s)
        self.wire_bytes = 0
        self._owner = np.repeat(np.arange(self.world_size), [len(b) for b in self.blocks])
        self._plans: dict[int, _RoundPlan] = {}
        self._round_terms: dict[int, RoundTerms] = {}
        self._indices: dict[tuple, torch.Tensor] = {}

    def like(self, topology: Topology) -> "DistributedMixer":
        return DistributedMixer(topology, self.group, self.timeout_s)

    def average(self, tensors: Sequence[torch.Tensor], out: Sequence[torch.Tensor] | None = None
                ) -> list[torch.Tensor]:
        """:meth:`Mixer.average` by an exchange over the complete graph (its rows reach every rank, then
        the ordered sum of every row); ``wire_bytes`` adds what that exchange really sent."""
        sent = self._average.wire_bytes if self._average is not None else 0
        result = super().average(tensors, out)
        self.wire_bytes += self._average.wire_bytes - sent
        return result

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
        text = "wait returned false" if cause is None else first_line(cause)
        where = (f"while {'receiving from' if kind == 'recv' else 'sending to'} it at mixing step {k} "
                 f"(the optimizer's count), gossip round {r + 1}/{self.topology.rounds}")
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
        ``xc`` = X[C]: t rounds of exchange and ``(W X)[B] = W[B, C] X[C]``, each node's sum
        in the fixed order of :class:`dadam3.mixing.ordered.RoundTerms` (the simulator's)."""
        L = self.local_nodes
        offsets = np.concatenate([[0], np.cumsum([t[0].numel() for t in tensors])]).tolist()
        plans = [(phase, self._plan(phase)) for phase in self._round_phases(k)]
        first = plans[0][1]
        if len(tensors) == 1 and len(first.columns) == L:              # nothing to receive: no copy
            xc = tensors[0].reshape(L, -1)
        else:
            xc = torch.empty(len(first.columns), offsets[-1], dtype=dtype, device=device)
            for t, a, b in zip(tensors, offsets[:-1], offsets[1:]):
                xc[first.local, a:b].copy_(t.reshape(L, -1))
        for r, (phase, plan) in enumerate(plans):
            self._exchange(plan, xc, k, r)
            terms = self._terms(phase, plan)                                # W[B, C]
            if r + 1 < len(plans):                                          # into the next round's X[C]
                nxt = plans[r + 1][1]
                xn = torch.empty(len(nxt.columns), offsets[-1], dtype=dtype, device=device)
                terms.apply(xc, xn[nxt.local])
                xc = xn
            else:                                                           # straight into each output
                for o, a, b in zip(out, offsets[:-1], offsets[1:]):
                    terms.apply(xc[:, a:b], o.view(L, -1))

    def _terms(self, phase: int, plan: _RoundPlan) -> RoundTerms:
        if phase not in self._round_terms:
            self._round_terms[phase] = RoundTerms(plan.weights, plan.columns)
        return self._round_terms[phase]


def _rows(rows: np.ndarray):
    """A slice when the rows are contiguous (sent without a copy), else an index tensor."""
    if rows[-1] - rows[0] + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return torch.as_tensor(rows, dtype=torch.long)

