"""The cells of the synthetic-game studies (``python -m dadam3.gossip_study``): gossip rounds and
topology (issue 36), heterogeneous nodes (issue 43) and one adaptive scale for every node (issue 58).
A cell is one run of ``python -m dadam3.synthetic``; :class:`Cell` gives its folder and overrides."""
from __future__ import annotations

import math
from dataclasses import dataclass

from dadam3.errors.config import ConfigError
from dadam3.topologies import build_topology

OPTIMIZERS = ("dadam3", "dp_oadam")
NODES = (5, 16, 64)
TOPOLOGIES = ("ring", "torus", "exponential", "one_peer_exponential", "erdos_renyi", "complete")
ROUNDS = (1, 2, 3, 5, 8)
GRAPH_SEEDS = (0, 1, 2)            # Erdos-Renyi draws
EXTRA_SEEDS = (1, 2)               # game seeds beside 0, for Dadam3 at t = 1
ITERATIONS = 1_000_000
LONG = 10_000_000                  # the ring at t = 1, game seed 0
SPREADS = (0.5, 1.0)               # --heterogeneous: game.spread of its cells
HETEROGENEOUS_TOPOLOGIES = ("ring", "complete")
# a tiny grid for the tests: an easy game (c = 2, k = 0.5, eta = 0.05) that reaches e_k <= 10^-2 in ~100 iterations
SMOKE = dict(nodes=(4,), topologies=("ring", "erdos_renyi"), rounds=(1, 2), graph_seeds=(0,), extra_seeds=(1,),
             iterations=300, long=600, extra=("game.c=2", "game.k=0.5", "optimizer.lr=0.05"))
SMOKE_HETEROGENEOUS = dict(SMOKE, topologies=HETEROGENEOUS_TOPOLOGIES, spreads=(1.0,))
SUMMARY, STUDY = "summary.json", "study.json"
# --shared-scale (issue 58): Dadam3 against one scale for every node (tracked by gossip) and its ideal
# reference (the scales averaged exactly), on the heterogeneous game, the ring at these t and the complete graph
SHARED_OPTIMIZERS = ("dadam3", "dadam3_shared", "dadam3_shared_exact")
SHARED_ROUNDS = (1, 3)


def er_p(nodes: int) -> float:
    """Erdos-Renyi's edge probability at M nodes: 2 ln M / M (twice the connectivity threshold), 2 decimals."""
    return round(min(1.0, 2 * math.log(nodes) / nodes), 2)


@dataclass(frozen=True)
class Cell:
    optimizer: str
    nodes: int
    topology: str
    rounds: int
    iterations: int
    seed: int = 0                  # the game's sample stream
    graph_seed: int | None = None  # Erdos-Renyi only
    extra: tuple[str, ...] = ()    # further overrides (the smoke grid's game)
    spread: float = 0.0            # game.spread (0: the paper's iid nodes)

    @property
    def graph(self) -> str:
        return self.topology if self.graph_seed is None else f"{self.topology}_seed{self.graph_seed}"

    @property
    def path(self) -> str:
        seed = f"_seed{self.seed}" if self.seed else ""
        spread = f"spread{self.spread:g}/" if self.spread else ""
        return f"{spread}{self.optimizer}/M{self.nodes}/{self.graph}/t{self.rounds}{seed}"

    def topology_options(self) -> dict:
        return {} if self.graph_seed is None else {"p": er_p(self.nodes), "seed": self.graph_seed}

    def overrides(self) -> list[str]:
        """The command line of ``python -m dadam3.synthetic`` that reruns this cell (without its directory)."""
        return [f"optimizer={self.optimizer}", f"topology={self.topology}", *self.values()]

    def values(self) -> list[str]:
        opts = [f"topology.{k}={v}" for k, v in self.topology_options().items()]
        return [f"topology.rounds={self.rounds}", *opts, f"nodes={self.nodes}", f"iterations={self.iterations}",
                f"seed={self.seed}", *([f"game.spread={self.spread}"] if self.spread else []), *self.extra]


