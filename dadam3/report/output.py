"""Where the report writes: ``results/REPORT.md`` and its figures in ``results/report/``; every file
written is remembered, so files of an earlier report that this one did not write are removed."""
from __future__ import annotations

from pathlib import Path

FIGURE_DIR = "report"


class Output:
    def __init__(self, root: Path):
        self.root = root
        self.written: set[Path] = set()

    def figure(self, name: str) -> tuple[Path, str]:
        """(the PNG's path, its link relative to ``results/``) for the figure ``name``."""
        path = self.root / FIGURE_DIR / f"{name}.png"
        self.written.add(path)
        return path, f"{FIGURE_DIR}/{name}.png"

    def stale(self) -> list[Path]:
        """Files under ``results/report/`` this report did not write."""
        folder = self.root / FIGURE_DIR
        return sorted(p for p in folder.rglob("*") if p.is_file() and p not in self.written) if folder.is_dir() else []
