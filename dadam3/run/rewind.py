"""A resumed log reads as if the run had never stopped: the one place that guarantees it.

An uninterrupted run writes a record at every iteration on its logging grid
(:class:`LoggingGrid`), plus one at its last iteration (and where a sample grid or checkpoint
is due, none). A run stopped at a checkpoint at iteration k wrote records an uninterrupted
run does not have: everything after k, its final status record (finished, diverged,
interrupted), and the record at k itself when k was on no grid (written only because k was
that process's last iteration). So:

* the trainer stores in each checkpoint whether its iteration is on the grid
  (``record_on_grid``: :meth:`LoggingGrid.on_grid`);
* the resuming run asks :func:`record_at_resume_point_kept`;
* :func:`rewind` gives ``metrics.jsonl`` as an uninterrupted run left it at k
  (:class:`dadam3.run.loggers.JsonlLogger` calls it when opened with a resume point, and
  continues the log in a new file holding that: :func:`dadam3.errors.files.open_appending`).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dadam3.errors.config import ConfigError
from dadam3.errors.files import DataFileError
from dadam3.errors.small_files import LOG, read_small

TERMINAL_STATUSES = ("finished", "diverged", "interrupted")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoggingGrid:
    """The iterations every run passing them logs at (not only a run that ends there): the
    multiples of ``log_every`` and, when evaluation runs, of ``eval_every``."""

    log_every: int
    eval_every: int = 0               # 0: no evaluation

    def on_grid(self, k: int) -> bool:
        return k % self.log_every == 0 or bool(self.eval_every and k % self.eval_every == 0)


def as_record(value: Any) -> dict | None:
    """``value`` (a parsed JSON line of ``metrics.jsonl`` or ``sweep_status.jsonl``) when it is a
    record: a JSON object whose ``iteration``, if any, is an integer >= 0 and whose ``status``,
    if any, is a string; None for anything else that parses as JSON (an array, a number, a
    string iteration, ...). Every reader of those logs goes through it."""
    if not isinstance(value, dict):
        return None
    it, status = value.get("iteration"), value.get("status")
    if it is not None and (isinstance(it, bool) or not isinstance(it, int) or it < 0):
        return None
    if status is not None and not isinstance(status, str):
        return None
    return value


def parse_record(line: str) -> dict | None:
    """One line of a JSONL log as a record (:func:`as_record`), None if it is not one."""
    try:
        return as_record(json.loads(line))
    except (ValueError, RecursionError):        # not JSON, or nested past Python's limit
        return None


def read_records(path: Path) -> list[dict]:
    """The complete records of a JSONL log (:func:`parse_record`; empty if it cannot be read):
    what a reader that must not stop on a damaged line uses (the sweep, the figure scripts)."""
    try:
        lines = read_small(path, LOG).decode("utf-8", errors="replace").split("\n")[:-1]
    except (OSError, DataFileError):
        return []
    return [r for r in map(parse_record, lines) if r is not None]


def check_log_not_ahead(path: Path, k: int, config: Mapping[str, Any], resume: str) -> None:
    """A resume that would stop at once (``config``'s ``loop.iterations`` <= the checkpoint's
    iteration ``k``) of a run whose log (``path``) says it finished later than ``k``: its checkpoint
    is behind its log (an older ``last.pt`` put back), the cause to name, not ``loop.iterations``."""
    target = (config.get("loop") or {}).get("iterations")
    if not isinstance(target, int) or target > k:
        return
    done = [r for r in read_records(path) if r.get("status") == "finished"]
    if done and isinstance(done[-1].get("iteration"), int) and done[-1]["iteration"] > k:
        n = done[-1]["iteration"]
        raise ConfigError("resume", resume, f"the run's log says it finished at iteration {n}, but its checkpoint is "
                                            f"at iteration {k} (an older checkpoint put back?): restore the checkpoint "
                                            f"of iteration {n}, or redo iterations {k + 1}-{n} from this one with "
                                            f"loop.iterations={n}")


def record_at_resume_point_kept(ckpt: Mapping[str, Any]) -> bool:
    """Whether the record at the checkpoint's iteration is one an uninterrupted run writes too:
    the checkpoint's ``record_on_grid``. Every checkpoint a resume accepts holds it: the trainer
    has stored it since before the ``loop`` group, and checkpoints older than that group are
    refused (:func:`dadam3.run.checkpoint.resume.check_checkpoint`)."""
    return bool(ckpt["record_on_grid"])


def rewind(path: Path, k: int, drop_at_k: bool) -> bytes:
    """The JSONL log at ``path`` as an uninterrupted run left it at iteration ``k`` (read small:
    :func:`dadam3.errors.small_files.read_small`; the caller writes it, as a new file): records
    after k dropped, every final status record, ``resumed`` records at k or later (an earlier
    attempt to resume there), with ``drop_at_k`` the record at k, and (each kind named in one
    warning line) a torn last line and unreadable lines (not JSON, not a record, or not UTF-8:
    such a line is dropped whole, never written back altered). A record at k that an uninterrupted
    run has but the log lacks (torn, or deleted) cannot be written again (its window's sums were
    reset when it was logged): one warning line says the log has none at k."""
    kept, unreadable, at_k = [], [], False
    *lines, rest = read_small(path, LOG).split(b"\n")
    torn = len(lines) + 1 if rest.strip() else None
    for number, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:          # not UTF-8: unreadable, never rewritten altered
            unreadable.append(number)
            continue
        record = parse_record(line)
        if record is None:
            if line.strip():
                unreadable.append(number)
            continue
        it, status = record.get("iteration"), record.get("status")
        if status in TERMINAL_STATUSES or (it is not None and (it > k or (it == k and drop_at_k))):
            continue
        if status == "resumed" and it is not None and it >= k:
            continue
        at_k = at_k or (it == k and status not in ("resumed",))
        kept.append(line + "\n")
    if unreadable:
        shown = ", ".join(map(str, unreadable[:5])) + (", ..." if len(unreadable) > 5 else "")
        log.warning("%s: dropped %d unreadable line(s) (line %s) while rewinding to iteration %d",
                    path, len(unreadable), shown, k)
    if torn is not None:
        log.warning("%s: dropped the torn last line (line %d, a write cut short) while rewinding to iteration %d",
                    path, torn, k)
    if k > 0 and not drop_at_k and not at_k:
        log.warning("%s: the record at iteration %d (the checkpoint's) is missing or was torn and cannot be written "
                    "again: the log has no record at %d", path, k, k)
    return "".join(kept).encode("utf-8")
