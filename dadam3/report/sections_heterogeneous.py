"""``## Beyond the paper: heterogeneous nodes`` (issue 43): the per-arm tables and figures of the runs
the committed plan ``docs/analysis_plan/heterogeneous.yaml`` governs, and the heterogeneous synthetic
game's gossip-rounds table (``python -m dadam3.gossip_study --heterogeneous``).

Per arm of the plan (its runs under ``<plan runs>/<data>/<setting>/lr<LR>/<method>/seed<S>/``): the final
FID of the averaged model x̄ (``fid_avg_model``) and of the node mean (``fid_mean``), the worst node
(the largest final ``fid_nodes``), the consensus distance (1/M) Σ‖x_i − x̄‖² (final, and its mean over
the logged evaluations), and the bytes each node sent (``bytes_sent``, the mixer's count) by the first
evaluation with FID (node mean) ≤ each of the plan's ``bytes_to_fid``, with how many seeds got there.
The verdicts on the plan's claims (paired differences, Holm) are the family machinery's, not this
module's: nothing here is a test.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from dadam3.errors.files import DataFileError
from dadam3.report import figures, read
from dadam3.report.common import what_was_run
from dadam3.report.communication import ALL_REDUCE, charge, to_score
from dadam3.report.output import Output
from dadam3.report.runs import LABEL, Run, load_run, seed_dirs

TITLE = "Beyond the paper: heterogeneous nodes"
PLAN = "docs/analysis_plan/heterogeneous.yaml"          # relative to the repository (the results folder's parent)
GAME_DIR = "gossip_heterogeneous"                        # relative to the results folder
SECOND = "_fmnist_mlp"                                   # the second scorer's keys: fid_mean_fmnist_mlp, ...
COMMAND = "bash experiments/evidence_round3.sh heterogeneous next"      # each seed's missing arms, seed by seed


def lr_folder(lr: float) -> str:
    """``lr<LR>`` as ``experiments/evidence_round3.sh`` spells it: 8e-4, 1.6e-3, 2.56e-2."""
    mantissa, exponent = f"{float(lr):e}".split("e")
    return f"lr{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def load_plan(path: Path) -> dict:
    """The plan's mapping, with ``arms`` as {name: (data, setting, method, lr)}; a plan that is not one:
    :class:`~dadam3.errors.files.DataFileError` naming the file and the key."""
    plan = read.yaml_file(path)
    if not isinstance(plan, dict):
        raise DataFileError(path, "no analysis plan (a mapping) here", None, "restore it from git")
    for key in ("runs", "arms", "fresh_seeds", "bytes_to_fid"):
        if key not in plan:
            raise DataFileError(path, f"no key {key!r}", None, "restore it from git")
    arms = {}
    for name, arm in plan["arms"].items():
        if not (isinstance(arm, list) and len(arm) == 4 and isinstance(arm[3], (int, float))):
            raise DataFileError(path, f"arms.{name}={arm!r}: not [data, setting, method, lr]", None,
                                "restore it from git")
        arms[name] = tuple(arm)
    return {**plan, "arms": arms}


def arm_dir(root: Path, plan: dict, arm: tuple) -> Path:
    data, setting, method, lr = arm
    return root / str(plan["runs"]).removeprefix("results/") / data / setting / lr_folder(lr) / method


def arm_runs(root: Path, plan: dict) -> dict[str, list[Run]]:
    """Each arm's runs (seed by seed) in the results folder ``root``; [] for an arm with none."""
    return {name: [load_run(root, d, arm[2], s) for s, d in seed_dirs(arm_dir(root, plan, arm))]
            for name, arm in plan["arms"].items()}


# ------------------------------------------------------------------------------- per run, per arm

def worst_node(run: Run, suffix: str = "") -> float | None:
    """The largest FID among the nodes at the run's last evaluation."""
    nodes = [r[f"fid_nodes{suffix}"] for r in run.records if r.get(f"fid_nodes{suffix}")]
    return max(nodes[-1]) if nodes else None


