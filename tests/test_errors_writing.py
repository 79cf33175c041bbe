"""Every failed write is one line and a terminal record (issue 26 item 8): a file-size limit
(RLIMIT_FSIZE, set in the child before it starts) or a really full file system (a small
tmpfs, where this user may mount one) while writing metrics.jsonl, a sample PNG or a
checkpoint; metrics.jsonl replaced by a directory; torch's zip writer's own error after the
OSError. Real processes: ``python -m dadam3.train``."""
import errno
import json
import os
import resource
import subprocess
from pathlib import Path

import pytest
import torch

from dadam3.run.checkpoint import atomic_save, checkpoint_path
from dadam3.errors.files import WriteFailed, writing
from dadam3.run.loggers import JsonlLogger, read_jsonl

from trainer_runs import SMALL, TOY, cli, one_line

BASE = [*TOY, "metrics.every=0"]


def fsize(limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


def one_error_line(stderr, start):
    lines = [x for x in stderr.strip().splitlines() if x.startswith(("error", "stopped")) or "Traceback" in x]
    assert len(lines) == 1 and lines[0].startswith(start), stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


def whole_lines(path):
    """Every line of the file is complete JSON (no torn last line)."""
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.decode().splitlines()]


def test_metrics_jsonl_past_the_file_size_limit_leaves_no_torn_line(tmp_path):
    run = tmp_path / "run"
    r = cli(*BASE, "loop.log_every=1", "loop.sample_every=1000", "loop.checkpoint_every=1000", "loop.iterations=200",
            f"hydra.run.dir={run}", preexec_fn=fsize(12_000))
    assert r.returncode == 1, r.stderr[-2000:]
    line = one_error_line(r.stderr, f"error: write failed: {run / 'metrics.jsonl'}: File too large (EFBIG)")
    assert "start the run again" in line             # no checkpoint yet: nothing to resume
    records = whole_lines(run / "metrics.jsonl")
    assert records[-1]["status"] == "interrupted" and "metrics.jsonl" in records[-1]["reason"]
    assert all(r["status"] == "running" for r in records[:-1]) and len(records) > 3


