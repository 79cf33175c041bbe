"""A resume's configuration, composed before its settings are checked.

A resume takes its configuration from the run itself, the config stored in its checkpoint
(:func:`run_config`; never from ``.hydra/``, which a copied ``last.pt`` does not have), and
applies only the keys the command line gives (:func:`given_keys`): a key ``k=v`` (and what lies
under it), a group option of another name (its whole group: ``logger=wandb``), the keys a
preset sets (``experiment=X``, ``loop=X``); choosing the run's own option again
(``optimizer=dadam3`` on a Dadam3 run) gives only its name. What may not change is then named,
every such key in one line (:func:`dadam3.run.checkpoint.resume.check_resume`). The checkpoint is
read once (:func:`read_resume`), for the config and the run directory's checks."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from dadam3.run.checkpoint import load, resolve_resume_path, resume_override
from dadam3.run.checkpoint.resume import check_checkpoint, stored_config
import dadam3.run.schema.presets as presets
from dadam3.run.config import flatten
from dadam3.errors.config import ConfigError
from dadam3.run.schema import config_error, merged_overrides
from dadam3.errors.files import DataFileError
from dadam3.run.schema.groups import GROUPS
from dadam3.run.schema.overrides import VALUE_FLAGS
from dadam3.run.schema.runs import only_with

_UNSET = object()
_READ: dict[tuple, tuple[Path, dict]] = {}     # (path, mtime, size) -> (path, checkpoint): the last one read


def resumed_config(cfg: DictConfig) -> DictConfig:
    """With ``resume=``: the run's own config (its checkpoint's, :func:`run_config`) with only the
    keys this command line gives (:func:`given_keys`) taken from ``cfg``'s composition; without,
    ``cfg`` as composed."""
    if not cfg.get("resume"):
        return cfg
    stored = run_config(cfg.resume)
    hc = HydraConfig.get()
    task = list(hc.overrides.task)
    try:        # composed with the run's group options (a sweep over resume= was composed without them)
        composed = hydra.compose(config_name=hc.job.config_name, overrides=merged_overrides(
            group_choices(stored, task), [*task, resume_override(cfg.resume)], ("resume", "overwrite")))
    except Exception as e:
        raise config_error(e) from None
    return with_stored(composed, stored, given_keys(task, stored))


def run_config(resume: str) -> dict[str, Any]:
    """The flattened config of the run ``resume`` names, as its checkpoint stores it; a file that
    is no checkpoint of a run is one line (:func:`read_resume`: the
    file is read once, for this and the run directory's checks)."""
    _, ckpt = read_resume(resume)
    return stored_config(ckpt)


def read_resume(resume: str) -> tuple[Path, dict]:
    """(the checkpoint file ``resume`` names, its content) loaded (:func:`dadam3.run.checkpoint.load`)
    and checked (:func:`check_checkpoint`) once for the resume's config and its run directory's
    checks: the last one read is kept (while the file is unchanged) until :func:`release_resume`."""
    path = resolve_resume_path(resume)
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    if key not in _READ:
        _READ.clear()
        ckpt = load(path, map_location="cpu", key="resume")
        check_checkpoint(ckpt, path)
        _READ[key] = path, ckpt
    return _READ[key]


def release_resume() -> None:
    """Let go of the checkpoint :func:`read_resume` keeps (the run directory holds it until the
    state is loaded)."""
    _READ.clear()


def group_choices(stored: dict[str, Any], overrides: Sequence[str] = ()) -> list[str]:
    """``group=option`` for each group option of the stored config that has its YAML file, but
    the groups a preset among ``overrides`` chooses (``experiment=X``: its choice is given)."""
    chosen = {g for o in _parsed(overrides) if o.key_or_group in ("experiment", "loop")
              and not o.is_sweep_override() and o.value() is not None
              for g in _preset_choices(o.key_or_group, str(o.value()))}
    out = []
    for group, (name_key, _) in GROUPS.items():
        name = stored.get(f"{group}.{name_key}")
        if isinstance(name, str) and presets.exists(group, name) and group not in chosen:
            out.append(f"{group}={name}")
    return out


def _parsed(overrides: Sequence[str]) -> list:
    out = []
    for line in overrides:
        try:
            out += OverridesParser.create().parse_overrides([line])
        except Exception:          # a flag, or not an override: Hydra says why
            continue
    return out


def _preset_choices(group: str, option: str) -> dict[str, str]:
    """The group options a preset's ``defaults:`` chooses (``override /dataset: fashion_mnist``)."""
    found = presets.preset(group, option)
    return found[1] if found else {}


def given_keys(overrides: Sequence[str], stored: dict[str, Any]) -> list[str]:
    """The config keys (each with what lies under it) that ``overrides`` give on a resume of a run
    whose config is ``stored`` (see the module docstring); ``hydra.*`` keys are none."""
    keys: list[str] = []
    for o in _parsed(overrides):
        key = o.key_or_group
        if key.startswith("hydra") or o.package is not None:
            continue
        if not presets.is_group(key):
            keys.append(key)
        elif not o.is_sweep_override() and o.value() is not None:
            keys += _choice_keys(key, str(o.value()), stored)
    return keys


def _choice_keys(group: str, option: str, stored: dict[str, Any]) -> list[str]:
    """What choosing ``group=option`` gives: a named group's name key (its run's own option) or
    the whole group (another); a preset's (``experiment``, ``loop``) keys and group choices."""
    if group in GROUPS:
        name_key = GROUPS[group][0]
        return [f"{group}.{name_key}"] if stored.get(f"{group}.{name_key}") == option else [group]
    found = presets.preset(group, option)
    if found is None:
        return []                            # Hydra has refused an unknown option already
    conf, _, is_global = found
    prefix = "" if is_global else f"{group}."
    keys = [prefix + k for k in flatten({k: v for k, v in conf.items() if k != "defaults"})]
    for g, choice in _preset_choices(group, option).items():
        keys += _choice_keys(g, choice, stored) if g in GROUPS else []
    return keys


def with_stored(composed: DictConfig, stored: dict[str, Any], given: Sequence[str]) -> DictConfig:
    """``composed`` with every stored key that ``given`` does not cover set to its stored value
    (``resume`` and ``overwrite`` excepted). A stored key this version does not know is left out:
    the resume's check names it. A stored key that the given keys make meaningless
    (:func:`dadam3.run.schema.runs.only_with`: ``distributed.*`` after ``placement=local``, ``cuda.*``
    after ``device=cpu``) keeps its composed value (its default)."""
    out = composed.copy()
    kept = [k for k in stored if k not in ("resume", "overwrite") and not any(k == g or k.startswith(g + ".")
                                                                              for g in given)]
    _set_stored(out, stored, kept)
    meaningless = [k for k in kept if only_with(out, k) is not None]
    _set_stored(out, {k: OmegaConf.select(composed, k) for k in meaningless}, meaningless)
    return out


def _set_stored(out: DictConfig, stored: dict[str, Any], keys: Sequence[str]) -> None:
    for key in keys:
        value = stored[key]
        if OmegaConf.select(out, key, default=_UNSET) is not _UNSET:
            OmegaConf.update(out, key, value, merge=False)
            continue
        parent = OmegaConf.select(out, key.rpartition(".")[0], default=None) if "." in key else None
        if isinstance(parent, DictConfig) and OmegaConf.get_type(parent) is dict:    # a free dict (a net's kwargs)
            with open_dict(parent):
                parent[key.rpartition(".")[2]] = value


def resume_argv(argv: list[str]) -> list[str]:
    """The command line with one ``resume=`` (not a sweep's): the run's group options first
    (:func:`group_choices`, from its checkpoint), then ``argv``, so that the command line's keys
    of the run's data set or net are known when it is checked, before Hydra composes."""
    resume = None
    for o in _parsed(argv):
        if o.key_or_group == "resume" and not o.is_sweep_override() and o.value():
            resume = o.value()
    try:
        base = [] if resume is None else group_choices(run_config(resume), argv)
    except (ConfigError, OSError, DataFileError):
        base = []                   # the run says so, in its own words
    if not base:
        return argv
    # Hydra's flags (--config-dir DIR, -m) stay in front of the overrides: its parser takes those as one block
    flag = [a.startswith("-") or (i > 0 and argv[i - 1] in VALUE_FLAGS) for i, a in enumerate(argv)]
    return [a for a, f in zip(argv, flag) if f] + merged_overrides(base, [a for a, f in zip(argv, flag) if not f],
                                                                   ("resume", "overwrite"))
