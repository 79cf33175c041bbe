"""make report (dadam3/report): a tiny fake results tree in the real run-directory format (records
like results/fmnist/fig3/dosg/seed0/metrics.jsonl) -> the tables (mean ± sample SD, n), the best
step size, the divergence rule, 'unknown' provenance, stale files removed, identical bytes twice."""
import json
import statistics
import subprocess
import sys

import pytest

from dadam3.errors.config import ConfigError
from dadam3.run.divergence import FROZEN_RECORDS, first_breach, frozen_from, loss_beyond
from dadam3.report.build import write
from dadam3.report.runs import load_run
from trainer_runs import ROOT

CONFIG = """nodes: 5
seed: {seed}
iterations: 100
batch_size: 32
dataset:
  name: fashion_mnist
model:
  arch: dcgan32
  width: 0.0625
optimizer:
  name: {method}
  lr: {lr}
topology:
  name: ring
"""
PROVENANCE = [{"from_iteration": 0, "code_commit": "40da47f553b2870b61acdb38416b290a667980ab", "torch": "2.14.1",
               "python": "3.11.7", "device": "cpu", "device_model": "Test CPU", "torch_threads": 1}]


def record(k, loss=1.0, scores=None, nodes=5, step=0.0):
    """A logging record as the trainer writes it (loss keys with their per-node lists)."""
    rec = {"iteration": k, "time": 0.1 * k, "status": "running"}
    for key, value in (("loss_d", loss), ("loss_g", -loss / 2 + step), ("gp", 0.1 + step), ("wasserstein", loss / 3)):
        rec[key] = value
        rec[f"{key}_nodes"] = [value] * nodes
    rec["operator_norm"] = 10.0
    if scores is not None:
        fid, is_ = scores
        rec.update({"is_avg_model": is_, "is_mean": is_, "fid_avg_model": fid, "fid_mean": fid,
                    "kid_avg_model": fid / 20, "kid_mean": fid / 20})
    return rec


def healthy(fid, is_=4.0, end=100, finished=True):
    recs = [record(k, loss=1.0 + k / 1000, step=k / 1e4, scores=(fid + 50 * (k < end), is_) if k % 50 == 0 else None)
            for k in range(25, end + 1, 25)]
    return recs + ([{"iteration": end, "status": "finished", "time": 12.0}] if finished else [])


def make_run(root, rel, method, lr, seed, recs, provenance=False):
    d = root / rel
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "config_resolved.yaml").write_text(CONFIG.format(seed=seed, method=method, lr=lr))
    if provenance:
        (d / "provenance.json").write_text(json.dumps(PROVENANCE))
    return d


FIG3_FID = {"dadam3": (100.0, 110.0, 120.0), "cadam3": (95.0, 105.0, 115.0), "dosg": (400.0, 402.0, 404.0),
            "cosg": (401.0, 403.0, 405.0)}
SWEEP_FID = (80.0, 84.0, 90.0)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "results"
    for method, fids in FIG3_FID.items():
        for seed, fid in enumerate(fids):
            make_run(root, f"fmnist/fig3/{method}/seed{seed}", method, 2e-4, seed, healthy(fid))
    for seed, fid in enumerate(SWEEP_FID):
        make_run(root, f"fmnist/lr_sweep/lr8e-4/dadam3/seed{seed}", "dadam3", 8e-4, seed, healthy(fid), provenance=True)
    # DOSG at 1.6e-3: seed 0 explodes (1.4e17) then freezes, seed 1 has the best FID of all but seed 0 diverged
    exploded = [record(25, loss=1.4e17)] + [record(k, loss=10.0) for k in range(50, 301, 25)]
    make_run(root, "fmnist/lr_sweep/lr1.6e-3/dosg/seed0", "dosg", 1.6e-3, 0, exploded, provenance=True)
    make_run(root, "fmnist/lr_sweep/lr1.6e-3/dosg/seed1", "dosg", 1.6e-3, 1, healthy(50.0), provenance=True)
    nan = [record(25), {"iteration": 31, "status": "diverged", "node": 2, "time": 1.0,
                        "message": "NaN/Inf in loss_d of node 2 at iteration 31"}]
    make_run(root, "fmnist/lr_sweep/lr3.2e-3/cosg/seed0", "cosg", 3.2e-3, 0, nan, provenance=True)
    make_run(root, "fmnist/lr_sweep/lr8e-4/cosg/seed0", "cosg", 8e-4, 0, healthy(390.0, end=75, finished=False),
             provenance=True)
    (root / "report").mkdir()
    (root / "report" / "old_figure.png").write_bytes(b"stale")
    (root / "fmnist" / "fig2").mkdir(parents=True)
    (root / "fmnist" / "fig2" / "samples_adam3.png").write_bytes(b"stale copy")
    return root


