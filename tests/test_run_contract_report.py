"""Issue 60, the report's mechanisms, each table-driven through the real command line
(``python -m dadam3.report``): one identity per run (a violation is one line, nothing written),
provenance the trainer writes accepted and implausible provenance refused, small files read small,
no write through a link, every file whole or unchanged, nothing deleted on its manifest's word
(docs/run_contract.md, "The report reads each run once" and "Loading and deleting")."""
from __future__ import annotations

import json
import os
import resource
import shutil
from pathlib import Path

import pytest
import yaml

from report_plan_runs import make_run
from test_run_contract import cli, said


def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A results folder with one run of the checkout's fig2 plan: (the folder, the run)."""
    results = tmp_path / "results"
    return results, make_run(results, "adam3", 8e-4, 0, 90.0, family="fig2")


def records(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]


def write_records(d: Path, recs: list[dict]) -> None:
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def edit_provenance(d: Path, **fields) -> None:
    segs = json.loads((d / "provenance.json").read_text())
    (d / "provenance.json").write_text(json.dumps([{**segs[0], **fields}, *segs[1:]]))


def _duplicated_evaluation(results, d):
    recs = records(d)
    write_records(d, [*recs[:2], {**recs[1], "fid_mean": 10.0, "fid_mean_fmnist_mlp": 10.0}, *recs[2:]])


def _seed_folder_linked(results, d):
    (d.parent / "seed1").symlink_to(d)


def _log_cut_plus_finished(results, d):
    recs = records(d)
    write_records(d, [recs[0], {"iteration": 200, "status": "finished"}])


def _copies_with_edited_seed_and_run_id(results, d):
    for s in (1, 2):
        c = d.parent / f"seed{s}"
        shutil.copytree(d, c)
        cfg = (c / "config_resolved.yaml").read_text()
        (c / "config_resolved.yaml").write_text(cfg.replace("seed: 0", f"seed: {s}"))
        (c / "run_id").write_text(f"copy-{s}\n")


def _another_step_size_in_a_preset_folder(results, d):
    c = results / "fmnist" / "fig2" / "adam3" / "seed3"       # the preset experiment=fmnist_fig2's folder: lr 2e-4
    c.parent.mkdir(parents=True)
    shutil.copytree(d, c)
    cfg = yaml.safe_load((c / "config_resolved.yaml").read_text())
    (c / "config_resolved.yaml").write_text(yaml.safe_dump({**cfg, "seed": 3, "optimizer": {"name": "adam3",
                                                                                            "lr": 1e-3}}))


def _another_optimizer_in_its_folder(results, d):
    cfg = yaml.safe_load((d / "config_resolved.yaml").read_text())
    (d / "config_resolved.yaml").write_text(yaml.safe_dump({**cfg, "optimizer": {"name": "oadagrad", "lr": 8e-4}}))


def _other_data_in_a_plans_data_folder(results, d):
    arm = make_run(results, "dadam3", 8e-4, 3, 90.0, family="heterogeneous", arm="iid/plain")
    cfg = yaml.safe_load((arm / "config_resolved.yaml").read_text())
    cfg["dataset"] = {"partition": "dirichlet", "alpha": 0.1}
    (arm / "config_resolved.yaml").write_text(yaml.safe_dump(cfg))


def _dangling_log(results, d):
    other = make_run(results, "adam3", 8e-4, 1, 91.0, family="fig2")
    (other / "metrics.jsonl").unlink()
    (other / "metrics.jsonl").symlink_to(results / "gone.jsonl")


def _seed_superscript(results, d):
    shutil.copytree(d, d.parent / "seed²")


def _deep_json(results, d):
    (d / "provenance.json").write_text("[" * 100_000 + "]" * 100_000)


def _deep_yaml(results, d):
    (d / "config_resolved.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")


def _fifo_provenance(results, d):
    (d / "provenance.json").unlink()
    os.mkfifo(d / "provenance.json")


