"""Beyond the paper: how many gossip rounds t the synthetic game needs per topology and node count
(issue 36), from the run directories of ``experiments/gossip_rounds.sh`` under ``results/gossip/``
(each with ``summary.json``, written by :mod:`dadam3.gossip_study`).

A cell *reaches* the target when its e_k <= e* (10^-2) at some iteration; the *smallest sufficient
t* of a graph is the smallest t of the grid whose game-seed-0 cell reaches it. The theorem asks
for t >= log_{1/rho}(1 + C) = ln(1 + C) / ln(1/rho): the smallest sufficient t should grow like
1/ln(1/rho), which the verdict tests with Spearman's rank correlation over the graphs."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from dadam3.report import figures, read
from dadam3.report.common import what_was_run
from dadam3.report.output import Output
from dadam3.report.runs import UNKNOWN, Run

TITLE = "Beyond the paper: gossip rounds and topology"
NAMES = {"ring": "ring", "torus": "torus", "exponential": "exponential", "one_peer_exponential": "one-peer exponential",
         "erdos_renyi": "Erdős–Rényi", "complete": "complete"}
ORDER = tuple(NAMES)
CLAIM = ("Not in the paper: its Theorem asks for t ≥ log_{{1/ρ}}(1 + C) gossip rounds per step, ρ = ‖W − 11ᵀ/M‖₂, "
         "so the rounds needed should grow like 1/ln(1/ρ); its experiments use the ring at M = 5 and t = 1. Here: "
         "the game of Section 5.1 at the paper's settings (each node draws its own game; the same sample stream, "
         "game seed 0, in every cell), Dadam3 and DP-OAdam on six topologies, M ∈ {{5, 16, 64}}, "
         "t ∈ {{1, 2, 3, 5, 8}}. A cell *reaches* the target when e_k ≤ {target:g} at some iteration (checked at "
         "every iteration); a graph's *smallest sufficient t* is the smallest t whose seed-0 cell reaches it.")


WHY = ("What this game can and cannot show: whether slow mixing hurts the node average z̄ through the adaptive "
       "steps, and each graph's bytes; not an effect of the graph or t on z̄, because (1) the operator is affine "
       "(G(z; a) = a (1, 1) + Az): the mean of the nodes' gradients is the gradient at z̄ however far apart the "
       "nodes are; (2) gossip (doubly stochastic W) preserves the node average; (3) every node draws from the same "
       "distribution from the same start, so every node's adaptive scale is the same and z̄ takes the centralized "
       "step. Its smallest sufficient t is no advice for a GAN (not affine; nodes may hold different data). Until "
       "the heterogeneous GAN runs exist (\"Beyond the paper: heterogeneous nodes\", plan "
       "docs/analysis_plan/heterogeneous.yaml) the only advice taken from here is each graph's bytes per round:")


def bytes_per_round(cells: list[dict]) -> list[str]:
    """Bytes per node per iteration per gossip round: Dadam3's mixer count (mean over nodes, the game's two
    float64 numbers) divided by t, per graph and M, and the most that quotient differs between t (0: linear)."""
    per: dict[tuple, list[float]] = {}
    for s in (s for s in cells if s["optimizer"] == "dadam3" and s["seed"] == 0 and "bytes_per_iteration_mean" in s):
        label = NAMES[s["topology"]] + ("" if s["graph_seed"] is None else f" (p = 2 ln M / M), seed {s['graph_seed']}")
        per.setdefault((graph_key(s)[1:], label, s["nodes"]), []).append(s["bytes_per_iteration_mean"] / s["rounds"])
    ms, graphs_ = sorted({k[2] for k in per}), sorted({k[:2] for k in per})
    spread = max(((max(v) - min(v)) / max(v) for v in per.values() if max(v) > 0), default=0.0)
    return ([f"Bytes per node per iteration per gossip round (Dadam3's mixer count at t rounds / t, which differs "
             f"between the t of one graph by at most {spread:.1%}; scale by your model's bytes / 16):", "",
             "| graph | " + " | ".join(f"M = {M}" for M in ms) + " |", "|" + " --- |" * (len(ms) + 1)]
            + [f"| {g[1]} | " + " | ".join(f"{statistics.fmean(per[(*g, M)]):.4g}" if (*g, M) in per else "–"
                                           for M in ms) + " |" for g in graphs_] + [""]) if per else []


def load(root: Path) -> tuple[list[dict], dict]:
    """Every cell's summary (with ``rel``, its directory under ``root``) and ``study.json``."""
    base = root / "gossip"
    cells = []
    for path in sorted(base.glob("*/M*/*/t*/summary.json")):
        s = read.json_file(path, dict)
        s["rel"] = path.parent.relative_to(root).as_posix()
        cells.append(s)
    study = read.json_file(base / "study.json", dict, {})
    return cells, study


