"""Evaluation during training: sample quality of the node-stacked generator at an iteration.

* 2-D data (the ring of Gaussians): modes covered and share of high-quality samples
  (Metz et al. 2017 / VEEGAN), per node and of the node-averaged model;
* images: IS, FID and KID through torch-fidelity (InceptionV3, or the Fashion-MNIST
  classifier), per node (the paper reports the node average) and of the node-averaged
  model; FID/KID against the data set's training images, whose statistics are cached.

Functions of plain arguments; :func:`evaluation_hook` binds them into the trainer's
``evaluate(G, iteration) -> dict`` hook (or None when nothing is to be evaluated).
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import Tensor

from dadam3.data import mode_metrics
from dadam3.gan.samples import eval_mode, fixed_noise, generate
from dadam3.gan.stacked import StackedNet


def mode_coverage(G: StackedNet, iteration: int, z: Tensor, centers: Tensor, std: float) -> dict:
    """Modes covered and high-quality share of every node's samples (node mean and list) and of
    the node-averaged model's, all from the noise ``z``."""
    per_node, averaged = generate(G, z)
    centers = centers.to(per_node.device)
    nodes = [mode_metrics(per_node[i], centers, std) for i in range(G.num_nodes)]
    avg = mode_metrics(averaged, centers, std)
    return {"modes_covered": sum(p["modes_covered"] for p in nodes) / G.num_nodes,
            "high_quality_share": sum(p["high_quality_share"] for p in nodes) / G.num_nodes,
            "modes_covered_nodes": [p["modes_covered"] for p in nodes],
            "high_quality_share_nodes": [p["high_quality_share"] for p in nodes],
            "modes_covered_avg_model": avg["modes_covered"],
            "high_quality_share_avg_model": avg["high_quality_share"]}


def image_scores(G: StackedNet, iteration: int, nz: int, samples: int, batch_size: int, feature_extractor: str,
                 weights: str, isc: bool = True, fid: bool = False, kid: bool = False, reference=None,
                 reference_cache_name: str | None = None, per_node: bool = True,
                 cache_root: str | None = None) -> dict:
    """IS / FID / KID through torch-fidelity (``feature_extractor`` a torch-fidelity name) of every
    node (``<metric>_mean`` = node average, ``<metric>_nodes``) and of the node-averaged model
    (``<metric>_avg_model``); ``samples`` images each, from fixed evaluation noise
    (``fidelity_metrics`` samples under a forked RNG seeded with 0, the run's own RNG
    untouched). FID and KID compare with ``reference`` (the data set's training images;
    cached after the first call)."""
    from dadam3.metrics.inception import fidelity_metrics

    ref = next(G.parameters())
    device, dtype = ref.device, ref.dtype
    with eval_mode(G):
        nets = [G.node_module(i).eval() for i in range(G.num_nodes)] if per_node else []
        score = partial(fidelity_metrics, num_samples=samples, batch_size=batch_size, device=device,
                        weights_path=weights, isc=isc, fid=fid, kid=kid, reference=reference,
                        reference_cache_name=reference_cache_name, feature_extractor=feature_extractor,
                        cache_root=cache_root)
        nodes = [score(_sampler(net, nz, device, dtype)) for net in nets]
        avg = score(_sampler(G.averaged_module().eval(), nz, device, dtype))
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


def _sampler(net, nz: int, device, dtype) -> Callable[[int], Tensor]:
    return lambda b: net(torch.randn(b, nz, device=device, dtype=dtype))


def evaluation_hook(dataset, metrics, nz: int, seed: int, device: torch.device,
                    dtype: torch.dtype) -> Callable[[StackedNet, int], dict] | None:
    """The trainer's ``evaluate(G, iteration)`` for ``dataset`` under ``metrics``
    (:class:`dadam3.settings.MetricsSettings`); the Inception weights are resolved here, before
    any training, so a missing file stops the run at once."""
    if not metrics.every:
        return None
    if len(dataset.shape) != 3:
        return partial(mode_coverage, z=fixed_noise(metrics.samples, nz, seed + 11, device, dtype),
                       centers=dataset.centers, std=dataset.std)
    if not metrics.any_image_metric:
        return None
    from dadam3.metrics.fidelity import resolve_feature_extractor_weights
    from dadam3.settings import FEATURE_EXTRACTORS
    extractor = FEATURE_EXTRACTORS[metrics.feature_extractor]
    weights = resolve_feature_extractor_weights(extractor, metrics.inception_weights, download=metrics.download_weights)
    reference, cache_name = None, None
    if metrics.fid or metrics.kid:
        from dadam3.data import TensorImages
        reference = dataset            # the training images; preloaded ones are cached by a hash of their pixels
        if not isinstance(dataset, TensorImages):
            cache_name = f"dadam3-{dataset.name}-train-{len(dataset)}x{'x'.join(map(str, dataset.shape))}"
    return partial(image_scores, nz=nz, samples=metrics.samples, batch_size=metrics.batch_size,
                   feature_extractor=extractor, weights=weights, isc=metrics.inception, fid=metrics.fid,
                   kid=metrics.kid, reference=reference, reference_cache_name=cache_name,
                   per_node=metrics.per_node, cache_root=metrics.cache_dir)
