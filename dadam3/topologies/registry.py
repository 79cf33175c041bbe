"""The topologies' registry: ``@topology("name")`` on a builder registers it, as ``@optimizer``
registers an algorithm (:mod:`dadam3.optim.registry`).

A builder is ``fn(nodes, *, option=default, ...) -> W``: the ``[M, M]`` mixing matrix of a static
graph, or ``[P, M, M]``, the period of a time-varying schedule (matrix ``r mod P`` is used at
gossip round r). Its options are its parameters after ``nodes``, each with its default; the
config ``topology=NAME`` and its schema are made from them (:mod:`dadam3.run.schema.topologies`).
An option's check is its annotation's metadata (``p: Annotated[float, probability] = 0.5``: the
check ``probability(key, value) -> value``, one-line :class:`~dadam3.errors.config.ConfigError`),
else its default's type (a bool, an integer, a number); the builder checks what depends on the
nodes. Every module of :mod:`dadam3.topologies` is imported with the package, so a topology is
one file there.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Builder:
    """One topology of :data:`TOPOLOGIES`: its builder ``fn`` (see the module docstring);
    ``given``: W comes from the user and ``fn`` validates it itself, naming the option given
    (:func:`dadam3.topologies.build.build_topology` validates every other W);
    ``supports(nodes)``: whether it has a graph on that many nodes (the tests build each topology
    on node counts it supports)."""

    fn: Callable[..., np.ndarray]
    given: bool = False
    supports: Callable[[int], bool] = lambda nodes: nodes >= 1

    @property
    def options(self) -> dict[str, Any]:
        """Each option (a parameter of ``fn`` after ``nodes``) -> its default."""
        return {p.name: p.default for p in list(inspect.signature(self.fn).parameters.values())[1:]}

    def checks(self) -> dict[str, Callable[[str, Any], Any] | None]:
        """Each option -> the check its annotation carries (``Annotated[type, check]``), or None."""
        hints = typing.get_type_hints(self.fn, include_extras=True)
        return {name: next((m for m in getattr(hints.get(name), "__metadata__", ()) if callable(m)), None)
                for name in self.options}


# name -> Builder: the ONE list of topologies, in the order their files are imported (by name).
# The schema, the configs (topology=NAME, stored in Hydra's ConfigStore from here), the docs and
# the tests read it.
TOPOLOGIES: dict[str, Builder] = {}


def topology(name: str, given: bool = False, supports: Callable[[int], bool] | None = None) -> Callable:
    """Register the decorated builder under ``name`` in :data:`TOPOLOGIES` (see :class:`Builder`)."""
    def register(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        if name in TOPOLOGIES and TOPOLOGIES[name].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"topology {name!r} is registered twice ({TOPOLOGIES[name].fn.__qualname__}, "
                             f"{fn.__qualname__})")
        TOPOLOGIES[name] = Builder(fn, given, *([supports] if supports else []))
        return fn
    return register


def import_builders(package: str, path) -> None:
    """Import every module of ``package`` (its ``__path__``), so each builder file registers itself."""
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
