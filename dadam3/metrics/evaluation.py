"""Evaluation during training: sample quality of the node-stacked generator at an iteration.

* 2-D data (the ring of Gaussians): modes covered and share of high-quality samples
  (Metz et al. 2017 / VEEGAN), per node and of the node-averaged model;
* images: IS, FID and KID through torch-fidelity (InceptionV3, or the Fashion-MNIST
  classifier), per node (the paper reports the node average) and of the node-averaged
  model; FID/KID against the data set's training images, whose statistics are cached.

:func:`evaluation_hook` binds these into the trainer's :class:`Evaluation` hook: the
period and ``score(G, iteration) -> dict`` (or None when nothing is to be evaluated). What is
drawn from the generator comes from the layer above through ``draws``
(:class:`dadam3.gan.samples.GeneratorDraws`): this module scores samples and never imports the GAN code.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol

from torch import Tensor, nn

from dadam3.data import mode_metrics
from dadam3.metrics.spec import FEATURE_EXTRACTORS, FidelitySpec

Sampler = Callable[[int], Tensor]          # n -> n generated samples
log = logging.getLogger(__name__)


class Draws(Protocol):
    """What evaluation draws from the node-stacked generator ``G``."""

    def fixed(self, n: int) -> Callable[[nn.Module], tuple[Tensor, Tensor]]:
        """G -> (every node's samples ``[M, n, ...]``, the averaged model's ``[n, ...]``), from
        the same ``n`` noise vectors at every call."""

    def samplers(self, G: nn.Module, per_node: bool) -> ContextManager[tuple[list[Sampler], Sampler]]:
        """In eval mode: a sampler per node (none unless ``per_node``) and one of the averaged model."""


@dataclass(frozen=True)
class Evaluation:
    """What the trainer evaluates: ``score(G, iteration) -> dict`` every ``every`` iterations
    (and at the last)."""
    every: int
    score: Callable[[nn.Module, int], dict]

    def due(self, k: int, last: bool) -> bool:
        return k % self.every == 0 or last


def mode_coverage(G: nn.Module, iteration: int, draw: Callable[[nn.Module], tuple[Tensor, Tensor]],
                  centers: Tensor, std: float) -> dict:
    """Modes covered and high-quality share of every node's samples (node mean and list) and of
    the node-averaged model's, all from the same fixed noise (``draw``)."""
    per_node, averaged = draw(G)
    centers = centers.to(per_node.device)
    num_nodes = per_node.shape[0]
    nodes = [mode_metrics(per_node[i], centers, std) for i in range(num_nodes)]
    avg = mode_metrics(averaged, centers, std)
    return {"modes_covered": sum(p["modes_covered"] for p in nodes) / num_nodes,
            "high_quality_share": sum(p["high_quality_share"] for p in nodes) / num_nodes,
            "modes_covered_nodes": [p["modes_covered"] for p in nodes],
            "high_quality_share_nodes": [p["high_quality_share"] for p in nodes],
            "modes_covered_avg_model": avg["modes_covered"],
            "high_quality_share_avg_model": avg["high_quality_share"]}


def image_scores(G: nn.Module, iteration: int, draws: Draws, samples: int, spec: FidelitySpec,
                 reference: Any = None, reference_cache_name: str | None = None, per_node: bool = True,
                 second: tuple[str, FidelitySpec] | None = None) -> dict:
    """The ``spec``'s IS / FID / KID of every node (``<metric>_mean`` = node average,
    ``<metric>_nodes``) and of the node-averaged model (``<metric>_avg_model``); ``samples``
    images each, from fixed evaluation noise (``fidelity_metrics`` samples under a forked RNG
    seeded with 0, the run's own RNG untouched). FID and KID compare with ``reference`` (the
    data set's training images; cached after the first call). ``second`` = (name, spec): the same
    images scored under a second scorer (its spec's metrics), each key suffixed ``_<name>``."""
    rec = _scores(G, draws, samples, spec, reference, reference_cache_name, per_node)
    if second is not None:
        name, spec2 = second
        more = _scores(G, draws, samples, spec2, reference, reference_cache_name, per_node)
        rec.update({f"{k}_{name}": v for k, v in more.items()})
    return rec


