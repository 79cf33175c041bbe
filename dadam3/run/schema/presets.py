"""Where the config groups' options are found, as Hydra finds them: the packaged ``configs/``,
the registries' options, stored in Hydra's ConfigStore by :func:`register` (``optimizer/NAME``,
``synthetic_optimizer/NAME``, ``topology/NAME``: no YAML file repeats a registry name), and a
user's own directories, given the Hydra way on the command line (``--config-dir DIR`` or
``hydra.searchpath=[file://DIR]``). One repository over all of them answers which options a group
has (the one-line error of an unknown name lists them), what a preset holds and what it chooses
(resume)."""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from hydra._internal.config_repository import ConfigRepository
from hydra._internal.utils import create_config_search_path
from hydra.core.config_store import ConfigStore
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser

from dadam3.errors.boundary import exit_on_failure
from dadam3.errors.config import ConfigError
from dadam3.optim import OPTIMIZERS
from dadam3.run.config import CONFIG_DIR
from dadam3.run.schema.groups import GROUPS
from dadam3.run.schema.topologies import topology_schema_name
from dadam3.run.schema.runs import LoopSettings, SyntheticConfig, TrainConfig
from dadam3.topologies import TOPOLOGIES

SEARCHPATH: list[str] = []        # the user's directories (URLs: file://DIR, pkg://...) from the command line
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")


def user_searchpath(argv: Sequence[str], keyed: bool = False) -> list:
    """The directories ``argv`` adds to Hydra's search path: ``--config-dir DIR`` (``-cd DIR``,
    ``--config-dir=DIR``) and ``hydra.searchpath=[...]``, as URLs (``keyed``: (flag or key, URL))."""
    out: list = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in CONFIG_DIR_FLAGS:
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if value:
                out.append((flag, value if "://" in value else f"file://{value}"))
        elif arg.startswith("hydra.searchpath="):
            try:
                parsed = OverridesParser.create().parse_overrides([arg])[0].value()
            except Exception:             # Hydra says why
                continue
            out += [("hydra.searchpath", str(v)) for v in (parsed if isinstance(parsed, list) else [parsed])]
    return out if keyed else [url for _, url in out]


def use_searchpath(argv: Sequence[str]) -> None:
    """Take the user's directories from ``argv`` (an entry point's command line); one that is not a
    directory is one line (Hydra would only warn, or say it in five lines)."""
    keyed = user_searchpath(argv, keyed=True)
    for key, url in keyed:
        if url.startswith("file://") and not Path(url.removeprefix("file://")).is_dir():
            raise ConfigError(key, url.removeprefix("file://"), "is not a directory: the user's config directory "
                                                                "(its presets) must exist")
    SEARCHPATH[:] = [url for _, url in keyed]


def preset_files(group: str, option: str) -> list[Path]:
    """The YAML files of ``group/option`` on the search path, the one Hydra uses first: the package's
    (``dadam3/configs``), then the user's directories' in their order."""
    dirs = [CONFIG_DIR, *(Path(u.removeprefix("file://")) for u in SEARCHPATH if u.startswith("file://"))]
    return [f for d in dirs if (f := d / group / f"{option}.yaml").is_file()]


def searchpath_override() -> list[str]:
    """``hydra.searchpath=[...]`` for a compose inside the package (none without user directories)."""
    return [f"hydra.searchpath=[{','.join(SEARCHPATH)}]"] if SEARCHPATH else []


def register() -> None:
    """Store every schema in Hydra's ConfigStore: ``<entry>_schema`` (the primary
    configs' first default) and ``<group>/schema_<kind>`` (the group options'; an optimizer's
    ``optimizer/schema_<name>`` holds its hyper-parameters at its class's defaults: the YAML names
    the algorithm, the values come from ``HPARAMS`` only)."""
    cs = ConfigStore.instance()
    for name, cls in {"train": TrainConfig, "synthetic": SyntheticConfig}.items():
        cs.store(name=f"{name}_schema", node=cls)
    cs.store(group="loop", name="schema", node=LoopSettings)
    for group, (_, options) in GROUPS.items():
        for name, cls in options.items():
            cs.store(group=group, name=name, node=cls)
    register_presets(cs)


