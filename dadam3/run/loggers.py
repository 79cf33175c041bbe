"""Run records: ``metrics.jsonl`` (always local), optional Weights & Biases, a progress bar.

Every logger has the same small interface::

    log(metrics: Mapping, step: int)          one record for iteration ``step``
    log_images(key, images, step)             a sample grid (images N×C×H×W in [-1, 1])
    finish()

JSONL format: one object per line, ``{"iteration": step, **metrics}``, strict JSON.
Tensors and numpy values become Python numbers/lists; non-finite floats become the
strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (the spellings ``float()``
accepts), so a diverged run is still visible and the file stays valid JSON for any
reader. :func:`read_jsonl` turns those strings back into floats.

Resuming: ``JsonlLogger(path, resume_from_iteration=k)`` rewinds the file to what an
uninterrupted run left at iteration ``k`` (the checkpoint's; :mod:`dadam3.run.rewind`).
"""
from __future__ import annotations

import json
import math
import numbers
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from dadam3.errors.config import ConfigError
from dadam3.errors.files import open_appending, write_whole, writing
from dadam3.errors.small_files import LOG, json_value, read_small
from dadam3.run.rewind import rewind

WANDB_MODES = ("online", "offline", "disabled")
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class Logger(Protocol):
    def log(self, metrics: Mapping[str, Any], step: int) -> None: ...
    def log_images(self, key: str, images: Tensor, step: int) -> None: ...
    def finish(self) -> None: ...


# ---------------------------------------------------------------- value conversion

def to_jsonable(value: Any) -> Any:
    """Plain-JSON version of a logged value (see module docstring for non-finite floats)."""
    if isinstance(value, Tensor):
        value = value.detach().cpu()
        value = value.item() if value.dim() == 0 else value.tolist()
    elif isinstance(value, (np.ndarray, np.generic)):
        value = value.tolist()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isfinite(v):
            return v
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot log a value of type {type(value).__name__}: {value!r:.80}")


