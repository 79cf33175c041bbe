"""The optimizers' registry: ``@optimizer("name")`` on an algorithm class registers it, as
``@topology`` registers a graph (:mod:`dadam3.topologies`).

Every module of :mod:`dadam3.optim` is imported with the package (:func:`import_algorithms`), so an
algorithm is one file: its class on a skeleton, decorated. The configs are made from the registry
(:func:`dadam3.run.schema.register` stores ``optimizer/NAME`` and, for a class with ``SYNTHETIC``,
``synthetic_optimizer/NAME`` in Hydra's ConfigStore), and the schema, the docs and the tests read it.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from dadam3.errors.config import ConfigError


@dataclass(frozen=True)
class Spec:
    """One registry entry: the class (whose ``HPARAMS`` give defaults and ranges; its skeleton
    is the family) and the topology it forces. The synthetic game's compiled loop is made from
    the class (:func:`dadam3.games.synthetic_kernels.kernel_for`)."""

    name: str
    cls: type
    topology: str | None = None      # forced topology (centralized variants)
    single_node: bool = False

    def check_hparams(self, hparams: Mapping[str, Any]) -> dict[str, float]:
        """Every hyper-parameter: given ones checked (one-line ConfigError), others at their defaults."""
        return self.cls.check_hparams(hparams, self.name)

    @property
    def synthetic(self) -> dict[str, Any]:
        """The synthetic game's preset (the class's ``SYNTHETIC``; none: its defaults at the game's lr)."""
        return dict(getattr(self.cls, "SYNTHETIC", {}))


# name -> Spec: the ONE list of optimizers (in the order they were registered)
OPTIMIZERS: dict[str, Spec] = {}


def optimizer(name: str, topology: str | None = None, single_node: bool = False) -> Callable[[type], type]:
    """Register the decorated algorithm class under ``name`` (``topology``: the graph it forces,
    e.g. ``"complete"`` for a centralized variant; ``single_node``: it runs on one node, no mixing).
    A class may carry several names (stack the decorators)."""
    def register(cls: type) -> type:
        if name in OPTIMIZERS and OPTIMIZERS[name].cls.__qualname__ != cls.__qualname__:
            raise ValueError(f"optimizer {name!r} is registered twice ({OPTIMIZERS[name].cls.__qualname__}, "
                             f"{cls.__qualname__})")
        OPTIMIZERS[name] = Spec(name, cls, topology, single_node)
        return cls
    return register


def optimizer_spec(name: str) -> Spec:
    """The registry entry of ``name`` (one-line ConfigError for an unknown name)."""
    if name not in OPTIMIZERS:
        raise ConfigError("name", name, f"unknown optimizer (not in dadam3.optim.OPTIMIZERS); allowed: "
                                        f"{', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def import_algorithms(package: str, path) -> None:
    """Import every module of ``package`` (its ``__path__``), so each algorithm file registers itself."""
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
