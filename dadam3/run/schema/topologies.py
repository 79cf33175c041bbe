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
from typing import Any, Iterator, Mapping, Optional

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


TOPOLOGY_SCHEMAS = {"schema_graph": None, "schema_torus": "torus", "schema_erdos_renyi": "erdos_renyi",
                    "schema_explicit": "explicit"}     # the written ones: schema name -> the topology it is for


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
    cls.__module__ = __name__
    return cls


class TopologySchemas(Mapping):
    """``schema_<kind>`` -> the topology schemas: the written ones, and one made for each topology
    of the registry with options no written schema covers (read when asked)."""

    def _all(self) -> dict[str, type]:
        written = {"schema_graph": Topology, "schema_torus": Torus, "schema_erdos_renyi": ErdosRenyi,
                   "schema_explicit": Explicit}
        made = {f"schema_{n}": topology_schema(n) for n, b in TOPOLOGIES.items()
                if b.options and n not in TOPOLOGY_SCHEMAS.values()}
        return {**written, **made}

    def __getitem__(self, key: str) -> type:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def topology_schema_name(name: str) -> str:
    """The schema a topology's config names: ``schema_graph`` (no options), a written one, or its own."""
    if not TOPOLOGIES[name].options:
        return "schema_graph"
    return next((k for k, v in TOPOLOGY_SCHEMAS.items() if v == name), f"schema_{name}")


@dataclass
class Explicit(Topology):
    """A user-given W: ``matrix=[[...],[...]]`` or ``file=W.npy|.csv|.txt``."""
    name: str = knob(check=OptionName(("explicit",)))
    matrix: Optional[Any] = knob(default_of(build_topology, "matrix"), matrix_rows)
    file: Optional[str] = knob(default_of(build_topology, "file"), text)
    # the paper's theory assumes an undirected graph
    require_symmetric: bool = knob(default_of(build_topology, "require_symmetric"), boolean)
