"""Topologies: the mixing matrices W of M nodes, one builder a file, and their registry.

* :mod:`~dadam3.topologies.registry` — ``@topology("name")``, :data:`TOPOLOGIES`: a builder is
  ``fn(nodes, *, option=default, ...) -> W`` (``[M, M]``, or ``[P, M, M]`` for a time-varying
  schedule); its options' config and schema are made from its signature;
* :mod:`~dadam3.topologies.build` — :func:`build_topology` and :class:`Topology`, the schedule W_k^t;
* :mod:`~dadam3.topologies.checks` — what every W passes (doubly stochastic, symmetric, connected);
* the builders, one file each: the paper's (``ring``, ``complete``, ``torus``, ``star``,
  ``exponential``, ``erdos_renyi``, ``explicit``) and beyond it (``one_peer_exponential``).

Every module here is imported with the package, so a new topology is one file (its config
``topology=NAME`` and its schema are made from the registry).
"""
from dadam3.topologies.build import Topology, build_topology
from dadam3.topologies.checks import check_nodes
from dadam3.topologies.registry import TOPOLOGIES, Builder, import_builders, topology

__all__ = ["TOPOLOGIES", "Builder", "Topology", "build_topology", "check_nodes", "topology"]

import_builders(__name__, __path__)       # every builder file registers itself (@topology)
