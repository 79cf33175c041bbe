"""Divergence that is not NaN: the rule the trainer applies at each logging record and the report
(:mod:`dadam3.report`) applies to every run's ``metrics.jsonl``.

A run has **diverged** at the first logging record where

* **bound**: a logged loss (``loss_d``, ``loss_g``, ``gp``, ``wasserstein``: the node mean or any
  node's value) has ``|value| > bound`` (``loop.diverge_above``, default ``1e6``; ``0`` turns it
  off), or
* **frozen**: every logged loss of every node is bit-identical over ``FROZEN_RECORDS``
  consecutive logging records (each a mean over a window of iterations with fresh batches: only
  parameters that stopped changing repeat it exactly). The report applies this part; the
  trainer applies the bound (a stateless check on the record it is about to write).

A NaN/Inf is the trainer's own stop (:mod:`dadam3.gan.finiteness`); both end the run with a
``"status": "diverged"`` record naming node and iteration.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping, NamedTuple

LOSS_KEYS = ("loss_d", "loss_g", "gp", "wasserstein")
DIVERGE_ABOVE = 1e6          # loop.diverge_above's default; a healthy run here stays below ~3e3
FROZEN_RECORDS = 5


class Breach(NamedTuple):
    """Where a run diverged by the rule: the record's iteration, the node (None: the node mean or
    all nodes), and one sentence."""
    iteration: int
    node: int | None
    message: str


def loss_beyond(record: Mapping, bound: float) -> Breach | None:
    """The first logged loss of ``record`` with ``|value| > bound`` (None: none, or ``bound`` is 0)."""
    if not bound:
        return None
    k = record.get("iteration")
    for key in LOSS_KEYS:
        for node, value in enumerate(record.get(f"{key}_nodes") or []):
            if isinstance(value, (int, float)) and math.isfinite(value) and abs(value) > bound:
                return Breach(k, node, f"{key} = {value:.3g}, beyond ±{bound:g} (loop.diverge_above), "
                                       f"at node {node}, iteration {k}")
        value = record.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value) and abs(value) > bound:
            return Breach(k, None, f"{key} = {value:.3g}, beyond ±{bound:g} (loop.diverge_above), "
                                   f"node mean, iteration {k}")
    return None


def _losses(record: Mapping) -> tuple:
    return tuple((key, record.get(key), tuple(record.get(f"{key}_nodes") or ())) for key in LOSS_KEYS)


def frozen_from(records: Iterable[Mapping], count: int = FROZEN_RECORDS) -> Breach | None:
    """The first run of ``count`` consecutive logging records (those with losses) whose losses are
    all bit-identical; the breach is at the run's first record."""
    run: list[int] = []
    previous = None
    for rec in records:
        if rec.get("loss_d") is None:
            continue
        losses = _losses(rec)
        run = run + [rec["iteration"]] if losses == previous else [rec["iteration"]]
        previous = losses
        if len(run) >= count:
            return Breach(run[0], None, f"every logged loss bit-identical over {count} logging records from "
                                        f"iteration {run[0]} to {run[-1]} (parameters frozen)")
    return None


def first_breach(records: list[Mapping], bound: float = DIVERGE_ABOVE, count: int = FROZEN_RECORDS) -> Breach | None:
    """The earliest breach of either part of the rule in a run's records (None: none)."""
    bounded = next((b for b in (loss_beyond(r, bound) for r in records) if b is not None), None)
    found = [b for b in (bounded, frozen_from(records, count)) if b is not None]
    return min(found, key=lambda b: b.iteration) if found else None
