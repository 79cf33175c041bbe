"""The Fashion-MNIST sections: the Figs. 2 and 3 miniatures (one step size, as in the paper), every
method at its own step sizes (chosen on seeds 0–2, judged on fresh seeds), the paper-scale
runs, bf16 autocast and the scale of the scores."""
from __future__ import annotations

import math
from pathlib import Path

from dadam3.report import claims, evidence, figures, read
from dadam3.report.common import score_table, what_was_run
from dadam3.report.output import Output
from dadam3.report.runs import LABEL, Run, load_run, method_runs, sample_grid
from dadam3.report.evidence import (Judged, Selection, inherited_table, judge, judge_fixed, judged_table, select,
                                    selection_table, threshold_lines, thresholds_table)
from dadam3.report.stats import ORDER, Cell, cells_of, lr_text

FIDELITY_PANELS = [("is_mean", "IS (higher is better)", "is_avg_model"),
                   ("fid_mean", "FID (lower is better)", "fid_avg_model")]


def _curves(runs: list[Run], out: Output, name: str, title: str) -> str:
    groups: dict[str, list[Run]] = {}
    for c in cells_of([r for r in runs if r.status != "diverged" and r.series("fid_mean")]):
        groups[f"{c.label}, lr {lr_text(c.lr)}"] = c.runs
    if not groups:
        return "No run was evaluated, so there are no curves."
    path, link = out.figure(name)
    figures.curves(groups, FIDELITY_PANELS, title + " (solid: node mean, dashed: averaged model; band: ± 1 sample SD)",
                   path)
    return f"![{title}]({link})"


def _grids(root: Path, cells: list[Cell]) -> str:
    links = []
    for c in cells:
        grid = next((g for r in c.runs if (g := sample_grid(root, r))), None)
        links.append(f"[{c.label}, lr {lr_text(c.lr)}]({grid})" if grid else f"{c.label}: none")
    return "Last sample grid of the node-averaged model (lowest seed with one): " + ", ".join(links) + "."


PAIRS = (("dadam3", "cadam3"), ("dosg", "cosg"))    # a decentralized method and its centralized variant
NEAR_IDENTICAL = 1e-3


def pair_differences(runs: list[Run]) -> list[str]:
    """For each decentralized/centralized pair, per common seed, the largest difference of their
    logged losses over the iterations both logged, relative to the largest loss of the series:
    near 0, the two runs are not independent evidence (one comparison, not two)."""
    lines = []
    for a, b in PAIRS:
        by_seed = {m: {r.seed: r for r in runs if r.method == m} for m in (a, b)}
        diffs = []
        for seed in sorted(set(by_seed[a]) & set(by_seed[b]), key=str):
            worst = 0.0
            for key in ("loss_d", "loss_g"):
                sa, sb = by_seed[a][seed].series(key), by_seed[b][seed].series(key)
                common = [k for k in set(sa) & set(sb) if math.isfinite(sa[k]) and math.isfinite(sb[k])]
                scale = max((abs(sa[k]) for k in common), default=0.0)
                if scale > 0:
                    worst = max(worst, max(abs(sa[k] - sb[k]) for k in common) / scale)
            diffs.append(worst)
        if diffs:
            la, lb = LABEL.get(a, a), LABEL.get(b, b)
            same = max(diffs) < NEAR_IDENTICAL
            lines.append(f"{la} and {lb} at the same seed: logged losses differ by at most {max(diffs):.1e} "
                         f"(relative to the largest logged loss, over {len(diffs)} seed(s))" + (
                             f": the two runs are nearly identical, so {la} ≈ {lb} here is one observation, "
                             "not two independent ones" if same else ""))
    return ["- " + x for x in lines] + ([""] if lines else [])


def comparison(root: Path, out: Output, name: str, title: str, claim: str, claim_list) -> list[str]:
    """A miniature (or paper-scale) figure: its methods at the preset's one step size."""
    lines = [f"## {title}", "", claim, ""]
    runs = method_runs(root, root / "fmnist" / name)
    if not runs:
        return lines + [f"No committed runs under `results/fmnist/{name}/`.", ""]
    cells = cells_of(runs)
    lines += what_was_run(runs) + score_table(cells)
    lines += [_curves(runs, out, f"fmnist_{name}", title), "", _grids(root, cells), ""]
    lines += pair_differences(runs)
    judged = fixed_claims(runs, claim_list)
    if judged:
        lines += ["At the preset's one step size, fixed in advance (no selection), every seed both methods ran; "
                  "the rule is stated in the conventions at the top.", ""] + judged_table(judged)
        lines += ["**Round-2 reading** (post hoc, final FID): " + "; ".join(f"{j.name}: {j.verdict}" for j in judged
                                                        if j.measure == "final") + ".", ""]
    return lines


