"""A run's own records beside its metrics: the job log (``train.log``) and Hydra's provenance
(``.hydra/``), both written only once the run holds its directory."""
from __future__ import annotations

import io
import json
import logging
import logging.handlers
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import torch

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from dadam3.errors.boundary import failure_of
from dadam3.errors.config import ConfigError, one_line
from dadam3.errors.files import DataFileError, open_appending, write_text_whole, writing
from dadam3.errors.small_files import json_value, read_small_text
from dadam3.errors.stops import RunStopped
from dadam3.run.provenance import DIRTY, UNKNOWN, code_diff, code_fields

JOB_LOG = "train.log"
PROVENANCE = "provenance.json"
CODE_DIFF = "code.diff"              # a dirty checkout's changes, beside provenance.json
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"     # Hydra's job log format


class _JobLogFile(logging.FileHandler):
    """``train.log``: a file this run created, holding what the log held before (a resume's:
    :func:`~dadam3.errors.files.open_appending`, so a link or a hard-linked copy is never
    written); a write that fails (full disk, file-size limit) turns the file off with one
    line on stderr instead of logging's traceback per record; the run goes on (its records
    and checkpoints say whether they could be written)."""

    def __init__(self, path: Path, join: bool = False):
        self.join = join            # another rank's: rank 0 made the file new, this one appends to it
        super().__init__(path)

    def _open(self):
        if self.join:               # never through a link; the same file as rank 0's (a copy would drop its lines)
            raw = os.fdopen(os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC),
                            "ab", buffering=0)
        else:
            raw = open_appending(self.baseFilename)
        return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", write_through=True)

    def handleError(self, record: logging.LogRecord) -> None:
        reason = sys.exc_info()[1]
        if not getattr(self, "_failed", False):
            self._failed = True
            sys.stderr.write(f"warning: {self.baseFilename}: not written ({reason}); the job log stops here\n")
        self.setLevel(logging.CRITICAL + 1)

    def flush(self) -> None:
        try:
            super().flush()
        except OSError:
            self.handleError(None)

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            self.handleError(None)
            if self.stream is not None:
                self.stream = None


class JobLog:
    """The job log (``train.log``) in the run directory, written only once the run holds it: log
    records of the checks are kept in memory and written when :meth:`attach` is called (a
    refused run writes no log into another run's directory). Hydra's own file handler is off
    (``hydra/job_logging: console``)."""

    def __init__(self):
        self.buffer = logging.handlers.MemoryHandler(capacity=1 << 20, flushLevel=logging.CRITICAL + 1)
        self.file: logging.Handler | None = None

    def __enter__(self) -> "JobLog":
        logging.getLogger().addHandler(self.buffer)
        return self

    def attach(self, path: Path, join: bool = False) -> None:
        """``join``: append to the ``train.log`` another rank of the run made (rank 0, first)."""
        self.file = _JobLogFile(path, join)
        self.file.setFormatter(logging.Formatter(LOG_FORMAT))
        root = logging.getLogger()
        root.removeHandler(self.buffer)
        for record in self.buffer.buffer:
            self.file.handle(record)
        self.buffer.buffer.clear()
        root.addHandler(self.file)

    def __exit__(self, exc_type, exc, tb) -> None:
        root = logging.getLogger()
        root.removeHandler(self.buffer)
        self.buffer.buffer.clear()
        if self.file is not None and exc is not None and not isinstance(exc, ConfigError):
            # the traceback behind the entry point's one line (dadam3.errors.boundary.failure_of): in the file only
            said = failure_of(exc)
            self.file.handle(logging.getLogger(__name__).makeRecord(
                __name__, logging.ERROR, __file__, 0, "the run ended: %s", (said[1] if said else "internal error",),
                None if isinstance(exc, RunStopped) else (exc_type, exc, tb)))     # a stop it chose: no traceback
        if self.file is not None:
            root.removeHandler(self.file)
            self.file.close()


