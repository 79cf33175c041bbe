"""The schemas of the ``topology`` group, every one made from its builder
(:data:`dadam3.topologies.TOPOLOGIES`): :class:`Topology` for a graph without options, and for a
topology with options one schema of its own (:func:`topology_schema`): a field per option, its
builder's keyword argument, with the builder's default and the check its annotation carries (else
one by the default's type; the builder checks what depends on the nodes)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, make_dataclass
from typing import Any, Optional

from dadam3.run.schema.fields import Int, Num, Option, OptionName, boolean, default_of, knob
from dadam3.topologies import TOPOLOGIES, build_topology


@dataclass
class Topology(Option):
    """A graph of :data:`dadam3.topologies.TOPOLOGIES` without options of its own, named by
    ``name`` (ring, star, complete, exponential, one_peer_exponential, ...: every one the registry
    holds)."""
    COMMON = ("name", "rounds")
    name: str = knob(check=OptionName(tuple(name for name, b in TOPOLOGIES.items() if not b.options)))
    rounds: int = knob(default_of(build_topology, "rounds"), Int(1))   # gossip rounds per mixing: W^t


def topology_field(name: str, default: Any, check) -> tuple:
    """A field for option ``name``: its builder's default, and ``check`` (the builder's, from its
    annotation) or else one by the default's type."""
    if isinstance(default, bool):
        return name, bool, knob(default, check or boolean)
    if isinstance(default, int):
        return name, int, knob(default, check or Int())
    if isinstance(default, float):
        return name, float, knob(default, check or Num())
    return name, Optional[Any], knob(default, check)


@functools.cache
def topology_schema(name: str) -> type:
    """The schema of topology ``name`` (with options of its own): ``name``, ``rounds`` and one
    field per option of its builder."""
    builder = TOPOLOGIES[name]
    checks = builder.checks()
    cls = make_dataclass(f"Topology_{name}", [("name", str, knob(check=OptionName((name,)))),
                                              *[topology_field(o, d, checks[o]) for o, d in builder.options.items()]],
                         bases=(Topology,))
    cls.__module__ = "dadam3.run.schema.groups"     # found again by that module's __getattr__ (pickle, submitit)
    return cls


def topology_schemas() -> dict[str, type]:
    """``schema_<kind>`` -> the topology schemas: ``schema_graph`` (no options), and
    ``schema_<name>`` for each topology of the registry with options."""
    return {"schema_graph": Topology, **{topology_schema_name(n): topology_schema(n)
                                         for n, b in TOPOLOGIES.items() if b.options}}


def topology_schema_name(name: str) -> str:
    """The schema a topology's config names: ``schema_graph`` (no options), else ``schema_<name>``."""
    return f"schema_{name}" if TOPOLOGIES[name].options else "schema_graph"