def row(text, start):
    return next(line for line in text.splitlines() if line.startswith(start))


def test_table_gives_mean_and_sample_sd_with_n(tree):
    write(tree)
    text = (tree / "REPORT.md").read_text()
    fids = FIG3_FID["dadam3"]
    mean, sd = statistics.fmean(fids), statistics.stdev(fids)
    line = row(text, "| Dadam3 | 0.0002 | 3 of 3 |")
    assert f"| {mean:.1f} ± {sd:.1f} |" in line
    assert f"{statistics.fmean(SWEEP_FID):.1f} ± {statistics.stdev(SWEEP_FID):.1f}" in row(text, "| Dadam3 | 0.0008 |")


def test_best_step_size_skips_a_step_size_where_a_seed_diverged(tree):
    write(tree)
    text = (tree / "REPORT.md").read_text()
    best = text[text.index("| method | step sizes tried (seeds 0–2) | chosen step size |"):]
    assert row(best, "| Dadam3 |").startswith("| Dadam3 | 0.0002, 0.0008 | 0.0008 | 84.7 ± 5.0 (n = 3) |")
    # 1.6e-3 has FID 50 on seed 1, but seed 0 diverged
    assert row(best, "| DOSG |").startswith("| DOSG | 0.0002, 0.0016 | 0.0002 |")
    assert row(best, "| Cadam3 |").startswith("| Cadam3 | 0.0002 | 0.0002 |")


def test_divergence_rule_names_the_exploded_and_frozen_run(tree):
    run = load_run(tree, tree / "fmnist/lr_sweep/lr1.6e-3/dosg/seed0", "dosg", 0)
    assert run.status == "diverged" and run.breach.iteration == 25 and run.breach.node == 0
    assert "loop.diverge_above" in run.breach.message
    frozen = frozen_from(run.records)
    assert frozen is not None and frozen.iteration == 50
    assert first_breach(run.records[1:]).iteration == 50              # without the explosion, the freeze alone
    assert loss_beyond(record(5, loss=2e6), 0) is None                  # 0: the bound is off
    moving = [record(k, loss=1.0, step=k / 100) for k in range(25, 25 * (FROZEN_RECORDS + 3), 25)]
    assert first_breach(moving) is None
    write(tree)
    text = (tree / "REPORT.md").read_text()
    assert "seed 0: diverged at iteration 25 (loss_d = 1.4e+17, beyond ±1e+06" in row(text, "| DOSG | 0.0016 |")
    assert "diverged at iteration 31 (NaN/Inf in loss_d of node 2" in row(text, "| COSG | 0.0032 |")


@pytest.mark.parametrize("bad", ["NaN", "-Infinity", "Infinity"])
def test_a_finished_run_with_a_non_finite_loss_in_its_log_is_diverged(tmp_path, bad):
    """Issue 33: a NaN/-Infinity logged loss (as metrics.jsonl writes it) makes the run diverged,
    whatever its last record says and whatever the bound (0: off), at the node and iteration."""
    recs = healthy(100.0)
    recs[1]["loss_g_nodes"][3] = bad
    run = load_run(tmp_path, make_run(tmp_path, "r", "dadam3", 2e-4, 0, recs), "dadam3", 0)
    assert recs[-1]["status"] == "finished" and run.status == "diverged"
    assert (run.breach.iteration, run.breach.node) == (50, 3) and "not finite" in run.breach.message
    raw = {**record(5), "loss_d": bad}                 # as a reader that keeps the strings sees it
    assert loss_beyond(raw, 0).message.startswith("loss_d = ") and loss_beyond(raw, 0).node is None


def test_unfinished_run_is_marked_with_its_last_iteration(tree):
    write(tree)
    assert "seed 0: unfinished (last iteration 75 of 100)" in row((tree / "REPORT.md").read_text(), "| COSG | 0.0008 |")


