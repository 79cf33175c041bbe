"""``## Beyond the paper: one adaptive scale for every node`` (issue 58): does stepping every node with
one adaptive scale, kept in consensus by gossip (``dadam3_shared``; its ideal reference
``dadam3_shared_exact`` averages the scales exactly), remove the bias Dadam3's own scales cause on
heterogeneous nodes?

The synthetic game (``python -m dadam3.gossip_study --shared-scale``): per cell, the first iteration
with e_k ≤ 10^-2, the final e_N and the nodes' final scales' relative consensus distance, for the three
methods side by side, and a reading computed from them. The GAN: per unit of the committed plan
``docs/analysis_plan/shared_scale.yaml`` at its judged cells, the final scores, the consensus distance,
and the iterations and bytes to the same FID, bytes charged as a user pays them
(:mod:`dadam3.report.communication`). The plan's verdicts are its family's section's, not this module's.
"""
from __future__ import annotations

from pathlib import Path

from dadam3.report import read
from dadam3.report.communication import ALL_REDUCE
from dadam3.report.output import Output
from dadam3.report.sections_heterogeneous import arm_row, figure_fid
from dadam3.report.sections_plan import anchor_of

TITLE = "Beyond the paper: one adaptive scale for every node"
GAME_DIR = "shared_scale_game"               # under the results folder
FAMILY = "shared_scale"                      # docs/analysis_plan/shared_scale.yaml
METHODS = {"dadam3": "Dadam3", "dadam3_shared": "shared (gossip)", "dadam3_shared_exact": "shared (exact)"}
THRESHOLDS = (150.0, 100.0)


def section(root: Path, out: Output, families: list) -> list[str]:
    lines = [f"## {TITLE}", "",
             "Not in the paper. Dadam3 divides node i's step by its own adaptive scale Λ_i; gossip mixes the iterates, "
             "never the scales, so on heterogeneous nodes the node average rests where Σ_i G_i/√Λ_i = 0, a "
             "1/√Λ-weighted mean of the nodes' games (the previous section). `dadam3_shared` steps every node with one "
             "scale kept in consensus by gradient tracking of Λ (Chen, Karimi, Zhao & Li, ACML 2023; the equations: "
             "[docs/choices.md](../docs/choices.md)); `dadam3_shared_exact` averages the scales exactly each step, so "
             "the gap between the two is the tracking error.", ""]
    return lines + game_part(root) + gan_part(root, out, next((f for f in families if f.plan.family == FAMILY), None))


# ------------------------------------------------------------------------------- the game

def game_cells(root: Path) -> tuple[dict, dict]:
    """{(s, M, graph, t): {optimizer: summary}} and the study's ``study.json``."""
    base = root / GAME_DIR
    cells: dict = {}
    for path in sorted(base.glob("spread*/*/M*/*/t*/summary.json")):
        s = read.json_file(path, dict)
        cells.setdefault((s["spread"], s["nodes"], s["topology"], s["rounds"]), {})[s["optimizer"]] = s
    return cells, read.json_file(base / "study.json", dict, {})


def _hit(s: dict | None) -> str:
    if s is None:
        return "–"
    return "never" if s["first_hit"] is None else f"{s['first_hit']:,}".replace(",", " ")


def _cell(s: dict | None) -> list[str]:
    if s is None:
        return ["–", "–", "–"]
    spread = s.get("final_scale_consensus_rel")
    return [_hit(s), f"{s['final_error']:.3g}" if s.get("final_error") is not None else "–",
            "–" if spread is None else f"{spread:.2g}"]


def game_part(root: Path) -> list[str]:
    cells, study = game_cells(root)
    lines = ["### The synthetic game", ""]
    if not cells:
        return lines + [f"No committed cells under `results/{GAME_DIR}/`. Command: "
                        "`SHARED_SCALE=1 JOBS=1 bash experiments/gossip_rounds.sh`.", ""]
    target = study.get("target_error", 1e-2)
    commits = sorted({str(seg.get("code_commit", "unknown"))[:12]
                      for by in cells.values() for s in by.values()
                      for seg in read.json_file(root / GAME_DIR / _path(s) / "provenance.json", list, [{}])})
    lines += [f"Section 5.1's game with node i drawing a = c w.p. (1 + s u_i)/3 (the mean game and its FNE z* "
              f"unchanged), the paper's settings, N = {study.get('iterations', 0):,} iterations, game seed 0. Per "
              f"method: the first k with e_k ≤ {target:g} (*never*: not within N), the final e_N, and the nodes' final "
              "scales' relative consensus distance (1/M) Σ‖S_i − S̄‖² / ‖S̄‖² (S_i: the scale node i divides its step "
              "by; 0: one scale). Dadam3: each node its own scale; shared (gossip): `dadam3_shared`; shared (exact): "
              "`dadam3_shared_exact`, the ideal reference. On the complete graph the exact reference is the tracked "
              "scale itself (not run). "
              "Code commits of the cells: " + ", ".join(commits) + ".", "",
              "| s | M | graph | t | " + " | ".join(f"{METHODS[m]}: {x}" for m in METHODS
                                                   for x in ("first k", "e_N", "scales' spread")) + " |",
              "|" + " --- |" * (4 + 3 * len(METHODS))]
    for (spread, M, topo, t), by in sorted(cells.items()):
        lines.append(f"| {spread:g} | {M} | {topo} | {t} | " + " | ".join(x for m in METHODS for x in _cell(by.get(m)))
                     + " |")
    return lines + [""] + game_reading(cells, target)


