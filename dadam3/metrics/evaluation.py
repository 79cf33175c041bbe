"""Evaluation during training: sample quality of the node-stacked generator at an iteration.

* 2-D data (the ring of Gaussians): modes covered and share of high-quality samples
  (Metz et al. 2017 / VEEGAN), per node and of the node-averaged model;
* images: inception score through torch-fidelity, per node (the paper reports the node
  average) and of the node-averaged model.

Functions of plain arguments; :func:`evaluation_hook` binds them into the trainer's
``evaluate(G, iteration) -> dict`` hook (or None when nothing is to be evaluated).
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import Tensor

from dadam3.data import mode_metrics
from dadam3.gan.samples import fixed_noise, generate
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


def inception_scores(G: StackedNet, iteration: int, nz: int, samples: int, batch_size: int,
                     weights: str, per_node: bool = True) -> dict:
    """IS of every node (``is_mean`` = node average, ``is_nodes``) and of the node-averaged model
    (``is_avg_model``, ``is_avg_model_std``), ``samples`` images each, through torch-fidelity."""
    from dadam3.metrics.inception import inception_score

    ref = next(G.parameters())
    device, dtype = ref.device, ref.dtype
    was_training = G.training
    G.eval()
    try:
        nets = [G.node_module(i).eval() for i in range(G.num_nodes)] if per_node else []
        scores = [inception_score(_sampler(net, nz, device, dtype), samples, batch_size, device, weights)
                  for net in nets]
        avg = inception_score(_sampler(G.averaged_module().eval(), nz, device, dtype), samples, batch_size,
                              device, weights)
    finally:
        G.train(was_training)
    rec = {"is_avg_model": avg["is_mean"], "is_avg_model_std": avg["is_std"]}
    if scores:
        rec.update(is_mean=sum(s["is_mean"] for s in scores) / len(scores), is_nodes=[s["is_mean"] for s in scores])
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
    if not metrics.inception:
        return None
    from dadam3.metrics.inception import resolve_inception_weights
    weights = resolve_inception_weights(metrics.inception_weights, download=metrics.download_weights)
    return partial(inception_scores, nz=nz, samples=metrics.samples, batch_size=metrics.batch_size,
                   weights=weights, per_node=metrics.per_node)
