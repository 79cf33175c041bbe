"""Command-line overrides against the schema: one line for a key that is unknown or means
nothing for the chosen option, before Hydra composes (whose own error spans many lines).

:func:`check_overrides` composes the config for each combination of the group choices on
the command line (a sweep's too), then walks every other override's key through the
schema and applies that field's check to each of its values. :func:`compose` is the same
check followed by Hydra's composition, as the tests and scripts compose a config.
"""
from __future__ import annotations

import contextlib
import difflib
import itertools
import re
from dataclasses import fields, is_dataclass
from typing import Any, Mapping, Sequence

from hydra import compose as hydra_compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict

import dadam3.run.schema.presets as presets
from dadam3.run.config import CONFIG_DIR
from dadam3.errors.config import ConfigError
from dadam3.run.schema.fields import schema_field
from dadam3.run.schema.groups import GROUPS, option_schema
from dadam3.run.schema.runs import SyntheticConfig, TrainConfig, only_with

ROOTS = {"train": TrainConfig, "synthetic": SyntheticConfig}      # config name -> its schema

# Hydra's options that take a value in the next argument
VALUE_FLAGS = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
               "--config-dir", "-cd", "--experimental-rerun")


def compose(config_name: str, overrides: Sequence[str] = (), checked: bool = False) -> DictConfig:
    """:func:`check_overrides` (unless the caller has just run it on these overrides: ``checked``),
    then Hydra's composition (its errors reduced to one line)."""
    if not checked:
        check_overrides(config_name, overrides)
    return _compose(config_name, overrides)


def check_overrides(config_name: str, argv: Sequence[str], stored: Mapping[str, Any] | None = None) -> None:
    """Raise a one-line ConfigError for an override whose key the schema does not know (with
    ``+`` too), that means nothing for the chosen group option, or whose value its field's
    check refuses. Hydra's flags and ``hydra.*`` keys are left to Hydra. ``stored``: a resume's
    run config (flattened), whose values decide what a given key means (``dataset.alpha`` on a
    run made with ``dataset.partition=dirichlet``)."""
    try:
        parsed = OverridesParser.create().parse_overrides(_overrides_only(argv))
    except HydraException:
        return                                   # not an override Hydra can parse: Hydra says why
    choices = [o for o in parsed if presets.is_group(o.key_or_group) and o.type != OverrideType.DEL]
    values = [o for o in parsed if o not in choices and o.package is None and o.type != OverrideType.DEL
              and not o.key_or_group.startswith("hydra")]
    if not values:
        return
    lines = [[f"{o.input_line.partition('=')[0]}={v}" for v in _values(o, as_text=True)] for o in choices]
    for combo in itertools.product(*lines):
        cfg = _compose(config_name, combo)
        for o in values:
            for value in _values(o):
                _check_key(ROOTS[config_name], cfg, o.key_or_group, value)
        if ROOTS[config_name] is TrainConfig:
            _check_only_with(cfg, [o for o in values if not o.is_sweep_override()], stored or {})


def _check_only_with(cfg: DictConfig, given: list[Override], stored: Mapping[str, Any]) -> None:
    """A key given (at any value, its default too) where the config it makes means nothing by it
    (:data:`~dadam3.run.schema.runs.ONLY_WITH`: ``metrics.per_node=true`` with ``metrics.every=0``);
    on a resume, the run's own values (``stored``) first."""
    cfg = cfg.copy()
    with open_dict(cfg):
        for key, value in stored.items():
            if key not in ("resume", "overwrite"):
                with contextlib.suppress(Exception):        # a key this version does not know: the resume names it
                    OmegaConf.update(cfg, key, value, merge=True)
        for o in given:
            try:
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
            except Exception:           # a value Hydra will refuse in its own words
                return
    for o in given:
        said = only_with(cfg, o.key_or_group)
        if said is not None:
            raise ConfigError(o.key_or_group, o.input_line.partition("=")[2], f"only used with {said}")


def merged_overrides(base: Sequence[str], given: Sequence[str], dropped: Sequence[str] = ()) -> list[str]:
    """``base`` (a run's overrides, later ones winning) with every key that ``given`` sets (or
    that ``dropped`` names) removed, then ``given``: what a resume composes, where only the keys
    on its command line change anything. Overrides Hydra cannot parse are kept as they are."""
    parser = OverridesParser.create()

    def key(line: str) -> str | None:
        try:
            return parser.parse_overrides([line])[0].key_or_group
        except HydraException:
            return None

    taken = {key(o) for o in given} | set(dropped)
    kept: dict = {}
    for line in base:
        k = key(line)
        if k not in taken and not (k or "").startswith("hydra."):
            kept.pop(k or line, None)
            kept[k or line] = line
    return [*kept.values(), *given]


