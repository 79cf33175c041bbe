"""``python -m dadam3.synthetic``: the synthetic game of Section 5.1 (paper Fig. 1).

Writes ``metrics.csv`` (iteration,error,avg_grad_sq_norm at ~50 log-spaced iterations
and the last), ``status.json`` (``{"status": "finished"}``, or ``"diverged"`` with the
iteration and message, then the exit status is 3; or ``"interrupted"`` after SIGINT/SIGTERM,
with what was logged until then, exit status 130/143), ``synthetic.log`` and ``.hydra/``
into the Hydra run directory. Example::

    python -m dadam3.synthetic optimizer=dp_oadam iterations=1000000 hydra.run.dir=out/dp
    python -m dadam3.synthetic -m optimizer=dadam3,dp_oadam optimizer.lr=1e-2,1e-1

The run directory follows the trainer's contract (:mod:`dadam3.run.directory`): every check comes
before anything is written; a directory holding an earlier synthetic run's results is refused
unless ``overwrite=true`` (which replaces them), one holding a training run's files always;
a live writer's lock is refused. The exit status always matches ``status.json``: a signal
that arrives after the last iteration leaves a finished run (exit 0). A ``-m`` sweep runs
every job (a diverged or refused one is recorded in ``<sweep dir>/sweep_status.jsonl``) and
ends with the trainer's summary line (:class:`dadam3.run.sweep.SweepStatus`).
"""
from __future__ import annotations

import gc

if __name__ == "__main__":          # first: a stop signal while torch, numba and Hydra load is one line
    gc.disable()                    # and no collection while they load (frozen below)
    from dadam3.run.signals import during_start_up
    during_start_up()

import contextlib
import csv
import io
import json
import logging
import signal
from functools import partial
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from dadam3.run.config import CONFIG_DIR
from dadam3.run.schema.presets import run_cli
from dadam3.errors.boundary import exit_on_failure, failure_of
from dadam3.errors.config import ConfigError, named_as
from dadam3.errors.files import write_whole, writing
from dadam3.games.synthetic import SyntheticGame
from dadam3.games.synthetic_run import (SyntheticDiverged, SyntheticInterrupted, SyntheticResult, estimate_bytes,
                                        run_synthetic)
from dadam3.gan.memory import check_bytes
from dadam3.run.job_log import CODE_DIFF, PROVENANCE, JobLog, record_provenance, write_provenance
from dadam3.optim import mixer_for
from dadam3.run.directory import RUN_ID_FILE, RunDir, check_run_dir
from dadam3.run.hydra_dirs import discard_if_unused
from dadam3.run.manifest import RUN_FILES, run_files, stamp_manifest
from dadam3.run.command_line import check_command_line
from dadam3.run.schema import SyntheticConfig, synthetic_settings
from dadam3.run.signals import Interrupted, StopSignals
from dadam3.run.sweep import sweep_job

if __name__ == "__main__":
    # The imports above leave ~290 000 objects that live as long as the process; the cyclic collector
    # traversed them all in each full collection while they loaded and again at exit (0.7 s of a
    # 6.8 s run on a loaded 2-core machine: docs/benchmarks.md). Frozen, no collection looks at them.
    gc.freeze()
    gc.enable()

log = logging.getLogger(__name__)

METRICS, STATUS, JOB_LOG = "metrics.csv", "status.json", "synthetic.log"
RESULTS = (METRICS, STATUS)           # a directory holding one of these holds a synthetic run's results
SHARED_FILES = (RUN_ID_FILE, ".hydra", PROVENANCE, CODE_DIFF)  # every run directory's, the synthetic runner's too
WRITES = (*RESULTS, JOB_LOG, *SHARED_FILES)   # what a synthetic run writes (its manifest lists them)


