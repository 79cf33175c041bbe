"""The run contract's mechanisms (docs/run_contract.md, issue 44), each table-driven over every entry
point it applies to, through the real command line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainer_runs import SMALL

ROOT = Path(__file__).resolve().parent.parent
ENTRY = {"train": ("dadam3.train", [*SMALL, "loop.iterations=2"]),
         "synthetic": ("dadam3.synthetic", ["iterations=50"])}


def cli(module, *args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, **kw)


def said(stderr: str) -> list[str]:
    """The lines an entry point printed on stderr that a user reads (errors, warnings, stops)."""
    return [x for x in stderr.splitlines() if x.startswith(("error", "warning", "stopped", "Traceback"))
            or "WARNING" in x]


# ---------------------------------------------------------------- 3: overwrite deletes only what the run wrote

@pytest.mark.parametrize("entry", ["train", "synthetic"])
def test_overwrite_keeps_a_file_added_to_the_manifest_and_names_it(tmp_path, entry):
    module, args = ENTRY[entry]
    run = tmp_path / "run"
    assert cli(module, *args, f"hydra.run.dir={run}").returncode == 0
    with open(run / "manifest.txt", "a") as f:
        f.write("thesis.tex\n")
    (run / "thesis.tex").write_text("my thesis\n")
    r = cli(module, *args, "overwrite=true", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    assert (run / "thesis.tex").read_text() == "my thesis\n"
    [line] = [x for x in said(r.stdout + r.stderr) if "thesis.tex" in x]    # the job log's console: stdout
    assert "kept thesis.tex" in line, r.stderr


@pytest.mark.parametrize("entry", ["train", "synthetic"])
def test_overwrite_refuses_a_run_file_replaced_since_and_deletes_nothing(tmp_path, entry):
    """A name the run wrote, stamped, then replaced by another file (a user's file in its place):
    overwrite=true would write there, so it is refused in one line, nothing deleted."""
    module, args = ENTRY[entry]
    run = tmp_path / "run"
    assert cli(module, *args, f"hydra.run.dir={run}").returncode == 0
    (run / "provenance.json").unlink()
    (run / "provenance.json").write_text("[]\n")        # a new file (inode) in the run's place
    before = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    r = cli(module, *args, "overwrite=true", f"hydra.run.dir={run}")
    assert r.returncode == 2 and said(r.stderr) == [said(r.stderr)[0]], r.stderr
    assert said(r.stderr)[0].startswith("error: overwrite=True: provenance.json in "), r.stderr
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == before


FOLDERS = {     # case: (entry point, the run's folder, the user's file: added beside the run's / put in place of one)
    "train samples, added": ("train", "samples", "added"),
    "train checkpoints, replaced": ("train", "checkpoints", "replaced"),
    "train samples, added before a resume": ("train", "samples", "before resume"),
    "synthetic .hydra, added": ("synthetic", ".hydra", "added"),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.slow] if FOLDERS[c][2] == "before resume" else [])
                                  for c in FOLDERS])
def test_overwrite_deletes_in_a_runs_folder_only_what_it_wrote_and_names_the_folder_it_keeps(tmp_path, case):
    """In the run's folders (samples/, checkpoints/, .hydra/) overwrite=true deletes a file only
    while its stamp in the manifest says the run wrote it; the folder goes only when that empties
    it, else it is kept and named in one warning line."""
    entry, folder, how = FOLDERS[case]
    module, args = ENTRY[entry]
    args = [*args, "loop.sample_every=1", "metrics.every=0"] if entry == "train" else args
    run = tmp_path / "run"
    assert cli(module, *args, f"hydra.run.dir={run}").returncode == 0
    theirs = sorted(p.name for p in (run / folder).iterdir())
    user = run / folder / ("thesis.tex" if how != "replaced" else theirs[0])
    if how == "replaced":
        user.unlink()
    user.write_text("my thesis\n")
    if how == "before resume":        # the resume stamps its folders: a file older than its start is not its own
        r = cli(module, f"resume={run}", "loop.iterations=3")
        assert r.returncode == 0, r.stderr
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    r = cli(module, *args, "overwrite=true", f"hydra.run.dir={run}")
    assert user.read_text() == "my thesis\n"
    if how == "replaced":           # the new run would write over it: refused, nothing deleted
        assert r.returncode == 2 and said(r.stderr) == [
            f"error: overwrite=True: {folder}/{user.name} in {run} is no longer what the old run wrote "
            "(replaced since; its manifest.txt says what it wrote): move it away yourself; nothing was deleted"],\
            r.stderr
        assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before
        return
    assert r.returncode == 0, r.stderr
    [line] = [x for x in said(r.stdout + r.stderr) if "kept" in x]
    assert f"kept {folder}/ (not empty: {folder}/{user.name})" in line, line
    assert all((run / folder / n).stat().st_mtime > user.stat().st_mtime for n in theirs if n != user.name)


# ---------------------------------------------------------------- 2: the report validates every record

def _drop_fid(recs):
    for key in [k for k in recs[1] if k.startswith("fid_")]:       # the last evaluation keeps its IS and KID
        del recs[1][key]


REPORT_REFUSALS = {     # case: (change the run's records, what the one line says)
    "last evaluation without any FID": (_drop_fid, "line 2: an evaluation record without fid_mean"),
    "records out of order": (lambda recs: recs.insert(1, {"iteration": 50, "loss_d": 1.0}),
                             "line 2: iteration 50 after iteration 100"),
}


@pytest.mark.parametrize("case", REPORT_REFUSALS)
def test_the_report_refuses_a_record_it_cannot_use_in_one_line_writing_nothing(tmp_path, case):
    import json

    from report_plan_runs import make_run
    change, words = REPORT_REFUSALS[case]
    results = tmp_path / "results"
    d = make_run(results, "adam3", 8e-4, 0, 90.0, family="fig2")
    recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    change(recs)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = cli("dadam3.report", f"--results={results}")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and words in r.stderr, r.stderr
    assert not (results / "REPORT.md").exists() and not (results / "report").exists()


# ---------------------------------------------------------------- 4: checksums in sha256sum's formats, or refused

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 2-iteration run with its checkpoint."""
    run = tmp_path_factory.mktemp("trained") / "run"
    r = cli("dadam3.train", *ENTRY["train"][1], f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    return run


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _nan_weights(path: Path) -> None:
    """The checkpoint re-saved (torch's format, no checksum) with one weight NaN."""
    import torch
    ckpt = torch.load(path, weights_only=False)

    def first(value):
        if isinstance(value, dict):
            return next((t for v in value.values() if (t := first(v)) is not None), None)
        if isinstance(value, (list, tuple)):
            return next((t for v in value if (t := first(v)) is not None), None)
        return value if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() else None

    weight = first({k: v for k, v in ckpt.items() if k != "config"})
    weight[(0,) * weight.dim()] = float("nan")
    torch.save(ckpt, path)
    (path.parent / (path.name + ".sha256")).unlink()


def _gnu(h, name):
    return f"{h}  {name}\n"


CHECKSUMS = {   # case: (the checksum file from (hash, name), damage the checkpoint, exit status, what stderr says)
    "bsd tag, intact": (lambda h, n: f"SHA256 ({n}) = {h}\n", None, 0, None),
    "upper case, intact": (lambda h, n: _gnu(h.upper(), n), None, 0, None),
    "binary mode, intact": (lambda h, n: f"{h} *{n}\n", None, 0, None),
    "bsd tag, damaged": (lambda h, n: f"SHA256 ({n}) = {h}\n", _flip_a_byte, 2, "corrupt checkpoint"),
    "upper case, damaged": (lambda h, n: _gnu(h.upper(), n), _flip_a_byte, 2, "corrupt checkpoint"),
    "empty": (lambda h, n: "", None, 2, "unreadable checksum file last.pt.sha256 (empty"),
    "garbage": (lambda h, n: "not a hash\n", _flip_a_byte, 2, "unreadable checksum file last.pt.sha256 (line 1 "),
    "short hash": (lambda h, n: _gnu(h[:40], n), None, 2, "unreadable checksum file"),
    "no checksum, NaN weights": (None, _nan_weights, 2, "no last.pt.sha256 beside it, which every checkpoint of this "
                                                        "code has"),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.slow] if CHECKSUMS[c][2] == 0 else [])
                                  for c in CHECKSUMS])       # a resume that trains: > 20 s under load
