"""Where the config groups' options are found, as Hydra finds them: the packaged ``configs/``,
the registries' options in Hydra's ConfigStore (``optimizer/NAME``, ``topology/NAME``, ...:
:func:`dadam3.run.schema.register`) and a user's own directories, given the Hydra way on the
command line (``--config-dir DIR`` or ``hydra.searchpath=[file://DIR]``). One repository over all
of them answers which options a group has (for the one-line error of an unknown name), what a
preset holds and what it chooses (resume)."""
from __future__ import annotations

import functools
from typing import Any, Sequence

from hydra._internal.config_repository import ConfigRepository
from hydra._internal.utils import create_config_search_path
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser

from dadam3.run.config import CONFIG_DIR

SEARCHPATH: list[str] = []        # the user's directories (URLs: file://DIR, pkg://...) from the command line
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")


def user_searchpath(argv: Sequence[str]) -> list[str]:
    """The directories ``argv`` adds to Hydra's search path: ``--config-dir DIR`` (``-cd DIR``,
    ``--config-dir=DIR``) and ``hydra.searchpath=[...]``, as URLs."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in CONFIG_DIR_FLAGS:
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if value:
                out.append(value if "://" in value else f"file://{value}")
        elif arg.startswith("hydra.searchpath="):
            try:
                parsed = OverridesParser.create().parse_overrides([arg])[0].value()
            except Exception:             # Hydra says why
                continue
            out += [str(v) for v in (parsed if isinstance(parsed, list) else [parsed])]
    return out


def use_searchpath(argv: Sequence[str]) -> None:
    """Take the user's directories from ``argv`` (an entry point's command line)."""
    SEARCHPATH[:] = user_searchpath(argv)


def searchpath_override() -> list[str]:
    """``hydra.searchpath=[...]`` for a compose inside the package (none without user directories)."""
    return [f"hydra.searchpath=[{','.join(SEARCHPATH)}]"] if SEARCHPATH else []


@functools.cache
def _repository(extra: tuple[str, ...]) -> ConfigRepository:
    from dadam3.run.schema import register
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
