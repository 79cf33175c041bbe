"""``python -m dadam3.plot FIGURE --run LABEL=DIR ... --out FILE``: paper-style figures.

* ``fig1``: panel (a) error rate e_k, panel (b) average squared gradient norm R_k, both on
  log-log axes, one curve per run directory holding a ``metrics.csv``.
* ``toy``: modes covered and share of high-quality samples against iterations, one curve
  per training run directory holding a ``metrics.jsonl`` (experiment=toy_gaussians).
* ``is``: inception score against iterations (paper Figs. 2-4), node average solid and
  node-averaged model dashed, one curve per training run directory.
* ``fidelity``: IS and FID against iterations, the same way.
* ``summary``: a markdown table (``--out FILE.md``) of each run's last IS / FID / KID (mean ±
  sample standard deviation over the label's runs), iteration and wall time.

``--run LABEL=DIR1,DIR2,...`` (the same run with several seeds) draws the seeds' mean with
a band of ± one sample standard deviation (for ``toy``, ``is`` and ``fidelity``). Every
standard deviation here is the sample one (n − 1 in the denominator): a handful of seeds is a
sample of the runs one could make.
"""
from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import matplotlib
import numpy as np

from dadam3.errors.boundary import exit_on_failure
from dadam3.errors.config import ConfigError
from dadam3.errors.files import DataFileError, WriteFailed, new_temporary, write_text_whole, write_whole
from dadam3.errors.pickled import Picklable
from dadam3.run.paths import ArgumentParser, check_writable_file, path_argument

matplotlib.use("Agg")
import matplotlib.pyplot as plt


class PlotInputError(Picklable, ValueError):
    """An input the figure cannot be drawn from: one line naming the file and what is wrong."""


def read_metrics_csv(path: Path) -> dict[str, list[float]]:
    """The columns of a synthetic run's ``metrics.csv`` (header and at least one row of numbers)."""
    from dadam3.report import read

    try:
        out = read.csv_columns(path)            # the report's readers' checks (line and column named)
        if not out or not any(out.values()):
            raise PlotInputError(f"{path}: no rows (empty, or only a header)")
    except DataFileError as e:
        at = "" if e.line_number is None else f"line {e.line_number}: "
        raise PlotInputError(f"{path}: not a metrics.csv of python -m dadam3.synthetic ({at}{e.reason})") from None
    except (OSError, csv.Error) as e:
        raise PlotInputError(f"{path}: not a metrics.csv of python -m dadam3.synthetic ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:100]})") from None
    missing = [k for k in ("iteration", "error", "avg_grad_sq_norm") if k not in out]
    if missing:
        raise PlotInputError(f"{path}: no column {', '.join(missing)}")
    return out


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
    try:
        write_whole(out, lambda f: fig.savefig(f, dpi=150, format=out.suffix[1:].lower()))
    except WriteFailed as e:
        raise PlotInputError(f"--out={out}: cannot be written ({e.reason})") from None
    finally:
        plt.close(fig)


def check_out(out: Path, figure: str) -> None:
    """``--out``: a suffix matplotlib can write (a figure) and a file this process can create or
    replace, checked by opening it before anything is drawn (root passes ``os.access`` checks
    that the kernel then refuses, e.g. under /proc). A directory that does not exist yet is
    created, as for a run's outputs."""
    if figure != "summary":
        formats = plt.figure().canvas.get_supported_filetypes()
        plt.close("all")
        if out.suffix.lstrip(".").lower() not in formats:
            raise ConfigError("--out", str(out), f"needs the suffix of a format matplotlib writes: "
                                                 f"{', '.join('.' + f for f in sorted(formats))}")
    check_writable_file("--out", out)
    try:                # a new file can be made beside it (the figure is one, renamed over --out)
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = new_temporary(out)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise ConfigError("--out", str(out), f"cannot be written ({e.strerror or e}); choose another path") from None