def _from_json(value: Any) -> Any:
    if isinstance(value, str):
        return _NONFINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All complete records of a ``metrics.jsonl``, non-finite strings turned back into floats.

    Note: a string value that is exactly ``"NaN"``/``"Infinity"``/``"-Infinity"`` is read back
    as a float too. A torn last line (writer killed mid-line) is skipped. Read small
    (:mod:`dadam3.errors.small_files`: a regular file, size and nesting capped).
    """
    lines = read_small(path, LOG).decode("utf-8").split("\n")[:-1]
    return [_from_json(json_value(line, path)) for line in lines if line.strip()]


def _check_iteration(metrics: Mapping[str, Any], step: int) -> None:
    if "iteration" in metrics and int(metrics["iteration"]) != int(step):
        raise ValueError(f"record has iteration={metrics['iteration']} but step={step}")


def _images_to_grid(images: Tensor, nrow: int = 8) -> Tensor:
    """N×C×H×W in [-1, 1] → C×H'×W' grid in [0, 1] on CPU."""
    from torchvision.utils import make_grid

    x = (images.detach().float().cpu().clamp(-1, 1) + 1) / 2
    return make_grid(x, nrow=nrow, padding=2)


# ---------------------------------------------------------------- JSONL

class JsonlLogger:
    """Appends one JSON object per :meth:`log` call to ``path`` (e.g. ``<run_dir>/metrics.jsonl``).

    Each line is written whole, unbuffered, so a killed process loses at most the line being
    written; such a torn last line is removed when the file is opened again. A write that
    fails is cut back at once (:meth:`log`).

    The log is always a file this logger created: what it continues (an existing file, less a
    torn last line; a resume's rewound log) is copied into a new file renamed over ``path``
    (:func:`dadam3.errors.files.open_appending`), so a link or a hard-linked copy of the old log
    is never written. Resuming from a checkpoint at iteration k (``resume_from_iteration=k``)
    continues the log as an uninterrupted run would have left it at k
    (:func:`dadam3.run.rewind.rewind`; ``drop_record_at_resume_point``: the record at k itself
    goes too, see :func:`dadam3.run.rewind.record_at_resume_point_kept`). Opening an existing
    file without ``resume_from_iteration`` continues it.
    """

    def __init__(self, path: str | os.PathLike, resume_from_iteration: int | None = None,
                 drop_record_at_resume_point: bool = False):
        self.path = Path(path)
        with writing(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        content = b""
        if os.path.lexists(self.path):
            if resume_from_iteration is not None:
                content = rewind(self.path, resume_from_iteration, drop_record_at_resume_point)
            else:
                content = read_small(self.path, LOG)
                content = content[:content.rfind(b"\n") + 1]       # a torn last line dropped
        self._file = open_appending(self.path, content)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Append one whole line; a write that fails (disk full, file-size limit) is cut back
        to the line before, so no torn line is left, and raises :class:`WriteFailed`."""
        _check_iteration(metrics, step)
        record = {"iteration": int(step), **{k: to_jsonable(v) for k, v in metrics.items()
                                               if k != "iteration"}}
        line = memoryview((json.dumps(record, allow_nan=False) + "\n").encode("utf-8"))
        with writing(self.path):
            fd = self._file.fileno()
            start = os.fstat(fd).st_size
            try:
                while line:
                    line = line[self._file.write(line):]
            except BaseException:
                os.ftruncate(fd, start)
                raise

    def log_images(self, key: str, images: Tensor, step: int, nrow: int = 8) -> Path:
        """Save the grid as ``<dir of path>/images/<key>/<step:08d>.png`` (``/`` in key → ``_``)."""
        from torchvision.utils import save_image

        out = self.path.parent / "images" / key.replace("/", "_") / f"{int(step):08d}.png"
        with writing(out):
            out.parent.mkdir(parents=True, exist_ok=True)
        write_whole(out, lambda f: save_image(_images_to_grid(images, nrow), f, format="png"))
        return out

    def finish(self) -> None:
        if not self._file.closed:
            self._file.close()


# ---------------------------------------------------------------- Weights & Biases

class WandbLogger:
    """Logs the same records to a W&B run (``wandb.init(..., mode=mode)``), ``step=iteration``.

    ``run_id`` (with ``resume="allow"``) continues an earlier run; W&B ignores steps at or
    below the last one it has, so records repeated after a resume are not duplicated there.
    ``dir`` is where ``wandb/`` (offline runs: ``wandb/offline-run-*/run-<id>.wandb``) goes.
    """

    def __init__(self, project: str, group: str | None = None, job_type: str | None = None,
                 mode: str = "offline", config: Mapping[str, Any] | None = None,
                 dir: str | os.PathLike | None = None, name: str | None = None,
                 run_id: str | None = None, tags: Sequence[str] | None = None):
        if mode not in WANDB_MODES:
            raise ConfigError("logger.mode", mode, f"must be one of {', '.join(WANDB_MODES)}")
        import wandb  # only runs that ask for wandb pay for (and depend on) it

        self._wandb = wandb
        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(project=project, group=group, job_type=job_type, mode=mode,
                                  config=dict(config or {}), dir=None if dir is None else str(dir),
                                  name=name, id=run_id, resume="allow" if run_id else None,
                                  tags=list(tags) if tags else None)
        except (wandb.errors.UsageError, wandb.errors.AuthenticationError, wandb.errors.CommError) as e:
            said = " ".join(str(e).split())[:120]
            if "project" in said.lower() and not isinstance(e, wandb.errors.AuthenticationError):
                raise ConfigError("logger.project", project, f"wandb refuses it ({said})") from None
            raise ConfigError("logger.mode", mode, f"wandb cannot start ({said}); "
                                                   "run `wandb login`, or set logger.mode=offline "
                                                   "(or WANDB_MODE=offline)") from None

    @property
    def run_id(self) -> str:
        return self.run.id

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        _check_iteration(metrics, step)
        data = {k: _from_json(to_jsonable(v)) for k, v in metrics.items() if k != "iteration"}
        self.run.log(data, step=int(step))

    def log_images(self, key: str, images: Tensor, step: int, nrow: int = 8) -> None:
        grid = _images_to_grid(images, nrow)
        array = (grid * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        self.run.log({key: self._wandb.Image(array)}, step=int(step))

    def finish(self) -> None:
        self.run.finish()


# ---------------------------------------------------------------- fan-out and factory

class MultiLogger:
    """Sends every call to each logger; with none (``MultiLogger()``) it logs nothing: the logger
    of every rank but rank 0 under torch.distributed."""

    def __init__(self, *loggers: Logger):
        self.loggers = list(loggers)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for lg in self.loggers:
            lg.log(metrics, step)

    def log_images(self, key: str, images: Tensor, step: int) -> None:
        for lg in self.loggers:
            lg.log_images(key, images, step)

    def finish(self) -> None:
        errors = []
        for lg in self.loggers:
            try:
                lg.finish()
            except Exception as e:  # finish the others before reporting
                errors.append(e)
        if errors:
            raise errors[0]


def build_logger(path: str | os.PathLike, *, resume_from_iteration: int | None = None,
                 drop_record_at_resume_point: bool = False, wandb: Mapping[str, Any] | None = None) -> Logger:
    """A :class:`JsonlLogger` at ``path``; with ``wandb`` (keyword arguments of
    :class:`WandbLogger`; its ``dir`` defaults to the directory of ``path``) the same records
    go to W&B too, so local records never depend on W&B. W&B starts first: a W&B that will not
    start leaves ``path`` untouched (not created, not rewound)."""
    if wandb is None:
        return JsonlLogger(path, resume_from_iteration, drop_record_at_resume_point)
    remote = WandbLogger(**{"dir": Path(path).parent, **wandb})
    try:
        return MultiLogger(JsonlLogger(path, resume_from_iteration, drop_record_at_resume_point), remote)
    except BaseException:
        remote.finish()
        raise


def progress(total: int, initial: int = 0, desc: str | None = None, disable: bool = False) -> tqdm:
    """A tqdm bar over iterations ``initial..total`` showing it/s and ETA (a resumed run starts at
    ``initial``; its rate counts only iterations done in this process)."""
    return tqdm(total=total, initial=initial, desc=desc, unit="it", dynamic_ncols=True,
                smoothing=0.05, disable=disable, file=sys.stderr)
