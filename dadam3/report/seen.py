"""Seeds already seen: a plan's fresh evidence is evidence nobody has seen, so a seed of a plan must
have no committed run of the same figure outside the plan's own folder (DESIGN.md, "Evidence").

*The same figure* is the same data set (``dataset.name``) at the same number of nodes (``nodes``):
a run at another cell, step size, data split or stabiliser still shares the seed's initial point and
data order with the plan's, and its outcome is in the repository. A run whose config does not say
(a legacy run) counts for every figure. Round 4's plans list the seeds seen when they were written
(``seen_seeds``); the report refuses a plan whose seed is in that list or has such a run
(:func:`seen_seeds`), and names the seeds of older plans that were (:mod:`dadam3.report.families`).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from dadam3.report import read
from dadam3.report.plan import Plan

SEED_FOLDER = re.compile(r"seed(\d+)$")
_INDEX: dict[str, tuple[tuple, list]] = {}


def committed_runs(root: Path) -> list[tuple[str, int, str | None, int | None]]:
    """(path relative to ``root``, seed, data set, nodes) of every run directory with a
    ``metrics.jsonl`` under the results folder ``root`` (data set and nodes None where no config says)."""
    dirs = sorted(p.parent for p in root.rglob("metrics.jsonl"))
    stamp = tuple((str(d), (d / "config_resolved.yaml").stat().st_mtime_ns
                   if (d / "config_resolved.yaml").is_file() else 0) for d in dirs)
    key = str(root.resolve())
    if key in _INDEX and _INDEX[key][0] == stamp:
        return _INDEX[key][1]
    found = []
    for d in dirs:
        cfg = read.yaml_file(d / "config_resolved.yaml", {}) if (d / "config_resolved.yaml").is_file() else {}
        cfg = cfg if isinstance(cfg, dict) else {}
        seed = cfg.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            m = SEED_FOLDER.search(d.name)
            seed = int(m.group(1)) if m else None
        if seed is None:
            continue
        data = (cfg.get("dataset") or {}).get("name") if isinstance(cfg.get("dataset"), dict) else None
        nodes = cfg.get("nodes") if isinstance(cfg.get("nodes"), int) else None
        found.append((d.relative_to(root).as_posix(), seed, data, nodes))
    _INDEX[key] = (stamp, found)
    return found


@lru_cache(maxsize=None)
def figure_of(experiment: str) -> tuple[str, int]:
    """(data set, nodes) of an experiment preset (its composed training config)."""
    from dadam3.run.schema import compose
    cfg = compose("train", [f"experiment={experiment}"])
    return str(cfg.dataset.name), int(cfg.nodes)


def plan_seeds(plan: Plan) -> tuple[int, ...]:
    return tuple(dict.fromkeys((*plan.selection_seeds, *plan.fresh_seeds)))


def seen_seeds(root: Path, plan: Plan) -> dict[int, list[str]]:
    """The plan's seeds that were seen: {seed: why}, each why a path of a committed run of the same
    figure (the plan's experiment's data set and nodes) outside the plan's folder, or the plan's own list."""
    data, nodes = figure_of(plan.experiment) if plan.experiment else (None, None)
    own = plan.runs.removeprefix("results/").rstrip("/") + "/"
    seeds = set(plan_seeds(plan))
    out: dict[int, list[str]] = {}
    for s in seeds & set(plan.seen_seeds or ()):
        out.setdefault(s, []).append("in the plan's own list of seen seeds")
    for rel, seed, d, n in committed_runs(root):
        same = (d is None or data is None or d == data) and (n is None or nodes is None or n == nodes)
        if seed in seeds and not rel.startswith(own) and same:
            out.setdefault(seed, []).append(f"`{rel}`")
    return dict(sorted(out.items()))


def seen_text(seen: dict[int, list[str]], most: int = 2) -> str:
    """``seed 3 (`a/seed3`, `b/seed3` and 4 more); seed 4 (...)``: at most ``most`` reasons a seed."""
    parts = []
    for seed, why in seen.items():
        more = f" and {len(why) - most} more" if len(why) > most else ""
        parts.append(f"seed {seed} ({', '.join(why[:most])}{more})")
    return "; ".join(parts)
