"""Which sample indices each of the M nodes may draw from.

* ``iid`` — every node sees the whole set: D_i = D for all i, the setting of the paper
  (Sec. 3, "we will work with the first strategy and assume F_i = E_{ξ∼D}[f]").
* ``split`` — a seeded random permutation cut into M disjoint shards of ⌊N/M⌋ samples
  (the N mod M left over are unused).
* ``dirichlet`` — label skew: for every class c draw p_c ∼ Dir_M(α) and give node j a
  p_{c,j} share of class c's (shuffled) samples; a node that already holds ≥ N/M samples
  gets no more ("balance" step). Redrawn until every node holds at least ``min_size``.
  This is the scheme of NIID-Bench (Li, Diao, Chen & He, "Federated Learning on Non-IID
  Data Silos: An Experimental Study", ICDE 2022), after Yurochkin et al. (ICML 2019).
  Shards are disjoint; together they cover the whole set. Small α ⇒ strong skew.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from dadam3.errors.config import ConfigError

PARTITIONS = ("iid", "split", "dirichlet")
DIRICHLET_MAX_TRIES = 1000


def split_shards(n: int, nodes: int, rng: np.random.Generator) -> list[Tensor]:
    """M disjoint, equal, sorted shards of a seeded permutation of ``range(n)``."""
    per_node = n // nodes
    perm = rng.permutation(n)
    return [torch.from_numpy(np.sort(perm[j * per_node:(j + 1) * per_node])) for j in range(nodes)]


def dirichlet_shards(labels: np.ndarray, nodes: int, alpha: float, rng: np.random.Generator,
                     min_size: int = 1) -> list[Tensor]:
    """Label-skewed disjoint shards (see the module docstring), each sorted. Shards that cannot all
    hold ``min_size`` samples whatever the draw (``nodes * min_size`` beyond the data set) are
    refused by counting, before any draw, naming the keys that fix it."""
    n = len(labels)
    if nodes * min_size > n:
        raise ConfigError("batch_size", min_size,
                          f"dataset.partition=dirichlet gives each of nodes={nodes} its own samples, at least "
                          f"batch_size={min_size} each: {nodes * min_size} samples, but the data set has {n}; lower "
                          f"loop.batch_size to <= {n // nodes} or nodes to <= {n // min_size}")
    classes = np.unique(labels)
    for _ in range(DIRICHLET_MAX_TRIES):
        shards: list[list[int]] = [[] for _ in range(nodes)]
        for c in classes:
            idx = np.flatnonzero(labels == c)
            rng.shuffle(idx)
            p = rng.dirichlet(np.full(nodes, alpha))
            open_ = np.array([len(s) < n / nodes for s in shards], dtype=np.float64)
            p = p * open_                                             # balance step
            # tiny alpha can put all mass on full nodes (p underflows): spread evenly instead
            p = p / p.sum() if p.sum() > 0 else open_ / open_.sum()
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            for shard, part in zip(shards, np.split(idx, cuts)):
                shard.extend(part.tolist())
        if min(len(s) for s in shards) >= min_size:
            return [torch.from_numpy(np.sort(np.asarray(s, dtype=np.int64))) for s in shards]
    raise ConfigError("alpha", alpha,
                      f"{DIRICHLET_MAX_TRIES} Dirichlet draws never gave all {nodes} nodes at least {min_size} "
                      f"samples (batch_size) of the {n} ({n // nodes} each at most if split evenly): lower "
                      "loop.batch_size or nodes, or raise dataset.alpha (a larger alpha splits more evenly)")