def test_provenance_is_given_or_unknown(tree):
    write(tree)
    text = (tree / "REPORT.md").read_text()
    assert row(text, "| `fmnist/fig3/dadam3/seed0` |").endswith("| unknown | unknown | unknown |")
    assert row(text, "| `fmnist/lr_sweep/lr8e-4/dadam3/seed0` |").endswith("| 40da47f553b2 | 2.14.1 | Test CPU |")
    assert ("- code versions (commit: runs, seeds): 40da47f553b2: 7 runs, seeds 0–2; legacy, provenance unknown "
            "(no config, no provenance.json, or a code commit git could not give; kept out of every verdict): 12 runs, "
            "seeds 0–2") in text


def test_twice_gives_identical_bytes_and_only_its_own_stale_files_go(tree):
    """Files the report did not write (an earlier version's figure, a script's quick look) stay;
    a figure the previous report listed in its manifest and this one does not write goes."""
    assert write(tree)[0] == []
    assert (tree / "report" / "old_figure.png").is_file() and (tree / "fmnist" / "fig2" / "samples_adam3.png").is_file()
    from dadam3.run.stamps import stamp
    manifest = tree / "report" / "manifest.txt"
    listed = [line.split("\t")[0] for line in manifest.read_text().splitlines()]
    assert "REPORT.md" in listed and all(p.endswith(".png") for p in listed[1:] if p != "REPORT.md")
    (tree / "report" / "gone.png").write_bytes(b"a figure an earlier report wrote")
    manifest.write_text(manifest.read_text() + f"report/gone.png\t{stamp(tree / 'report' / 'gone.png')}\n")
    assert write(tree)[0] == [tree / "report" / "gone.png"]
    first = {p: p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}
    assert write(tree)[0] == []
    assert first == {p: p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}
    assert any(p.suffix == ".png" and p.parent.name == "report" for p in first)


