"""Compare a rerun of Fig. 1 with the committed curves: ``python scripts/fig1_compare.py OUT [REF]``.

For each optimizer folder of ``REF`` (default ``results/fig1``), reads ``metrics.csv`` there and in
``OUT`` and prints the largest relative difference over every column and row ("reproduced the
committed curve to 3e-16"), or what differs (iterations, columns, a missing run). Exit status 0 when
every curve is there with the same iterations, 1 otherwise; a difference in value is reported, not
refused (another CPU or library may round differently), and each run's provenance says where it ran.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path


def columns(path: Path) -> dict[str, list[float]]:
    """``metrics.csv`` as columns of floats."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {k: [float(r[k]) for r in rows] for k in (rows[0] if rows else {})}


def largest_relative_difference(a: list[float], b: list[float]) -> float:
    """max |a - b| / max(|b|, tiny) over the rows (inf when a value is not finite in one only)."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if x != y:
            worst = max(worst, abs(x - y) / max(abs(y), 1e-300))
    return worst


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    out, ref = Path(argv[0]), Path(argv[1] if len(argv) == 2 else "results/fig1")
    status = 0
    for run in sorted(p.parent for p in ref.glob("*/metrics.csv")):
        mine = out / run.name / "metrics.csv"
        if not mine.is_file():
            print(f"fig1: {mine}: missing (the committed curve is {run / 'metrics.csv'})")
            status = 1
            continue
        a, b = columns(mine), columns(run / "metrics.csv")
        if a.keys() != b.keys() or a.get("iteration") != b.get("iteration"):
            print(f"fig1: {mine}: other columns or iterations than {run / 'metrics.csv'} (other settings?)")
            status = 1
            continue
        worst = max(largest_relative_difference(a[k], b[k]) for k in b)
        said = "reproduced the committed curve" if worst <= 1e-9 else "DIFFERS from the committed curve: up"
        print(f"fig1: {run.name}: {said} to a relative difference of {worst:.1e} ({mine} vs {run / 'metrics.csv'})")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