def consensus_over_run(run: Run) -> float | None:
    """The mean consensus distance over the logged records."""
    values = list(run.series("consensus_distance").values())
    return statistics.fmean(values) if values else None


def _stat(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None and np.isfinite(v)]
    if not vals:
        return "–"
    sd = f" ± {statistics.stdev(vals):.3g}" if len(vals) > 1 else ""
    return f"{statistics.fmean(vals):.4g}{sd}"


def arm_row(name: str, arm: tuple, runs: list[Run], thresholds: list[float], suffix: str = "") -> list[str]:
    """The arm's cells of the per-arm table (mean ± sample SD over its finished runs)."""
    done = [r for r in runs if r.status == "finished"]
    cells = [name, arm[0], arm[1], LABEL.get(arm[2], arm[2]), f"{arm[3]:g}",
             f"{len(done)} of {len(runs)}" + (f" ({len(runs) - len(done)} {_others(runs)})" if len(done) < len(runs)
                                               else ""),
             _stat([r.final(f"fid_avg_model{suffix}") for r in done]),
             _stat([r.final(f"fid_mean{suffix}") for r in done]),
             _stat([worst_node(r, suffix) for r in done])]
    if suffix:
        return cells
    cells += [_stat([r.final("consensus_distance") for r in done]), _stat([consensus_over_run(r) for r in done])]
    for thr in thresholds:
        hits = [hit for r in done if (hit := to_score(r, thr)) is not None]
        cells += [f"{_stat([float(k) for k, _ in hits])} ({len(hits)} of {len(done)})",
                  _stat([b for _, b in hits])] if hits else [f"never (0 of {len(done)})", "–"]
    return cells


def _others(runs: list[Run]) -> str:
    return ", ".join(sorted({r.status for r in runs if r.status != "finished"}))


# ------------------------------------------------------------------------------- figures

def figure_fid(groups: dict[str, list[Run]], data: str, path: Path) -> None:
    """FID (node mean; x̄ dashed) against iterations and against bytes per node, one curve per arm."""
    fig, (ax_k, ax_b) = figures.plt.subplots(1, 2, figsize=(10, 4))
    for name, runs in groups.items():
        x, mean, sd = figures.seed_band(runs, "fid_mean")
        if not len(x):
            continue
        sent = {k: v * charge(runs[0]) for k, v in runs[0].series("bytes_sent").items()}     # as a user pays
        line, = ax_k.plot(x, mean, marker=".", label=f"{name} (n = {len(runs)})")
        ax_k.fill_between(x, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, lw=0)
        xa, mean_a, _ = figures.seed_band(runs, "fid_avg_model")
        ax_k.plot(xa, mean_a, ls="--", color=line.get_color())
        has = [i for i, k in enumerate(x) if k in sent]
        ax_b.plot([sent[x[i]] for i in has], mean[has], marker=".", color=line.get_color(), label=name)
    ax_k.set(xlabel="iteration", ylabel="FID (node mean; dashed: x̄)", title=f"data: {data}")
    ax_b.set(xlabel="bytes per node (an exact average as an all-reduce)", ylabel="FID (node mean)",
             title=f"data: {data}")
    for ax in (ax_k, ax_b):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    figures.save(fig, path)


def figure_consensus(groups: dict[str, list[Run]], path: Path) -> None:
    """Consensus distance against iterations, one curve per arm (log scale; zeros left out)."""
    fig, ax = figures.plt.subplots(figsize=(7, 4))
    for name, runs in groups.items():
        x, mean, _ = figures.seed_band(runs, "consensus_distance")
        keep = mean > 0
        if keep.any():
            ax.semilogy(x[keep], mean[keep], marker=".", label=f"{name} (n = {len(runs)})")
    ax.set(xlabel="iteration", ylabel="consensus distance (1/M) Σ‖x_i − x̄‖²")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    figures.save(fig, path)


# ------------------------------------------------------------------------------- the section