def _check_key(root: type, cfg: DictConfig, key: str, value: Any) -> None:
    """Walk ``key`` through the schema ``root`` (a group: the schema its chosen option's name
    selects, :func:`~dadam3.run.schema.groups.option_schema`) and check ``value`` with the field's check."""
    parts = key.split(".")
    cls: Any = root
    for i, part in enumerate(parts):
        path, rest = ".".join(parts[:i + 1]), parts[i + 1:]
        names = [f.name for f in fields(cls)]
        f = schema_field(cls, part)
        if f is None:
            if i == 1 and parts[0] in GROUPS:
                choice = cfg[parts[0]][GROUPS[parts[0]][0]]
                raise ConfigError(path, _nest(rest, value), f"means nothing for {parts[0]}={choice} (its keys: "
                                                            f"{', '.join(names)}){_suggest(part, cls)}")
            raise ConfigError(path, _nest(rest, value), f"unknown key{_suggest(part, cls)}")
        if not rest:
            check = f.metadata.get("check")
            if check is not None and not (isinstance(value, str) and "${" in value):
                check(path, value)
            return
        if i == 0 and part in GROUPS:
            cls = option_schema(part, cfg[part][GROUPS[part][0]])
            if cls is None:
                return                      # an option no schema knows: the settings refuse its name
        elif is_dataclass(f.default_factory):
            cls = f.default_factory
        elif getattr(f.metadata.get("check"), "free_keys", False):
            return                          # a builder's keyword arguments: it checks them
        else:
            raise ConfigError(f"{path}.{rest[0]}", _nest(rest[1:], value), f"unknown key ({path} is a value)")


def config_error(e: Exception) -> ConfigError:
    """Hydra's or OmegaConf's error (a composition, a type, an interpolation) as one line naming the
    key (OmegaConf's ``full_key``, found through the causes and contexts) and, for an error inside a
    preset (Hydra's ``In 'experiment/mine'``), the preset and its file."""
    chain, cause = [], e
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    refused = next((c for c in chain if isinstance(c, ConfigError)), None)
    if refused is not None:
        return refused
    keyed = next((c for c in chain if getattr(c, "full_key", None)), chain[-1])
    first = next((line for line in str(keyed).strip().splitlines() if line.strip()), type(keyed).__name__)
    where = re.search(r"In '([\w/-]+)/([\w.-]+)'", str(e))
    key = getattr(keyed, "full_key", None) or "config"
    value = getattr(keyed, "value", "?")
    if where is not None:
        group, option = where.groups()
        files = presets.preset_files(group, option)
        found = presets.preset(group, option) if key != "config" else None
        if value in ("?", None) and found is not None:
            value = OmegaConf.select(OmegaConf.create(found[0] if found[2] else {group: found[0]}), key, default="?")
        first = f"set by the preset {group}={option} ({files[0] if files else 'no file'}): {first.strip()}"
    return ConfigError(key, value, first)


def _compose(config_name: str, overrides: Sequence[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            given = [o for o in overrides if not o.startswith("hydra.searchpath=")]
            return hydra_compose(config_name=config_name, overrides=[*given, *presets.searchpath_override()])
        except Exception as e:
            raise config_error(e) from None


def _overrides_only(argv: Sequence[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip or arg.startswith("-"):
            skip = not skip and arg in VALUE_FLAGS
            continue
        out.append(arg)
    return out


def _values(o: Override, as_text: bool = False) -> list:
    """The override's value, or each value of its sweep (an interval sweep: none to check)."""
    if not o.is_sweep_override():
        return [o.get_value_element_as_str() if as_text else o.value()]
    try:
        return list(o.sweep_string_iterator() if as_text else o.sweep_iterator())
    except HydraException:
        return []


def _nest(rest: list[str], value: Any) -> Any:
    for part in reversed(rest):
        value = {part: value}
    return value


def _suggest(part: str, cls: type) -> str:
    """A key's new name, or a close key of ``cls``, nested ones too (``iterations`` -> ``loop.iterations``)."""
    dotted = {f.name: f.name for f in fields(cls)}
    for f in fields(cls):
        if is_dataclass(f.default_factory):
            dotted.update({g.name: f"{f.name}.{g.name}" for g in fields(f.default_factory) if g.name not in dotted})
    close = difflib.get_close_matches(part, list(dotted), n=1)
    return f"; did you mean {dotted[close[0]]}?" if close else ""
