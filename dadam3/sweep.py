"""Sweeps (``python -m dadam3.train -m ...``): a job that diverges, is refused or fails is
recorded in ``<sweep dir>/sweep_status.jsonl`` and the sweep goes on; :class:`SweepStatus`
(a Hydra callback, ``hydra.callbacks.status`` in configs/train.yaml) sums up at the end."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from dadam3.distributed import exit_on_peer_failure
from dadam3.errors import ConfigError, Diverged, RunStopped, check_usable_dir, stop_report
from dadam3.signals import Interrupted

log = logging.getLogger(__name__)
SWEEP_STATUS = "sweep_status.jsonl"


def sweep_job(run: Callable[[DictConfig, Path], Any], cfg: DictConfig, run_dir: Path) -> None:
    """One job of a ``-m`` sweep, ``run(cfg, run_dir)``: its status, exit status and one line
    go to ``sweep_status.jsonl``. A stop signal (Interrupted) stops the sweep."""
    hc = HydraConfig.get()
    job = {"job": hc.job.num, "overrides": hc.job.override_dirname, "dir": str(run_dir)}
    try:
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
    except Exception as e:          # a bug: recorded, its traceback logged, the sweep goes on
        log.exception("job #%s failed", job["job"])
        job.update(status="failed", exit=1, message=f"error: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
        print(f"{job['message']} [job #{job['job']}: {job['overrides'] or 'no overrides'}]", file=sys.stderr)
    _record_job(hc.sweep.dir, job)


def _record_job(sweep_dir: str, job: dict) -> None:
    with open(Path(sweep_dir) / SWEEP_STATUS, "a", encoding="utf-8") as f:
        f.write(json.dumps(job) + "\n")


class SweepStatus(Callback):
    """Refuses an unusable ``hydra.run.dir`` / ``hydra.sweep.dir`` with one line before Hydra
    creates it, and ends a sweep with one summary line and exit status 1 when any job did not finish."""

    def __init__(self):
        self._start = 0

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        _usable_or_exit("hydra.run.dir", config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        _usable_or_exit("hydra.sweep.dir", config.hydra.sweep.dir)
        status = Path(config.hydra.sweep.dir) / SWEEP_STATUS
        self._start = status.stat().st_size if status.is_file() else 0

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        status = Path(config.hydra.sweep.dir) / SWEEP_STATUS
        jobs = []
        if status.is_file():
            with open(status, encoding="utf-8") as f:
                f.seek(self._start)
                jobs = [json.loads(line) for line in f if line.strip()]
        failed = [j for j in jobs if j["status"] != "finished"]
        if not failed:
            print(f"sweep: all {len(jobs)} jobs finished", file=sys.stderr, flush=True)
            return
        which = "; ".join(f"#{j['job']} {j['overrides'] or '(no overrides)'}: {j['status']}" for j in failed)
        print(f"error: sweep: {len(failed)} of {len(jobs)} jobs did not finish ({which}); see {status}",
              file=sys.stderr, flush=True)
        sys.exit(1)


def _usable_or_exit(key: str, path: str) -> None:
    try:
        check_usable_dir(key, path)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