def _path(s: dict) -> str:
    """A cell's folder under the study's (``dadam3.games.study_grid.Cell.path``)."""
    return f"spread{s['spread']:g}/{s['optimizer']}/M{s['nodes']}/{s['topology']}/t{s['rounds']}"


def game_reading(cells: dict, target: float) -> list[str]:
    """Per spread: how many cells each method brings to the target, its final e_N range, and where both
    shared methods got there, how far the tracked scale's first hit is from the exact reference's."""
    out = []
    for spread in sorted({k[0] for k in cells}):
        mine = [by for k, by in cells.items() if k[0] == spread]
        parts = []
        for m, label in METHODS.items():
            runs = [by[m] for by in mine if m in by]
            if not runs:
                continue
            finals = [s["final_error"] for s in runs if s.get("final_error") is not None]
            hit = sum(s["first_hit"] is not None for s in runs)
            parts.append(f"{label}: e_k ≤ {target:g} in {hit} of {len(runs)} cells, final e_N "
                         f"{min(finals):.3g}–{max(finals):.3g}" if finals else f"{label}: no finished cell")
        both = [(by["dadam3_shared"]["first_hit"], by["dadam3_shared_exact"]["first_hit"]) for by in mine
                if "dadam3_shared" in by and "dadam3_shared_exact" in by
                and by["dadam3_shared"]["first_hit"] and by["dadam3_shared_exact"]["first_hit"]]
        if both:
            gap = max(abs(a - b) / b for a, b in both)
            parts.append(f"the tracked scale's first hit is the exact reference's in all {len(both)} cells where both "
                         "reach the target (no tracking error visible)" if gap == 0 else
                         f"where both reach the target, the tracked scale's first hit is within {100 * gap:.2g} % of "
                         f"the exact reference's ({len(both)} cells)")
        out.append(f"s = {spread:g}: " + "; ".join(parts))
    return ["**Reading** (computed from the cells above):", ""] + [f"- {x}." for x in out] + [""]


# ------------------------------------------------------------------------------- the GAN

def gan_part(root: Path, out: Output, fam) -> list[str]:
    lines = ["### The GAN (Fashion-MNIST miniature, M = 5 ring)", ""]
    if fam is None:
        return lines + [f"No plan `docs/analysis_plan/{FAMILY}.yaml`: nothing to report.", ""]
    lines += [f"The claims and their verdicts: [the family's section](#{anchor_of(fam)}). Below, per unit at its "
              "judged cell, over the fresh seeds: final FID of the averaged model x̄ and of the node mean, the worst "
              "node, the final consensus distance and its mean over the run, and the iterations and bytes per node to "
              f"the first evaluation with FID (node mean) ≤ each threshold (gossip as counted, {ALL_REDUCE}): what "
              "differs in iterations is convergence, what differs only in bytes is accounting.", ""]
    plan = fam.plan
    units = sorted({u for row in fam.rows for u in row.units if "@" in u and u in fam.units})
    if not units:
        return lines + ["No unit judged yet: " + ("; ".join(fam.queue) or "nothing queued") + ".", ""]
    head = ["unit", "data", "setting", "method", "lr", "finished", "FID x̄", "FID node mean", "worst node",
            "consensus (final)", "consensus (over the run)"]
    head += [x for t in THRESHOLDS for x in (f"iterations to FID ≤ {t:g}", f"bytes to FID ≤ {t:g}")]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    groups: dict[str, dict] = {}
    for u in units:
        name, lr = u.split("@")
        spec = plan.methods[name]
        runs = [r for s, r in sorted(fam.units[u].items()) if s in plan.fresh_seeds]
        if not runs:
            continue
        lines.append("| " + " | ".join(arm_row(u, (spec.data or "–", spec.setting or "–", spec.optimizer, float(lr)),
                                                runs, list(THRESHOLDS))) + " |")
        groups.setdefault(spec.data or "plan", {})[u] = [r for r in runs if r.status == "finished"] or runs
    lines.append("")
    for data, group in groups.items():
        path, link = out.figure(f"shared_scale_fid_{data}")
        figure_fid(group, data, path)
        lines += [f"![FID against iterations and bytes, data {data}]({link})", ""]
    return lines