def hydra_files(cfg: DictConfig, run_dir: Path, resumed_at: int | None = None) -> dict[Path, str]:
    """What Hydra's ``.hydra/`` held (config.yaml, overrides.yaml, hydra.yaml), path -> text: written
    by the run once it holds its directory (``hydra.output_subdir`` is null, so a refused run's Hydra
    writes none over another run's). A resume adds ``.hydra/resumed_<iteration>/`` and keeps the
    original. None outside a Hydra app."""
    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    out = run_dir / ".hydra" if resumed_at is None else run_dir / ".hydra" / f"resumed_{resumed_at:08d}"
    return {out / "config.yaml": OmegaConf.to_yaml(cfg),
            out / "overrides.yaml": OmegaConf.to_yaml(OmegaConf.create(list(hc.overrides.task))),
            out / "hydra.yaml": OmegaConf.to_yaml(OmegaConf.create({"hydra": hc}), resolve=False)}


def write_provenance(cfg: DictConfig, run_dir: Path, resumed_at: int | None = None) -> None:
    """:func:`hydra_files`, written."""
    write_files(hydra_files(cfg, run_dir, resumed_at))


def write_files(files: Mapping[Path, str]) -> None:
    """Each ``path: text`` written (its directory made); a write that fails is
    :class:`~dadam3.errors.files.WriteFailed` naming the file."""
    for path, text in files.items():
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_whole(path, text)


def device_model(device: str) -> str:
    """The accelerator's name, or the CPU's model name from /proc/cpuinfo (platform's otherwise)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or UNKNOWN


def _boot_id() -> str:
    """This boot of this machine (Linux's random boot id): two runs with the same id ran in one session
    of one machine."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return UNKNOWN


def record_provenance(run_dir: Path, device: str, iteration: int, identity: str | None = None) -> None:
    """:func:`provenance_files`, written."""
    write_files(provenance_files(run_dir, device, iteration, identity))


def provenance_files(run_dir: Path, device: str, iteration: int, identity: str | None = None) -> dict[Path, str]:
    """``provenance.json`` with this segment of the run (fresh start or resume at ``iteration``)
    appended, path -> text: when the segment started (UTC), code commit, torch and Python versions,
    device model, this boot of the machine (``machine_session``), thread count, and
    the config's identity (:func:`dadam3.run.checkpoint.resume.run_identity`: a resume that changes a
    key of the identity starts a segment of another one). From a checkout with uncommitted changes
    (commit ``+dirty``) the package's diff goes beside it as ``code.diff``
    (``.hydra/resumed_<iteration>/code.diff`` for a resume), named in the entry (``code_diff``; the files
    its size cap left out: ``code_diff_left_out``)."""
    entry = {"from_iteration": iteration, **({"config_identity": identity} if identity else {}),
             "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             **code_fields(), "torch": torch.__version__,
             "python": platform.python_version(), "device": device, "device_model": device_model(device),
             "machine_session": _boot_id(), "torch_threads": torch.get_num_threads()}
    files = {}
    diff = code_diff() if entry["code_commit"].endswith(DIRTY) else None   # the changes, beside the record
    if diff is not None:
        where = Path(CODE_DIFF) if not iteration else Path(".hydra") / f"resumed_{iteration:08d}" / CODE_DIFF
        files[run_dir / where] = diff[0]
        entry["code_diff"] = where.as_posix()
        if diff[1]:
            entry["code_diff_left_out"] = diff[1]
    earlier = earlier_segments(run_dir) if iteration else []       # a fresh run's is its own
    files[run_dir / PROVENANCE] = json.dumps([s for s in earlier if s["from_iteration"] < iteration] + [entry],
                                             indent=1) + "\n"
    return files


def earlier_segments(run_dir: Path, key: str = "resume", value: Any = None) -> list[dict[str, Any]]:
    """The segments of ``run_dir``'s ``provenance.json`` ([] without one). A file that is not a
    JSON list of segments, each with an integer ``from_iteration``, is one line (``key=value``):
    a resume refuses it before anything is written rather than drop the run's earlier segments."""
    path = Path(run_dir) / PROVENANCE
    if not os.path.lexists(path):
        return []
    try:
        segments = json_value(read_small_text(path), path)
    except (OSError, ValueError) as e:
        why = one_line(e)
    except DataFileError as e:          # a FIFO, a device, a huge or deep file
        why = e.reason
    else:
        if isinstance(segments, list) and all(isinstance(s, dict) and type(s.get("from_iteration")) is int
                                              for s in segments):
            return segments
        why = "not a list of segments, each with an integer from_iteration"
    raise ConfigError(key, value, f"{path} is damaged ({why}): restore it, or move it away to continue without "
                                  "the run's earlier provenance")
