"""The schemas of the ``topology`` group: one per kind of topology option. The written ones
(:class:`Topology` for a graph without options, :class:`Torus`, :class:`ErdosRenyi`,
:class:`Explicit`) and one made from the builder for every topology of
:data:`dadam3.topology.TOPOLOGIES` with options of its own and no written schema (a topology added
in one file, :mod:`dadam3.topologies`)."""
from __future__ import annotations

import functools
import inspect
import numbers
from dataclasses import dataclass, make_dataclass
from typing import Any, Optional

from dadam3.errors.config import ConfigError
from dadam3.run.schema.fields import (SEED_MAX, Int, Num, Option, OptionName, boolean, default_of, knob, matrix_rows,
                                      text)
from dadam3.topology import TOPOLOGIES, build_topology


@dataclass
class Topology(Option):
    """A graph of :data:`dadam3.topology.TOPOLOGIES` without options of its own, named by ``name``
    (ring, star, complete, exponential, one_peer_exponential, ...: every one the registry holds)."""
    COMMON = ("name", "rounds")
    name: str = knob(check=OptionName(tuple(name for name, b in TOPOLOGIES.items() if not b.options)))
    rounds: int = knob(default_of(build_topology, "rounds"), Int(1))   # gossip rounds per mixing: W^t


def divisor(key: str, value: Any) -> Any:
    """A number or null (:func:`dadam3.topology.torus` checks it is an integer divisor of nodes)."""
    if value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        return value
    raise ConfigError(key, value, "must be an integer divisor of nodes, or null (the most square factorisation)")


@dataclass
class Torus(Topology):
    name: str = knob(check=OptionName(("torus",)))
    # null: the most square factorisation; build_topology checks it against nodes
    rows: Optional[Any] = knob(default_of(build_topology, "rows"), divisor)


@dataclass
class ErdosRenyi(Topology):
    name: str = knob(check=OptionName(("erdos_renyi",)))
    p: float = knob(default_of(build_topology, "p"), Num(0.0, 1.0, low_open=True, high_open=False))
    seed: int = knob(default_of(build_topology, "seed"), Int(0, SEED_MAX))


def topology_field(name: str, default: Any) -> tuple:
    """A field for option ``name`` of a topology registered elsewhere: its builder's default, and
    a check by the default's type (the builder checks the value too)."""
    if isinstance(default, bool):
        return name, bool, knob(default, boolean)
    if isinstance(default, int):
        return name, int, knob(default, Int())
    if isinstance(default, float):
        return name, float, knob(default, Num())
    return name, Optional[Any], knob(default)


@functools.cache
def topology_schema(name: str) -> type:
    """The schema of topology ``name`` with options of its own and no written schema: ``name``,
    ``rounds`` and one field per option (its builder's keyword argument and default)."""
    builder = TOPOLOGIES[name]
    params = inspect.signature(builder.fn).parameters
    cls = make_dataclass(f"Topology_{name}", [("name", str, knob(check=OptionName((name,)))),
                                              *[topology_field(o, params[o].default) for o in builder.options]],
                         bases=(Topology,))
    cls.__module__ = "dadam3.run.schema.groups"     # found again by that module's __getattr__ (pickle, submitit)
    return cls


def topology_schemas() -> dict[str, type]:
    """``schema_<kind>`` -> the topology schemas: ``schema_graph`` (no options), the written ones,
    and one made for each topology of the registry with options no written schema covers."""
    written = {"torus": Torus, "erdos_renyi": ErdosRenyi, "explicit": Explicit}
    return {"schema_graph": Topology, **{topology_schema_name(n): written.get(n) or topology_schema(n)
                                         for n, b in TOPOLOGIES.items() if b.options}}


def topology_schema_name(name: str) -> str:
    """The schema a topology's config names: ``schema_graph`` (no options), else ``schema_<name>``
    (a written one, or its own)."""
    return f"schema_{name}" if TOPOLOGIES[name].options else "schema_graph"


@dataclass
class Explicit(Topology):
    """A user-given W: ``matrix=[[...],[...]]`` or ``file=W.npy|.csv|.txt``."""
    name: str = knob(check=OptionName(("explicit",)))
    matrix: Optional[Any] = knob(default_of(build_topology, "matrix"), matrix_rows)
    file: Optional[str] = knob(default_of(build_topology, "file"), text)
    # the paper's theory assumes an undirected graph
    require_symmetric: bool = knob(default_of(build_topology, "require_symmetric"), boolean)
