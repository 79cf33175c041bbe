"""Sweeps (``python -m dadam3.train -m ...``): a job that diverges, is refused or fails is
recorded in ``<sweep dir>/sweep_status.jsonl`` and the sweep goes on; :class:`SweepStatus`
(a Hydra callback, ``hydra.callbacks.status`` in configs/train.yaml) sums up at the end.

Each record names its invocation (``invocation``: start time and a random suffix, one per
``-m`` command) and, in a sweep over ``resume=``, the job's ``resume``. A sweep run again into
the same ``hydra.sweep.dir`` skips the jobs an earlier invocation finished (or saw diverge) and
resumes the interrupted ones, as the figure scripts do (``overwrite=true`` starts them afresh),
but only a run of the job's own config: a job whose directory holds a run of another identity
(:func:`dadam3.run.checkpoint.resume.identity_diff`: its ``config_resolved.yaml``, else its
checkpoint's config) is refused in one line naming the directory and the keys that differ, and
is never skipped or resumed. A run whose log holds a non-finite or out-of-bound loss
(:func:`dadam3.run.divergence.run_breach`) counts as diverged, whatever its last record says.
A job whose directory another job of the same invocation already used is refused, with
nothing deleted."""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from dadam3.run.checkpoint import checkpoint_path, load
from dadam3.run.checkpoint.resume import identity_diff
from dadam3.run.divergence import run_breach
from dadam3.distributed import exit_on_peer_failure
from dadam3.errors.boundary import failure_of
from dadam3.errors.config import ConfigError
from dadam3.errors.files import write_whole
from dadam3.errors.small_files import LOG, read_small
from dadam3.run.paths import HYDRA_NO_TILDE, check_no_link, check_path, check_usable_dir
from dadam3.errors.stops import Diverged, RunStopped, stop_report
from dadam3.run.rewind import read_records
from dadam3.run.directory import config_on_file
from dadam3.run.hydra_dirs import note_existing
from dadam3.run.schema import config_error
from dadam3.run.signals import Interrupted

log = logging.getLogger(__name__)
SWEEP_STATUS = "sweep_status.jsonl"
INVOCATION_ENV = "DADAM3_SWEEP_INVOCATION"      # set by SweepStatus, inherited by launchers' processes


def sweep_job(run: Callable[[DictConfig, Path], Any], cfg: DictConfig, run_dir: Path) -> None:
    """One job of a ``-m`` sweep, ``run(cfg, run_dir)``: its status, exit status and one line
    go to ``sweep_status.jsonl``. A stop signal (Interrupted) stops the sweep."""
    hc = HydraConfig.get()
    job = {"invocation": os.environ.get(INVOCATION_ENV, "unknown"), "job": hc.job.num,
           "overrides": hc.job.override_dirname, "dir": str(run_dir)}
    if cfg.get("resume"):
        job["resume"] = str(cfg.resume)
    try:
        _check_own_dir(hc.sweep.dir, run_dir, job)
        earlier = None if cfg.get("resume") or cfg.get("overwrite") else _earlier_run(run_dir, cfg)
        if earlier in ("finished", "diverged"):
            job.update(status=earlier, exit=0 if earlier == "finished" else Diverged.exit_code,
                       message=f"{earlier} in an earlier invocation: skipped")
            log.info("job #%s: %s", job["job"], job["message"])
            _record_job(hc.sweep.dir, job)
            return
        if earlier == "resume":
            cfg = _with_resume(cfg, run_dir)
            job["resume"] = str(run_dir)
        exit_on_peer_failure(run)(cfg, run_dir)
        job.update(status="finished", exit=0, message="")
    except (ConfigError, RunStopped) as e:
        code, line, echo = stop_report(e)
        status = "refused" if isinstance(e, ConfigError) else "diverged" if isinstance(e, Diverged) else \
            "interrupted" if isinstance(e, Interrupted) else "stopped"
        job.update(status=status, exit=code, message=line)
        _record_job(hc.sweep.dir, job)
        if echo:
            print(f"{line} [job #{job['job']}: {job['overrides'] or 'no overrides'}]", file=sys.stderr, flush=True)
        if isinstance(e, Interrupted):
            sys.exit(code)
        return
    except Exception as e:          # recorded, the sweep goes on
        said = failure_of(e)        # an environmental failure: the boundary's one line; a bug: its traceback
        if said is None:
            log.exception("job #%s failed", job["job"])
        code, line, _ = said or (1, f"error: {type(e).__name__}: {' '.join(str(e).split())[:200]}", True)
        job.update(status="failed", exit=code, message=line)
        print(f"{job['message']} [job #{job['job']}: {job['overrides'] or 'no overrides'}]", file=sys.stderr)
    _record_job(hc.sweep.dir, job)