def grid(smoke: bool = False, heterogeneous: bool = False, shared_scale: bool = False
         ) -> tuple[list[Cell], list[dict]]:
    """The study's cells (the costliest first), and the (topology, M) that cannot be built, with why."""
    if shared_scale:
        return shared_scale_grid(smoke), []
    if heterogeneous:
        return heterogeneous_grid(smoke), []
    g = SMOKE if smoke else dict(nodes=NODES, topologies=TOPOLOGIES, rounds=ROUNDS, graph_seeds=GRAPH_SEEDS,
                                 extra_seeds=EXTRA_SEEDS, iterations=ITERATIONS, long=LONG, extra=())
    cells, skipped = [], []
    for M in g["nodes"]:
        for topo in g["topologies"]:
            graph_seeds = g["graph_seeds"] if topo == "erdos_renyi" else (None,)
            try:
                build_topology(topo, M, **({"p": er_p(M)} if topo == "erdos_renyi" else {}))
            except ConfigError as e:
                skipped.append({"topology": topo, "nodes": M, "reason": str(e)})
                continue
            for opt in OPTIMIZERS:
                for t in g["rounds"]:
                    seeds = (0, *g["extra_seeds"]) if (opt, t) == ("dadam3", 1) else (0,)
                    for gs in graph_seeds:
                        for s in seeds:
                            n = g["long"] if (topo, t, s) == ("ring", 1, 0) else g["iterations"]
                            cells.append(Cell(opt, M, topo, t, n, s, gs, g["extra"]))
    return sorted(cells, key=lambda c: -c.iterations * c.nodes ** 2), skipped


def heterogeneous_grid(smoke: bool = False) -> list[Cell]:
    """``--heterogeneous``: Dadam3 at each spread of :data:`SPREADS`, on the ring (every t) and the complete
    graph (t = 1 only: W^t = W = 11^T/M, so more rounds change the bytes, not the run), every M, game seed 0
    (plus :data:`EXTRA_SEEDS` at t = 1); the costliest first."""
    g = SMOKE_HETEROGENEOUS if smoke else dict(nodes=NODES, topologies=HETEROGENEOUS_TOPOLOGIES, rounds=ROUNDS,
                                               extra_seeds=EXTRA_SEEDS, iterations=ITERATIONS, extra=(),
                                               spreads=SPREADS)
    cells = [Cell("dadam3", M, topo, t, g["iterations"], seed, extra=g["extra"], spread=s)
             for s in g["spreads"] for M in g["nodes"] for topo in g["topologies"]
             for t in (g["rounds"] if topo != "complete" else (1,))          # the complete graph: W^t = W
             for seed in ((0, *g["extra_seeds"]) if t == 1 else (0,))]
    return sorted(cells, key=lambda c: -c.iterations * c.nodes ** 2)


def shared_scale_grid(smoke: bool = False) -> list[Cell]:
    """``--shared-scale``: each optimizer of :data:`SHARED_OPTIMIZERS` at each spread of :data:`SPREADS`,
    every M, the ring at t in :data:`SHARED_ROUNDS` and the complete graph at t = 1 (there the exact
    reference is the tracked scale itself, 11^T/M U: left out), game seed 0; the costliest first."""
    g = SMOKE_HETEROGENEOUS if smoke else dict(nodes=NODES, iterations=ITERATIONS, extra=(), spreads=SPREADS)
    cells = [Cell(opt, M, topo, t, g["iterations"], 0, extra=g["extra"], spread=s)
             for s in g["spreads"] for M in g["nodes"] for opt in SHARED_OPTIMIZERS
             for topo, rounds in (("ring", SHARED_ROUNDS if not smoke else (1, 2)), ("complete", (1,)))
             for t in rounds if not (topo == "complete" and opt == "dadam3_shared_exact")]
    return sorted(cells, key=lambda c: -c.iterations * c.nodes ** 2)