def gan_part(root: Path, out: Output, plan: dict, plan_name: str) -> list[str]:
    runs = arm_runs(root, plan)
    fresh, need = set(plan["fresh_seeds"]), int(plan.get("fresh_min", len(plan["fresh_seeds"])))
    waiting = [name for name, rs in runs.items() if sum(r.status == "finished" and r.seed in fresh for r in rs) < need]
    lines = [f"Plan: [{plan_name}](../{plan_name}) (committed before its runs): {len(plan['arms'])} arms on the "
             f"`{plan.get('experiment', '?')}` preset, fresh seeds {', '.join(map(str, plan['fresh_seeds']))}; the "
             "claims' verdicts (paired differences, Holm) come from the evidence families' machinery, not from "
             "the tables below.", ""]
    if waiting:
        lines += [f"Awaiting runs ({len(waiting)} of {len(runs)} arms have fewer than {need} finished fresh seeds): "
                  + ", ".join(f"`{a}`" for a in waiting) + f". Command: `{COMMAND}` (with `CODE=DIR`, a clean "
                  "worktree of the family's commit: docs/experiments.md).", ""]
    have = {name: rs for name, rs in runs.items() if rs}
    if not have:
        return lines
    thresholds = [float(t) for t in plan["bytes_to_fid"]]
    lines += what_was_run([r for rs in have.values() for r in rs])
    head = ["arm", "data", "setting", "method", "lr", "finished", "FID x̄", "FID node mean", "worst node"]
    lines += ["Per arm, final values (mean ± sample SD over the finished seeds); consensus distance "
              "(1/M) Σ‖x_i − x̄‖² at the end and its mean over the run; iterations and bytes per node to the first "
              f"evaluation with FID (node mean) ≤ the threshold, over the seeds that got there (k of n): gossip as "
              f"counted, {ALL_REDUCE} ([docs/topology.md](../docs/topology.md)).", "",
              "| " + " | ".join(head + ["consensus (final)", "consensus (over the run)"]
                                + [x for t in thresholds for x in (f"iterations to FID ≤ {t:g}",
                                                                   f"bytes to FID ≤ {t:g}")]) + " |",
              "|" + " --- |" * (len(head) + 2 + 2 * len(thresholds))]
    lines += ["| " + " | ".join(arm_row(n, plan["arms"][n], rs, thresholds)) + " |" for n, rs in have.items()]
    second = {n: rs for n, rs in have.items() if any(r.final(f"fid_mean{SECOND}") is not None for r in rs)}
    if second:
        lines += ["", f"The second scorer ({SECOND[1:]}), final:", "", "| " + " | ".join(head) + " |",
                  "|" + " --- |" * len(head)]
        lines += ["| " + " | ".join(arm_row(n, plan["arms"][n], rs, [], SECOND)) + " |" for n, rs in second.items()]
    lines.append("")
    for data in dict.fromkeys(arm[0] for name, arm in plan["arms"].items() if name in have):
        groups = {n: [r for r in have[n] if r.status == "finished"] or have[n] for n in have
                  if plan["arms"][n][0] == data}
        path, link = out.figure(f"heterogeneous_fid_{data}")
        figure_fid(groups, data, path)
        lines += [f"![FID against iterations and bytes, data {data}]({link})", ""]
    path, link = out.figure("heterogeneous_consensus")
    figure_consensus({n: [r for r in rs if r.status == "finished"] or rs for n, rs in have.items()}, path)
    return lines + [f"![consensus distance against iterations, per arm]({link})", ""]


def section(root: Path, out: Output, plan_path: Path | None = None) -> list[str]:
    """The section: the plan's arms (tables, figures, or what awaits runs), then the heterogeneous game."""
    plan_path = plan_path or root.parent / PLAN
    lines = [f"## {TITLE}", "", "Not in the paper: its decentralized ≈ centralized claim is tested on iid shards "
             "only. Here the nodes' data differ (Dirichlet shards of Fashion-MNIST), and, on the synthetic game, "
             "each node draws from its own distribution.", ""]
    if plan_path.is_file():
        lines += gan_part(root, out, load_plan(plan_path), PLAN)
    else:
        lines += [f"No analysis plan at `{PLAN}`: the GAN arms are not reported.", ""]
    return lines + game_part(root)


