"""Prune ``results/`` to what the report reads (docs/results.md, "What results/ keeps in git").

Lists the tracked files the rule takes out of git, in this order, and with ``--delete`` removes them
(``git rm``: the working copy too) until ``--max-mb`` of deleted bytes is reached:

1. byte copies over 10 kB: the copy ``results/REPORT.md`` links stays, else the first path in sorted order;
2. per-node sample grids (``samples/iter_*_node*.png``) that REPORT.md does not link;
3. intermediate grids of the averaged model (every ``samples/iter_*_avg.png`` of a run but its last,
   the one the report would show) that REPORT.md does not link.

What stays is each run's metrics, configs, provenance and log, its final grid, and the report's figures.
The full samples of a run live in its run directory where it ran; rerunning the run's command (its
``.hydra/overrides.yaml``, at its provenance's commit) writes them again.

    python scripts/prune_results.py                      # what the rule would delete, by category
    python scripts/prune_results.py --delete --max-mb 110
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUPLICATE_MIN_BYTES = 10 * 1024
LINK = re.compile(r"\]\(([^)#\s]+)\)")


def tracked(results: str) -> list[tuple[str, str, int]]:
    """(path, blob hash, bytes) of every file under ``results`` in git's index."""
    out = subprocess.run(["git", "ls-files", "-s", "-z", "--", results], cwd=ROOT, check=True,
                         capture_output=True).stdout.decode()
    rows = []
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        rows.append((path, meta.split()[1], (ROOT / path).stat().st_size))
    return rows


def linked(results: str) -> set[str]:
    """Paths (from the repository root) of the files ``results/REPORT.md`` links."""
    text = (ROOT / results / "REPORT.md").read_text(encoding="utf-8")
    return {(Path(results) / m).as_posix() for m in LINK.findall(text) if not m.startswith(("http", "../"))}


def candidates(rows: list[tuple[str, str, int]], keep: set[str]) -> list[tuple[str, str, int]]:
    """(category, path, bytes) the rule deletes, in the order above."""
    by_hash: dict[str, list[str]] = {}
    size = {p: n for p, _, n in rows}
    for path, blob, n in rows:
        if n > DUPLICATE_MIN_BYTES:
            by_hash.setdefault(blob, []).append(path)
    out, gone = [], set()
    for paths in by_hash.values():
        if len(paths) > 1:
            stay = sorted(paths, key=lambda p: (p not in keep, p))[0]
            out += [("duplicate", p, size[p]) for p in sorted(paths) if p != stay]
    gone = {p for _, p, _ in out}
    samples = sorted(p for p in size if re.search(r"/samples/iter_\d+_(node\d+|avg)\.png$", p))
    out += [("per-node grid", p, size[p]) for p in samples if "_node" in p and p not in keep | gone]
    last: dict[str, str] = {}
    for p in samples:
        if p.endswith("_avg.png"):
            last[p.rsplit("/", 1)[0]] = p
    out += [("intermediate grid", p, size[p]) for p in samples
            if p.endswith("_avg.png") and p != last[p.rsplit("/", 1)[0]] and p not in keep | gone]
    return sorted(out, key=lambda c: ["duplicate", "per-node grid", "intermediate grid"].index(c[0]))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default="results", help="the results folder, from the repository root")
    p.add_argument("--delete", action="store_true", help="git rm what the rule takes out (default: list only)")
    p.add_argument("--max-mb", type=float, default=float("inf"), help="stop before deleting more than this")
    a = p.parse_args(argv)
    if a.max_mb <= 0:
        sys.exit(f"error: --max-mb={a.max_mb}: must be positive")
    rows = tracked(a.results)
    todo = candidates(rows, linked(a.results))
    chosen, total = [], 0
    for category, path, n in todo:
        if total + n > a.max_mb * 1e6:
            break
        chosen.append((category, path, n))
        total += n
    for category in ("duplicate", "per-node grid", "intermediate grid"):
        c = [n for k, _, n in chosen if k == category]
        r = [n for k, _, n in todo if k == category]
        print(f"{category}: {'delete' if a.delete else 'would delete'} {len(c)} files, {sum(c) / 1e6:.1f} MB; "
              f"left for later {len(r) - len(c)} files, {(sum(r) - sum(c)) / 1e6:.1f} MB")
    kept = sum(n for _, _, n in rows) - total
    print(f"{a.results}/ in git afterwards: {len(rows) - len(chosen)} files, {kept / 1e6:.1f} MB")
    if a.delete:
        paths = [path for _, path, _ in chosen]
        for i in range(0, len(paths), 500):
            subprocess.run(["git", "rm", "-q", "--", *paths[i:i + 500]], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
