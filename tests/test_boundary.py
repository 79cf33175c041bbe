"""The entry points' one boundary (issue 33 point 4: :func:`dadam3.errors.boundary.failure_of`,
:func:`dadam3.errors.boundary.exit_on_failure`): every environmental failure -- an OSError of any errno,
memory, an undecodable data file, a missing optional package, a stop signal, a second signal
that a library turned into its own error -- is one line naming the file, key or package, the
right exit status, and a terminal record where a run directory exists; a bug keeps its
traceback."""
import errno
import json
import os
import signal
import time

import pytest

from dadam3.run import signals
from dadam3.errors.boundary import exit_on_failure, failure_of
from dadam3.errors.config import ConfigError, needs_package
from dadam3.errors.files import DataFileError, WriteFailed, writing
from dadam3.errors.stops import StoppedAtOnce
from dadam3.run.loggers import read_jsonl
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer

from trainer_runs import SMALL, TOY, cli, config, one_line


@pytest.fixture(autouse=True)
def no_stop_at_once():
    StoppedAtOnce.raised = None
    yield
    StoppedAtOnce.raised = None


def said(e):
    code, line, echo = failure_of(e)
    assert echo and "\n" not in line
    return code, line


@pytest.mark.parametrize("error, code, start", [
    (OSError(errno.ENOSPC, "No space left on device", "/r/metrics.jsonl"), 1,
     "error: /r/metrics.jsonl: No space left on device (ENOSPC): the file system is full: free space"),
    (OSError(errno.EDQUOT, "Disk quota exceeded", "/r/x"), 1, "error: /r/x: Disk quota exceeded (EDQUOT): the disk"),
    (PermissionError(errno.EACCES, "Permission denied", "/r/samples"), 1,
     "error: /r/samples: Permission denied (EACCES): permission denied: fix the permissions"),
    (OSError(errno.EROFS, "Read-only file system", "/r"), 1, "error: /r: Read-only file system (EROFS): the file "),
    (OSError(errno.EMFILE, "Too many open files"), 1, "error: Too many open files (EMFILE): too many open files: "),
    (OSError(errno.EIO, "Input/output error", "/r/x"), 1, "error: /r/x: Input/output error (EIO): an input/output"),
    (OSError(errno.EADDRINUSE, "Address already in use"), 1, "error: Address already in use (EADDRINUSE): the addr"),
    (OSError(errno.ENOTCONN, "Transport endpoint is not connected", "/mnt/x"), 1,
     "error: /mnt/x: Transport endpoint is not connected (ENOTCONN): check the file and the system"),
    (MemoryError(), 1, "error: out of memory (MemoryError: MemoryError): lower the values that size the run"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to "
                  "allocate 8000000000000 bytes"), 1, "error: out of memory (RuntimeError: [enforce fail"),
    (ModuleNotFoundError("No module named 'wandb'", name="wandb"), 2,
     "error: the Python package wandb is missing or broken (No module named 'wandb'): install it (`pip install "),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 1, "error: a file could not be decoded ("),
    (EOFError("Compressed file ended before the end-of-stream marker was reached"), 1,
     "error: a file could not be decoded (EOFError: Compressed file ended"),
    (KeyboardInterrupt(), 130, "stopped: SIGINT"),
    (DataFileError("/d/n01440764/x.JPEG", "cannot be decoded (OSError: image file is truncated)"), 1,
     "error: unreadable file: /d/n01440764/x.JPEG: cannot be decoded (OSError: image file is truncated); "),
    (ConfigError("nodes", 0, "must be an integer >= 1"), 2, "error: nodes=0: must be an integer >= 1"),
])
def test_every_environmental_failure_is_one_line_with_its_exit_status(error, code, start):
    got_code, line = said(error)
    assert got_code == code and line.startswith(start), line


def test_an_oserror_behind_a_librarys_own_error_and_an_unnamed_file_are_named():
    try:                                   # torch's zip writer: RuntimeError after the OSError
        try:
            raise OSError(errno.EFBIG, "File too large", "/r/checkpoints/last.pt")
        except OSError as e:
            raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0") from e
    except RuntimeError as e:
        assert said(e)[1].startswith("error: /r/checkpoints/last.pt: File too large (EFBIG): the file-size limit")

    def closing(f):                        # a flush at close names no file: the open file object does
        raise OSError(errno.ENOSPC, "No space left on device")
    with open(os.devnull, "w") as f:
        try:
            closing(f)
        except OSError as e:
            assert said(e)[1].startswith(f"error: {os.devnull}: No space left on device (ENOSPC)")


def test_a_bug_keeps_its_traceback():
    assert failure_of(KeyError("loss_d")) is None and failure_of(TypeError("x")) is None


