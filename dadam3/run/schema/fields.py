"""How a schema field is declared and checked: :func:`knob` and the generic walker.

A field of a schema dataclass carries, beside its default, its check (one of the small
callables below, built on :mod:`dadam3.errors`, so a bad value is today's one line
``key=value: what is allowed``) and whether it may differ between a checkpoint and its
resume. :func:`check_tree` applies every field's check (and a section's own ``cross_check``
for rules between its fields), then freezes the section: the checked objects are the settings.
"""
from __future__ import annotations

import inspect
from dataclasses import MISSING, FrozenInstanceError, dataclass, field, fields, is_dataclass
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Iterator, Mapping

from dadam3.errors.config import ConfigError, check_bool, check_choice, check_int, check_range

Check = Callable[[str, Any], Any]


def default_of(fn: Callable[..., Any], arg: str) -> Any:
    """``fn``'s default for its argument ``arg``: the default of a field that feeds that argument,
    read from the library (one source: ``build_x(...)`` without the argument does what the config's
    default does)."""
    default = inspect.signature(fn).parameters[arg].default
    if default is inspect.Parameter.empty:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)}() has no default for {arg}")
    return default


def knob(default: Any = MISSING, check: Check | None = None, *, resume: bool = False,
         factory: Callable[[], Any] | None = None) -> Any:
    """A schema field: its default (or ``factory``), its ``check`` (None: its type is the check,
    or a builder checks it) and whether it may change on resume."""
    meta = {"check": check, "resume": resume}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Int:
    """An integer in ``[low, high]`` (``none``: null allowed too)."""
    low: int | None = None
    high: int | None = None
    none: bool = False

    def __call__(self, key: str, value: Any) -> int | None:
        return None if value is None and self.none else check_int(key, value, self.low, self.high)


@dataclass(frozen=True)
class Num:
    """A finite number in an interval (closed below, open above, unless stated)."""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = True

    def __call__(self, key: str, value: Any) -> float:
        return check_range(key, value, self.low, self.high, self.low_open, self.high_open)


@dataclass(frozen=True)
class Choice:
    """One of ``allowed`` (``none``: null allowed too)."""
    allowed: tuple[str, ...]
    none: bool = False

    def __call__(self, key: str, value: Any) -> str | None:
        if value is None and self.none:
            return None
        if self.none and value not in self.allowed:
            raise ConfigError(key, value, f"unknown value; allowed: null, {', '.join(self.allowed)}")
        return check_choice(key, value, self.allowed)


@dataclass(frozen=True)
class OptionName:
    """A group option's own name (``dataset.name``, ``model.arch``, ``topology.name``,
    ``logger.kind``): set by choosing the option (``dataset=mnist``), so on the command line it
    may only name another option of the same schema (``names``)."""
    names: tuple[str, ...]

    def __call__(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or value not in self.names:
            group = key.rpartition(".")[0] or key
            raise ConfigError(key, value, f"names the chosen option: choose it with {group}=NAME (this option's "
                                          f"schema has {', '.join(self.names)})")
        return value


def boolean(key: str, value: Any) -> bool:
    """YAML true or false (0/1 and strings such as ``yes`` are refused)."""
    return check_bool(key, value)


def text(key: str, value: Any) -> str | None:
    """A string or null (a path, a name; a number is read as its digits, as OmegaConf does)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if value is not None and not isinstance(value, str):
        raise ConfigError(key, value, "must be a string")
    return value


class Section:
    """Base of every schema dataclass, a section of the config (a node is a gossip node): mutable
    while OmegaConf builds it and :func:`check_tree` checks it, frozen afterwards (assigning a
    field raises)."""

    _frozen: ClassVar[bool] = False

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise FrozenInstanceError(f"cannot assign {name}: checked settings are frozen")
        object.__setattr__(self, name, value)

    def cross_check(self, prefix: str) -> None:
        """Rules between this section's fields (after each field's own check)."""

    @classmethod
    def keys(cls, prefix: str) -> dict[str, str]:
        """Each field's name -> its config key (``prefix`` + name): what
        :func:`~dadam3.errors.config.named_as` needs to say a builder's error (naming its argument,
        which is the field's name) in the config's keys. A property of the schema, not of the
        values: ``Distributed.keys("distributed.")``."""
        return {f.name: prefix + f.name for f in fields(cls)}


def check_tree(section: Section, prefix: str = "") -> Section:
    """Check every field of ``section`` and its sub-sections (keys named ``prefix + field``),
    replace each value by its checked form, run the sections' cross checks, then freeze."""
    for f in fields(section):
        value = getattr(section, f.name)
        if is_dataclass(value):
            check_tree(value, f"{prefix}{f.name}.")
        elif f.metadata.get("check") is not None:
            object.__setattr__(section, f.name, f.metadata["check"](f"{prefix}{f.name}", value))
    section.cross_check(prefix)
    object.__setattr__(section, "_frozen", True)
    return section


def schema_field(cls: type, name: str):
    """The dataclass field ``name`` of schema class ``cls`` (None if it has none)."""
    return next((f for f in fields(cls) if f.name == name), None)


SEED_MAX = 2**32 - 1                      # what every generator a run seeds accepts


class ReadWhenAsked(Mapping):
    """``schema_<kind>`` -> schema class, made by ``make()`` each time it is read: the schemas of a
    registry that may grow after import (an optimizer or a topology added to it has its schema)."""

    def __init__(self, make: Callable[[], Mapping[str, type]]):
        self.make = make

    def __getitem__(self, key: str) -> type:
        return self.make()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.make())

    def __len__(self) -> int:
        return len(self.make())


class Option(Section):
    """A group option: ``options`` are its fields beyond :attr:`COMMON` (its builder's own)."""

    COMMON: ClassVar[tuple[str, ...]] = ()

    @property
    def options(self) -> Mapping[str, Any]:
        return MappingProxyType({f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.COMMON})