def read_records(path: Path) -> list[dict]:
    """A run's ``metrics.jsonl`` records; an empty or corrupt file is a :class:`PlotInputError`."""
    from dadam3.run.loggers import read_jsonl

    try:
        recs = read_jsonl(path)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PlotInputError(f"{path}: not a metrics.jsonl of python -m dadam3.train ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:100]})") from None
    if not recs:
        raise PlotInputError(f"{path}: no records")
    for n, r in enumerate(recs, 1):
        if not isinstance(r, dict):
            what = {list: "an array", str: "a string", type(None): "null", bool: "a boolean"}.get(type(r), "a number")
            raise PlotInputError(f"{path}: record {n} is {what}, not a record (a JSON object with an iteration)")
        it = r.get("iteration")
        if isinstance(it, bool) or not isinstance(it, int) or it < 0:
            raise PlotInputError(f"{path}: record {n} has iteration={json.dumps(it)[:40]}: not an integer >= 0")
    return recs


def read_jsonl_metric(run_dir: Path, key: str) -> tuple[list[int], list[float]]:
    """(iterations, values) of the records of ``run_dir/metrics.jsonl`` that have ``key``."""
    path = run_dir / "metrics.jsonl"
    recs = [r for r in read_records(path) if r.get(key) is not None]
    for r in recs:
        if isinstance(r[key], bool) or not isinstance(r[key], (int, float)):
            raise PlotInputError(f"{path}: the record of iteration {r['iteration']} has {key}="
                                 f"{json.dumps(r[key])[:40]}: not a number")
    return [r["iteration"] for r in recs], [float(r[key]) for r in recs]


def check_metrics_present(runs: dict[str, list[Path]], keys: list[str]) -> None:
    """Each run logged each of ``keys`` at least once (else the figure would be silently empty)."""
    for label, run_dirs in runs.items():
        for d in run_dirs:
            for key in keys:
                if not read_jsonl_metric(d, key)[0]:
                    raise PlotInputError(f"{d / 'metrics.jsonl'} (--run {label}): no record has {key}; "
                                         "was the metric on (metrics.every, metrics.inception/fid/kid)?")


def seed_series(run_dirs: list[Path], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(iterations, mean, sample std (n − 1; 0 for one run)) of ``key`` over the runs (seeds), at the
    iterations all of them logged."""
    series = [dict(zip(*read_jsonl_metric(d, key))) for d in run_dirs]
    common = sorted(set.intersection(*(set(s) for s in series))) if series else []
    values = np.array([[s[i] for i in common] for s in series], dtype=float).reshape(len(series), len(common))
    std = values.std(axis=0, ddof=1) if len(series) > 1 else np.zeros(len(common))
    return np.array(common), values.mean(axis=0), std


def curves(runs: dict[str, list[Path]], out: Path, panels: list[tuple[str, str, str | None]], title: str) -> None:
    """One panel per (metric key, y label, optional dashed companion key); a label with several run
    directories (seeds) is drawn as their mean with a band of ± one sample standard deviation."""
    check_metrics_present(runs, [k for key, _, dashed in panels for k in (key, dashed) if k])
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (key, ylabel, dashed) in zip(axes[0], panels):
        for label, run_dirs in runs.items():
            x, mean, std = seed_series(run_dirs, key)
            n = f" ({len(run_dirs)} seeds)" if len(run_dirs) > 1 else ""
            line, = ax.plot(x, mean, marker=".", label=label + n)
            if len(run_dirs) > 1:
                ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)
            if dashed:
                x2, mean2, std2 = seed_series(run_dirs, dashed)
                ax.plot(x2, mean2, ls="--", color=line.get_color())
                if len(run_dirs) > 1:
                    ax.fill_between(x2, mean2 - std2, mean2 + std2, color=line.get_color(), alpha=0.1, lw=0)
        ax.set(xlabel="iteration", ylabel=ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    _save(fig, out)


def summary(runs: dict[str, list[Path]], out: Path) -> None:
    """A markdown table: each label's last evaluation (mean ± sample std over its runs) and wall time."""

    keys = [("is_mean", "IS (node mean)"), ("is_avg_model", "IS (averaged model)"),
            ("fid_mean", "FID (node mean)"), ("fid_avg_model", "FID (averaged model)"),
            ("kid_mean", "KID (node mean)")]
    lines = ["| run | seeds | iteration | " + " | ".join(h for _, h in keys) + " | wall time (s) |",
             "|" + " --- |" * (len(keys) + 4)]
    for label, run_dirs in runs.items():
        cells = []
        for key, _ in keys:
            last = [read_jsonl_metric(d, key) for d in run_dirs]
            vals = np.array([y[-1] for _, y in last if y], dtype=float)
            cells.append("–" if len(vals) < len(run_dirs) else
                         f"{vals.mean():.3f}" + (f" ± {vals.std(ddof=1):.3f}" if len(vals) > 1 else ""))
        ends = [read_records(d / "metrics.jsonl")[-1] for d in run_dirs]
        its = sorted({r["iteration"] for r in ends})
        status = ("" if all(r.get("status") == "finished" for r in ends) else
                  " (diverged)" if any(r.get("status") == "diverged" for r in ends) else " (not finished)")
        wall = np.mean([t if isinstance(t := r.get("time"), (int, float)) else float("nan") for r in ends])
        lines.append(f"| {label} | {len(run_dirs)} | {'/'.join(map(str, its))}{status} | " + " | ".join(cells)
                     + f" | {wall:.0f} |")
    lines += ["", "Last evaluation of each run; with several seeds, mean ± sample standard deviation (n − 1) "
                  "over them."]
    try:
        write_text_whole(out, "\n".join(lines) + "\n")
    except WriteFailed as e:
        raise PlotInputError(f"--out={out}: cannot be written ({e.reason})") from None


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
    "fidelity": ("metrics.jsonl", lambda runs, out: curves(
        runs, out, [("is_mean", "IS (higher is better)", "is_avg_model"),
                    ("fid_mean", "FID (lower is better)", "fid_avg_model")],
        "IS and FID (solid: mean over nodes, dashed: node-averaged model; bands: ± 1 sample SD over seeds)")),
    "summary": ("metrics.jsonl", summary),
}