def _scores(G: nn.Module, draws: Draws, samples: int, spec: FidelitySpec, reference: Any,
            reference_cache_name: str | None, per_node: bool) -> dict:
    from dadam3.metrics.fidelity import fidelity_metrics

    score = partial(fidelity_metrics, num_samples=samples, spec=spec, reference=reference,
                    reference_cache_name=reference_cache_name, device=next(G.parameters()).device)
    with draws.samplers(G, per_node) as (node_samplers, averaged):
        nodes = [score(sample) for sample in node_samplers]
        avg = score(averaged)
    rec = {}
    for ours, theirs in (("is", "is_mean"), ("fid", "fid"), ("kid", "kid_mean")):
        if theirs not in avg:
            continue
        rec[f"{ours}_avg_model"] = avg[theirs]
        if nodes:
            rec[f"{ours}_nodes"] = [n[theirs] for n in nodes]
            rec[f"{ours}_mean"] = sum(rec[f"{ours}_nodes"]) / len(nodes)
    if "is_std" in avg:
        rec["is_avg_model_std"] = avg["is_std"]
    return rec


FEATURE_BYTES = 2048 * 4           # one reference image's cached features (Inception pool3, float32)
STATS_BYTES = 64 << 20             # the cached mean and covariance, and slack


def cache_too_small(cache_dir: str, reference_images: int) -> str | None:
    """Why the feature cache would not fit on ``cache_dir``'s file system (None: it fits)."""
    place = next(a for a in (Path(cache_dir), *Path(cache_dir).absolute().parents) if a.exists())
    st = os.statvfs(place)
    free, need = st.f_bavail * st.f_frsize, reference_images * FEATURE_BYTES + STATS_BYTES
    if free < need:
        return f"{free / 2**20:.0f} MiB free, the cache needs about {need / 2**20:.0f} MiB"
    return None


def evaluation_hook(dataset, metrics, draws: Draws) -> Evaluation | None:
    """The trainer's evaluation for ``dataset`` under ``metrics``
    (:class:`dadam3.run.schema.runs.Metrics`); the feature extractor's weights are resolved
    here, before any training, so a missing file stops the run at once."""
    if not metrics.every:
        return None
    if len(dataset.shape) != 3:
        return Evaluation(metrics.every, partial(mode_coverage, draw=draws.fixed(metrics.samples),
                                                 centers=dataset.centers, std=dataset.std))
    if not metrics.any_image_metric:
        return None
    from dadam3.metrics.fidelity import resolve_feature_extractor_weights
    extractor = FEATURE_EXTRACTORS[metrics.feature_extractor]
    weights = resolve_feature_extractor_weights(extractor, metrics.inception_weights, download=metrics.download_weights)
    spec = FidelitySpec(batch_size=metrics.batch_size, feature_extractor=extractor, weights=weights,
                        download=metrics.download_weights, isc=metrics.inception, fid=metrics.fid, kid=metrics.kid,
                        cache_root=metrics.cache_dir)
    if metrics.fid or metrics.kid:
        short = cache_too_small(spec.cache_dir, len(dataset) if hasattr(dataset, "__len__") else 0)
        if short is not None:       # found now, not at the first evaluation deep into the run
            log.warning("metrics.cache_dir=%s: %s; FID/KID compute the reference features without caching "
                        "(again at every evaluation)", metrics.cache_dir or spec.cache_dir, short)
            spec = replace(spec, extra={**spec.extra, "cache": False})
    reference, cache_name = None, None
    if metrics.fid or metrics.kid:
        from dadam3.data import TensorImages
        reference = dataset            # the training images; preloaded ones are cached by a hash of their pixels
        if not isinstance(dataset, TensorImages):
            cache_name = f"dadam3-{dataset.name}-train-{len(dataset)}x{'x'.join(map(str, dataset.shape))}"
    second = None
    if metrics.second_extractor is not None:
        extractor2 = FEATURE_EXTRACTORS[metrics.second_extractor]
        weights2 = resolve_feature_extractor_weights(extractor2, None, download=metrics.download_weights)
        # FID and IS again; KID only under the first scorer (its 100 subset kernels dominate an evaluation)
        second = (metrics.second_extractor, replace(spec, feature_extractor=extractor2, weights=weights2, kid=False))
    return Evaluation(metrics.every, partial(image_scores, draws=draws, samples=metrics.samples, spec=spec,
                                             reference=reference, reference_cache_name=cache_name,
                                             per_node=metrics.per_node, second=second))