PAPER_ITERATIONS = 30000          # Table 6


def paper_scale(root: Path, out: Output, name: str, title: str, claim: str, claim_list) -> list[str]:
    """Runs at Table 6's scale, said for exactly what they are: iterations reached of 30 000, seeds,
    the methods never run, what they can and cannot show; no verdict."""
    lines = [f"## {title}", "", claim, ""]
    runs = method_runs(root, root / "fmnist" / name)
    if not runs:
        return lines + [f"No committed runs under `results/fmnist/{name}/`.", ""]
    reached = ", ".join(f"{r.label} {r.last_iteration:,} ({r.last_iteration / PAPER_ITERATIONS:.1%}; {r.status})"
                        for r in runs)
    wanted = {m for a, _, b in claim_list for m in (a, b)} - {r.method for r in runs}
    missing = [LABEL.get(m, m) for m in ORDER if m in wanted]
    no_config = sum(not r.config for r in runs)
    lines += [f"**What these runs are:** {len(runs)} run(s), seed(s) {', '.join(sorted({str(r.seed) for r in runs}))}; "
              f"iterations reached of Table 6's {PAPER_ITERATIONS:,}: {reached}"
              + (f"; never run: {', '.join(missing)}" if missing else "") + ". "
              + (f"{no_config} of {len(runs)} recorded no config (settings, step size unknown); " if no_config else "")
              + f"{sum(r.legacy for r in runs)} of {len(runs)} are legacy (provenance unknown). "
              "What they can show: the code trains at this scale for that many iterations without failing"
              + (" (the scale scripts/fmnist_paper_scale.sh sets; runs without a config did not record it)"
                 if no_config else "") + ". What "
              "they cannot show: any ranking of the methods or any of the paper's claims (one seed, a few percent of "
              "the iterations, settings not all recorded), so no verdict is drawn from them.", ""]
    cells = cells_of(runs)
    lines += what_was_run(runs) + score_table(cells)
    lines += [_curves(runs, out, f"fmnist_{name}", title), "", _grids(root, cells), ""]
    return lines


def measures_of(claim_list) -> list[tuple[tuple[str, str, str], str]]:
    """Each claim on the final FID, and each "≫" claim also on the curve (the "more quickly" measure)."""
    return [(c, m) for c in claim_list for m in ("final", "speed") if m == "final" or c[1] == "≫"]


def fixed_claims(runs: list[Run], claim_list) -> list[Judged]:
    present = {r.method for r in runs}
    return [judge_fixed(c, runs, m) for c, m in measures_of(claim_list) if c[0] in present and c[2] in present]


def group_runs(root: Path, folder: str, name: str) -> tuple[list[Run], list[Run]]:
    """(every run of the group, its preset runs): the sweep's runs with one node (``fig2``) or
    several (``fig3``), plus the preset's own runs for the main sweep."""
    one_node = name == "fig2"
    mine = [r for r in sweep_runs(root, folder) if (r.setting("nodes") == "1") == one_node]
    if folder != "lr_sweep":
        return mine, [r for r in mine if r.lr == 2e-4]
    preset = method_runs(root, root / "fmnist" / name)
    return mine + preset, preset


def chosen_claims(runs: list[Run], claim_list, chosen: dict[str, Selection], every: bool = True) -> list[Judged]:
    """Each claim at the step sizes ``chosen`` on the selection seeds, judged on the fresh seeds
    (``every=False``: only the claims whose methods both ran)."""
    return [judge(c, runs, chosen, m) for c, m in measures_of(claim_list)
            if every or (c[0] in chosen and c[2] in chosen)]


def sweep_runs(root: Path, folder: str = "lr_sweep") -> list[Run]:
    """Every run of ``fmnist/<folder>/lr<lr>/<method>/seed<s>/``."""
    runs = []
    for lr_dir in sorted((root / "fmnist" / folder).glob("lr*")):
        runs += method_runs(root, lr_dir)
    return runs


def inherited_selection(root: Path, folder: str, name: str,
                        chosen: dict[str, Selection]) -> dict[str, Selection] | None:
    """For a variant folder whose every method ran one step size, the one the main sweep chose
    for it (e.g. longer runs at the chosen cells): the main sweep's selections of those methods;
    else None (the variant chooses its own)."""
    if folder == "lr_sweep" or any(len(s.cells) != 1 for s in chosen.values()):
        return None
    main = select(group_runs(root, "lr_sweep", name)[0])
    if any(m not in main or main[m].chosen is None or main[m].chosen.lr != s.cells[0].lr for m, s in chosen.items()):
        return None
    return {m: main[m] for m in chosen}


