"""Divergence that is not NaN: the rule the trainer applies at each logging record and the report
(:mod:`dadam3.report`) applies to every run's ``metrics.jsonl``.

A run has **diverged** at the first logging record where

* **not finite**: a logged loss is NaN or ±Infinity (a float, or the log's ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"``), whatever the bound and whatever the run's last record says
  (a log with one is never a finished run's: the report, the sweep and the figure scripts read
  it through :func:`first_breach`), or
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


NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}   # as metrics.jsonl writes them


def loss_beyond(record: Mapping, bound: float) -> Breach | None:
    """The first logged loss of ``record`` that is not finite, or with ``|value| > bound``
    (``bound`` 0: the bound is off, a non-finite loss still counts). None: none."""
    k = record.get("iteration")
    for key in LOSS_KEYS:
        nodes = record.get(f"{key}_nodes")
        values = [*enumerate(nodes if isinstance(nodes, list) else []), (None, record.get(key))]
        for node, value in values:
            value = NON_FINITE.get(value, value) if isinstance(value, str) else value
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            where = "node mean" if node is None else f"at node {node}"
            if not math.isfinite(value):
                return Breach(k, node, f"{key} = {value}, not finite, {where}, iteration {k}")
            if bound and abs(value) > bound:
                return Breach(k, node, f"{key} = {value:.3g}, beyond ±{bound:g} (loop.diverge_above), "
                                       f"{where}, iteration {k}")
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


def run_breach(records: list[Mapping]) -> Breach | None:
    """Where a run's log says it diverged: its own ``diverged`` record, else the rule
    (:func:`first_breach`); None for a run the rule finds nothing in. Every reader that calls a
    run finished or diverged (the report, a rerun sweep, the figure scripts) asks this."""
    last = records[-1] if records else {}
    if last.get("status") == "diverged":
        return Breach(last.get("iteration"), last.get("node"), last.get("message", "diverged"))
    return first_breach(records)


def first_breach(records: list[Mapping], bound: float = DIVERGE_ABOVE, count: int = FROZEN_RECORDS) -> Breach | None:
    """The earliest breach of either part of the rule in a run's records (None: none)."""
    bounded = next((b for b in (loss_beyond(r, bound) for r in records) if b is not None), None)
    found = [b for b in (bounded, frozen_from(records, count)) if b is not None]
    return min(found, key=lambda b: b.iteration) if found else None
