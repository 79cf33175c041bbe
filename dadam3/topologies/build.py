"""A topology built from its registered builder and validated: :class:`Topology`, the mixing
schedule W_k of every iteration k, and :func:`build_topology`.

Convention: ``x_i <- sum_j W[i, j] x_j``; on parameters stacked along a leading
node axis this is ``W @ X``. (The paper writes ``X W`` with nodes as columns; the
two agree for the symmetric matrices the theory assumes.) Node i's neighbours
are ``N_i = {j : W[i, j] > 0}``.

Assumption D of the paper: W is doubly stochastic and

    rho = ||W - 11^T/M||_2 < 1,

which for symmetric W equals max(|sigma_2(W)|, |sigma_M(W)|). With t gossip
rounds per mixing (the paper's remark 3) the operator is W^t and its gap is
``rho(W^t) = rho^t`` for symmetric W.

Everything here is pure numpy (float64); nothing touches torch.distributed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dadam3.errors.config import ConfigError
from dadam3.topologies.checks import check_nodes, make_doubly_stochastic, spectral_gap_rho, validate
from dadam3.topologies.registry import TOPOLOGIES


@dataclass
class Topology:
    """The mixing schedule: ``matrix(k)`` is the W applied at iteration k (k >= 1), and
    ``operator(k)`` is the product of ``rounds`` gossip rounds, W^t for a static W. A
    time-varying one holds its period's matrices (``schedule``, ``[P, M, M]``)."""

    name: str
    nodes: int
    rounds: int = 1
    static_W: np.ndarray | None = None
    matrices: np.ndarray | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def time_varying(self) -> bool:
        return self.matrices is not None

    @property
    def period(self) -> int:
        """P, the schedule's period (1 for a static W)."""
        return 1 if self.matrices is None else len(self.matrices)

    def schedule(self, r: int) -> np.ndarray:
        """The schedule's matrix number r (mod its period)."""
        return self.matrices[r % self.period]

    def matrix(self, k: int = 1) -> np.ndarray:
        return self.static_W if self.matrices is None else self.schedule(k)

    def phase(self, k: int, r: int = 0) -> int:
        """The schedule index of gossip round r (0..t-1) of iteration k: ``((k - 1) t + r) mod
        period`` (0 for a static W). The one place this order is written."""
        return ((k - 1) * self.rounds + r) % self.period if self.matrices is not None else 0

    def operator(self, k: int = 1) -> np.ndarray:
        """W^t (static), or W_{k,t} ... W_{k,1} for time-varying: round r uses the
        schedule's matrix number (k-1)*t + r."""
        if self.matrices is None:
            if "static" not in self._cache:
                self._cache["static"] = np.linalg.matrix_power(self.static_W, self.rounds)
            return self._cache["static"]
        phase = self.phase(k)
        if phase not in self._cache:
            P = np.eye(self.nodes)
            for r in range(self.rounds):
                P = self.schedule(phase + r) @ P
            self._cache[phase] = P
        return self._cache[phase]

    @property
    def rho(self) -> float:
        """rho of a single W (static), or of the product of one period (time-varying)."""
        if self.matrices is None:
            return spectral_gap_rho(self.static_W)
        P = np.eye(self.nodes)
        for W in self.matrices:
            P = W @ P
        return spectral_gap_rho(P)


def build_topology(name: str, nodes: int, rounds: int = 1, **options: Any) -> Topology:
    """Build and validate topology ``name`` of :data:`~dadam3.topologies.registry.TOPOLOGIES` on
    ``nodes`` nodes, ``rounds`` gossip rounds per mixing, with ``options`` (its builder's keyword
    arguments): a one-line ConfigError naming the argument otherwise."""
    check_nodes(nodes)
    if int(rounds) != rounds or rounds < 1:
        raise ConfigError("rounds", rounds, "gossip rounds per mixing must be an integer >= 1")
    rounds = int(rounds)
    if name not in TOPOLOGIES:
        raise ConfigError("name", name, f"unknown topology (not in dadam3.topologies.TOPOLOGIES); allowed: "
                                        f"{', '.join(sorted(TOPOLOGIES))}")
    builder = TOPOLOGIES[name]
    unknown = sorted(set(options) - set(builder.options))
    if unknown:
        raise ConfigError(unknown[0], options[unknown[0]], f"not an option of topology {name}; allowed: "
                                                           f"{', '.join(builder.options) or 'none'}")
    W = np.asarray(builder.fn(nodes, **options), dtype=float)
    if W.ndim == 3:                     # a time-varying schedule: each W_r mixes, one period connects
        for Wr in W:
            validate(Wr, "name", symmetric=False, require_connected=False)
        topo = Topology(name, nodes, rounds, matrices=W)
        if nodes > 1 and topo.rho >= 1 - 1e-9:
            raise ConfigError("name", name, "product of one period is not connected")
        return topo
    if not builder.given:               # a built-in W (tested valid): the error names the key only
        validate(W, "name")
        W = make_doubly_stochastic(W, "name")
    return Topology(name, nodes, rounds, static_W=W)
