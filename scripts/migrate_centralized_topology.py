"""A recorded migration: the centralized runs (Cadam3, COSG) whose config records a topology other
than ``complete``.

Until the schema refused it (``OptimizerOption.check_topology``), a run with ``optimizer=cadam3``
or ``optimizer=cosg`` kept the preset's ``topology.name`` (``ring``) in its config while the code
ran it on the complete graph: the optimizer's spec forced it (``dadam3/optim/__init__.py``,
``topology="complete"``, at every commit that made the committed Fashion-MNIST runs, from 0d5b878
on). This script rewrites exactly that one value, ``topology.name``, in the run's
``config_resolved.yaml`` and ``.hydra/config.yaml`` (every other byte kept; the result is checked
to differ from the original in that key alone) and appends what it changed to the run's
``migrations.json``. A second pass finds nothing to change.

    python scripts/migrate_centralized_topology.py [--results results]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

from dadam3.errors.files import write_text_whole

CENTRALIZED = ("cadam3", "cosg")
FORCED = "complete"
CONFIGS = ("config_resolved.yaml", ".hydra/config.yaml")
LOG = "migrations.json"
WHY = ("the code ran optimizer {method} on the complete graph whatever topology.name said (its spec forced it); "
       "the config recorded the preset's topology")
NAME_LINE = re.compile(r"^(topology:\n(?:[ ]{2}.*\n)*?[ ]{2}name: )(\S+)$", re.MULTILINE)


def migrated(text: str) -> tuple[str, str] | None:
    """(the config text with topology.name = complete, the old name), or None when there is
    nothing to change (not a centralized run, or it records the complete graph already)."""
    cfg = yaml.safe_load(text) or {}
    method = (cfg.get("optimizer") or {}).get("name")
    old = (cfg.get("topology") or {}).get("name")
    if method not in CENTRALIZED or old in (None, FORCED):
        return None
    new_text, count = NAME_LINE.subn(lambda m: m.group(1) + FORCED, text, count=1)
    after = yaml.safe_load(new_text)
    expected = {**cfg, "topology": {**cfg["topology"], "name": FORCED}}
    if count != 1 or after != expected:
        raise SystemExit(f"error: cannot rewrite topology.name alone in this config (method {method})")
    return new_text, old


def migrate(results: Path) -> list[Path]:
    """Rewrite every misrecorded config under ``results``; returns the files changed."""
    changed = []
    for path in sorted(p for name in CONFIGS for p in results.rglob(name)):
        run_dir = path.parent.parent if path.parent.name == ".hydra" else path.parent
        if not (run_dir / "metrics.jsonl").is_file():
            continue
        out = migrated(path.read_text())
        if out is None:
            continue
        text, old = out
        method = yaml.safe_load(text)["optimizer"]["name"]
        write_text_whole(path, text)
        log = run_dir / LOG
        entries = json.loads(log.read_text()) if log.is_file() else []
        entries.append({"script": "scripts/migrate_centralized_topology.py",
                        "file": path.relative_to(run_dir).as_posix(), "key": "topology.name", "was": old,
                        "now": FORCED, "why": WHY.format(method=method)})
        write_text_whole(log, json.dumps(entries, indent=1) + "\n")
        changed.append(path)
    return changed


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    a = p.parse_args(argv)
    if not a.results.is_dir():
        print(f"error: --results={a.results}: not a directory", file=sys.stderr)
        sys.exit(2)
    for path in migrate(a.results):
        print(f"topology.name -> {FORCED}: {path}")


if __name__ == "__main__":
    main()
