"""IS, FID and KID through torch-fidelity with a chosen feature extractor, against a data set.

What to compute is one frozen :class:`~dadam3.metrics.spec.FidelitySpec`: the metrics, the
feature extractor and its weights, batch size, IS splits, cache directory. The feature
extractors (:data:`~dadam3.metrics.spec.FEATURE_EXTRACTORS`) both run inside torch-fidelity's
own ``calculate_metrics``, so the formulas, splits, KID subsets and seeds are torch-fidelity's:

* ``"inception-v3-compat"`` — torch-fidelity's TF-ported InceptionV3, the network the
  published IS/FID numbers refer to (weights: :func:`~dadam3.metrics.inception.resolve_inception_weights`);
* ``"dadam3-fmnist-classifier"`` — the Fashion-MNIST classifier of
  :mod:`dadam3.metrics.fmnist_classifier` (packaged weights, SHA-256 checked): IS from its
  10 logits, FID/KID from its 128 penultimate features.

Nothing falls back from one to the other; the caller names the extractor.

Reference statistics: FID and KID compare with a reference set, normally a data set's
training images (``build_dataset(name, root, train=True)``). Its features are computed once
and then read from torch-fidelity's file cache: :func:`image_fidelity_metrics` names the
reference with :func:`dataset_cache_name` (data set name, image shape, a SHA-256 of the
uint8 pixels, the extractor and, for dadam3's own classifier, its weights hash) and passes it
as ``input2_cache_name`` with the spec's ``cache_root`` (default ``default_cache_dir()/fidelity``). torch-fidelity
then stores ``<name>-<extractor>-features-<layer>.pt`` (and ``…-stat-fid-<layer>.pt``) there;
because the name is derived from the pixels, another subset, size or data set never reads a
stale entry. Only :class:`~dadam3.data.TensorImages` are named automatically (hashing them
takes ~0.2 s for 60 000 images); other references are cached only under a name you give.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from dadam3.data.containers import TensorImages
from dadam3.metrics.images import UInt8Images, generate_uint8, is_image_dataset, uint8_images
from dadam3.metrics.inception import resolve_inception_weights
from dadam3.metrics.spec import INCEPTION, FidelitySpec, check_extractor

_TF_KEYS = {  # torch-fidelity result key -> ours
    "inception_score_mean": "is_mean",
    "inception_score_std": "is_std",
    "frechet_inception_distance": "fid",
    "kernel_inception_distance_mean": "kid_mean",
    "kernel_inception_distance_std": "kid_std",
}


def _registered_fmnist():
    """The classifier module; importing it registers the extractor with torch-fidelity."""
    from dadam3.metrics import fmnist_classifier
    return fmnist_classifier


def resolve_feature_extractor_weights(feature_extractor: str = INCEPTION,
                                      weights_path: str | os.PathLike | None = None,
                                      download: bool = True) -> str:
    """A local, checked weights file for ``feature_extractor`` or a one-line ConfigError."""
    if check_extractor(feature_extractor) == INCEPTION:
        return resolve_inception_weights(weights_path, download=download)
    return _registered_fmnist().resolve_weights(weights_path, feature_extractor)


def dataset_cache_name(dataset: TensorImages, feature_extractor: str = INCEPTION) -> str:
    """torch-fidelity cache name of ``dataset``'s features: name, shape, pixel hash, weights tag.

    ``dadam3-<name>-<N>x<C>x<H>x<W>-<sha256(pixels)[:16]>[-w<weights sha256[:12]>]``;
    torch-fidelity appends the extractor's name itself.
    """
    if not isinstance(dataset, TensorImages):
        raise ValueError("automatic cache names need TensorImages (the pixels are hashed); "
                         f"got {type(dataset).__name__}: pass reference_cache_name explicitly")
    images = dataset.images.cpu().contiguous()
    digest = hashlib.sha256(memoryview(images.numpy()).cast("B")).hexdigest()[:16]
    name = f"dadam3-{dataset.name}-{'x'.join(map(str, images.shape))}-{digest}"
    if check_extractor(feature_extractor) != INCEPTION:
        name += f"-w{_registered_fmnist().NETS[feature_extractor].sha256[:12]}"
    return name


def fidelity_metrics(sample_fn: Callable[[int], Tensor], num_samples: int, spec: FidelitySpec, *,
                     reference: Dataset | str | None = None, reference_cache_name: str | None = None,
                     device: torch.device | str = "cpu", seed: int | None = 0) -> dict[str, float]:
    """The ``spec``'s metrics of ``num_samples`` images from ``sample_fn``, via torch-fidelity.

    ``sample_fn(n)`` returns ``n×C×H×W`` images in [-1, 1] (C = 1 or 3); it is called in
    batches of ``spec.batch_size`` under a forked RNG seeded with ``seed``
    (:func:`~dadam3.metrics.images.generate_uint8`), after the weights are resolved.
    ``reference`` and ``reference_cache_name``: see :func:`image_fidelity_metrics`.
    Returns a subset of ``is_mean, is_std, fid, kid_mean, kid_std``.
    """
    spec.check(num_samples, reference)
    weights = resolve_feature_extractor_weights(spec.feature_extractor, spec.weights, spec.download)
    images = generate_uint8(sample_fn, num_samples, spec.batch_size, seed=seed, device=device)
    return _calculate(UInt8Images(images), spec, weights, reference, reference_cache_name, device)


def image_fidelity_metrics(images: Tensor | Dataset, spec: FidelitySpec, *, reference: Dataset | str | None = None,
                           reference_cache_name: str | None = None,
                           device: torch.device | str = "cpu") -> dict[str, float]:
    """The ``spec``'s metrics of a fixed set of images, by torch-fidelity's ``calculate_metrics``.

    Args:
        images: uint8 ``N×3×H×W`` tensor, a Dataset of such tensors, or a dadam3 image
            dataset (float in [-1, 1], converted by :func:`~dadam3.metrics.images.uint8_images`).
        spec: what to compute and how.
        reference: for FID/KID: a dadam3 image dataset (converted by ``uint8_images``
            and, for :class:`TensorImages`, cached under :func:`dataset_cache_name`), or
            anything torch-fidelity takes as ``input2`` (a registered name such as
            ``"cifar10-train"``, an image directory).
        reference_cache_name: overrides the automatic cache name (``None``: automatic or none).
        device: where the feature extractor runs.

    Returns:
        a subset of ``is_mean, is_std, fid, kid_mean, kid_std``.
    """
    if isinstance(images, Tensor):
        images = UInt8Images(images)
    elif is_image_dataset(images):
        images = uint8_images(images)
    spec.check(len(images), reference)
    weights = resolve_feature_extractor_weights(spec.feature_extractor, spec.weights, spec.download)
    return _calculate(images, spec, weights, reference, reference_cache_name, device)


def _calculate(images: Dataset, spec: FidelitySpec, weights: str, reference: Dataset | str | None,
               reference_cache_name: str | None, device: torch.device | str) -> dict[str, float]:
    """torch-fidelity's ``calculate_metrics`` once the arguments are checked and ``weights`` resolved."""
    fid, kid = spec.fid, spec.kid
    if (fid or kid) and is_image_dataset(reference):
        if reference_cache_name is None and isinstance(reference, TensorImages):
            reference_cache_name = dataset_cache_name(reference, spec.feature_extractor)
        reference = uint8_images(reference)

    import torch_fidelity  # heavy import, only when actually evaluating

    device = torch.device(device)
    kwargs: dict[str, Any] = dict(
        input1=images, isc=spec.isc, fid=fid, kid=kid, feature_extractor=spec.feature_extractor,
        cuda=device.type == "cuda", batch_size=spec.batch_size, isc_splits=spec.splits,
        feature_extractor_weights_path=weights, verbose=False, cache_root=spec.cache_dir,
        save_cpu_ram=True,  # in-memory tensors: DataLoader worker processes would only add overhead
    )
    if fid or kid:
        kwargs.update(input2=reference, input2_cache_name=reference_cache_name)
        if kid:
            n_ref = len(reference) if isinstance(reference, Dataset) else len(images)
            kwargs["kid_subset_size"] = min(1000, len(images), n_ref)
    kwargs.update(spec.extra)
    on_device = torch.cuda.device(device) if device.type == "cuda" and device.index is not None \
        else nullcontext()
    with on_device:
        result = torch_fidelity.calculate_metrics(**kwargs)
    return {_TF_KEYS[k]: float(v) for k, v in result.items() if k in _TF_KEYS}