def check_synthetic_dir(out_dir: Path, overwrite: bool) -> RunDir:
    """Every check of the directory a synthetic run writes into, writing nothing: a training
    run's files are refused; an earlier synthetic run's results unless ``overwrite``; what
    :func:`dadam3.run.directory.check_run_dir` refuses (a live writer's lock, an unusable path, files
    a run writes in a directory that holds no run or that its run did not write); what is
    replaced is what the earlier run's manifest lists."""
    theirs = run_files(out_dir, WRITES)[1] or ()        # a run's own (no run, or not its own: check_run_dir says so)
    trainer = [name for name in RUN_FILES if name not in SHARED_FILES and name in theirs]
    if trainer:
        raise ConfigError("hydra.run.dir", str(out_dir), f"holds a training run's files ({', '.join(trainer)}); "
                                                         "choose another directory")
    earlier = [name for name in (*RESULTS, JOB_LOG) if (out_dir / name).exists() or (out_dir / name).is_symlink()]
    if any(name in RESULTS for name in earlier) and not overwrite:
        raise ConfigError("hydra.run.dir", str(out_dir),
                          f"holds an earlier run's results ({', '.join(earlier)}); choose a new directory, or "
                          "set overwrite=true to replace them")
    for name in earlier:                 # everything overwrite=true deletes can be deleted
        path = out_dir / name
        if path.is_dir():
            raise ConfigError("hydra.run.dir", str(out_dir), f"{path} is a directory, not a run's file; "
                                                             "remove it or choose another directory")
    # only an earlier synthetic run's files can be left (or none): replaced as its manifest lists
    return check_run_dir(out_dir, None, {}, overwrite=True, writes=WRITES)


def write_results(out_dir: Path, result: SyntheticResult, status: dict) -> None:
    """metrics.csv, then status.json, each written whole (a temporary file renamed into place); a
    write that fails (full disk, ``ulimit -f``) is :class:`~dadam3.errors.files.WriteFailed` naming the
    file, its temporary file removed."""
    def table(f) -> None:
        w = csv.writer(f)
        w.writerow(["iteration", "error", "avg_grad_sq_norm"])
        for it, err, r in result.rows():
            w.writerow([it, repr(err), repr(r)])

    _write_whole(out_dir / METRICS, table)
    _write_whole(out_dir / STATUS, lambda f: f.write(json.dumps(status) + "\n"))
    stamp_manifest(out_dir, WRITES)         # what it wrote: overwrite=true deletes only that


def _write_whole(path: Path, write) -> None:
    """``write(text file)`` through :func:`~dadam3.errors.files.write_whole` (a temporary file renamed
    into place; a failure is :class:`~dadam3.errors.files.WriteFailed` naming ``path``)."""
    def text(f) -> None:
        wrapper = io.TextIOWrapper(f, encoding="utf-8", newline="")
        write(wrapper)
        wrapper.flush()
        wrapper.detach()
    write_whole(path, text)


def synthetic_run(cfg: DictConfig, out_dir: Path, stop: StopSignals) -> SyntheticResult:
    """One run: every check, then the directory claimed and its records written, then the game.
    A signal (``stop.signum``, set while ``stop`` is active) ends it as
    :class:`~dadam3.run.signals.Interrupted`."""
    with JobLog() as job_log:
        s = synthetic_settings(cfg)
        t = s.topology
        need, what = estimate_bytes(s.nodes, s.iterations)
        check_bytes("nodes", s.nodes, what, need)          # before the graph is built
        with named_as({**t.keys("topology."), "name": "optimizer"}):   # the graph too, before any write
            mixer_for(s.optimizer.name, s.nodes, t.name, t.rounds, **t.options)
        rd = check_synthetic_dir(out_dir, s.overwrite)
        if stop.signum is not None:            # a signal during the checks: nothing written
            rd.release()
            raise Interrupted(f"{signal.Signals(stop.signum).name} before the run started; nothing was written",
                              stop.signum)
        rd.commit()
        try:
            job_log.attach(out_dir / JOB_LOG)
            with writing(out_dir / ".hydra"):
                write_provenance(cfg, out_dir)
            record_provenance(out_dir, "cpu", 0)          # the code's commit (+ code.diff when dirty)
            stamp_manifest(out_dir, WRITES)
            return _play(s, out_dir, stop)
        except BaseException as e:
            if not isinstance(e, (SyntheticDiverged, Interrupted, ConfigError)):   # written, or a refusal
                _failed_status(out_dir, e)
            raise
        finally:
            rd.release()


