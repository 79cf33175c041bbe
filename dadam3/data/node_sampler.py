"""How the M nodes see the data: one mini-batch per node per call, stacked on a node axis
(:class:`NodeSampler`); and each node's own stream of generator noise (:class:`NodeNoise`).

Sampling rule (per node, independent of the others):

* node i owns a seeded ``torch.Generator`` (seed derived from ``(seed, i)`` with
  ``numpy.random.SeedSequence``, so node i's stream does not depend on M);
* finite datasets: each epoch the node draws a fresh permutation of its shard and
  serves it in consecutive slices of ``batch_size`` — sampling without replacement
  within an epoch; an incomplete last slice is dropped and the next epoch begins;
* infinite sources (``gaussians``): every batch is a fresh draw from the node's generator.

The shards come from :mod:`dadam3.data.partition` (``iid``: everyone sees everything,
the paper's setting; ``split``; ``dirichlet``).

Exact resume: :meth:`NodeSampler.state_dict` stores, per node, the generator state at
the start of the current epoch plus the epoch number and position in it (the
permutation is re-drawn from that state on load), so a sampler built with the same
arguments and restored with :meth:`NodeSampler.load_state_dict` yields bit-identical
future batches.
"""
from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from dadam3.errors.config import ConfigError, check_choice, check_int, check_range
from dadam3.data.partition import PARTITIONS, dirichlet_shards, split_shards
from dadam3.topologies import check_nodes

STATE_FORMAT = "dadam3.NodeSampler/1"


def node_seed(seed: int, node: int, stream: int = 0) -> int:
    """The seed of node ``node``'s random stream number ``stream`` (0: its data order) in a run with
    seed ``seed``: independent of how many nodes there are and of how they are spread over
    processes. Stream 0 is child ``node + 1`` of ``SeedSequence(seed)`` (child 0 draws the
    partition); other streams are children of ``SeedSequence([seed, stream])``."""
    parent = np.random.SeedSequence(seed if stream == 0 else [seed, stream])
    child = np.random.SeedSequence(parent.entropy, spawn_key=(node + 1 if stream == 0 else node,))
    return int(child.generate_state(1, np.uint64)[0])


NOISE_STREAM = 1             # node_seed stream of the generator noise and interpolation weights


class NodeNoise:
    """Every node's own stream of generator noise z and interpolation weights eps, seeded from
    (seed, node index), so results do not depend on how nodes are spread over processes.

    ``make_generator(device=...)`` makes one node's ``torch.Generator`` (torch's own by default:
    on CUDA a CUDA generator)."""

    def __init__(self, seed: int, node_ids: range, device: torch.device,
                 make_generator: Callable[..., torch.Generator] = torch.Generator):
        self.device = device
        self.generators = [make_generator(device=device).manual_seed(node_seed(seed, i, NOISE_STREAM))
                           for i in node_ids]

    def normal(self, *shape: int, dtype: torch.dtype) -> torch.Tensor:
        """``[M, *shape]`` standard normal draws, row i from node i's stream."""
        return torch.stack([torch.randn(*shape, generator=g, device=self.device, dtype=dtype)
                            for g in self.generators])

    def uniform(self, *shape: int, dtype: torch.dtype) -> torch.Tensor:
        """``[M, *shape]`` draws from U[0, 1), row i from node i's stream."""
        return torch.stack([torch.rand(*shape, generator=g, device=self.device, dtype=dtype)
                            for g in self.generators])

    def state_dict(self) -> list[torch.Tensor]:
        return [g.get_state() for g in self.generators]

    def load_state_dict(self, states: list[torch.Tensor]) -> None:
        for g, state in zip(self.generators, states, strict=True):
            g.set_state(state)