def _run(root: Path, s: dict) -> Run:
    d = root / s["rel"]
    cfg_path, prov = d / ".hydra" / "config.yaml", d / "provenance.json"
    cfg = read.yaml_file(cfg_path, {})
    return Run(s["rel"], s["optimizer"], s["seed"], cfg if isinstance(cfg, dict) else {},
               read.json_file(prov, list, []))


def torus_rows(M: int) -> int:
    """The rows of the torus ``dadam3.topologies.torus`` builds at M nodes without ``rows``: the most square
    factorisation rows × (M // rows), rows <= cols (the test checks the two agree)."""
    return max(r for r in range(1, math.isqrt(M) + 1) if M % r == 0)


def graph_key(s: dict) -> tuple:
    """(M, topology's place in ORDER, Erdős–Rényi seed or -1): one graph."""
    return s["nodes"], ORDER.index(s["topology"]), -1 if s["graph_seed"] is None else s["graph_seed"]


def graph_label(s: dict) -> str:
    name = NAMES[s["topology"]]
    if s["topology"] == "torus":
        rows = torus_rows(s["nodes"])
        return f"{name} {rows}×{s['nodes'] // rows}"
    if s["graph_seed"] is not None:
        return f"{name} (p = {s['p']:g}, seed {s['graph_seed']})"
    return name


EXACT = 1e-12        # a ρ below this is exact averaging up to rounding (e.g. the exponential graph of 5 nodes)


def inverse_log(rho: float) -> float:
    """1/ln(1/ρ); 0 for ρ = 0 (a round averages exactly), also below :data:`EXACT`."""
    return 0.0 if rho < EXACT else 1.0 / math.log(1.0 / rho)


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rank correlation (ties: average ranks); None when either side is constant."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(spearmanr(x, y).statistic)


def graphs(cells: list[dict], optimizer: str) -> list[dict]:
    """Per graph (sorted by M, topology, seed): its cells of ``optimizer`` by (t, game seed), ρ and
    the smallest sufficient t (None: no t reached the target)."""
    out: dict[tuple, dict] = {}
    for s in cells:
        if s["optimizer"] == optimizer:
            g = out.setdefault(graph_key(s), {"key": graph_key(s), "label": graph_label(s), "nodes": s["nodes"],
                                              "topology": s["topology"], "rho": s["rho"], "by": {}})
            g["by"][s["rounds"], s["seed"]] = s
    for g in out.values():
        reached = sorted(t for (t, seed), s in g["by"].items() if seed == 0 and s["first_hit"] is not None)
        g["smallest_t"] = reached[0] if reached else None
    return [out[k] for k in sorted(out)]


def _hit(s: dict | None) -> str:
    if s is None:
        return "–"
    return "never" if s["first_hit"] is None else f"{s['first_hit']:,}".replace(",", " ")