def _failed_status(out_dir: Path, e: BaseException) -> None:
    """status.json ``interrupted`` with the line the boundary says (:func:`dadam3.errors.boundary.failure_of`),
    where it can still be written (its disk may be full too)."""
    said = failure_of(e)
    status = {"status": "interrupted", "reason": said[1] if said else f"internal error: {type(e).__name__}: {e}"}
    with contextlib.suppress(Exception):
        _write_whole(out_dir / STATUS, lambda f: f.write(json.dumps(status) + "\n"))


def _play(s: SyntheticConfig, out_dir: Path, stop: StopSignals) -> SyntheticResult:
    o, t = s.optimizer, s.topology
    try:
        with named_as(t.keys("topology.")):
            game = SyntheticGame(s.game.c, s.game.k, s.game.spread)
            result = run_synthetic(game, o.name, o.hparams, s.nodes, s.iterations, seed=s.seed,
                                   topology={"name": t.name, "rounds": t.rounds, **t.options},
                                   engine=s.engine, stop=lambda: stop.signum is not None)
    except SyntheticDiverged as e:
        write_results(out_dir, e.result, {"status": "diverged", "iteration": e.iteration, "message": str(e)})
        raise
    except SyntheticInterrupted as e:
        name = signal.Signals(stop.signum).name
        write_results(out_dir, e.result, {"status": "interrupted", "iteration": e.iteration, "signal": name})
        raise Interrupted(f"{name} {e}; {out_dir / METRICS} holds the iterations logged so far (rerun with "
                          "overwrite=true to start again: the synthetic runner does not resume)", stop.signum) from None
    write_results(out_dir, result, {"status": "finished", "iteration": s.iterations})
    late = "" if stop.signum is None else f" ({signal.Signals(stop.signum).name} came after the last iteration)"
    log.info("%s: %d iterations on %d nodes in %.2f s; final e_k=%.4g R_k=%.4g -> %s%s", o.name, s.iterations,
             s.nodes, result.seconds, result.error[-1], result.avg_grad_sq_norm[-1], out_dir / METRICS, late)
    return result


@exit_on_failure
def run(cfg: DictConfig, out_dir: Path, stop: StopSignals) -> None:
    """``python -m dadam3.synthetic``: one run; a refusal, a stop or an environmental failure is
    one line and its exit status (the boundary: :func:`dadam3.errors.boundary.exit_on_failure`)."""
    synthetic_run(cfg, out_dir, stop)


# Active from the first task's start to the process's end (never restored in between, also not
# between a sweep's jobs): a signal at any moment after it is noted, never the default action,
# so the exit status is decided here and always matches status.json. The handler gives the
# previous one back after the first signal, so a second signal stops the process at once.
_STOP = StopSignals()
_STOP_ACTIVE: list[bool] = []


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="synthetic")
def main(cfg: DictConfig) -> None:
    if not _STOP_ACTIVE:
        _STOP.__enter__()
        _STOP_ACTIVE.append(True)
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            sweep_job(partial(synthetic_run, stop=_STOP), cfg, out_dir)
        else:
            run(cfg, out_dir, _STOP)
    finally:        # Hydra made it before the checks: a refused run leaves no directory of its own
        discard_if_unused(out_dir)


if __name__ == "__main__":
    # the Hydra task by reference to the importable module (not __main__), so launchers that
    # pickle it (submitit) can
    from dadam3.synthetic import main as task
    run_cli(task, groups=("optimizer", "topology"), check=partial(check_command_line, "synthetic"))
