"""Markdown pieces every section uses: what was run (settings and provenance, "unknown" where a
run did not record it) and the table of final scores per cell (mean ± sample SD, n stated)."""
from __future__ import annotations

from dadam3.report.runs import UNKNOWN, Run, lookup
from dadam3.report.stats import Cell, fmt, lr_text, seed_text

LEGACY = ("legacy, provenance unknown (no config, no provenance.json, or a code commit git could not give; kept out "
          "of every verdict)")

SCORE_COLUMNS = [("is_mean", "IS (node mean)"), ("is_avg_model", "IS (averaged model)"),
                 ("fid_mean", "FID (node mean)"), ("fid_avg_model", "FID (averaged model)"),
                 ("kid_mean", "KID (node mean)")]


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def _values(runs: list[Run], get) -> str:
    """The distinct values of ``get(run)``, sorted; unknown ones counted."""
    vals = [get(r) for r in runs]
    known = sorted({v for v in vals if v != UNKNOWN})
    missing = sum(v == UNKNOWN for v in vals)
    text = ", ".join(known)
    if missing:
        text += ("; " if text else "") + (UNKNOWN if missing == len(vals) else f"{UNKNOWN} for {missing} of "
                                                                               f"{len(vals)} runs")
    return text


# the stabilisers a run may switch on: (short name, what-was-run label, config key)
STABILISERS = (("clipping", "gradient clipping (loop.clip_grad_norm)", "loop.clip_grad_norm"),
               ("warm-up", "linear step-size warm-up, iterations (loop.lr_warmup)", "loop.lr_warmup"))


def setting_or_off(key: str):
    """The run's value of the stabiliser ``key``, ``off`` where it was 0 or the run's config is from
    before the option (it did not exist then)."""
    def get(run: Run) -> str:
        if not run.config:
            return UNKNOWN
        value = lookup(run.config, key)
        return "off" if not value else f"{float(value):g}"
    return get


def what_was_run(runs: list[Run], synthetic: bool = False) -> list[str]:
    """The settings and provenance of ``runs``, one bullet each."""
    def width(r: Run) -> str:
        arch = r.setting("model.arch")
        w = r.setting("model.width") if arch != "mlp" else r.setting("model.hidden")
        return UNKNOWN if arch == UNKNOWN else f"{arch} ({'width' if arch != 'mlp' else 'hidden'} {w})"

    rows: list = []
    if synthetic:
        rows += [("game", lambda r: f"c = {r.setting('game.c')}, k = {r.setting('game.k')}"
                  if r.setting("game.c") != UNKNOWN else UNKNOWN)]
    else:
        rows += [("data", lambda r: r.setting("dataset.name")), ("nets", width),
                 ("batch size per node", lambda r: r.setting("loop.batch_size", "batch_size"))]
        rows += [(label, setting_or_off(key)) for _, label, key in STABILISERS]
    rows += [("nodes", lambda r: r.setting("nodes")), ("topology", lambda r: r.topology),
             ("iterations (configured)", lambda r: UNKNOWN if r.target is None else str(r.target)),
             ("seeds", lambda r: str(r.seed)), ("step sizes", lambda r: UNKNOWN if r.lr is None else lr_text(r.lr)),
             ("machine (device model)", lambda r: r.provenance_field("device_model")),
             ("torch", lambda r: r.provenance_field("torch"))]
    lines = [f"What was run ({len(runs)} run directories):", ""]
    lines += [f"- {name}: {_values(runs, get)}" for name, get in rows]
    return lines + [f"- code versions (commit: runs, seeds): {code_versions(runs)}", ""]


def code_versions(runs: list[Run]) -> str:
    """Each code commit with its number of runs and their seeds; runs without config or provenance
    as the legacy group (kept out of every verdict)."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(LEGACY if r.legacy else r.provenance_field("code_commit"), []).append(r)
    return "; ".join(f"{name}: {len(rs)} run{'s' * (len(rs) > 1)}, seeds {seed_text({r.seed for r in rs})}"
                     for name, rs in sorted(groups.items(), key=lambda kv: (kv[0] == LEGACY, kv[0])))


def score_table(cells: list[Cell], with_lr: bool = True) -> list[str]:
    """Final scores per cell over its finished seeds, and what became of the other runs."""
    head = ["method"] + (["step size"] if with_lr else []) + ["n (finished)"] + [h for _, h in SCORE_COLUMNS] + \
        ["other runs"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in cells:
        n = len(c.of("finished"))
        others = [f"seed {r.seed}: {r.status_text()}" for r in c.runs if r.status != "finished"]
        row = [c.label] + ([lr_text(c.lr)] if with_lr else []) + [f"{n} of {len(c.runs)}"]
        row += [fmt(c.stat(k), k, with_n=False) for k, _ in SCORE_COLUMNS]
        row.append("; ".join(others) or "–")
        lines.append("| " + " | ".join(row) + " |")
    return lines + ["", "Final = the last evaluation of a finished run; mean ± sample SD (n − 1) over the finished "
                        "seeds, n in the third column.", ""]


def runs_table(runs: list[Run]) -> list[str]:
    """Every run: its status and provenance; the legacy group (no config or no provenance) apart."""
    lines = []
    for title, group in (("Runs with config and provenance", [r for r in runs if not r.legacy]),
                         (LEGACY[0].upper() + LEGACY[1:], [r for r in runs if r.legacy])):
        if not group:
            continue
        lines += [f"{title} ({len(group)}):", "", "| run directory | status | code commit | torch | device model |",
                  "| --- | --- | --- | --- | --- |"]
        for r in group:
            lines.append(f"| `{r.rel}` | {r.status_text()} | {r.provenance_field('code_commit')} | "
                         f"{r.provenance_field('torch')} | {r.provenance_field('device_model')} |")
        lines.append("")
    return lines
