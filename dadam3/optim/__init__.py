"""The algorithms, on M node copies stacked along a leading axis, and their registry.

===================  ===========================  ===============================================
name                 class                        what it is
===================  ===========================  ===============================================
adam3                Dadam3, no mixing            Algorithm 1 (one node; needs nodes=1)
dadam3               Dadam3                       Algorithm 2, mixing with the configured topology
cadam3               Dadam3, complete graph       the centralized variant (W = 11^T/M)
dosg                 DOSG                         decentralized optimistic SGD (Liu et al. 2020)
cosg                 DOSG, complete graph         its centralized variant
oadagrad             OAdagrad                     optimistic AdaGrad (Liu et al. 2020)
dadam                DAdam                        simultaneous Adam + gossip (plain baseline)
dp_oadam             DPOAdam                      optimistic Adam + gossip (Daskalakis et al. 2018)
dsgd                 DSGD                         simultaneous SGD + gossip (plain baseline)
extra_adam           ExtraAdam                    extra-gradient Adam + gossip (Gidel et al. 2019)
dadam3_shared        Dadam3Shared                 Algorithm 2, one scale for every node, tracked
                                                  by gossip (Chen et al. 2023; beyond the paper)
cadam3_shared        Dadam3Shared, complete       its centralized variant
dadam3_shared_exact  Dadam3SharedExact            its ideal reference: the scales averaged exactly
===================  ===========================  ===============================================

Adding an optimizer is one file in this package: a class on one of the skeletons of
:mod:`dadam3.optim.skeletons` (its ``HPARAMS``, ``STATE``, ``SCALARS``, ``scalars`` and ``direction``;
optionally ``SYNTHETIC``, its preset for the synthetic game), decorated with
``@optimizer("name")`` (:mod:`dadam3.optim.registry`). Every module here is imported with the
package, and the configs ``optimizer=name`` are made from the registry. It then trains GANs
(torch, torch.compile on CUDA, numba on the CPU) and runs on the synthetic game's compiled loop,
all from those functions; math numba cannot compile runs through torch.
Adding a skeleton: one module in :mod:`dadam3.optim.skeletons` (its buffers, phases and rounds;
a round may take a fresh gradient through the step's callback, as extra-gradient does).
"""
from __future__ import annotations

from typing import Callable

from dadam3.errors.config import ConfigError, named_as
from dadam3.mixing import LocalMixer, Mixer
from dadam3.optim.adam3 import Dadam3          # imported in the table's order: the registry's order
from dadam3.optim.osg import DOSG
from dadam3.optim.oadagrad import OAdagrad
from dadam3.optim.adam import DAdam, DPOAdam
from dadam3.optim.simultaneous import DSGD
from dadam3.optim.extra_adam import ExtraAdam
from dadam3.optim.base import NodeOptimizer, start_together, step_together
from dadam3.optim.engines import ENGINES
from dadam3.optim.hparams import HParam
from dadam3.optim.registry import OPTIMIZERS, Spec, import_algorithms, optimizer, optimizer_spec
from dadam3.optim.skeletons.optimistic import OptimisticGossip
from dadam3.optim.skeletons.single import SingleSequenceGossip
from dadam3.optim.skeletons.extragradient import ExtraGradientGossip
from dadam3.topologies import Topology, build_topology

__all__ = ["Dadam3", "DOSG", "OAdagrad", "DPOAdam", "DAdam", "DSGD", "ExtraAdam", "HParam", "NodeOptimizer",
           "OptimisticGossip", "SingleSequenceGossip", "ExtraGradientGossip", "step_together", "start_together",
           "OPTIMIZERS", "Spec", "ENGINES", "optimizer", "optimizer_spec", "build_optimizer", "mixer_for"]


import_algorithms(__name__, __path__)       # every algorithm file registers itself (@optimizer)


def mixer_for(name: str, nodes: int, topology: str = "ring", rounds: int = 1,
              make_mixer: Callable[[Topology], Mixer] = LocalMixer, **topology_kw) -> Mixer | None:
    """The mixer an optimizer runs with: the configured topology, the complete graph for
    the centralized variants, none for the single-node Adam3. ``make_mixer`` builds it from
    the topology (:class:`LocalMixer`, or :class:`dadam3.distributed.DistributedMixer`).
    A topology error names ``topology`` where :func:`build_topology` says ``name``."""
    spec = optimizer_spec(name)
    if spec.single_node:
        if nodes != 1:
            raise ConfigError("nodes", nodes, "{name} is the single-node algorithm: use {nodes=1} "
                                              "(or {name=dadam3} for several nodes)", {"name": name, "nodes": nodes})
        return None
    if spec.topology is not None:
        topology, topology_kw = spec.topology, {}
    with named_as({"name": "topology"}):
        graph = build_topology(topology, nodes, rounds, **topology_kw)
    return make_mixer(graph)


def build_optimizer(name: str, params, mixer: Mixer | None, maximize: bool = False, compile: bool | None = None,
                    start: bool = True, engine: str = "auto", **hparams) -> NodeOptimizer:
    """Build optimizer ``name`` over stacked ``params`` (iterable of tensors or param groups);
    ``compile``: compile its update with torch.compile (None: on CUDA); ``engine``: ``"auto"``
    (torch.compile on CUDA, numba on the CPU) or ``"eager"`` (the phase in Python everywhere, so a
    breakpoint in ``direction`` fires; :mod:`dadam3.optim.engines`); ``start``: call its
    ``start()`` (the first gossip round) — pass False to start several together, or to load a
    checkpoint instead."""
    opt = optimizer_spec(name).cls(params, mixer=mixer, maximize=maximize, compile=compile, engine=engine, **hparams)
    return opt.start() if start else opt