@exit_on_failure
def main(argv=None) -> None:
    p = ArgumentParser(prog="python -m dadam3.plot")
    p.add_argument("figure", choices=list(FIGURES))
    p.add_argument("--run", action="append", required=True, metavar="LABEL=DIR",
                   help="a curve: its label and a run directory (metrics.csv or metrics.jsonl)")
    p.add_argument("--out", required=True, type=path_argument("--out"))
    p.add_argument("--wait", action="store_true",
                   help="read one line from standard input first: 'go' draws, anything else or its end exits 0 "
                        "with nothing written (a script starts the plot while its runs start: the imports overlap)")
    a = p.parse_args(argv)
    if a.wait and sys.stdin.readline().strip() != "go":
        return
    needs, draw = FIGURES[a.figure]
    runs = {}
    for spec in a.run:
        label, _, dirs = spec.partition("=")
        paths = [Path(d) for d in dirs.split(",") if d]
        if not label.strip() or label in runs:
            why = "an empty label" if not label.strip() else f"the label {label!r} twice (each curve needs its own)"
            print(f"error: --run={spec}: {why}; expected LABEL=DIR[,DIR...]", file=sys.stderr)
            sys.exit(2)
        if not paths or not all((d / needs).is_file() for d in paths):
            print(f"error: --run={spec}: expected LABEL=DIR[,DIR...] with DIR/{needs}", file=sys.stderr)
            sys.exit(2)
        if a.figure == "fig1" and len(paths) > 1:
            print(f"error: --run={spec}: fig1 draws one run per label, got {len(paths)} directories", file=sys.stderr)
            sys.exit(2)
        runs[label] = paths
    if a.figure == "fig1":
        runs = {label: dirs[0] for label, dirs in runs.items()}
    try:
        check_out(a.out, a.figure)
        draw(runs, a.out)
    except (ConfigError, PlotInputError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    from dadam3.run.signals import exit_on_signals
    exit_on_signals("while the figure was drawn: nothing more was written")
    main()
