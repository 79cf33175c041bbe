"""``python -m dadam3.plot FIGURE --run LABEL=DIR ... --out FILE``: paper-style figures.

* ``fig1``: panel (a) error rate e_k, panel (b) average squared gradient norm R_k, both on
  log-log axes, one curve per run directory holding a ``metrics.csv``.
* ``toy``: modes covered and share of high-quality samples against iterations, one curve
  per training run directory holding a ``metrics.jsonl`` (experiment=toy_gaussians).
* ``is``: inception score against iterations (paper Figs. 2-4), node average solid and
  node-averaged model dashed, one curve per training run directory.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics_csv(path: Path) -> dict[str, list[float]]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {k: [float(r[k]) for r in rows] for k in rows[0]}


def fig1(runs: dict[str, Path], out: Path) -> None:
    fig, (ax_e, ax_r) = plt.subplots(1, 2, figsize=(10, 4))
    for label, run_dir in runs.items():
        m = read_metrics_csv(run_dir / "metrics.csv")
        ax_e.loglog(m["iteration"], m["error"], marker=".", label=label)
        ax_r.loglog(m["iteration"], m["avg_grad_sq_norm"], marker=".", label=label)
    ax_e.set(xlabel="iteration k", ylabel=r"$e_k = \|\bar z_k - z^*\| / \|z^*\|$", title="(a) Error rate")
    ax_r.set(xlabel="iteration k", ylabel=r"$\mathcal{R}_k = \frac{1}{k}\sum_{i\leq k}\|\nabla F(\bar z_i)\|^2$",
             title="(b) Average norm-squared of gradient")
    for ax in (ax_e, ax_r):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    _save(fig, out)


def _save(fig, out: Path) -> None:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)


def read_jsonl_metric(run_dir: Path, key: str) -> tuple[list[int], list[float]]:
    from dadam3.run_logging import read_jsonl

    recs = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get(key) is not None]
    return [r["iteration"] for r in recs], [float(r[key]) for r in recs]


def curves(runs: dict[str, Path], out: Path, panels: list[tuple[str, str, str | None]], title: str) -> None:
    """One panel per (metric key, y label, optional dashed companion key)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (key, ylabel, dashed) in zip(axes[0], panels):
        for label, run_dir in runs.items():
            x, y = read_jsonl_metric(run_dir, key)
            line, = ax.plot(x, y, marker=".", label=label)
            if dashed:
                x2, y2 = read_jsonl_metric(run_dir, dashed)
                ax.plot(x2, y2, ls="--", color=line.get_color())
        ax.set(xlabel="iteration", ylabel=ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    _save(fig, out)


FIGURES = {
    "fig1": ("metrics.csv", fig1),
    "toy": ("metrics.jsonl", lambda runs, out: curves(
        runs, out, [("modes_covered", "modes covered (of 8)", "modes_covered_avg_model"),
                    ("high_quality_share", "share of samples within 3 std of a mode",
                     "high_quality_share_avg_model")],
        "WGAN-GP on 8 Gaussians, M = 5 ring (solid: mean over nodes, dashed: node-averaged model)")),
    "is": ("metrics.jsonl", lambda runs, out: curves(
        runs, out, [("is_mean", "inception score", "is_avg_model")],
        "Inception score (solid: mean over nodes, dashed: node-averaged model)")),
}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m dadam3.plot")
    p.add_argument("figure", choices=list(FIGURES))
    p.add_argument("--run", action="append", required=True, metavar="LABEL=DIR",
                   help="a curve: its label and a run directory (metrics.csv or metrics.jsonl)")
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    needs, draw = FIGURES[a.figure]
    runs = {}
    for spec in a.run:
        label, _, d = spec.partition("=")
        if not d or not (Path(d) / needs).is_file():
            print(f"error: --run={spec}: expected LABEL=DIR with DIR/{needs}", file=sys.stderr)
            sys.exit(2)
        runs[label] = Path(d)
    draw(runs, a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
