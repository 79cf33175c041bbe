"""results/ stays small (issue 47): a run commits what the report reads, no file twice, and every file
REPORT.md links is in git (the rule and what is left to prune: docs/results.md)."""
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from dadam3.report.runs import shown_grids
from trainer_runs import ROOT, TOY, cli

RUN_COMMITS_AT_MOST = 300_000       # bytes a new miniature run adds to the repository, its final grid included
DUPLICATE_MIN_BYTES = 10 * 1024
needs_git = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                               reason="needs git and a checkout")


def _git(*args, cwd=ROOT, stdin=None):
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, input=stdin)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout


def _not_ignored(paths: list[str], cwd=ROOT) -> list[str]:
    """Of ``paths`` (from ``cwd``), those the ignore rules let in (tracked or not)."""
    ignored = set(_git("check-ignore", "--no-index", "--stdin", cwd=cwd, stdin="\n".join(paths)).splitlines())
    return [p for p in paths if p not in ignored]


def _final_grid(run: Path) -> list[Path]:
    grids = sorted((run / "samples").glob("iter_*_avg.png")) or sorted((run / "samples").glob("iter_*.png"))
    return grids[-1:]


@pytest.mark.slow
@needs_git
def test_a_new_run_commits_its_metrics_configs_and_provenance_only(tmp_path):
    """A real (tiny) run of `python -m dadam3.train`, in a repository with this checkout's .gitignore: what
    `git add` would take is the metrics, configs, provenance and log, not samples or checkpoints."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    run = repo / "results" / "toy" / "dadam3" / "seed0"
    r = cli(*TOY, "loop.iterations=8", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert list((run / "samples").glob("*.png")) and (run / "checkpoints").is_dir()
    added = set(_git("ls-files", "-o", "--exclude-standard", "results", cwd=repo).split())
    rel = "results/toy/dadam3/seed0/"
    assert {rel + f for f in ("metrics.jsonl", "config_resolved.yaml", ".hydra/config.yaml", ".hydra/overrides.yaml",
                              "provenance.json", "run_id", "train.log")} <= added, added
    assert not [f for f in added if "/samples/" in f or "/checkpoints/" in f or f.endswith((".pt", ".lock"))], added
    size = sum((repo / f).stat().st_size for f in added) + sum(g.stat().st_size for g in _final_grid(run))
    assert size <= RUN_COMMITS_AT_MOST, (size, sorted(added))


@needs_git
def test_a_committed_1500_iteration_run_kept_by_the_rules_with_its_final_grid_is_under_300_kB():
    """The miniature runs of the report (1 500 iterations, M up to 5): what the ignore rules keep
    of each, plus its final grid, is within the budget of a new run."""
    runs = [ROOT / p for p in _git("ls-files", "results/*/config_resolved.yaml").split()]
    sized = 0
    for config in runs:
        cfg = yaml.safe_load(config.read_text()) or {}
        if cfg.get("iterations") != 1500:
            continue
        run = config.parent
        files = [p for p in run.rglob("*") if p.is_file() and "samples" not in p.relative_to(run).parts]
        kept = _not_ignored([p.relative_to(ROOT).as_posix() for p in files])
        size = sum((ROOT / p).stat().st_size for p in kept) + sum(g.stat().st_size for g in _final_grid(run))
        assert size <= RUN_COMMITS_AT_MOST, (run, size)
        sized += 1
    assert sized >= 10, "the committed 1500-iteration runs were not found"


def test_the_ignore_rules_keep_samples_and_checkpoints_out(tmp_path):
    kept = _not_ignored(["results/x/m/seed0/samples/iter_000250_avg.png", "results/x/m/seed0/checkpoints/last.pt",
                         "results/x/m/seed0/metrics.jsonl", "results/x/m/seed0/provenance.json",
                         "results/report/fig1_synthetic.png", "build/lib/x.py", "dist/x.whl"])
    assert kept == ["results/x/m/seed0/metrics.jsonl", "results/x/m/seed0/provenance.json",
                    "results/report/fig1_synthetic.png"]


@needs_git
def test_no_file_over_10_kB_under_results_is_committed_twice():
    copies = defaultdict(list)
    for entry in _git("ls-files", "-s", "results").splitlines():
        meta, path = entry.split("\t", 1)
        if (ROOT / path).stat().st_size > DUPLICATE_MIN_BYTES:
            copies[meta.split()[1]].append(path)
    twice = [paths for paths in copies.values() if len(paths) > 1]
    assert twice == [], f"{len(twice)} files committed more than once, e.g. {twice[:3]}"


@needs_git
def test_every_file_report_md_links_is_in_git():
    text = (ROOT / "results" / "REPORT.md").read_text(encoding="utf-8")
    linked = {m.split("](", 1)[1][:-1] for m in _links(text)}
    files = {(Path("results") / p).as_posix() for p in linked if not p.startswith(("http", "#", "../"))}
    assert {f"results/{g}" for g in shown_grids(text)} <= files and len(files) > 10
    tracked = set(_git("ls-files", "results").split())
    assert sorted(files - tracked) == []


def _links(text):
    return re.findall(r"\]\([^)\s#]+\)", text)