def _earlier_run(run_dir: Path, cfg: DictConfig) -> str | None:
    """What an earlier invocation left in a job's directory: ``finished`` (at this sweep's
    ``loop.iterations`` or beyond), ``diverged`` (its own record, or a loss the divergence rule
    flags), ``resume`` (stopped with a checkpoint, or finished short of the iterations asked
    now), or None (nothing, or no checkpoint to resume: the run itself says what it refuses).
    A run of another config is refused (:func:`_check_same_run`)."""
    log_path = Path(run_dir) / "metrics.jsonl"
    if not log_path.is_file():
        return None
    _check_same_run(Path(run_dir), cfg)
    records = read_records(log_path)
    last = records[-1] if records else None
    if last is None:
        return None
    if run_breach(records) is not None:
        return "diverged"
    iterations = (cfg.get("loop") or {}).get("iterations")
    if last.get("status") == "finished" and (iterations is None or last.get("iteration", -1) >= iterations):
        return "finished"
    return "resume" if checkpoint_path(run_dir).is_file() else None


def _check_same_run(run_dir: Path, cfg: DictConfig) -> None:
    """Refuse (one line naming the directory and the keys that differ) a job whose directory
    holds a run of another identity, or a run whose config cannot be read."""
    stored = _stored_config(run_dir)
    if stored is None:
        raise ConfigError("hydra.sweep.dir", str(run_dir), "holds a run whose config is unknown (no readable "
                                                           "config_resolved.yaml or checkpoint): choose another "
                                                           "hydra.sweep.dir, or set overwrite=true to replace it")
    try:
        job = OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:          # an interpolation that does not resolve: the run says so too
        raise config_error(e) from None
    differ = identity_diff(stored, job)
    if differ:
        shown = ", ".join(f"{k}={a!r} there, {b!r} in this job" for k, (a, b) in list(differ.items())[:4])
        more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
        raise ConfigError("hydra.sweep.dir", str(run_dir), f"holds a run of another config ({shown}{more}): it is "
                                                           "neither skipped nor continued; choose another "
                                                           "hydra.sweep.dir, a hydra.sweep.subdir that names these "
                                                           "keys (${hydra.job.override_dirname}), or set "
                                                           "overwrite=true to replace it")


def _stored_config(run_dir: Path) -> dict | None:
    """The config of the run in ``run_dir``: its ``config_resolved.yaml``, else its checkpoint's."""
    stored = config_on_file(run_dir)
    if isinstance(stored, dict):
        return stored
    if not checkpoint_path(run_dir).is_file():
        return None
    try:
        ckpt = load(checkpoint_path(run_dir), map_location="cpu", key="resume")
    except ConfigError:
        return None
    return ckpt.get("config") if isinstance(ckpt, dict) and isinstance(ckpt.get("config"), dict) else None


def _with_resume(cfg: DictConfig, run_dir: Path) -> DictConfig:
    cfg = cfg.copy()
    with read_write(cfg), open_dict(cfg):
        cfg.resume = str(run_dir)
    return cfg


def _check_own_dir(sweep_dir: str, run_dir: Path, job: dict) -> None:
    """Refuse a job whose directory an earlier job of this invocation used (a
    ``hydra.sweep.subdir`` that does not differ per job), before anything there is touched."""
    here = os.path.abspath(run_dir)
    for other in read_records(Path(sweep_dir) / SWEEP_STATUS):
        if other.get("invocation") == job["invocation"] and os.path.abspath(other.get("dir", "")) == here:
            raise ConfigError("hydra.sweep.subdir", HydraConfig.get().sweep.subdir,
                              f"job #{job['job']} resolves to {run_dir}, the directory of job #{other.get('job')} of "
                              "this sweep; give every job its own (${hydra.job.override_dirname}, "
                              "${hydra.job.num})")


