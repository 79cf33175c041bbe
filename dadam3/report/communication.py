"""What a run's communication costs, charged as a user would pay it (DESIGN.md, "Evidence"), and how
many iterations it took, to the same score.

The mixer logs ``bytes_sent`` per node as gossip messages: each gossip round, a node's whole buffer
to each out-neighbour. That is what gossip costs. An exact average (the complete graph, W = 11^T/M,
which Cadam3 and COSG use) is not run that way by anyone: a user runs an all-reduce, which costs a
ring all-reduce's 2 (M - 1) / M of a buffer per node per mix, against the complete graph's M - 1
messages. So the bytes of a run on the complete graph are charged as logged x 2 / M; gossip stays as
counted. Beside them, the iterations to the same score, which no accounting changes.
"""
from __future__ import annotations

from dadam3.report.runs import Run

ALL_REDUCE = "an exact average charged as a ring all-reduce, 2 (M − 1)/M of a buffer per node per mix"


def first_at_most(run: Run, threshold: float, key: str = "fid_mean") -> int | None:
    """The first evaluated iteration with ``key`` ≤ ``threshold``; None: never."""
    return next((k for k, v in sorted(run.series(key).items()) if v <= threshold), None)


def charge(run: Run) -> float:
    """The factor from the logged gossip bytes to what a user pays: 2/M on the complete graph, else 1."""
    if run.topology != "complete":
        return 1.0
    nodes = int(run.setting("nodes")) if run.setting("nodes").isdigit() else None
    return 2.0 / nodes if nodes else 1.0


def bytes_at(run: Run, iteration: int) -> float | None:
    """Bytes each node paid by ``iteration`` (the logged ``bytes_sent`` there, charged by :func:`charge`);
    None where that record has none."""
    logged = run.series("bytes_sent").get(iteration)
    return None if logged is None else logged * charge(run)


def to_score(run: Run, threshold: float) -> tuple[int, float | None] | None:
    """(iterations, bytes per node paid) to the first evaluation with FID (node mean) ≤ ``threshold``;
    None: never."""
    k = first_at_most(run, threshold)
    return None if k is None else (k, bytes_at(run, k))
