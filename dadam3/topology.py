"""Mixing matrices W for M nodes, their validation and their spectral gap.

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

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from dadam3.errors.config import ConfigError, check_int
from dadam3.topology_checks import make_doubly_stochastic, spectral_gap_rho, validate


# --------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Builder:
    """One topology of :data:`TOPOLOGIES`: ``fn(nodes, **options)`` returns W, or with a
    ``period`` (a function of the nodes) ``fn(nodes, r)`` returns schedule matrix r (time-varying).
    ``options``: the keyword arguments of :func:`build_topology` it reads (its config keys);
    ``given``: W comes from the user (validated as asked, errors name the option given);
    ``supports(nodes)``: whether it has a graph on that many nodes (the tests build each topology
    on node counts it supports)."""

    fn: Callable[..., np.ndarray]
    options: tuple[str, ...] = ()
    period: Callable[[int], int] | None = None
    given: bool = False
    supports: Callable[[int], bool] = lambda nodes: nodes >= 1


# name -> Builder: the ONE list of topologies. The schema (dadam3/run/schema/groups.py), the
# configs (topology=NAME, stored in Hydra's ConfigStore from here), the docs and the tests read it;
# adding one is a function decorated with @topology, here or in a file of dadam3/topologies/
# (imported with this module). Its options are its keyword arguments with their defaults.
TOPOLOGIES: dict[str, Builder] = {}


def topology(name: str, options: tuple[str, ...] = (), period: Callable[[int], int] | None = None,
             given: bool = False, supports: Callable[[int], bool] | None = None) -> Callable:
    """Register the decorated builder under ``name`` in :data:`TOPOLOGIES` (see :class:`Builder`)."""
    def register(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        TOPOLOGIES[name] = Builder(fn, options, period, given, *([supports] if supports else []))
        return fn
    return register


def torus_supports(M: int) -> bool:
    """A torus needs M = r x c with r, c >= 2 (or M <= 3)."""
    return M <= 3 or any(M % r == 0 and M // r >= 2 for r in range(2, math.isqrt(M) + 1))


# --------------------------------------------------------------------------- builders
@topology("ring")
def ring(M: int) -> np.ndarray:
    """The paper's ring: W_ij = 1/3 if |i-j| <= 1 or |i-j| = M-1.

    M = 1 is the single node (W = [1]); M = 2 has one neighbour each, so each node
    averages itself and its neighbour with weight 1/2; M = 3 is the complete graph.
    """
    check_nodes(M)
    if M == 1:
        return np.ones((1, 1))
    if M == 2:
        return np.full((2, 2), 0.5)
    d = np.abs(np.subtract.outer(np.arange(M), np.arange(M)))
    return np.where((d <= 1) | (d == M - 1), 1.0 / 3.0, 0.0)


@topology("complete")
def complete(M: int) -> np.ndarray:
    """W = 11^T / M: one mixing round is exact averaging (the centralized variants)."""
    check_nodes(M)
    return np.full((M, M), 1.0 / M)


def metropolis_hastings(adjacency: np.ndarray) -> np.ndarray:
    """Metropolis-Hastings weights of an undirected graph (no self loops in ``adjacency``):

    W_ij = 1 / (1 + max(deg_i, deg_j)) for each edge, W_ii = 1 - sum_{j != i} W_ij.
    Symmetric and doubly stochastic for every undirected graph.
    """
    A = (np.asarray(adjacency) > 0).astype(float)
    np.fill_diagonal(A, 0.0)
    deg = A.sum(axis=1)
    W = np.where(A > 0, 1.0 / (1.0 + np.maximum(deg[:, None], deg[None, :])), 0.0)
    W[np.diag_indices_from(W)] = 1.0 - W.sum(axis=1)
    return W


@topology("torus", options=("rows",), supports=torus_supports)
def torus(M: int, rows: int | None = None) -> np.ndarray:
    """2-D torus of ``rows x (M // rows)`` nodes, each linked to its 4 grid neighbours
    (wrapping around), Metropolis-Hastings weights (1/5 each when both sides >= 3).

    ``rows=None`` picks the most square factorisation of M.
    """
    check_nodes(M)
    if rows is None:
        rows = max(r for r in range(1, int(math.isqrt(M)) + 1) if M % r == 0)
        if rows == 1 and M > 3:
            raise ConfigError("name", "torus", "{nodes} has no factorisation r x c with r, c >= 2: the torus "
                              "would be a ring; use {name=ring} or another nodes", {"nodes": M, "name": "torus"})
    if isinstance(rows, bool) or int(rows) != rows or not 1 <= rows <= M or M % int(rows):
        raise ConfigError("rows", rows, "must be an integer divisor of {nodes}", {"nodes": M})
    rows = int(rows)
    cols = M // rows
    A = np.zeros((M, M))
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                j = ((r + dr) % rows) * cols + (c + dc) % cols
                if j != i:
                    A[i, j] = A[j, i] = 1.0
    return metropolis_hastings(A)


@topology("star")
def star(M: int) -> np.ndarray:
    """Star with node 0 as hub, Metropolis-Hastings weights (hub-leaf weight 1/M)."""
    check_nodes(M)
    A = np.zeros((M, M))
    A[0, 1:] = A[1:, 0] = 1.0
    return metropolis_hastings(A)


@topology("exponential")
def exponential(M: int) -> np.ndarray:
    """Static exponential graph: i linked to i +- 2^k (mod M) for 2^k < M, made undirected,
    Metropolis-Hastings weights (so W is symmetric, as the paper's theory assumes)."""
    check_nodes(M)
    A = np.zeros((M, M))
    hop = 1
    while hop < M:
        for i in range(M):
            A[i, (i + hop) % M] = A[(i + hop) % M, i] = 1.0
        hop *= 2
    return metropolis_hastings(A)


@topology("erdos_renyi", options=("p", "seed"))
def erdos_renyi(M: int, p: float, seed: int = 0, max_tries: int = 1000) -> np.ndarray:
    """G(M, p) with Metropolis-Hastings weights, redrawn (seeded) until connected."""
    check_nodes(M)
    if not 0.0 < float(p) <= 1.0:
        raise ConfigError("p", p, "edge probability must be in (0, 1]")
    rng = np.random.default_rng(seed)
    for _ in range(max_tries):
        upper = np.triu(rng.random((M, M)) < p, k=1)
        A = (upper | upper.T).astype(float)
        if _connected(A):
            return metropolis_hastings(A)
    raise ConfigError("p", p, f"no connected G({M}, p) in {max_tries} draws; raise p")


@topology("explicit", options=("matrix", "file"), given=True)
def explicit(M: int | None = None, matrix: Sequence[Sequence[float]] | None = None,
             file: str | None = None) -> np.ndarray:
    """A user-given W: inline (``matrix``, a list of rows) or from a .npy / .csv / .txt
    ``file`` (whitespace- or comma-separated rows); ``M x M`` (``M=None``: any size)."""
    if (matrix is None) == (file is None):
        raise ConfigError("matrix", matrix, "give exactly one of {matrix=} (a list of rows) or {file=}",
                          {"matrix": matrix, "file": file})
    if file is not None:
        path = Path(file).expanduser()
        if not path.is_file():
            raise ConfigError("file", file, "no such file (.npy, .csv or .txt matrix)")
        try:
            if path.suffix == ".npy":
                W = np.asarray(np.load(path, allow_pickle=False), dtype=float)
            else:
                W = np.loadtxt(path.read_text().replace(",", " ").splitlines(), ndmin=2)
        except (ValueError, OSError, UnicodeDecodeError, EOFError) as e:
            raise ConfigError("file", file, f"not a numeric matrix (.npy, or .csv/.txt rows of "
                                            f"numbers): {' '.join(str(e).split())[:200]}") from None
        key = "file"
    else:
        try:
            W = np.asarray(matrix, dtype=float)
        except (TypeError, ValueError):
            raise ConfigError("matrix", matrix, "must be a list of numeric rows") from None
        key = "matrix"
    if W.ndim != 2:
        raise ConfigError(key, f"array of shape {W.shape}", "must be a 2-D square matrix")
    if M is not None and W.shape[0] != M:
        raise ConfigError(key, f"{W.shape[0]}x{W.shape[1]} matrix", f"must be {M}x{M} ({{nodes}})", {"nodes": M})
    return W.astype(float)


def one_peer_period(M: int) -> int:
    """tau = ceil(log2 M): the one-peer exponential graph's period (1 for a single node)."""
    return max(1, math.ceil(math.log2(M))) if M > 1 else 1


@topology("one_peer_exponential", period=one_peer_period)
def one_peer_exponential(M: int, k: int) -> np.ndarray:
    """Time-varying one-peer exponential graph (Ying et al., NeurIPS 2021), beyond the paper.

    At iteration k node i averages with the single peer (i + 2^(k mod tau)) mod M,
    tau = ceil(log2 M): W_k = (I + P_k)/2 with P_k a cyclic shift. Each W_k is doubly
    stochastic but not symmetric; for M a power of two the product over one period
    is exact averaging.
    """
    check_nodes(M)
    if M == 1:
        return np.ones((1, 1))
    shift = 2 ** (k % one_peer_period(M))
    W = 0.5 * np.eye(M)
    for i in range(M):
        W[i, (i + shift) % M] += 0.5
    return W


# --------------------------------------------------------------------------- topology object
@dataclass
class Topology:
    """The mixing schedule: ``matrix(k)`` is the W applied at iteration k (k >= 1), and
    ``operator(k)`` is the product of ``rounds`` gossip rounds, W^t for a static W."""

    name: str
    nodes: int
    rounds: int = 1
    static_W: np.ndarray | None = None
    schedule: Callable[[int], np.ndarray] | None = None
    period: int = 1
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def time_varying(self) -> bool:
        return self.schedule is not None

    def matrix(self, k: int = 1) -> np.ndarray:
        return self.static_W if self.schedule is None else self.schedule(k)

    def phase(self, k: int, r: int = 0) -> int:
        """The schedule index of gossip round r (0..t-1) of iteration k: ``((k - 1) t + r) mod
        period`` (0 for a static W). The one place this order is written."""
        return ((k - 1) * self.rounds + r) % self.period if self.schedule is not None else 0

    def operator(self, k: int = 1) -> np.ndarray:
        """W^t (static), or W_{k,t} ... W_{k,1} for time-varying: round r uses the
        schedule's matrix number (k-1)*t + r."""
        if self.schedule is None:
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
        if self.schedule is None:
            return spectral_gap_rho(self.static_W)
        P = np.eye(self.nodes)
        for r in range(self.period):
            P = self.schedule(r) @ P
        return spectral_gap_rho(P)


def build_topology(name: str, nodes: int, rounds: int = 1, *, rows: int | None = None,
                   p: float = 0.5, seed: int = 0, matrix=None, file: str | None = None,
                   require_symmetric: bool = True, **options) -> Topology:
    """Build and validate a :class:`Topology` (a one-line ConfigError naming the argument);
    ``options``: those of a topology registered elsewhere (its builder's keyword arguments)."""
    check_nodes(nodes)
    if int(rounds) != rounds or rounds < 1:
        raise ConfigError("rounds", rounds, "gossip rounds per mixing must be an integer >= 1")
    rounds = int(rounds)
    if name not in TOPOLOGIES:
        raise ConfigError("name", name, f"unknown topology (not in dadam3.topology.TOPOLOGIES); allowed: "
                                        f"{', '.join(TOPOLOGIES)}")
    builder = TOPOLOGIES[name]
    given = {"rows": rows, "p": p, "seed": seed, "matrix": matrix, "file": file, **options}
    unknown = sorted(set(options) - set(builder.options))
    if unknown:
        raise ConfigError(unknown[0], options[unknown[0]], f"not an option of topology {name}; allowed: "
                                                           f"{', '.join(builder.options) or 'none'}")
    options = {key: given[key] for key in builder.options if key in given}
    if builder.period is not None:
        period = builder.period(nodes)
        topo = Topology(name, nodes, rounds, schedule=lambda r: builder.fn(nodes, r, **options), period=period)
        for r in range(period):
            validate(topo.schedule(r), "name", symmetric=False, require_connected=False)
        if nodes > 1 and topo.rho >= 1 - 1e-9:
            raise ConfigError("name", name, "product of one period is not connected")
        return topo
    W = builder.fn(nodes, **options)
    if builder.given:                   # the user's W: errors name the option given, symmetric as asked
        key = next((k for k in builder.options if given[k] is not None), "name")
    else:
        key, require_symmetric = "name", True       # a built-in W (tested valid): the error names the key only
    validate(W, key, symmetric=require_symmetric)
    W = make_doubly_stochastic(W, key, symmetric=require_symmetric)     # every source of W
    return Topology(name, nodes, rounds, static_W=W)


# --------------------------------------------------------------------------- helpers
def check_nodes(M) -> int:
    """M as an int: the number of nodes of a topology, a node layout or a sampler (>= 1)."""
    return check_int("nodes", M, 1)


def _connected(A: np.ndarray) -> bool:
    M = A.shape[0]
    seen, stack = {0}, [0]
    while stack:
        i = stack.pop()
        for j in np.nonzero(A[i])[0]:
            if int(j) not in seen:
                seen.add(int(j))
                stack.append(int(j))
    return len(seen) == M


def _import_topologies() -> None:
    """Import every module of :mod:`dadam3.topologies` (each registers its builders)."""
    import importlib
    import pkgutil

    import dadam3.topologies as package
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")


_import_topologies()