def test_a_checksum_is_read_in_sha256sums_formats_or_refused(trained, tmp_path, case):
    import shutil
    write, damage, status, words = CHECKSUMS[case]
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    ckpt = run / "checkpoints" / "last.pt"
    digest = subprocess.run(["sha256sum", str(ckpt)], capture_output=True, text=True, check=True).stdout.split()[0]
    if write is not None:
        (ckpt.parent / "last.pt.sha256").write_text(write(digest, "last.pt"))
    if damage is not None:
        damage(ckpt)
    log = (run / "metrics.jsonl").read_bytes()
    r = cli("dadam3.train", f"resume={run}", "loop.iterations=3")
    assert r.returncode == status, r.stderr
    if status:
        assert [x for x in r.stderr.splitlines() if x.strip()] == [said(r.stderr)[0]], r.stderr
        assert said(r.stderr)[0].startswith(f"error: resume={run}") and words in r.stderr, r.stderr
        assert "diverged" not in r.stderr and (run / "metrics.jsonl").read_bytes() == log


# ---------------------------------------------------------------- 8: whole files under a temporary name, renamed

def _fsize(limit):
    import resource

    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


def _png_sample(tmp_path, limit):
    run = tmp_path / "run"
    r = cli("dadam3.train", *SMALL, "metrics.every=0", "loop.sample_every=2", "loop.checkpoint_every=1000",
            "loop.iterations=4", f"hydra.run.dir={run}", preexec_fn=_fsize(limit))
    return r, run / "samples"