def _record_job(sweep_dir: str, job: dict) -> None:
    """``job``'s line in ``sweep_status.jsonl``, written by its first rank only (submitit starts a
    job's ranks as tasks of one SLURM job: the job is one line, not one per rank)."""
    if os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) != "0":
        return
    path, line = Path(sweep_dir) / SWEEP_STATUS, (json.dumps(job) + "\n").encode("utf-8")
    fd = os.open(sweep_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:                # one job at a time (jobs of a local launcher run side by side): none loses its line
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        before = read_small(path, LOG) if os.path.lexists(path) else b""
        write_whole(path, lambda f: f.write(before + line))     # never appended in place: a link is replaced
    finally:
        os.close(fd)


class SweepStatus(Callback):
    """Refuses an unusable ``hydra.run.dir`` / ``hydra.sweep.dir`` with one line before Hydra
    creates it (noting what exists, so that what Hydra creates for a refused run can go again:
    :func:`dadam3.run.hydra_dirs.note_existing`), starts an invocation, and ends a sweep with one
    summary line and exit status 1 when any of its jobs did not finish."""

    def __init__(self):
        self._invocation = None

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        _usable_or_exit("hydra.run.dir", config.hydra.run.dir)
        note_existing(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        _usable_or_exit("hydra.sweep.dir", config.hydra.sweep.dir)
        _status_file_or_exit(config.hydra.sweep.dir)
        _launcher_or_exit(config.hydra.launcher)
        note_existing(config.hydra.sweep.dir)
        self._invocation = f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}-{uuid.uuid4().hex[:8]}"
        os.environ[INVOCATION_ENV] = self._invocation

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        status = Path(config.hydra.sweep.dir) / SWEEP_STATUS
        # each job once (its last record): a job of several ranks (submitit's tasks) is one job
        jobs = list({j.get("job"): j for j in read_records(status)
                     if j.get("invocation") == self._invocation}.values())
        failed = [j for j in jobs if j.get("status") != "finished"]
        if not failed:
            print(f"sweep: all {len(jobs)} jobs finished", file=sys.stderr, flush=True)
            return
        which = "; ".join(f"#{j.get('job')} {j.get('overrides') or '(no overrides)'}: {j.get('status')}"
                          for j in failed)
        print(f"error: sweep: {len(failed)} of {len(jobs)} jobs did not finish ({which}); see {status}",
              file=sys.stderr, flush=True)
        sys.exit(1)


def _launcher_or_exit(launcher: DictConfig) -> None:
    """A launcher that cannot start on this machine, refused in one line before any job: SLURM's
    without ``srun``/``sbatch`` on PATH (not a SLURM cluster's login node)."""
    target = str(launcher.get("_target_", ""))
    missing = [tool for tool in ("srun", "sbatch") if "Slurm" in target and shutil.which(tool) is None]
    if missing:
        print(f"error: hydra/launcher ({target.rsplit('.', 1)[-1]}) needs SLURM, but {' and '.join(missing)} "
              f"{'is' if len(missing) == 1 else 'are'} not on PATH (not a SLURM cluster's login node): run there, or "
              "use hydra/launcher=submitit_local or the default launcher", file=sys.stderr, flush=True)
        sys.exit(2)


def _usable_or_exit(key: str, path: str) -> None:
    """Hydra's directory as resolved (a ``${...}`` value the command line's check could not read):
    its name (:func:`check_path`), no ``~`` (Hydra does not expand it), usable."""
    try:
        check_path(key, str(path))
        if str(path).startswith("~"):
            raise ConfigError(key, path, HYDRA_NO_TILDE)
        check_no_link(key, path, path)
        check_usable_dir(key, path)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)


def _status_file_or_exit(sweep_dir: str) -> None:
    """The sweep's :data:`SWEEP_STATUS`, which every job appends to, is a file this process can write."""
    status = Path(sweep_dir) / SWEEP_STATUS
    if os.path.lexists(status) and (status.is_symlink() or not status.is_file() or not os.access(status, os.W_OK)):
        what = ("a symbolic link (nothing is written through one)" if status.is_symlink() else "a directory"
                if status.is_dir() else "not a regular file" if not status.is_file() else "not writable by this user")
        print(f"error: hydra.sweep.dir={sweep_dir}: its {SWEEP_STATUS} is {what}; move it away or choose another "
              "hydra.sweep.dir", file=sys.stderr, flush=True)
        sys.exit(2)