class NodeSampler:
    """Serves ``[M, B, *item_shape]`` batches (one mini-batch for each of M nodes) on ``device``.

    Args:
        dataset: an indexable dataset with ``get_batch(indices)`` (every image dataset of
            :func:`~dadam3.data.build_dataset`), or an infinite source with
            ``sample(n, generator)`` (:class:`~dadam3.data.GaussianRing`).
        nodes: M >= 1.
        batch_size: B >= 1 samples per node per call (at most the smallest shard).
        partition: ``iid`` | ``split`` | ``dirichlet`` (see :mod:`dadam3.data.partition`).
        alpha: Dirichlet concentration (``dirichlet`` only; > 0, smaller = more skew).
        seed: seeds both the partition and the node streams.
        device: where batches are returned; in-memory datasets are moved there once.
        prefetch: fetch the next batch in a background thread while the caller trains
            (useful for datasets that decode files). Batches and resume are unchanged.
        node_ids: the nodes this process serves (a rank's block under torch.distributed;
            default all M). Shards are cut for all M nodes, and node i's batches do not
            depend on which other nodes are served.
    """

    def __init__(self, dataset: Any, nodes: int, batch_size: int, partition: str = "iid",
                 alpha: float = 0.5, seed: int = 0, device: torch.device | str = "cpu",
                 prefetch: bool = False, node_ids: Sequence[int] | None = None):
        self.total_nodes = check_nodes(nodes)
        self.node_ids = list(range(self.total_nodes)) if node_ids is None else [int(i) for i in node_ids]
        self.nodes = len(self.node_ids)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.partition = check_choice("partition", partition, PARTITIONS)
        self.alpha = (check_range("alpha", alpha, 0.0, None, low_open=True)
                      if partition == "dirichlet" else alpha)
        self.seed = check_int("seed", seed, 0)
        self.device = torch.device(device)
        self.prefetch = bool(prefetch)
        self.infinite = not hasattr(dataset, "__len__") and callable(getattr(dataset, "sample", None))
        self.dataset = dataset.to(self.device) if callable(getattr(dataset, "to", None)) else dataset

        self._generators = [torch.Generator().manual_seed(node_seed(self.seed, i)) for i in self.node_ids]
        self.length: int | None = None
        self.shards: list[Tensor] | None = None        # None: every node sees the whole set
        self.shard_sizes: list[int] = []
        if self.infinite:
            if self.partition != "iid":
                raise ConfigError("partition", partition,
                                  f"{getattr(dataset, 'name', 'this source')} is an infinite sampler: "
                                  "only iid is possible")
        else:
            self.length = len(dataset)
            # child 0 of SeedSequence(seed) cuts the shards; node i's data order is child i + 1 (node_seed)
            self.shards = self._make_shards(np.random.default_rng(np.random.SeedSequence(self.seed).spawn(1)[0]))
        self._shards_sha1 = self._fingerprint()             # of all M shards, whichever this process serves
        if self.shards is not None:
            self.shards = [self.shards[i] for i in self.node_ids]
            self.shard_sizes = [len(s) for s in self.shards]
        elif not self.infinite:
            self.shard_sizes = [self.length] * self.nodes
        for i, size in zip(self.node_ids, self.shard_sizes):
            if size < self.batch_size:
                raise ConfigError("batch_size", batch_size,
                                  f"node {i} holds only {size} samples ({{partition}}, "
                                  f"{self.length} in the dataset); batch_size must be <= the smallest shard",
                                  {"partition": self.partition})

        self._epoch = [-1] * self.nodes
        self._pos = [0] * self.nodes
        self._epoch_rng: list[Tensor | None] = [None] * self.nodes
        self._perm: list[Tensor | None] = [None] * self.nodes
        if not self.infinite:
            for i in range(self.nodes):
                self._new_epoch(i)
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        self._consumed_state: dict[str, Any] | None = None

    # ------------------------------------------------------------------ partition
    def _make_shards(self, rng: np.random.Generator) -> list[Tensor] | None:
        if self.partition == "iid":
            return None
        if self.partition == "split":
            return split_shards(self.length, self.total_nodes, rng)
        labels = getattr(self.dataset, "labels", None)
        if labels is None:
            raise ConfigError("partition", "dirichlet",
                              f"needs class labels and dataset {getattr(self.dataset, 'name', '?')} "
                              "has none; use iid or split")
        return dirichlet_shards(torch.as_tensor(labels).cpu().numpy(), self.total_nodes, self.alpha, rng,
                                min_size=self.batch_size)

    def _fingerprint(self) -> str:
        h = hashlib.sha1(f"{self.partition}|{self.length}|{self.total_nodes}".encode())
        for shard in self.shards or []:
            h.update(shard.numpy().astype(np.int64).tobytes())
            h.update(b"|")
        return h.hexdigest()

    # ------------------------------------------------------------------ streams
    def _new_epoch(self, i: int) -> None:
        gen = self._generators[i]
        self._epoch_rng[i] = gen.get_state()
        self._perm[i] = torch.randperm(self.shard_sizes[i], generator=gen)
        self._pos[i] = 0
        self._epoch[i] += 1

    def _node_indices(self, i: int) -> Tensor:
        if self._pos[i] + self.batch_size > self.shard_sizes[i]:
            self._new_epoch(i)
        pos = self._pos[i]
        chosen = self._perm[i][pos:pos + self.batch_size]
        self._pos[i] = pos + self.batch_size
        return chosen if self.shards is None else self.shards[i][chosen]

    def next_indices(self) -> Tensor:
        """Advance every node's stream by one batch; int64 ``[M, B]`` dataset indices (CPU)."""
        if self.infinite:
            raise TypeError("an infinite source has no indices; use next_batch()")
        return torch.stack([self._node_indices(i) for i in range(self.nodes)])

    def _draw(self) -> Tensor:
        """Everything that advances the random state (always on the caller's thread)."""
        if self.infinite:
            return torch.stack([self.dataset.sample(self.batch_size, g) for g in self._generators])
        return self.next_indices()

    def _fetch(self, drawn: Tensor) -> Tensor:
        """Turn drawn indices (or points) into the batch on ``device``; no random state."""
        if self.infinite:
            return drawn.to(self.device)
        flat = self.dataset.get_batch(drawn.reshape(-1))
        return flat.reshape(self.nodes, self.batch_size, *flat.shape[1:]).to(self.device)

    def next_batch(self) -> Tensor:
        """One mini-batch per node: ``[M, B, C, H, W]`` (``[M, B, 2]`` for gaussians) on ``device``."""
        if not self.prefetch:
            return self._fetch(self._draw())
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="node-sampler")
        if self._pending is None:
            self._pending = self._pool.submit(self._fetch, self._draw())
        batch = self._pending.result()
        self._consumed_state = self._raw_state()   # the state after exactly the batches handed out
        self._pending = self._pool.submit(self._fetch, self._draw())
        return batch

    def __iter__(self) -> Iterator[Tensor]:
        while True:
            yield self.next_batch()

    def close(self) -> None:
        """Stop the prefetch thread (if any); the sampler stays usable."""
        self._drop_pending()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _drop_pending(self) -> None:
        if self._pending is not None:
            self._pending.cancel() or self._pending.exception()   # wait for a running fetch
            self._pending = None

    # ------------------------------------------------------------------ resume
    def _raw_state(self) -> dict[str, Any]:
        streams = {}
        for i, (node, gen) in enumerate(zip(self.node_ids, self._generators)):
            if self.infinite:
                streams[node] = {"rng": gen.get_state()}
            else:   # epoch-start state is never mutated in place, so sharing it is safe
                streams[node] = {"rng": self._epoch_rng[i], "epoch": self._epoch[i], "pos": self._pos[i]}
        return {"format": STATE_FORMAT, **self._identity(), "streams": streams}

    def _identity(self) -> dict[str, Any]:
        return {"nodes": self.total_nodes, "batch_size": self.batch_size, "partition": self.partition,
                "alpha": self.alpha if self.partition == "dirichlet" else None, "seed": self.seed,
                "length": self.length, "shards_sha1": self._shards_sha1}

    def state_dict(self) -> dict[str, Any]:
        """Everything that determines future batches (torch.save-able, a few KB per node);
        ``streams`` maps each served node's index to its stream's state, so the states of
        several processes' samplers merge into one (``{**a["streams"], **b["streams"]}``)."""
        state = self._consumed_state if self._pending is not None else self._raw_state()
        return {**state, "streams": {node: {k: (v.clone() if isinstance(v, Tensor) else v) for k, v in s.items()}
                                     for node, s in state["streams"].items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where the sampler that wrote ``state`` stopped.

        Raises:
            ConfigError: ``state`` comes from a sampler with other settings or data.
        """
        if state.get("format") != STATE_FORMAT:
            raise ConfigError("sampler_state.format", state.get("format"), f"expected {STATE_FORMAT}")
        for key, mine in self._identity().items():
            if state.get(key) != mine:
                raise ConfigError(f"sampler_state.{key}", state.get(key),
                                  f"does not match this sampler ({mine}); resume with the same data settings")
        self._drop_pending()
        self._consumed_state = None
        streams = state["streams"]
        missing = [node for node in self.node_ids if node not in streams]
        if missing:
            raise ConfigError("sampler_state.streams", sorted(streams), f"holds no stream of node(s) {missing}")
        for i, (gen, node) in enumerate(zip(self._generators, self.node_ids)):
            s = streams[node]
            gen.set_state(s["rng"].clone())
            if not self.infinite:
                self._epoch[i] = s["epoch"] - 1
                self._new_epoch(i)          # re-draws the same permutation from the epoch-start state
                self._pos[i] = s["pos"]