def register_presets(cs: ConfigStore) -> None:
    """The registries' options as configs (no YAML file repeats a registry name):
    ``optimizer/NAME`` (its schema at the class's defaults; a centralized variant selects its
    topology), ``synthetic_optimizer/NAME`` (the class's ``SYNTHETIC``, where it has one) and
    ``topology/NAME``. A YAML file of the same name (packaged or the user's) takes precedence."""
    for name, spec in OPTIMIZERS.items():
        forced = [{"override /topology@_global_.topology": spec.topology}] if spec.topology else []
        cs.store(group="optimizer", name=name, node={"defaults": [f"schema_{name}", *forced, "_self_"], "name": name})
        if spec.synthetic:
            cs.store(group="synthetic_optimizer", name=name, node=spec.synthetic)
    for name in TOPOLOGIES:
        cs.store(group="topology", name=name, node={"defaults": [topology_schema_name(name), "_self_"], "name": name})


@functools.cache
def _repository(extra: tuple[str, ...]) -> ConfigRepository:
    register()
    path = create_config_search_path(str(CONFIG_DIR))
    for url in extra:
        path.append(provider="user", path=url)
    return ConfigRepository(config_search_path=path)


def repository() -> ConfigRepository:
    return _repository(tuple(SEARCHPATH))


def is_group(name: str) -> bool:
    """Whether ``name`` is a config group (``dataset``, ``optimizer``, ... ; not ``hydra``'s)."""
    return bool(name) and "." not in name and not name.startswith("hydra") and repository().group_exists(name)


def group_choices(group: str) -> list[str]:
    """The options of ``group`` from every search path (the schemas ``schema_*`` are not options)."""
    names = repository().get_group_options(group, results_filter=ObjectType.CONFIG)
    return sorted(n for n in set(names) if not n.startswith("schema"))


def exists(group: str, option: str) -> bool:
    return repository().config_exists(f"{group}/{option}")


def preset(group: str, option: str) -> tuple[dict[str, Any], dict[str, str], bool] | None:
    """``group/option``'s own keys, the group options its ``defaults`` choose (``override
    /dataset: fashion_mnist`` -> ``{"dataset": "fashion_mnist"}``; a package is kept as
    ``group@package``) and whether it is ``@package _global_`` (None: no such option)."""
    if not exists(group, option):
        return None
    from hydra.core.default_element import GroupDefault
    from omegaconf import OmegaConf
    result = repository().load_config(f"{group}/{option}")
    conf = OmegaConf.to_container(result.config, resolve=False) or {}
    conf.pop("defaults", None)
    choices = {d.group.lstrip("/") + (f"@{d.package}" if d.package else ""): str(d.value)
               for d in result.defaults_list or () if isinstance(d, GroupDefault) and d.override}
    return conf, choices, result.header.get("package") == "_global_"


def check_group_choices(argv: Sequence[str], groups: Sequence[str]) -> None:
    """Raise a one-line ConfigError for ``group=value`` overrides naming no option of any search path."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key.lstrip("+~") not in groups or "(" in value:
            continue
        key = key.lstrip("+~")
        allowed = group_choices(key)
        for v in value.split(","):
            if v.strip() not in allowed:
                raise ConfigError(key, v.strip(), f"unknown {key}; allowed: {', '.join(allowed)}")
            files = preset_files(key, v.strip())
            if len(files) > 1 and files[0].parent.parent == CONFIG_DIR:
                raise ConfigError(key, v.strip(), f"the package's {files[0]} and your {files[1]} have this name; "
                                                  "Hydra would take the package's and ignore yours: rename yours")


def run_cli(hydra_main, groups: Sequence[str], check: Callable[[Sequence[str]], None]) -> None:
    """Entry-point wrapper: pre-check group choices, then every other override with ``check``
    (:func:`dadam3.run.schema.check_overrides`), then hand over to Hydra. The user's config
    directories (``--config-dir``, ``hydra.searchpath``) count for both checks. ``-m``/``--multirun``
    between the overrides (``seed=0 -m lr=1,2``) moves to the front: Hydra's argparse takes the
    overrides as one block and would refuse those after the flag with its usage text."""
    sys.argv[1:] = multirun_flags_first(sys.argv[1:])
    exit_on_failure(use_searchpath)(sys.argv[1:])
    exit_on_failure(check_group_choices)(sys.argv[1:], groups)
    exit_on_failure(check)(sys.argv[1:])
    exit_on_failure(hydra_main)()          # a second stop signal in a sweep, a launcher's failure: one line


def multirun_flags_first(argv: Sequence[str]) -> list[str]:
    """``argv`` with every ``-m``/``--multirun`` (a flag without a value) moved to the front."""
    flags = [a for a in argv if a in ("-m", "--multirun")]
    return flags + [a for a in argv if a not in ("-m", "--multirun")]