def game_cells(root: Path) -> tuple[list[dict], dict]:
    """The heterogeneous game's cell summaries and its ``study.json``."""
    base = root / GAME_DIR
    cells = [read.json_file(p, dict) for p in sorted(base.glob("spread*/*/M*/*/t*/summary.json"))]
    return cells, read.json_file(base / "study.json", dict, {})


GAME_WHY = ("Why (derived; the cells above agree): mixing is doubly stochastic, so the node average moves by the "
            "average of the nodes' own steps, z̄ ← z̄ − η (1/M) Σ_i G_i(z_i)/√Λ_i, with Λ_i node i's own adaptive "
            "scale, which gossip never mixes. The operator is affine, G_i(z) = a_i (1, 1) + A z, so where the "
            "scales agree the average step is the mean game's step at z̄ however far the nodes sit from z̄: the "
            "graph and t move the nodes apart (the consensus distance) but not z̄. Where they differ, z̄ rests "
            "where Σ_i (ā_i (1, 1) + A z̄)/√Λ_i = 0, a 1/√Λ-weighted mean of the nodes' games, away from z* by the "
            "same amount on every graph and at every t. Λ_i follows the largest squared gradient node i has seen, "
            "which comes near z = 0 at its first draw of a = c: every node with p_i > 0 draws c within its first "
            "few hundred iterations, so at s = 0.5 all the scales agree; at s = 1 node 0 (p_0 = 0) never draws c, "
            "its scale stays several times smaller and its steps several times larger, and its game (a = 1) pulls "
            "z̄ off z* — one node of M, so the bias shrinks as M grows. More gossip rounds cannot remove a bias of "
            "the adaptive scales; one common scale does (measured in the next section).")


def game_part(root: Path) -> list[str]:
    """The heterogeneous game's smallest-sufficient-t table per spread, its reading and why."""
    cells, study = game_cells(root)
    lines = ["### The synthetic game with heterogeneous nodes", ""]
    if not cells:
        return lines + [f"No committed cells under `results/{GAME_DIR}/`. Command: "
                        "`HETEROGENEOUS=1 JOBS=1 bash experiments/gossip_rounds.sh`.", ""]
    target = study.get("target_error", 1e-2)
    rounds = sorted({s["rounds"] for s in cells})
    commits = sorted({str(seg.get("code_commit", "unknown"))[:12] for s in cells for seg in
                      read.json_file(root / GAME_DIR / _cell_path(s) / "provenance.json", list, [{}])})
    lines += [f"Section 5.1's game with node i drawing a = c w.p. p_i = (1 + s u_i)/3, u_i evenly spaced in "
              f"[−1, 1] (`game.spread` = s; the mean game and its FNE z* unchanged), Dadam3 at the paper's "
              f"settings, N = {study.get('iterations', max(s['iterations'] for s in cells)):,} iterations per cell; "
              f"first k with e_k ≤ {target:g} at each t (game seed 0; *never*: not within N), at t = 1 with game "
              "seeds 1, 2; final e_N and the nodes' final consensus distance (1/M) Σ‖z_i − z̄‖². The complete graph "
              "runs t = 1 only (W^t = W). Code commits of the cells: " + ", ".join(commits) + ".", "",
              "| s | M | graph | " + " | ".join(f"first k, t = {t}" for t in rounds)
              + " | t = 1, seeds 1, 2 | final e_N (t = 1; range over t) | consensus (t = 1 → t = "
              f"{max(rounds)}) | smallest sufficient t |", "|" + " --- |" * (len(rounds) + 7)]
    groups: dict[tuple, dict] = {}
    for s in cells:
        groups.setdefault((s["spread"], s["nodes"], s["topology"]), {})[s["rounds"], s["seed"]] = s
    for (spread, M, topo), by in sorted(groups.items()):
        base = [by[t, 0] for t in rounds if (t, 0) in by]
        reached = [s["rounds"] for s in base if s["first_hit"] is not None]
        finals = [s["final_error"] for s in base if s["final_error"] is not None]
        one, last = by.get((1, 0)), by.get((max(rounds), 0))
        lines.append(f"| {spread:g} | {M} | {topo} | " + " | ".join(_hit(by.get((t, 0))) for t in rounds)
                     + f" | {_hit(by.get((1, 1)))}, {_hit(by.get((1, 2)))} | "
                     + (f"{one['final_error']:.3g} ({min(finals):.3g}–{max(finals):.3g})" if one and finals else "–")
                     + f" | {_cd(one)} → {_cd(last)} | {min(reached) if reached else 'none'} |")
    return lines + [""] + game_verdict(groups, rounds, target) + [GAME_WHY, ""]