def _png_plot(tmp_path, limit):
    run = tmp_path / "synthetic"
    assert cli("dadam3.synthetic", "iterations=200", f"hydra.run.dir={run}").returncode == 0
    out = tmp_path / "figure"
    out.mkdir()
    r = cli("dadam3.plot", "fig1", f"--run=a={run}", f"--out={out / 'fig1.png'}", preexec_fn=_fsize(limit))
    return r, out


@pytest.mark.parametrize("entry", ["train samples", "plot"])
def test_an_image_that_cannot_be_written_whole_leaves_no_file_and_is_one_line(tmp_path, entry):
    """Past the file-size limit (as a full disk): the PNG is written under a temporary name and
    renamed only when complete, so no empty or partial PNG and no temporary file is left."""
    r, where = (_png_sample if entry == "train samples" else _png_plot)(tmp_path, 20_000)   # a PNG: > 20 kB
    assert r.returncode in (1, 2), r.stderr
    [line] = [x for x in r.stderr.splitlines() if x.startswith("error")]
    assert ".png" in line and ("limit" in line or "too large" in line.lower()), r.stderr
    assert not [p for p in where.rglob("*") if p.is_file()], sorted(where.rglob("*"))


# ---------------------------------------------------------------- 5-7: the command line, checked before Hydra

LONG = "x" * 300
REFUSED = [     # (entry point, its arguments, the line's start): one line, exit status 2, no directory made
    ("dadam3.train", ["experiment=toy_gaussians", f"hydra.run.dir={{tmp}}/{LONG}"], "error: hydra.run.dir="),
    ("dadam3.synthetic", [f"hydra.run.dir={{tmp}}/{LONG}"], "error: hydra.run.dir="),
    ("dadam3.train", ["experiment=toy_gaussians", "-m", "seed=0,1", f"hydra.sweep.dir={{tmp}}/{LONG}"],
     "error: hydra.sweep.dir="),
    ("dadam3.train", ["experiment=toy_gaussians", "hydra.run.dir={tmp}/a\nb"], "error: hydra.run.dir="),
    ("dadam3.train", ["experiment=toy_gaussians", "device=auto", "cuda.graphs=true", "hydra.run.dir={tmp}/r"],
     "error: cuda.graphs=true: only used with a CUDA device"),
    ("dadam3.train", ["experiment=toy_gaussians", "loop.iterations=10", "loop.lr_warmup=11", "hydra.run.dir={tmp}/r"],
     "error: loop.lr_warmup=11: longer than the run (loop.iterations=10)"),
    ("dadam3.train", ["resume={tmp}/a,b"], "error: resume={tmp}/a,b: a comma makes this a sweep over 2 values, which "
     "needs --multirun; a value holding a comma is quoted for Hydra: resume='{tmp}/a,b'"),
    ("dadam3.synthetic", ["hydra.run.dir={tmp}/a,b"], "error: hydra.run.dir={tmp}/a,b: a comma makes this a sweep"),
    ("dadam3.train", ["experiment=toy_gaussians", "seed=range(0,2)", "hydra.run.dir={tmp}/r"],
     "error: seed=range(0,2): a sweep, which needs --multirun"),
    ("dadam3.train", ["experiment=toy_gaussians", "loop.iterations=ten", "hydra.run.dir={tmp}/r"],
     "error: loop.iterations=ten"),
    ("dadam3.synthetic", ["nodes=-1", "hydra.run.dir={tmp}/r"], "error: nodes=-1"),
    ("dadam3.train", ["resume={tmp}/run", "optimizer.lr=1e-3,5e-3", "--multirun", "hydra.sweep.dir={tmp}/s"],
     "error: resume={tmp}/run: cannot be combined with a --multirun over optimizer.lr=1e-3,5e-3"),
    ("dadam3.launch", ["--standalone", "--nproc-per-node=2", "-m", "dadam3.train",
                                   "experiment=toy_gaussians", "placement=distributed", "loop.iterations=10",
                                   "loop.lr_warmup=11", "hydra.run.dir={tmp}/r"], "error: loop.lr_warmup=11"),
    ("dadam3.gossip_study", ["--smoke", "--jobs", "64", "--out", "{tmp}/g"], "error: --jobs=64: more than the study's"),
    ("dadam3.gossip_study", ["--smoke", "--out", f"{{tmp}}/{LONG}"], "error: argument --out: the name"),
    ("dadam3.plot", ["fig1", "--run=a={tmp}", f"--out={{tmp}}/{LONG}.png"], "error: argument --out: the name"),
    ("dadam3.report", [f"--results={{tmp}}/{LONG}"], "error: argument --results: the name"),
]