def table(dadam3: list[dict], dp: dict[tuple, dict], rounds: list[int]) -> list[str]:
    """Per graph: ρ, Dadam3's first k with e_k <= e* at each t (game seed 0) and at t = 1 for game
    seeds 1 and 2, its smallest sufficient t with the bytes and final e_N there, and DP-OAdam's."""
    head = (["M", "graph", "ρ (per round)", "1/ln(1/ρ)"] + [f"first k, t = {t}" for t in rounds]
            + ["t = 1, game seeds 1, 2", "smallest sufficient t", "bytes/node to target there", "final e_N there",
               "DP-OAdam: smallest t (final e_N, t = 1)"])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for g in dadam3:
        t0 = g["smallest_t"]
        at = g["by"].get((t0, 0)) if t0 else None
        extra = ", ".join(_hit(g["by"].get((1, s))) for s in (1, 2))
        d = dp.get(g["key"])
        dp_text = "–" if d is None or (1, 0) not in d["by"] else \
            f"{d['smallest_t'] or 'none'} ({d['by'][1, 0]['final_error']:.3g})"
        rho = g["rho"] if g["rho"] >= EXACT else 0.0
        row = [str(g["nodes"]), g["label"], f"{rho:.4g}", f"{inverse_log(rho):.3g}"]
        row += [_hit(g["by"].get((t, 0))) for t in rounds]
        row += [extra, str(t0) if t0 else "none", f"{at['bytes_to_hit_mean']:.3g}" if at else "–",
                f"{at['final_error']:.3g}" if at else "–", dp_text]
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def figure_rounds(dadam3: list[dict], path: Path) -> None:
    """(a) smallest sufficient t against 1/ln(1/ρ); (b) the first k with e_k <= e* at t = 1 (game
    seed 0 filled, seeds 1 and 2 open) against 1/ln(1/ρ); one marker per topology, one colour per M."""
    plt = figures.plt
    fig, (ax_t, ax_k) = plt.subplots(1, 2, figsize=(11, 4.2))
    markers = dict(zip(ORDER, "osD^vP"))
    colours = {M: f"C{i}" for i, M in enumerate(sorted({g["nodes"] for g in dadam3}))}
    seen = set()
    for g in dadam3:
        x = inverse_log(g["rho"])
        label = f"{NAMES[g['topology']]}, M = {g['nodes']}"
        kw = dict(marker=markers[g["topology"]], color=colours[g["nodes"]], ls="none")
        if g["smallest_t"] is not None:
            ax_t.plot([x], [g["smallest_t"]], label=None if label in seen else label, **kw)
            seen.add(label)
        for seed in (0, 1, 2):
            s = g["by"].get((1, seed))
            if s is not None and s["first_hit"] is not None:
                ax_k.plot([x], [s["first_hit"]], mfc=None if seed == 0 else "none", **kw)
    ax_t.set(xlabel="1/ln(1/ρ)", ylabel="smallest sufficient t", title="(a) Dadam3: smallest t reaching the target")
    ax_k.set(xlabel="1/ln(1/ρ)", ylabel="first k with e_k ≤ target, t = 1",
             title="(b) Dadam3 at t = 1 (filled: game seed 0)")
    for ax in (ax_t, ax_k):
        ax.set_xscale("symlog", linthresh=1.0)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=6, ncol=2)
    figures.save(fig, path)


