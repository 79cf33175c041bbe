"""Every entry point's command line, checked whole before anything acts on it: before Hydra
composes or creates a directory, before torchrun starts a rank, before a study or a plot writes.

:func:`check_command_line` (``python -m dadam3.train`` and ``dadam3.synthetic``, and the launcher
for the command it starts) checks, each refusal one line (``error: key=value: what is allowed``,
exit status 2):

* a ``--multirun`` whose jobs would continue the same run (``resume=RUN`` with a swept key), and
  a single run given a sweep (a comma: ``resume=/tmp/a,b``; Hydra's quotes pass one value, ``'/tmp/a,b'``);
* every path given (Hydra's run and sweep directories, the schema's path keys): its length
  against the file system's ``NAME_MAX`` and ``PATH_MAX`` and its characters (:func:`check_path`),
  and no ``~`` at the start of Hydra's directories (Hydra does not expand it);
* every override's key, type and range against the schema
  (:func:`dadam3.run.schema.check_overrides`);
* for a single run, Hydra's composition of the command line (``~loop.log_every``, a typo in a
  ``hydra.*`` key, a value Hydra cannot take: one line, a resume's too), and for one that starts
  afresh the whole composed config as the run will read it (the settings' cross-checks: an option
  that cannot apply on this machine, ``loop.lr_warmup`` longer than the run, ...), so no refusal
  waits for Hydra's directory.

The argparse entry points (gossip study, plot, report) check theirs with the same path check and a
parser whose refusal is one line (:mod:`dadam3.run.paths`: ``ArgumentParser``, ``path_argument``).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException

from dadam3.errors.config import ConfigError
from dadam3.errors.files import DataFileError
from dadam3.run.paths import HYDRA_NO_TILDE, check_path
from dadam3.run.schema import check_overrides, compose, synthetic_settings, train_settings

DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")
# the schema's keys whose value is a path (read or written by the run)
PATH_KEYS = ("resume", "dataset.root", "metrics.cache_dir", "metrics.inception_weights", "topology.file",
             "logger.dir", "logger.save_dir")
MULTIRUN_FLAGS = ("-m", "--multirun")


def check_command_line(config_name: str, argv: Sequence[str]) -> None:
    """The whole command line of ``python -m dadam3.<config_name>`` (see the module docstring)."""
    parsed = _parsed(argv)
    multirun = any(a in MULTIRUN_FLAGS for a in argv) or any(
        o.key_or_group == "hydra.mode" and o.value() == "MULTIRUN" for o in parsed)   # Hydra takes no other spelling
    for o in parsed:
        if o.key_or_group in (*DIR_KEYS, *PATH_KEYS):
            for value in _values(o):
                if isinstance(value, str) and "${" not in value:
                    check_path(o.key_or_group, value)
                if o.key_or_group in DIR_KEYS and isinstance(value, str) and value.startswith("~"):
                    raise ConfigError(o.key_or_group, value, HYDRA_NO_TILDE)
        if o.key_or_group == "hydra.output_subdir" and o.value() is not None:
            raise ConfigError(o.key_or_group, o.input_line.partition("=")[2],
                              "the run writes .hydra/ itself once its checks passed (Hydra would write it into "
                              "the directory first, another run's too, even when the run is refused); leave it null")
    if multirun:
        check_sweep_of_resume(parsed)
    else:
        check_no_sweep(parsed)
    check_overrides(config_name, argv, None if multirun else _resumed_run_config(parsed))
    if not multirun:
        overrides = [o.input_line for o in parsed if not o.key_or_group.startswith("hydra/")]   # not Hydra's groups
        cfg = compose(config_name, overrides, checked=True)     # check_overrides above saw them all, Hydra its keys
        if not any(o.key_or_group == "resume" for o in parsed):     # a resume's settings are its run's config's
            (train_settings if config_name == "train" else synthetic_settings)(cfg)


def _resumed_run_config(parsed: Sequence[Any]) -> dict[str, Any] | None:
    """A resume's run config (its checkpoint's, read once for the whole start: :func:`run_config`),
    or None (no resume, or one the run's own checks will refuse in their words)."""
    from dadam3.run.resume_config import run_config
    resume = next((o.value() for o in parsed if o.key_or_group == "resume" and not o.is_sweep_override()), None)
    if not resume:
        return None
    try:
        return run_config(str(resume))
    except (ConfigError, OSError, DataFileError):
        return None


def check_no_sweep(parsed: Sequence[Any]) -> None:
    """A single run whose override Hydra reads as a sweep (a comma: ``resume=/tmp/a,b``; ``range()``,
    ``choice()``, ``glob()``), which Hydra refuses in five lines after loading: one line instead,
    naming the key and value, and how to pass a value holding a comma (Hydra's quotes)."""
    for o in parsed:
        if not o.is_sweep_override():
            continue
        key, _, value = o.input_line.partition("=")
        if o.value_type is ValueType.SIMPLE_CHOICE_SWEEP:
            raise ConfigError(key, value, f"a comma makes this a sweep over {len(_values(o)) or 'several'} values, "
                                          f"which needs --multirun; a value holding a comma is quoted for Hydra: "
                                          f"{key}='{value}' (in the shell: \"{key}='{value}'\")")
        raise ConfigError(key, value, "a sweep, which needs --multirun (-m); a single run takes one value")


def check_sweep_of_resume(parsed: Sequence[Any]) -> None:
    """A ``--multirun`` with ``resume=`` runs one job per run it resumes: a swept key beside it would
    have several jobs continue one run (job 0 extends it, job 1 would extend job 0's under other
    values). Refused in one line: sweep ``resume=`` alone, or start each job afresh."""
    resume = next((o for o in parsed if o.key_or_group == "resume"), None)
    if resume is None or not any(_values(resume)):
        return
    runs = len(_values(resume))
    jobs = math.prod(len(_values(o)) or 1 for o in parsed if o.is_sweep_override())
    if jobs > runs:
        swept = [o.input_line for o in parsed if o.is_sweep_override() and o is not resume]
        raise ConfigError("resume", resume.get_value_element_as_str(),
                          f"cannot be combined with a --multirun over {', '.join(swept)}: its {jobs} jobs would "
                          f"continue {runs} run(s), each job one run; resume each run with its own values, or "
                          "sweep without resume= (each job a new run)")


def _parsed(argv: Sequence[str]) -> list:
    out = []
    for arg in argv:
        if arg.startswith("-"):
            continue
        try:
            out += OverridesParser.create().parse_overrides([arg])
        except HydraException:
            if "=" not in arg:          # a flag's value (--cfg job): Hydra reads it
                continue
            key, _, value = arg.partition("=")
            shown = value.encode("unicode_escape").decode("ascii")
            raise ConfigError(key, shown, "not a value Hydra's override grammar can read (a newline, a bracket or "
                                          f"a quote it does not allow): quote it, {key}='...', or choose "
                                          "another") from None
    return out


def _values(o: Any) -> list:
    if not o.is_sweep_override():
        return [o.value()]
    try:
        return list(o.sweep_string_iterator())
    except HydraException:
        return []
