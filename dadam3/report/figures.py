"""The report's figures (matplotlib, Agg), written with fixed metadata so that the same runs give
the same PNG bytes. A label with several runs (seeds) is drawn as their mean at the iterations all
of them logged, with a band of ± one sample SD."""
from __future__ import annotations

import contextlib
from pathlib import Path

import matplotlib
import numpy as np

from dadam3.errors.files import write_whole
from dadam3.report.runs import Run
from dadam3.report.stats import Cell

matplotlib.use("Agg")
import matplotlib.pyplot as plt

METADATA = {"Software": None}        # no version string: the bytes depend on the runs only


def save(fig, path: Path) -> None:
    """``fig`` as the PNG ``path``, written whole (a new file renamed over the name: a link there
    is replaced, never followed; a failed write leaves the old figure)."""
    fig.tight_layout()
    made = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_whole(path, lambda f: fig.savefig(f, dpi=100, metadata=METADATA, format="png"))
    except BaseException:
        if made:                # a first figure that failed leaves no empty folder behind
            with contextlib.suppress(OSError):
                path.parent.rmdir()
        raise
    finally:
        plt.close(fig)


def legend(ax, **options) -> None:
    """``ax``'s legend, where it has labelled lines (a panel whose runs all lack its key has none)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**options)


def fig1(columns: dict[str, dict[str, list[float]]], path: Path) -> None:
    """Paper Fig. 1: e_k and R_k against k on log-log axes, one curve per method."""
    fig, (ax_e, ax_r) = plt.subplots(1, 2, figsize=(10, 4))
    for label, c in columns.items():
        ax_e.loglog(c["iteration"], c["error"], marker=".", label=label)
        ax_r.loglog(c["iteration"], c["avg_grad_sq_norm"], marker=".", label=label)
    ax_e.set(xlabel="iteration k", ylabel=r"$e_k$", title="(a) Error rate")
    ax_r.set(xlabel="iteration k", ylabel=r"$\mathcal{R}_k$", title="(b) Average squared gradient norm")
    for ax in (ax_e, ax_r):
        ax.grid(True, which="both", alpha=0.3)
        legend(ax)
    save(fig, path)


def seed_band(runs: list[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(iterations, mean, sample SD (0 for one run)) of ``key`` at the iterations every run logged."""
    series = [r.series(key) for r in runs]
    common = sorted(set.intersection(*(set(s) for s in series))) if series else []
    values = np.array([[s[i] for i in common] for s in series], dtype=float).reshape(len(series), len(common))
    sd = values.std(axis=0, ddof=1) if len(series) > 1 else np.zeros(len(common))
    return np.array(common), values.mean(axis=0), sd


def curves(groups: dict[str, list[Run]], panels: list[tuple[str, str, str | None]], title: str, path: Path) -> None:
    """One panel per (key, y label, dashed companion key or None), one curve per label."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (key, ylabel, dashed) in zip(axes[0], panels):
        for label, runs in groups.items():
            x, mean, sd = seed_band(runs, key)
            if not len(x):
                continue
            line, = ax.plot(x, mean, marker=".", label=f"{label} (n = {len(runs)})")
            ax.fill_between(x, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, lw=0)
            if dashed:
                x2, mean2, _ = seed_band(runs, dashed)
                ax.plot(x2, mean2, ls="--", color=line.get_color())
        ax.set(xlabel="iteration", ylabel=ylabel)
        ax.grid(True, alpha=0.3)
        legend(ax, fontsize=8)
    fig.suptitle(title, fontsize=10)
    save(fig, path)


def step_sizes(cells: list[Cell], path: Path, key: str = "fid_mean") -> None:
    """Final ``key`` (mean ± sample SD over finished seeds) against the step size, one line per
    method; a step size where a seed diverged is an x at the top of the panel."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    top = max((c.stat(key)[0] for c in cells if c.stat(key)), default=1.0) * 1.1
    for method in dict.fromkeys(c.method for c in cells):
        mine = [c for c in cells if c.method == method and c.lr is not None]
        ok = [c for c in mine if c.stat(key) and not c.of("diverged")]
        if ok:
            lrs = [c.lr for c in ok]
            means = [c.stat(key)[0] for c in ok]
            sds = [c.stat(key)[1] or 0.0 for c in ok]
            line, = ax.plot(lrs, means, marker="o", label=mine[0].label)
            ax.errorbar(lrs, means, yerr=sds, fmt="none", color=line.get_color(), capsize=3)
            color = line.get_color()
        else:
            color = None
        bad = [c.lr for c in mine if c.of("diverged")]
        if bad:
            ax.plot(bad, [top] * len(bad), "x", color=color, ms=9,
                    label=f"{mine[0].label}: diverged" if ok else f"{mine[0].label} (diverged)")
    ax.set_xscale("log")
    ax.set(xlabel="step size (optimizer.lr)", ylabel="final FID, node mean (lower is better)")
    ax.grid(True, which="both", alpha=0.3)
    legend(ax, fontsize=8)
    save(fig, path)