def chosen_for(root: Path, folder: str, name: str, runs: list[Run]) -> tuple[dict[str, Selection], bool]:
    """Each method's step size for the group ``runs`` of ``folder``: chosen on its own selection
    seeds, or inherited from the main sweep (True) where it ran only the main sweep's choices."""
    chosen = select(runs)
    inherited = inherited_selection(root, folder, name, chosen)
    return (chosen, False) if inherited is None else (inherited, True)


def variant_folders(root: Path) -> list[str]:
    """The ``fmnist/lr_sweep_<variant>/`` folders (e.g. a clipped variant), sorted."""
    return sorted(p.name for p in (root / "fmnist").glob("lr_sweep_*") if p.is_dir())


def step_sizes_title(variant: str = "") -> str:
    """The heading of the main sweep's section (``variant`` empty) or of a variant's."""
    return f"Round 2 (history): every method at its own step size{', variant ' + variant if variant else ''}"


def step_sizes(root: Path, out: Output, folder: str = "lr_sweep") -> list[str]:
    """Each method at every step size it ran (its seeds), the step size chosen on the selection
    seeds (bracketed or not), the claims judged on fresh seeds at the chosen step sizes, speed on
    the curves, and the claims at the presets' shared step size. The main sweep
    (``lr_sweep``) shares its 2e-4 cells with the Figs. 2 and 3 miniatures; a variant folder
    (``lr_sweep_<variant>``, run with other options such as loop.clip_grad_norm) holds all its own."""
    variant = folder.removeprefix("lr_sweep").lstrip("_")
    lines = [f"## {step_sizes_title(variant)}", ""]
    lines += ["The paper compares all methods at one step size (Table 6: 5·10⁻⁵). At the same nominal η the methods "
              "take steps of very different lengths, so each method is run here at several step sizes (the "
              "miniature presets, seeds as stated) and compared at its own step size: the one with the lowest "
              "mean final FID (node mean) over its finished selection seeds, among step sizes where no selection "
              "seed diverged; the claims are then judged on other seeds.", ""]
    if variant:
        lines[-2] = (f"The same comparison for the runs in `results/fmnist/{folder}/` (the options that differ are "
                     "listed under what was run).")
    groups = [("one node (Fig. 2 miniature)", "fig2", claims.CLAIMS_FIG2),
              ("M = 5 (Fig. 3 miniature)", "fig3", claims.CLAIMS_FIG3)]
    if not sweep_runs(root, folder):
        return lines + [f"No committed runs under `results/fmnist/{folder}/`. Command: "
                        "`bash scripts/fmnist_lr_sweep.sh`.", ""]
    for title, name, claim_list in groups:
        mine, preset = group_runs(root, folder, name)
        if not mine:
            continue
        cells = cells_of(mine)
        lines += [f"### {title}", ""] + what_was_run(mine) + score_table(cells)
        chosen, inherited = chosen_for(root, folder, name, mine)
        if inherited:       # the variant ran each method at the main sweep's choice only
            lines += [f"Step sizes: each method at the one chosen on the main sweep (`results/fmnist/lr_sweep/`, "
                      f"seeds {evidence.seed_text(evidence.SELECTION)}, its own iteration count); nothing is chosen "
                      "here: it inherits them, because it asks whether the main sweep's verdict survives another "
                      "budget at the step sizes that verdict was judged at (a search of its own would be a new "
                      "family, chosen and judged apart). Runs on those seeds share the seeds (initialisation and "
                      "data order) that chose the step size, so they are shown as selection seeds, not as a "
                      "verdict.", ""]
            lines += inherited_table(chosen, mine)
            lines += [_curves([r for r in mine if any(r.method == m and r.lr == s.chosen.lr
                                                      for m, s in chosen.items())],
                              out, f"fmnist_curves_{name}_{variant}", f"{title}, variant {variant}"), ""]
        else:
            path, link = out.figure(f"fmnist_step_sizes_{name}" + (f"_{variant}" if variant else ""))
            figures.step_sizes(cells, path)
            lines += [f"![final FID against step size, {title}]({link})", ""]
            lines += [f"Selection: each method's step size is chosen on seeds {evidence.seed_text(evidence.SELECTION)} "
                      "only (legacy runs included: a choice, not a verdict); bracketed = a tried step size with a "
                      "worse mean final FID, or a diverged seed, on each side of it.", ""]
            lines += selection_table(chosen, mine)
        judged = chosen_claims(mine, claim_list, chosen, every=not variant)
        lines += [f"Confirmation: each claim at the chosen step sizes, judged on fresh seeds "
                  f"{evidence.seed_text(evidence.FRESH)} (at least {evidence.FRESH_MIN} finished on both sides, with "
                  "config and provenance); until then the selection seeds' paired numbers are shown, labelled.", ""]
        lines += judged_table(judged) if judged else ["No claim has both of its methods run here.", ""]
        lines += ["Speed on the curves, at the chosen step sizes:", ""] + thresholds_table(chosen, mine)
        lines += threshold_lines(judged)
        at_preset = fixed_claims(preset, claim_list)
        lines += ["**Round-2 reading** (post hoc, final FID): at the chosen step sizes: "
                  + ("; ".join(f"{j.name}: {j.verdict}" for j in judged if j.measure == "final") or "no claim")
                  + "; at the presets' shared step size (legacy runs left out): "
                  + ("; ".join(f"{j.name}: {j.verdict}" for j in at_preset if j.measure == "final") or "no claim")
                  + ".", ""]
    return lines