def test_cli_refuses_a_missing_results_folder(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dadam3.report", "--results", str(tmp_path / "nope")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("error: --results=")


def test_a_variant_sweep_gets_its_own_section_with_its_stabilisers(tree):
    for method in ("dosg", "dadam3"):
        d = make_run(tree, f"fmnist/lr_sweep_clip1/lr8e-4/{method}/seed0", method, 8e-4, 0, healthy(300.0),
                     provenance=True)
        cfg = (d / "config_resolved.yaml").read_text().replace("iterations: 100\n", "loop:\n  iterations: 100\n"
                                                                "  clip_grad_norm: 1.0\n  lr_warmup: 50\n")
        (d / "config_resolved.yaml").write_text(cfg)
    write(tree)
    text = (tree / "REPORT.md").read_text()
    section = text[text.index("## Round 2 (history): every method at its own step size, variant clip1"):]
    assert "- gradient clipping (loop.clip_grad_norm): 1\n" in section
    assert "- linear step-size warm-up, iterations (loop.lr_warmup): 50\n" in section
    assert "- linear step-size warm-up, iterations (loop.lr_warmup): off\n" in text
    glance = text[text.index("## Claims at a glance"):text.index("\n## ", text.index("## Claims at a glance") + 5)]
    assert "clip1" not in glance and "Round 2" not in glance.replace("Round 2's readings", "")   # history: its sections
    assert "| DOSG | 0.0008 | 1 of 1 |" in section
    assert "- gradient clipping (loop.clip_grad_norm): off\n" in text      # the unclipped runs
    assert (tree / "report" / "fmnist_step_sizes_fig3_clip1.png").is_file()


def test_a_variant_at_the_main_sweeps_chosen_step_sizes_inherits_them_and_judges_no_selection_seed(tree):
    """Longer runs (issue 32 point 3): each method at the step size the main sweep chose; nothing is
    chosen again, the runs on seeds 0-2 are shown as selection seeds, and only the claims whose
    methods both ran are listed."""
    for method, lr, fids in (("dadam3", 8e-4, (60.0, 70.0)), ("dosg", 2e-4, (350.0, 330.0))):
        for seed, fid in enumerate(fids):
            make_run(tree, f"fmnist/lr_sweep_long5000/lr{lr:g}/{method}/seed{seed}", method, lr, seed,
                     healthy(fid), provenance=True)
    write(tree)
    text = (tree / "REPORT.md").read_text()
    section = text[text.index("## Round 2 (history): every method at its own step size, variant long5000"):]
    section = section[:section.index("\n## ", 1)]
    assert "Step sizes: each method at the one chosen on the main sweep" in section
    assert "| Dadam3 | 0.0008 | no: no worse step size tried above | selection 0, 1 |" in section
    assert "| DOSG | 0.0002 | no: no worse step size tried below | selection 0, 1 |" in section
    assert not (tree / "report" / "fmnist_step_sizes_fig3_long5000.png").exists()
    assert (tree / "report" / "fmnist_curves_fig3_long5000.png").is_file()
    claims = [line for line in section.splitlines() if line.startswith("| Dadam3 ≫") or line.startswith("| Cadam3")]
    assert claims and all(line.startswith("| Dadam3 ≫ DOSG |") for line in claims)
    assert all("| selection seeds |" in line and "awaiting fresh seeds: 0 of 5" in line for line in claims)
    assert "| -275.0 FID [-465.6, -84.4], n = 2 (seeds 0, 1) (selection seeds, not a verdict) |" in claims[0]
    glance = text[:text.index("## Fig. 1")]        # round 2's variants: in their sections, not at a glance
    assert "long5000" not in glance[glance.index("## Claims at a glance"):]


def test_a_centralized_variant_that_tracks_its_decentralized_run_is_named_as_one_observation(tree):
    """Fig. 3 pairs (Dadam3/Cadam3, DOSG/COSG): the largest difference of the logged losses per
    seed, relative to the series' largest loss; near zero it says the two are not independent."""
    from dadam3.report.sections_fmnist import pair_differences
    runs = [load_run(tree, tree / f"fmnist/fig3/{m}/seed{s}", m, s) for m in ("dosg", "cosg") for s in range(3)]
    text = "\n".join(pair_differences(runs))
    assert "DOSG and COSG at the same seed: logged losses differ by at most 0.0e+00" in text
    assert "one observation, not two independent ones" in text
    for seed in range(3):     # make COSG differ by 10 % of the loss scale at one record
        path = tree / f"fmnist/fig3/cosg/seed{seed}/metrics.jsonl"
        recs = [json.loads(x) for x in path.read_text().splitlines()]
        recs[1]["loss_d"] *= 1.1
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    runs = [load_run(tree, tree / f"fmnist/fig3/{m}/seed{s}", m, s) for m in ("dosg", "cosg") for s in range(3)]
    text = "\n".join(pair_differences(runs))
    assert "differ by at most 9." in text and "independent" not in text


def test_the_report_opens_with_the_claims_at_a_glance_and_round_2_stays_in_its_sections(tree):
    """The glance holds the plans' claims and Fig. 1; round 2's readings (history) are judged in their own
    sections only, the fresh seeds deciding there."""
    from dadam3.report.build import build
    from dadam3.report.glance import glance

    def section(text):
        start = text.index("## Round 2 (history): every method at its own step size")
        return text[start:text.index("\n## ", start + 5)]
    text = build(tree)[0]
    assert text.index("## Claims at a glance") < text.index("## Fig. 1")
    assert "Dadam3 ≫ DOSG" not in "\n".join(glance(tree))
    line = row(section(text), "| Dadam3 ≫ DOSG | final")
    assert "awaiting fresh seeds: 0 of 5 paired" in line and "(selection seeds, not a verdict)" in line
    for seed in range(3, 8):            # fresh seeds with provenance at the chosen cells (8e-4 and 2e-4)
        make_run(tree, f"fmnist/lr_sweep/lr8e-4/dadam3/seed{seed}", "dadam3", 8e-4, seed, healthy(90.0 + seed),
                 provenance=True)
        make_run(tree, f"fmnist/fig3/dosg/seed{seed}", "dosg", 2e-4, seed, healthy(400.0 - seed), provenance=True)
    line = row(section(build(tree)[0]), "| Dadam3 ≫ DOSG | final")
    d = [(90.0 + s) - (400.0 - s) for s in range(3, 8)]
    half = 2.776445105197793 * statistics.stdev(d) / len(d) ** 0.5      # t quantile, df = 4 (tables)
    m = statistics.fmean(d)
    assert f"| {m:+.1f} FID [{m - half:+.1f}, {m + half:+.1f}], n = 5 (seeds 3–7) | reproduced |" in line


def test_a_paper_scale_section_says_what_its_runs_are_and_draws_no_verdict(tree):
    from dadam3.report import claims
    from dadam3.report.output import Output
    from dadam3.report.sections_fmnist import paper_scale
    d = tree / "fmnist/paper_fig3/dadam3/seed0"           # a legacy run: records only, no config
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in healthy(130.0, end=1000)))
    section = "\n".join(paper_scale(tree, Output(tree), "paper_fig3", "Fig. 3 at scale", "", claims.CLAIMS_FIG3))
    assert ("iterations reached of Table 6's 30,000: Dadam3 1,000 (3.3%; finished); never run: Cadam3, DOSG, COSG"
            in section)
    assert "no verdict is drawn from them" in section and "**Verdict**" not in section