def test_exit_on_failure_prints_one_line_and_exits_with_the_status(capsys):
    @exit_on_failure
    def entry():
        raise OSError(errno.ENOSPC, "No space left on device", "/r/x")

    with pytest.raises(SystemExit) as e:
        entry()
    assert e.value.code == 1
    assert capsys.readouterr().err == "error: /r/x: No space left on device (ENOSPC): the file system is full: " \
                                      "free space, then run the command again\n"

    @exit_on_failure
    def bug():
        raise KeyError("x")

    with pytest.raises(KeyError):
        bug()


def test_a_second_signal_that_a_library_turns_into_its_own_error_is_said_as_the_stop(tmp_path, monkeypatch):
    """A second SIGTERM while a checkpoint is written: torch's writer makes a RuntimeError of it;
    it was said as a disk failure ("free space", exit 1) -- now as the stop (143)."""
    monkeypatch.setattr(signals, "SAME_STOP_S", 0.0)
    path = tmp_path / "last.pt"
    with signals.StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert stop.signum == signal.SIGTERM
        with pytest.raises(StoppedAtOnce) as e, writing(path):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1.0)
            except BaseException as inner:
                raise RuntimeError("unexpected pos 1234 vs 1200") from inner
    assert e.value is StoppedAtOnce.raised and not isinstance(e.value, WriteFailed)
    code, line = said(RuntimeError("unexpected pos"))        # whatever a library made of it
    assert code == 143 and line.startswith("stopped: second SIGTERM: stopped at once")


def test_sigquit_stops_at_once_and_sighup_and_sigusr1_are_noted_as_stops():
    with signals.StopSignals() as stop:
        for sig in (signal.SIGHUP, signal.SIGUSR1):
            stop.signum = None
            os.kill(os.getpid(), sig)
            time.sleep(0.01)
            assert stop.signum == sig
        with pytest.raises(StoppedAtOnce) as e:
            os.kill(os.getpid(), signal.SIGQUIT)
            time.sleep(1.0)
    assert e.value.exit_code == 128 + signal.SIGQUIT and "SIGQUIT: stopped at once" in str(e.value)


def test_a_missing_optional_package_is_refused_at_start_naming_the_key(monkeypatch):
    with pytest.raises(ConfigError) as e:
        needs_package("dadam3_no_such_package", "logger", "wandb", "choose logger=jsonl")
    assert str(e.value).startswith("logger=wandb: needs the Python package dadam3_no_such_package, which is not "
                                   "installed (")
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)      # import wandb raises ImportError
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config([*SMALL, "logger=wandb"])), "/nonexistent/never")
    assert str(e.value).startswith("logger=wandb: needs the Python package wandb, which")


def test_a_wandb_project_name_wandb_refuses_is_named_as_logger_project(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config([*SMALL, "logger=wandb", "logger.mode=offline", "logger.project=a/b"])),
                      tmp_path / "run")
    assert str(e.value).startswith("logger.project=a/b: must be a W&B project name")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, env, said", [
    (["logger=wandb", "logger.mode=offline", "logger.project=a/b"], {}, "logger.project=a/b: must be a W&B project"),
    ([], {"WORLD_SIZE": "2", "RANK": "1"}, "placement=local: this process is rank 1 of WORLD_SIZE=2"),
    (["dataset=fake", "model=dcgan32", "metrics.every=5", "metrics.fid=true", "metrics.cache_dir={file}"], {},
     "metrics.cache_dir={file}: exists and is not a directory"),
])
def test_the_launch_the_logger_and_the_feature_cache_are_checked_with_the_settings(tmp_path, monkeypatch, args,
                                                                                   env, said):
    """Checked by the settings (:func:`train_settings`), so the command line's check refuses them
    before Hydra makes anything, as it does any other key."""
    from dadam3.run.command_line import check_command_line
    file = tmp_path / "a_file"
    file.write_text("")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as e:
        check_command_line("train", ["device=cpu", *(a.format(file=file) for a in args)])
    assert str(e.value).startswith(said.format(file=file)) and "\n" not in str(e.value)