@pytest.mark.parametrize("module, args, start", REFUSED, ids=[f"{m.split('.')[-1]}-{i}" for i, (m, _, _) in
                                                               enumerate(REFUSED)])
def test_a_bad_command_line_is_one_line_before_anything_is_made(tmp_path, module, args, start):
    (tmp_path / "run").mkdir()
    before = sorted(tmp_path.rglob("*"))
    r = cli(module, *[a.replace("{tmp}", str(tmp_path)) for a in args], timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(start.replace("{tmp}", str(tmp_path))), r.stderr[-2000:]
    assert sorted(tmp_path.rglob("*")) == before


def test_every_project_error_survives_a_pickle_round_trip():
    """Sent between ranks (torch.distributed's object collectives pickle them) or back from a job
    process: the same type, line, fields and echo."""
    import pickle

    from dadam3.distributed.failures import DistributedTimeout
    from dadam3.errors.config import ConfigError
    from dadam3.errors.files import DataFileError, WriteFailed
    from dadam3.errors.stops import Diverged, StoppedAtOnce
    from dadam3.gan.finiteness import TrainingDiverged
    from dadam3.plot import PlotInputError
    from dadam3.run.checkpoint.files import CheckpointNotWritten
    from dadam3.run.signals import Interrupted
    refused = ConfigError("rows", 4, "must be an integer divisor of {nodes}", refs={"nodes": 6}, said={"nodes": "n"})
    refused.echo = False
    for error in (refused, WriteFailed("/x/y.png", "No space left on device (ENOSPC)"), Interrupted("SIGTERM", 15),
                  DataFileError("/d/x.gz", "truncated", line=3), Diverged("at iteration 3"),
                  StoppedAtOnce(15, "second SIGTERM"), DistributedTimeout("peer gone", 1, [0], 30.0),
                  PlotInputError("--out=x: empty"), TrainingDiverged.__new__(TrainingDiverged, "node 2"),
                  CheckpointNotWritten.__new__(CheckpointNotWritten, "full")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and again.__dict__ == error.__dict__


def test_the_gossip_study_stops_on_sigterm_with_one_line_and_143(tmp_path):
    import signal
    import time
    p = subprocess.Popen([sys.executable, "-m", "dadam3.gossip_study", "--smoke", "--jobs", "2", "--out",
                          str(tmp_path / "g")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("gossip study: ")         # started: its cells are under way
    time.sleep(2)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    assert [x for x in err.splitlines() if x.strip()] == [
        "stopped: SIGTERM: the running cells were stopped; finished cells are kept, rerun to go on"], err


# ---------------------------------------------------------------- 9: messages that name the real cause

def test_a_resume_whose_log_finished_after_its_checkpoint_names_that(trained, tmp_path):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    older = tmp_path / "older"
    shutil.copytree(run / "checkpoints", older)
    r = cli("dadam3.train", f"resume={run}", "loop.iterations=4")
    assert r.returncode == 0, r.stderr
    for name in ("last.pt", "last.pt.sha256"):           # the checkpoint of iteration 2 put back
        shutil.copy(older / name, run / "checkpoints" / name)
    r = cli("dadam3.train", f"resume={run}")
    assert r.returncode == 2
    assert [x for x in r.stderr.splitlines() if x.strip()] == [
        f"error: resume={run}: the run's log says it finished at iteration 4, but its checkpoint is at iteration 2 "
        "(an older checkpoint put back?): restore the checkpoint of iteration 4, or redo iterations 3-4 from this "
        "one with loop.iterations=4"], r.stderr