def _report(*args):
    return subprocess.run([sys.executable, "-m", "dadam3.report", *args], capture_output=True, text=True, cwd=ROOT)


def test_a_folder_without_runs_is_left_untouched(tmp_path):
    """The issue's reproducer: --results my, a folder of the user's own files and no run."""
    my = tmp_path / "my"
    for rel in ("report/draft.tex", "fmnist/mine/summary.md", "REPORT.md"):
        (my / rel).parent.mkdir(parents=True, exist_ok=True)
        (my / rel).write_text("the user's")
    before = {p: p.read_bytes() for p in my.rglob("*") if p.is_file()}
    r = _report("--results", str(my))
    assert r.returncode == 2 and r.stdout == "" and r.stderr.splitlines() == [
        f"error: --results={my}: holds no run directory (no metrics.jsonl or metrics.csv below it): nothing "
        "written; give the results folder"]
    assert {p: p.read_bytes() for p in my.rglob("*") if p.is_file()} == before


def test_another_tools_files_and_a_users_report_are_kept(tree):
    (tree / "fmnist" / "fig3" / "summary.md").write_text("fmnist_figure.sh's quick look")
    (tree / "report" / "draft.tex").write_text("the user's")
    (tree / "REPORT.md").write_text("# my own notes\n")
    with pytest.raises(ConfigError, match="REPORT.md was not written by this report"):
        write(tree)
    assert (tree / "REPORT.md").read_text() == "# my own notes\n" and not (tree / "report" / "manifest.txt").exists()
    (tree / "REPORT.md").unlink()
    write(tree)
    (tree / "REPORT.md").write_text((tree / "REPORT.md").read_text() + "edited by hand\n")   # listed: the report's
    assert write(tree)[0] == []
    assert (tree / "fmnist" / "fig3" / "summary.md").is_file() and (tree / "report" / "draft.tex").is_file()
    assert "edited by hand" not in (tree / "REPORT.md").read_text()


def test_a_manifest_naming_files_outside_the_results_folder_deletes_none(tree, tmp_path):
    (tmp_path / "precious").write_text("keep")
    write(tree)
    manifest = tree / "report" / "manifest.txt"
    manifest.write_text(manifest.read_text() + f"../precious\n{tmp_path / 'precious'}\n")
    write(tree)
    assert (tmp_path / "precious").read_text() == "keep"


def test_fig1_is_a_verdict_only_with_each_runs_provenance_and_prints_its_commit(tmp_path):
    """Fig. 1's runs without provenance.json are legacy: the rule's answer is shown, labelled; with it,
    the verdict and the commit (a dirty one as dirty)."""
    from dadam3.report.sections_paper import fig1_verdict
    for name, error in (("dadam3", 0.002), ("dp_oadam", 0.99)):
        d = tmp_path / "fig1" / name
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "config.yaml").write_text(f"optimizer:\n  name: {name}\nseed: 0\n")
        (d / "metrics.csv").write_text(f"iteration,error,avg_grad_sq_norm\n1,1.0,1.0\n100,{error},1.0\n")
    verdict, effect, evidence = fig1_verdict(tmp_path)
    assert verdict == "not resolved (legacy runs, provenance unknown; by the rule it holds)"
    assert evidence.endswith("code legacy (no provenance.json)")
    dirty = [{**PROVENANCE[0], "code_commit": PROVENANCE[0]["code_commit"] + "+dirty"}]
    for name, prov in (("dadam3", PROVENANCE), ("dp_oadam", dirty)):
        (tmp_path / "fig1" / name / "provenance.json").write_text(json.dumps(prov))
    verdict, effect, evidence = fig1_verdict(tmp_path)
    assert (verdict, effect) == ("holds", "Dadam3 ends at e_k = 0.002, DP-OAdam at 0.99")
    assert evidence.endswith("100 iterations; code 40da47f553b2; 40da47f553b2+dirty (diff not saved)")