def figure_bytes(dadam3: list[dict], rounds: list[int], path: Path) -> None:
    """Bytes each node sent until e_k <= e* (mean over nodes) against t, one panel per M."""
    plt = figures.plt
    sizes = sorted({g["nodes"] for g in dadam3})
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 4), squeeze=False)
    for ax, M in zip(axes[0], sizes):
        for g in (g for g in dadam3 if g["nodes"] == M):
            pts = [(t, g["by"][t, 0]["bytes_to_hit_mean"]) for t in rounds
                   if (t, 0) in g["by"] and g["by"][t, 0]["bytes_to_hit_mean"] is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=g["label"])
        ax.set(xlabel="gossip rounds t", ylabel="bytes per node to e_k ≤ target", title=f"Dadam3, M = {M}",
               yscale="log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    figures.save(fig, path)


def _spread(values: list[int]) -> float:
    """(max − min) / min."""
    return (max(values) - min(values)) / min(values)


def verdict(dadam3: list[dict], dp: list[dict], rounds: list[int], target: float) -> list[str]:
    """The findings, each computed from the cells: the smallest sufficient t against 1/ln(1/ρ),
    the first hit at t = 1 across graphs and game seeds, what more rounds change, the cheapest
    graph in bytes per M, and DP-OAdam."""
    out = []
    reached = [g for g in dadam3 if g["smallest_t"] is not None]
    never = [g["label"] + f" (M = {g['nodes']})" for g in dadam3 if g["smallest_t"] is None]
    ts, xs = [g["smallest_t"] for g in reached], [inverse_log(g["rho"]) for g in reached]
    if ts:
        worst = max(reached, key=lambda g: inverse_log(g["rho"]))
        span = (f"1/ln(1/ρ) from {min(xs):.3g} to {max(xs):.3g} (the most slowly mixing: {worst['label']}, "
                f"M = {worst['nodes']}, ρ = {worst['rho']:.4g})")
        if len(set(ts)) == 1:
            out.append(f"Dadam3's smallest sufficient t is {ts[0]} on every one of the {len(reached)} graphs that "
                       f"reach e_k ≤ {target:g}, over {span}: on this game it does **not** grow with 1/ln(1/ρ) as "
                       "the theorem's t ≥ log_{1/ρ}(1 + C) would have it; the theorem's condition is sufficient, "
                       "not necessary, here")
        else:
            r, slope = spearman(xs, ts), float(np.polyfit(xs, ts, 1)[0])
            grows = r is not None and r > 0.5 and slope > 0
            shape = ("grows with 1/ln(1/ρ), the shape the theorem predicts" if grows else
                     "does not grow with 1/ln(1/ρ) as the theorem predicts")
            out.append(f"Dadam3's smallest sufficient t ranges over {sorted(set(ts))} on {len(reached)} graphs, "
                       f"{span}; least-squares slope {slope:.3g} per unit of 1/ln(1/ρ), Spearman "
                       f"{'undefined' if r is None else f'{r:.2f}'}: it {shape}")
    if never:
        out.append(f"Dadam3 reaches e_k ≤ {target:g} at no t on: {', '.join(never)}")
    by_m: dict[int, list[int]] = {}
    seeds = []
    for g in dadam3:
        hits = [g["by"][1, s]["first_hit"] for s in (0, 1, 2) if (1, s) in g["by"]]
        if hits and hits[0] is not None:
            by_m.setdefault(g["nodes"], []).append(hits[0])
        if len(hits) > 1 and None not in hits:
            seeds.append(_spread(hits))
    if by_m:
        corr = []
        for M in sorted(by_m):
            pts = [(inverse_log(g["rho"]), g["by"][1, 0]["first_hit"]) for g in dadam3 if g["nodes"] == M
                   and (1, 0) in g["by"] and g["by"][1, 0]["first_hit"] is not None]
            r = spearman(*zip(*pts)) if len(pts) >= 3 else None
            corr.append(f"{'undefined' if r is None else f'{r:.2f}'} at M = {M}")
        between = max(_spread(v) for v in by_m.values())
        out.append(f"at t = 1 the first iteration with e_k ≤ {target:g} differs between the graphs of one M by at "
                   f"most {between:.1%}" + (f", against up to {max(seeds):.1%} between game seeds 0–2 on one graph"
                                            if seeds else "")
                   + "; its Spearman correlation with 1/ln(1/ρ) among the graphs of one M: " + ", ".join(corr)
                   + " (undefined: the same on every graph)")
    changes, cheapest_one = [], 0
    for g in reached:
        hits = {t: g["by"][t, 0]["first_hit"] for t in rounds if (t, 0) in g["by"]}
        if hits.get(1) is not None and all(h is not None for h in hits.values()):
            changes.append(max(abs(h - hits[1]) / hits[1] for h in hits.values()))
        cost = {t: g["by"][t, 0]["bytes_to_hit_mean"] for t in rounds
                if (t, 0) in g["by"] and g["by"][t, 0]["bytes_to_hit_mean"] is not None}
        cheapest_one += bool(cost) and min(cost, key=cost.get) == 1
    if changes:
        out.append(f"more rounds (t up to {max(rounds)}) move the first hit by at most {max(changes):.1%} of its "
                   f"t = 1 value, so the bytes to the target grow about linearly with t: t = 1 is the cheapest "
                   f"on {cheapest_one} of {len(reached)} graphs")
    for M in sorted({g["nodes"] for g in reached}):
        costs = sorted((g["by"][t, 0]["bytes_to_hit_mean"], t, g["label"]) for g in reached if g["nodes"] == M
                       for t in rounds if (t, 0) in g["by"] and g["by"][t, 0]["bytes_to_hit_mean"] is not None)
        full = [c for c in costs if c[2] == "complete"]
        if costs:
            b, t, label = costs[0]
            out.append(f"M = {M}: the fewest bytes per node to the target: {label} at t = {t} ({b:.3g} bytes)"
                       + (f"; the complete graph needs {full[0][0]:.3g} ({full[0][0] / b:.1f}×)" if full else ""))
    dp_cells = [s for g in dp for s in g["by"].values()]
    if dp_cells:
        hit = sum(s["first_hit"] is not None for s in dp_cells)
        finals = [s["final_error"] for s in dp_cells if s["final_error"] is not None]
        out.append(f"DP-OAdam reaches the target in {hit} of its {len(dp_cells)} cells (final e_N from "
                   f"{min(finals):.3g} to {max(finals):.3g}): more gossip rounds do not remove its bias, which is "
                   "not a consensus error" if hit == 0 else
                   f"DP-OAdam reaches the target in {hit} of its {len(dp_cells)} cells")
    return ["**Verdict** (computed from the cells above):", ""] + [f"- {x}." for x in out] + [""]


def section(root: Path, out: Output) -> list[str]:
    """``## Beyond the paper: gossip rounds and topology``."""
    cells, study = load(root)
    target = study.get("target_error", 1e-2)
    lines = [f"## {TITLE}", "", CLAIM.format(target=target), ""]
    if not cells:
        return lines + ["No committed runs under `results/gossip/`. Command: `bash experiments/gossip_rounds.sh`.", ""]
    rounds = sorted({s["rounds"] for s in cells})
    dadam3, dp = graphs(cells, "dadam3"), graphs(cells, "dp_oadam")
    lines += what_was_run([_run(root, s) for s in cells], synthetic=True)
    er = ", ".join(f"p = {p:g} at M = {M}" for M, p in sorted((int(M), p) for M, p in study.get("er_p", {}).items()))
    seeds = sorted({s["graph_seed"] for s in cells if s["graph_seed"] is not None})
    lines += [f"- Erdős–Rényi: G(M, p) redrawn until connected, Metropolis–Hastings weights, {er or UNKNOWN}; "
              f"graph seeds {', '.join(map(str, seeds)) or UNKNOWN}",
              "- torus: rows × cols is the most square factorisation of M (`dadam3/topologies/torus.py`), "
              "Metropolis–Hastings weights" + "".join(f"; not built at M = {x['nodes']}: {x['reason']}"
                                                      for x in study.get("not_built", []) if x["topology"] == "torus"),
              "- one-peer exponential is time-varying (round r mixes with peer i + 2^(r mod ⌈log₂M⌉)): its ρ here is "
              "per round, the geometric mean ρ(W_P ⋯ W_1)^(1/P) over one period of P = ⌈log₂M⌉ rounds (0 where M is "
              "a power of two: one period averages exactly)",
              "- bytes: each node's count of the optimizer's own mixer (`Mixer.bytes_sent`: its buffer to every "
              "out-neighbour, every round), for this game's buffers (θ and α, float64), mean over the nodes, until "
              "the first iteration with e_k ≤ target",
              "- N = 10⁶ iterations per cell, 10⁷ on the ring at t = 1 (game seed 0), the slowest-mixing graph of "
              "each M; the first hit is found at every iteration by the compiled loop", ""]
    lines += ["Dadam3, per graph: the first iteration k with e_k ≤ target at each t (game seed 0; *never*: not "
              "within N), and at t = 1 with game seeds 1 and 2; ρ of one round.", ""]
    lines += table(dadam3, {g["key"]: g for g in dp}, rounds)
    path, link = out.figure("gossip_rounds")
    figure_rounds(dadam3, path)
    lines += [f"![smallest sufficient t and first hit against 1/ln(1/ρ)]({link})", ""]
    path, link = out.figure("gossip_bytes")
    figure_bytes(dadam3, rounds, path)
    lines += [f"![bytes per node to the target against t]({link})", ""]
    return lines + verdict(dadam3, dp, rounds, target) + [WHY, ""] + bytes_per_round(cells)


def runs_rows(root: Path) -> list[str]:
    """The study's runs for the report's "Every run" table, one row per optimizer and M (276 runs one by one
    would bury the rest): how many, their status and their code commits."""
    cells, _ = load(root)
    groups: dict[str, list[dict]] = {}
    for s in cells:
        groups.setdefault(s["rel"].rsplit("/", 2)[0], []).append(s)
    rows = []
    for rel, group in sorted(groups.items(), key=lambda kv: (kv[0].split("/")[1], int(kv[0].rsplit("/M", 1)[1]))):
        statuses = [s["status"] for s in group]
        status = ", ".join(f"{statuses.count(st)} {st}" for st in sorted(set(statuses)))
        commits = ", ".join(sorted({_run(root, s).provenance_field("code_commit") for s in group}))
        rows.append(f"| `{rel}/*/t*` ({len(group)} run{'s' * (len(group) != 1)}) | {status} | {commits} |")
    return rows