def _cell_path(s: dict) -> str:
    """A cell's folder under the study's (``dadam3.gossip_study.Cell.path``)."""
    seed = f"_seed{s['seed']}" if s["seed"] else ""
    return f"spread{s['spread']:g}/{s['optimizer']}/M{s['nodes']}/{s['topology']}/t{s['rounds']}{seed}"


def _hit(s: dict | None) -> str:
    if s is None:
        return "–"
    return "never" if s["first_hit"] is None else f"{s['first_hit']:,}".replace(",", " ")


def _cd(s: dict | None) -> str:
    return "–" if s is None or s.get("final_consensus_distance") is None else f"{s['final_consensus_distance']:.2g}"


def game_verdict(groups: dict[tuple, dict], rounds: list[int], target: float) -> list[str]:
    """What the cells show, computed: per spread, how far t and the graph move the first hit and e_N, and
    how far they move the consensus distance."""
    out = []
    for spread in sorted({k[0] for k in groups}):
        mine = {k: by for k, by in groups.items() if k[0] == spread}
        hits = [by[t, 0]["first_hit"] for by in mine.values() for t in rounds if (t, 0) in by]
        moved = [m for by in mine.values() if (m := _moved([by[t, 0]["first_hit"] for t in rounds if (t, 0) in by]))]
        never = sorted(f"M = {k[1]} {k[2]}" for k, by in mine.items() if all(by[t, 0]["first_hit"] is None
                                                                            for t in rounds if (t, 0) in by))
        graphs = []
        for M in sorted({k[1] for k in mine}):
            finals = [by[t, 0]["final_error"] for k, by in mine.items() if k[1] == M for t in rounds
                      if (t, 0) in by and by[t, 0]["final_error"] is not None]
            if finals:
                graphs.append(f"{min(finals):.3g}–{max(finals):.3g} at M = {M}")
        ratios = [by[1, 0]["final_consensus_distance"] / by[max(rounds), 0]["final_consensus_distance"]
                  for k, by in mine.items() if k[2] == "ring" and (1, 0) in by and (max(rounds), 0) in by
                  and by[max(rounds), 0].get("final_consensus_distance")]
        text = (f"s = {spread:g}: {sum(h is not None for h in hits)} of {len(hits)} seed-0 cells reach e_k ≤ "
                f"{target:g}" + (f" (never on: {', '.join(never)})" if never else "")
                + (f"; between t = {min(rounds)} and t = {max(rounds)} the first hit moves by at most "
                   f"{max(moved)[0]} iterations ({max(moved)[1]:.2g} % of it) on one graph" if moved else "")
                + f"; final e_N over both graphs and every t: {'; '.join(graphs)}")
        if ratios:
            text += (f"; on the ring, t = {max(rounds)} shrinks the final consensus distance "
                     f"{min(ratios):.3g}–{max(ratios):.3g}× against t = 1")
        out.append(text)
    return ["**Reading** (computed from the cells above):", ""] + [f"- {x}." for x in out] + [""]


def _moved(values: list[int | None]) -> tuple[int, float] | None:
    """(max − min, 100 (max − min)/min) of one graph's first hits over t (None unless every t reached the target)."""
    if not values or None in values:
        return None
    return max(values) - min(values), 100.0 * (max(values) - min(values)) / min(values)