REFUSED = {     # case: (change the tree, exit status, what the one line says)
    "a duplicated last evaluation with another FID": (_duplicated_evaluation, 1,
                                                      "line 3: a second record of iteration 200 (the first: line 2)"),
    "a seed folder that is a symlink to another": (_seed_folder_linked, 2, "seed1 is a symbolic link to"),
    "a log cut short plus a finished record": (_log_cut_plus_finished, 1,
                                               "finished at iteration 200, but its records stop at iteration 100"),
    "copies with an edited seed and run id": (_copies_with_edited_seed_and_run_id, 1,
                                              "the same logged values under another seed (1, there 0: a copy"),
    "a run at another step size in a preset's folder": (_another_step_size_in_a_preset_folder, 1,
                                                        "optimizer.lr=0.001 disagrees with the folder fmnist/fig2"),
    "a config of another optimizer in its folder": (_another_optimizer_in_its_folder, 1,
                                                    "optimizer.name='oadagrad' disagrees with the folder adam3"),
    "other data in a plan's data folder": (_other_data_in_a_plans_data_folder, 1,
                                           "dataset.partition='dirichlet' disagrees with the folder iid"),
    "a dangling metrics.jsonl": (_dangling_log, 2, "metrics.jsonl is a symbolic link to"),
    "a seed folder spelled seed²": (_seed_superscript, 1, "the seed folder is spelled 'seed²', not seed<digits>"),
    "a deeply nested provenance.json": (_deep_json, 1, "provenance.json: nested deeper than 64 levels"),
    "a deeply nested config": (_deep_yaml, 1, "config_resolved.yaml: nested deeper than 64 levels"),
    "provenance.json a FIFO": (_fifo_provenance, 1, "provenance.json: is a FIFO, not a regular file"),
    "a start in 2099": (lambda r, d: edit_provenance(d, started="2099-01-01T00:00:00+00:00"), 1,
                        "started='2099-01-01T00:00:00+00:00' is in the future"),
    "a commit the repository does not have": (
        lambda r, d: edit_provenance(d, code_commit="0123456789abcdef0123456789abcdef01234567"), 1,
        "code_commit=0123456789abcdef0123456789abcdef01234567 is no commit of this repository"),
    "segments out of order": (
        lambda r, d: (d / "provenance.json").write_text(json.dumps([
            {**json.loads((d / "provenance.json").read_text())[0], "from_iteration": 100},
            {**json.loads((d / "provenance.json").read_text())[0], "from_iteration": 0}])), 1,
        "segment 1 (from_iteration=0, started='2026-01-02T00:00:00+00:00') comes before segment 0"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_the_report_refuses_what_is_not_one_run_in_one_line_writing_nothing(tmp_path, case):
    change, status, words = REFUSED[case]
    results, d = tree(tmp_path)
    change(results, d)
    r = cli("dadam3.report", f"--results={results}", timeout=300)
    assert r.returncode == status, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and words in lines[0], r.stderr[-2000:]
    assert not (results / "REPORT.md").exists() and not (results / "report").exists()


@pytest.mark.parametrize("commit", ["not a checkout", "unknown", "unknown (git is not installed or not on PATH)"])
def test_the_report_accepts_every_commit_value_the_trainer_writes_and_keeps_such_runs_out_of_verdicts(tmp_path,
                                                                                                       commit):
    results, d = tree(tmp_path)
    toy = results / "toy_gaussians" / "a_run"         # read by the report outside any plan: listed in "Every run"
    toy.parent.mkdir(parents=True)
    shutil.move(d, toy)
    d = toy
    edit_provenance(d, code_commit=commit)
    r = cli("dadam3.report", f"--results={results}", timeout=300)
    assert r.returncode == 0 and not said(r.stderr), r.stderr[-2000:]
    assert "Warning" not in r.stderr, r.stderr[-2000:]          # a panel with no labelled line draws no legend
    text = (results / "REPORT.md").read_text()
    [row] = [x for x in text.splitlines() if x.startswith(f"| `{d.relative_to(results).as_posix()}` |")]
    assert commit in row
    assert "Legacy, provenance unknown (no config, no provenance.json, or a code commit git could not give" in text


# ---------------------------------------------------------------- the report's own files

def _fsize(limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


def test_the_report_writes_nothing_through_a_link_and_deletes_only_its_own_stamped_files(tmp_path):
    """REPORT.md a link (after a report wrote it): refused, the link's target untouched; report/ a
    link: refused; a figure a link: replaced by the new figure, its target untouched; lines added to
    its manifest (a user's notes.md, a run's metrics.jsonl) and a stale figure changed since: kept
    and named, never deleted; a figure it wrote and no longer writes, still as written: deleted."""
    results = tmp_path / "results"
    for s in range(3):          # Fig. 2's miniature (preset folders): the report draws its curves
        for method, fid in (("adam3", 100.0), ("oadagrad", 120.0)):
            d = make_run(results, method, 2e-4, s, fid + s, family="fig2")
            target = results / "fmnist" / "fig2" / method / f"seed{s}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(d, target)
    assert cli("dadam3.report", f"--results={results}", timeout=300).returncode == 0
    appendix, mine = tmp_path / "appendix.md", tmp_path / "figure.png"
    appendix.write_text("my appendix\n")
    mine.write_bytes(b"my figure")
    report = (results / "REPORT.md").read_bytes()
    (results / "REPORT.md").unlink()
    (results / "REPORT.md").symlink_to(appendix)
    r = cli("dadam3.report", f"--results={results}", timeout=300)
    assert r.returncode == 2 and said(r.stderr)[0].endswith("REPORT.md was not written by this report (not what "
                                                            "report/manifest.txt stamped, nor a regular file starting "
                                                            "as the report does): move it away; nothing written")
    assert appendix.read_text() == "my appendix\n"
    (results / "REPORT.md").unlink()
    (results / "REPORT.md").write_bytes(report)
    [figure] = sorted((results / "report").glob("*.png"))
    figure.unlink()
    figure.symlink_to(mine)
    stale, edited = results / "report" / "stale.png", results / "report" / "edited.png"
    stale.write_bytes(b"a figure it wrote")
    edited.write_bytes(b"a figure it wrote, then a user changed")
    (results / "notes.md").write_text("my notes\n")
    from dadam3.run.stamps import stamp
    with open(results / "report" / "manifest.txt", "a") as f:
        f.write(f"notes.md\t{stamp(results / 'notes.md')}\nfmnist/fig2/adam3/seed0/metrics.jsonl\n"
                f"report/stale.png\t{stamp(stale)}\nreport/edited.png\t{stamp(edited)}\n")
    edited.write_bytes(b"changed")
    r = cli("dadam3.report", f"--results={results}", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert mine.read_bytes() == b"my figure" and not figure.is_symlink() and figure.stat().st_size > 1000
    assert (results / "notes.md").read_text() == "my notes\n"
    assert (results / "fmnist" / "fig2" / "adam3" / "seed0" / "metrics.jsonl").is_file()
    assert not stale.exists() and f"removed stale {stale}" in r.stdout and edited.read_bytes() == b"changed"
    [kept] = said(r.stderr)
    assert f"{results / 'notes.md'} (outside report/)" in kept and "seed0/metrics.jsonl (outside report/)" in kept
    assert f"{edited} (changed since the report wrote it)" in kept
    (results / "report").rename(tmp_path / "figures")
    (results / "report").symlink_to(tmp_path / "figures")
    r = cli("dadam3.report", f"--results={results}", timeout=300)
    assert r.returncode == 2 and f"{results / 'report'} is a symbolic link to" in said(r.stderr)[0], r.stderr


def test_a_report_that_cannot_be_written_whole_leaves_the_previous_one(tmp_path):
    results, d = tree(tmp_path)
    assert cli("dadam3.report", f"--results={results}", timeout=300).returncode == 0
    before = (results / "REPORT.md").read_bytes() + b"\n" + b"x" * 5000      # larger than the limit below
    (results / "REPORT.md").write_bytes(before)
    assert len(before) > 2000
    r = cli("dadam3.report", f"--results={results}", timeout=300, preexec_fn=_fsize(2000))
    assert r.returncode == 1, r.stderr[-2000:]
    [line] = [x for x in r.stderr.splitlines() if x.strip()]
    assert line.startswith("error: write failed: ") and "(EFBIG)" in line, line
    assert (results / "REPORT.md").read_bytes() == before
    assert not [p for p in results.rglob(".*.tmp")]


def test_a_first_report_whose_figure_cannot_be_written_leaves_no_folder(tmp_path):
    results, d = tree(tmp_path)
    r = cli("dadam3.report", f"--results={results}", timeout=300, preexec_fn=_fsize(2000))
    assert r.returncode == 1, r.stderr[-2000:]
    [line] = [x for x in r.stderr.splitlines() if x.strip()]
    assert line.startswith("error: write failed: ") and "(EFBIG)" in line, line
    assert not (results / "report").exists() and not (results / "REPORT.md").exists()
