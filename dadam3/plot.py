"""``python -m dadam3.plot fig1 --run LABEL=DIR ... --out FILE``: paper-style figures.

fig1: panel (a) error rate e_k, panel (b) average squared gradient norm R_k, both on
log-log axes, one curve per run directory holding a ``metrics.csv``.
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
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m dadam3.plot")
    p.add_argument("figure", choices=["fig1"])
    p.add_argument("--run", action="append", required=True, metavar="LABEL=DIR",
                   help="a curve: its label and a run directory holding metrics.csv")
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    runs = {}
    for spec in a.run:
        label, _, d = spec.partition("=")
        if not d or not (Path(d) / "metrics.csv").is_file():
            print(f"error: --run={spec}: expected LABEL=DIR with DIR/metrics.csv", file=sys.stderr)
            sys.exit(2)
        runs[label] = Path(d)
    fig1(runs, a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