def test_a_damaged_image_met_mid_run_is_named_and_the_log_ends_with_a_record(tmp_path, monkeypatch):
    """A truncated JPEG of Imagenette met mid-run left an empty metrics.jsonl with no status."""
    from PIL import Image
    from dadam3.data.containers import DecodedImages, ImageFiles
    good, bad = tmp_path / "img" / "a.jpg", tmp_path / "img" / "b.jpg"
    good.parent.mkdir()
    Image.new("RGB", (8, 8)).save(good)
    bad.write_bytes(good.read_bytes()[:40])
    images = DecodedImages(ImageFiles(good.parent), (3, 8, 8), None, "imagenette")
    with pytest.raises(DataFileError) as e:
        images.get_batch(__import__("torch").tensor([0, 1]))
    assert str(e.value).startswith(f"{bad}: cannot be decoded (")

    run = tmp_path / "run"
    t = build_trainer(train_settings(config([*TOY, "loop.iterations=6", "loop.log_every=1"])), run)
    step, calls = t.train_step, []

    def failing_step():
        calls.append(1)
        if len(calls) == 3:
            raise e.value
        return step()
    monkeypatch.setattr(t, "train_step", failing_step)
    with pytest.raises(DataFileError):
        t.fit()
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and last["iteration"] == 2 and f"{bad}: cannot be decoded" in last["reason"]


def test_a_users_file_where_samples_belongs_is_found_at_start(tmp_path):
    """It was found only after 10 iterations, with "free space" advice."""
    run = tmp_path / "run"
    assert cli(*SMALL, f"hydra.run.dir={run}").returncode == 0
    before = (run / "metrics.jsonl").read_bytes()
    for p in (run / "samples").iterdir():
        p.unlink()
    (run / "samples").rmdir()
    (run / "samples").write_text("my notes\n")
    r = cli(*TOY, "loop.iterations=6", f"resume={run}")
    assert r.returncode == 2, r.stderr[-2000:]
    one_line(r.stderr, f"error: resume={run}: {run / 'samples'} is a file where the run writes a directory")
    assert (run / "metrics.jsonl").read_bytes() == before and (run / "samples").read_text() == "my notes\n"


def test_an_oserror_mid_run_ends_the_log_and_says_one_line(tmp_path):
    """An OSError that no write of the run's catches (a data file on a failing disk, stood in for
    here by the iteration raising it): one line naming the file, exit 1, the log's record."""
    run = tmp_path / "run"
    t = build_trainer(train_settings(config([*TOY, "loop.iterations=6", "loop.log_every=1"])), run)
    step, calls = t.train_step, []

    def failing_step():
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error", str(tmp_path / "data" / "x.bin"))
        return step()
    t.train_step = failing_step
    with pytest.raises(OSError) as e:
        t.fit()
    code, line = said(e.value)
    assert code == 1 and line.startswith(f"error: {tmp_path / 'data' / 'x.bin'}: Input/output error (EIO)")
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["status"] == "interrupted" and last["reason"].startswith(line)


def test_a_stop_between_jobs_is_forwarded_to_the_sweeps_job_processes(tmp_path):
    """SIGINT to a ``hydra/launcher=submitit_local`` sweep left its jobs training, orphaned: the
    main process's handler now tells its child processes to stop (SIGTERM, which submitit's
    controller forwards to the job, which checkpoints) and waits for them."""
    import subprocess
    import sys
    mark = tmp_path / "stopped"
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              f"signal.signal(signal.SIGTERM, lambda *a: (open({str(mark)!r}, 'w').write('x'), "
                              "sys.exit(0)))\nprint('ready', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline() == "ready\n"
    assert signals._forward_to_children() >= 1
    assert mark.read_text() == "x" and child.poll() is not None


def test_the_traceback_behind_the_one_line_goes_to_the_job_log_only(tmp_path, capsys):
    from dadam3.run.job_log import JobLog
    with pytest.raises(OSError), JobLog() as job_log:
        job_log.attach(tmp_path / "train.log")
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))
    text = (tmp_path / "train.log").read_text()
    assert f"the run ended: error: {tmp_path / 'x'}: No space left on device (ENOSPC)" in text
    assert "Traceback (most recent call last)" in text and "Traceback" not in capsys.readouterr().err


def test_a_checkpoint_write_cut_by_a_second_signal_is_the_stop_not_a_disk_failure(tmp_path, monkeypatch):
    """The trainer's own path: torch's writer made an OSError(EIO) of the StoppedAtOnce, so the
    checkpoint 'failed' ("free space and start again", exit 1); now the stop (143) and its record."""
    run = tmp_path / "run"
    t = build_trainer(train_settings(config([*TOY, "loop.iterations=6", "loop.checkpoint_every=2"])), run)

    def cut(ckpt):
        StoppedAtOnce.raised = StoppedAtOnce(signal.SIGTERM, "second SIGTERM: stopped at once, without finishing the "
                                                             "iteration")
        return "checkpoint write failed: [Errno 5] unexpected pos"
    monkeypatch.setattr(t.checkpointer, "save", cut)
    with pytest.raises(StoppedAtOnce) as e:
        t.fit()
    assert said(e.value)[0] == 143
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["status"] == "interrupted" and "second SIGTERM" in last["reason"] and "free space" not in last["reason"]