def test_a_sample_png_past_the_file_size_limit_is_one_line_and_no_partial_file(tmp_path):
    run = tmp_path / "run"
    r = cli(*BASE, "loop.sample_every=4", "loop.checkpoint_every=1000", "loop.iterations=20",
            f"hydra.run.dir={run}", preexec_fn=fsize(20_000))           # a PNG here is 50-80 kB
    assert r.returncode == 1, r.stderr[-2000:]
    png = run / "samples" / "iter_000004.png"
    one_error_line(r.stderr, f"error: write failed: {png}: ")
    assert not png.exists()                             # no half-written image left behind
    last = whole_lines(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and last["iteration"] == 4 and "iter_000004.png" in last["reason"]


def test_a_checkpoint_past_the_file_size_limit_keeps_nothing_half_written(tmp_path):
    run = tmp_path / "run"
    r = cli(*BASE, "loop.sample_every=1000", "loop.checkpoint_every=3", "loop.iterations=20",
            f"hydra.run.dir={run}", preexec_fn=fsize(40_000))           # a checkpoint here is ~60 kB
    assert r.returncode == 1, r.stderr[-2000:]
    one_error_line(r.stderr, f"error: checkpoint not written: {checkpoint_path(run)} after iteration 3")
    assert not checkpoint_path(run).exists() and not list(checkpoint_path(run).parent.glob(".*.tmp"))
    last = whole_lines(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and last["iteration"] == 3 and "File too large" in last["reason"]


@pytest.mark.slow
def test_metrics_jsonl_replaced_by_a_directory_is_one_line_on_resume(tmp_path):
    run = tmp_path / "run"
    assert cli(*BASE, "loop.iterations=3", f"hydra.run.dir={run}").returncode == 0
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()
    r = cli(*BASE, "loop.iterations=6", f"resume={run}")
    assert r.returncode != 0
    one_error_line(r.stderr, "error")


def test_zip_writer_error_after_a_failed_write_is_an_oserror_saying_why(tmp_path, monkeypatch):
    """torch's zip writer reports a full disk as ``RuntimeError: ... unexpected pos`` (the
    OSError swallowed): atomic_save says it as an OSError, and leaves no temporary file."""
    def failing_save(obj, f):
        f.write(b"PK")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError) as e:
        atomic_save({"x": 1}, tmp_path / "c" / "last.pt")
    assert "unexpected pos" in e.value.strerror and e.value.errno == errno.EIO
    assert list((tmp_path / "c").iterdir()) == []


def test_any_exception_while_writing_names_the_file(tmp_path):
    out = tmp_path / "grid.png"
    with pytest.raises(WriteFailed) as e, writing(out):
        out.write_bytes(b"\x89PNG half")
        raise AttributeError("'_idat' object has no attribute 'fileno'")      # PIL, after the OSError
    assert str(e.value).startswith(f"{out}: ") and "\n" not in str(e.value)


def test_a_logger_write_that_fails_is_cut_back_to_the_last_whole_line(tmp_path, monkeypatch):
    lg = JsonlLogger(tmp_path / "m.jsonl")
    lg.log({"status": "running", "x": 1.0}, step=1)
    real_write = lg._file.write

    def half_then_fail(data):
        if len(data) > 20:
            real_write(bytes(data[:20]))                    # part of the line reached the disk
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(data)
    monkeypatch.setattr(lg, "_file", type("F", (), {"write": staticmethod(half_then_fail),
                                                    "fileno": lg._file.fileno, "closed": False})())
    with pytest.raises(WriteFailed, match=r"No space left on device \(ENOSPC\)"):
        lg.log({"status": "running", "x": 2.0, "pad": "y" * 40}, step=2)
    assert [r["iteration"] for r in read_jsonl(tmp_path / "m.jsonl")] == [1]
    assert (tmp_path / "m.jsonl").read_bytes().endswith(b"\n")


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(mnt, "400k"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_keeps_the_previous_checkpoint_and_ends_the_log(small_disk):
    """A real full file system: the first checkpoint fits, the second (written beside it
    before it replaces it) does not; the first stays and the log says why it stopped."""
    run = small_disk / "run"
    r = cli(*BASE, "loop.log_every=1", "loop.sample_every=1000", "loop.checkpoint_every=3", "loop.iterations=300",
            f"hydra.run.dir={run}")
    assert r.returncode == 1, r.stderr[-2000:]
    line = one_error_line(r.stderr, "error: ")
    assert "No space left on device" in line
    records = whole_lines(run / "metrics.jsonl")
    assert records[-1]["status"] == "interrupted" and "No space left on device" in records[-1]["reason"]
    if checkpoint_path(run).exists():                   # the previous one, whole
        ckpt = torch.load(checkpoint_path(run), weights_only=False)
        assert ckpt["iteration"] % 3 == 0 and ckpt["iteration"] <= records[-1]["iteration"]
    assert not list(checkpoint_path(run).parent.glob(".*.tmp"))


def test_a_metrics_cache_without_room_is_found_before_training(small_disk, tmp_path):
    """A cache directory on a file system without room for the reference features is said up
    front (the evaluation then runs without caching) instead of failing at the first one."""
    from dadam3.metrics.evaluation import cache_too_small
    reason = cache_too_small(str(small_disk / "cache"), 60_000)
    assert reason is not None and "MiB free" in reason
    assert cache_too_small(str(tmp_path / "cache"), 10) is None


def test_the_run_files_written_before_training_are_one_line_and_a_record(tmp_path):
    """config_resolved.yaml / provenance.json past a 1 KiB file-size limit: one line naming the
    file, exit 1, the log's only record ``interrupted`` with the reason."""
    run = tmp_path / "run"
    r = cli(*BASE, "loop.iterations=3", f"hydra.run.dir={run}", preexec_fn=fsize(1024))
    assert r.returncode == 1, r.stderr[-2000:]
    line = one_error_line(r.stderr, f"error: write failed: {run}/")
    assert "File too large (EFBIG)" in line and "start the run again" in line
    (record,) = whole_lines(run / "metrics.jsonl")
    assert record["status"] == "interrupted" and "File too large" in record["reason"]


def test_job_log_past_the_file_size_limit_is_one_line(tmp_path):
    """train.log on a full disk / past RLIMIT_FSIZE: one warning line, no logging tracebacks."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import logging, resource, signal, sys
        from pathlib import Path
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from dadam3.run.job_log import JobLog
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))
        logging.getLogger().setLevel(logging.INFO)
        with JobLog() as job_log:
            job_log.attach(Path(sys.argv[1]) / "train.log")
            for i in range(50):
                logging.getLogger("x").info("record number %d with some text", i)
        print("went on")
    """)
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "went on", r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "train.log: not written" in lines[0] and "File too large" in lines[0], r.stderr


@pytest.mark.slow
def test_a_failed_checkpoint_write_is_one_line_and_a_terminal_record(tmp_path):
    run = tmp_path / "run"
    assert cli(*SMALL, "loop.checkpoint_every=1000", f"hydra.run.dir={run}").returncode == 0
    kept = checkpoint_path(run).read_bytes()
    limit = len(kept) // 2                            # a checkpoint no longer fits; the log does

    def fsize_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = cli(*SMALL, "loop.checkpoint_every=1000", "loop.iterations=6", f"resume={run}", preexec_fn=fsize_limit)
    assert r.returncode == 1, r.stderr[-2000:]
    one_line(r.stderr, f"error: checkpoint not written: {checkpoint_path(run)} after iteration 6 (checkpoint "
                       "write failed: File too large); the previous checkpoint is kept")
    assert checkpoint_path(run).read_bytes() == kept
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and last["iteration"] == 6 and "File too large" in last["reason"]