def bf16(root: Path, out: Output) -> list[str]:
    lines = ["## Fashion-MNIST: bf16 autocast against float32", "", claims.BF16, ""]
    dirs = [root / "fmnist" / "bf16" / v for v in ("float32", "bf16")]
    if not all((d / "metrics.jsonl").is_file() for d in dirs):
        return lines + ["No committed runs under `results/fmnist/bf16/`.", ""]
    f32, b16 = (load_run(root, d, d.name, 0) for d in dirs)
    for r in (f32, b16):
        r.seed = r.setting("seed")
    lines += what_was_run([f32, b16])
    lines += [f"- float32 run: {f32.status_text()}; bf16 run: {b16.status_text()} "
              f"(autocast: {_autocast(f32)} / {_autocast(b16)})", ""]
    keys = ("is_avg_model", "fid_avg_model", "kid_avg_model")
    both = sorted(set(f32.series(keys[1])) & set(b16.series(keys[1])))
    lines += ["Scores of the node-averaged model at every evaluation both runs reached (raw KID, as logged):", "",
              "| iteration | IS float32 | IS bf16 | FID float32 | FID bf16 | KID float32 | KID bf16 |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for k in both:
        cells = [f"{r.series(key)[k]:.{2 if key != 'fid_avg_model' else 1}f}" for key in keys for r in (f32, b16)]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    path, link = out.figure("fmnist_bf16")
    figures.curves({"float32": [f32], "bf16": [b16]}, FIDELITY_PANELS, "bf16 autocast vs float32, Dadam3, seed 0", path)
    lines += ["", f"![bf16]({link})", ""]
    if both:
        k = both[-1]
        a, b = f32.series("fid_avg_model")[k], b16.series("fid_avg_model")[k]
        legacy = ", runs legacy (provenance unknown)" if f32.legacy or b16.legacy else ""
        lines += [f"**Observation** (not a verdict: one seed each{legacy}): at iteration {k}, the last both "
                  f"runs evaluated, the averaged model's FID is {b:.1f} with bf16 against {a:.1f} with float32 "
                  f"({'worse' if b > a else 'not worse'} with bf16).", ""]
    return lines


def _autocast(run: Run) -> str:
    """``loop.autocast`` as the run recorded it (``null``: float32)."""
    for node in (run.config, run.config.get("loop") or {}):
        if "autocast" in node:
            return "null" if node["autocast"] is None else str(node["autocast"])
    return "unknown"


def reference_values(root: Path) -> list[str]:
    path = root / "fmnist" / "reference_values.json"
    if not path.is_file():
        return []
    ref = read.json_file(path, dict)
    setup, values = ref.get("setup", {}), ref.get("values", {})
    lines = ["## The scale of the Fashion-MNIST scores", "",
             f"IS, FID and KID here use the Fashion-MNIST classifier (`{setup.get('feature_extractor', 'unknown')}`, "
             f"test accuracy {setup.get('classifier_test_accuracy', 'unknown')}) against the 60 000 training images, "
             "so they are on their own scale; these two rows (from `fmnist/reference_values.json`, written by "
             "`scripts/fmnist_reference_values.py`) bound it:", "",
             "| images | IS | FID | KID |", "| --- | --- | --- | --- |"]
    names = {"test": "real test set (10 000)", "noise": "uniform noise in [-1, 1] (10 000)"}
    for key, v in values.items():
        lines.append(f"| {names.get(key, key)} | {v['is_mean']:.3f} ± {v['is_std']:.3f} | {v['fid']:.4g} | "
                     f"{v['kid_mean']:.4g} ± {v['kid_std']:.3g} |")
    return lines + ["", "IS and KID: mean ± SD over torch-fidelity's splits / subsets.", ""]

