"""IS, FID and KID through torch-fidelity with a chosen feature extractor, against a data set.

Feature extractors (:data:`FEATURE_EXTRACTORS`), both run inside torch-fidelity's own
``calculate_metrics``, so the formulas, splits, KID subsets and seeds are torch-fidelity's:

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
as ``input2_cache_name`` with ``cache_root`` (default ``default_cache_dir()/fidelity``). torch-fidelity
then stores ``<name>-<extractor>-features-<layer>.pt`` (and ``…-stat-fid-<layer>.pt``) there;
because the name is derived from the pixels, another subset, size or data set never reads a
stale entry. Only :class:`~dadam3.data.TensorImages` are named automatically (hashing them
takes ~0.2 s for 60 000 images); other references are cached only under a name you give.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from dadam3.data.containers import ImageDataset, TensorImages
from dadam3.errors import ConfigError
from dadam3.metrics.inception import UInt8Images, resolve_inception_weights, to_uint8_rgb

INCEPTION = "inception-v3-compat"
FMNIST_CLASSIFIER = "dadam3-fmnist-classifier"   # = fmnist_classifier.FEATURE_EXTRACTOR_NAME
FEATURE_EXTRACTORS = (INCEPTION, FMNIST_CLASSIFIER)
EXTRACTOR_KEY = "metrics.feature_extractor"

_TF_KEYS = {  # torch-fidelity result key -> ours
    "inception_score_mean": "is_mean",
    "inception_score_std": "is_std",
    "frechet_inception_distance": "fid",
    "kernel_inception_distance_mean": "kid_mean",
    "kernel_inception_distance_std": "kid_std",
}


def default_cache_dir() -> str:
    """``$DADAM3_CACHE``, else ``$XDG_CACHE_HOME/dadam3``, else ``~/.cache/dadam3``."""
    if os.environ.get("DADAM3_CACHE"):
        return os.path.expanduser(os.environ["DADAM3_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return os.path.join(os.path.expanduser(base), "dadam3")


def _check_extractor(feature_extractor: str) -> str:
    if feature_extractor not in FEATURE_EXTRACTORS:
        raise ConfigError(EXTRACTOR_KEY, feature_extractor,
                          f"unknown feature extractor; allowed: {', '.join(FEATURE_EXTRACTORS)}")
    return feature_extractor


def _registered_fmnist():
    """The classifier module; importing it registers the extractor with torch-fidelity."""
    from dadam3.metrics import fmnist_classifier
    return fmnist_classifier


def resolve_feature_extractor_weights(feature_extractor: str = INCEPTION,
                                      weights_path: str | os.PathLike | None = None,
                                      download: bool = True) -> str:
    """A local, checked weights file for ``feature_extractor`` or a one-line ConfigError."""
    if _check_extractor(feature_extractor) == INCEPTION:
        return resolve_inception_weights(weights_path, download=download)
    return _registered_fmnist().resolve_weights(weights_path)


def check_metric_args(num_samples: int, batch_size: int, isc: bool, fid: bool, kid: bool,
                      splits: int, reference: Any) -> None:
    """The argument checks shared by every entry point (one-line ConfigErrors)."""
    for key, value in (("metrics.num_samples", num_samples), ("metrics.batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(key, value, "must be a positive integer")
    if isc and not 1 <= splits <= num_samples:
        raise ConfigError("metrics.is_splits", splits, f"must be in [1, {num_samples}] (metrics.num_samples)")
    if (fid or kid) and reference is None:
        raise ConfigError("metrics.reference", None, "FID/KID need a reference dataset")
    if not (isc or fid or kid):
        raise ConfigError("metrics", "none", "enable at least one of isc, fid, kid")


def _is_image_dataset(x: Any) -> bool:
    return isinstance(x, ImageDataset) and len(getattr(x, "shape", ())) == 3


class _UInt8View(Dataset):
    """Items of an image dataset in [-1, 1], converted one by one to uint8 ``3×H×W`` when read."""

    def __init__(self, dataset: ImageDataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Tensor:
        return to_uint8_rgb(self.dataset[i].unsqueeze(0))[0]


def uint8_images(dataset: ImageDataset) -> Dataset:
    """A dadam3 image dataset (float ``C×H×W`` in [-1, 1]) as torch-fidelity's input: uint8 ``3×H×W``.

    :class:`TensorImages` already hold the uint8 pixels the normalisation came from, so they
    are used directly (grayscale repeated to three channels as a view, no copy); this equals
    :func:`~dadam3.metrics.inception.to_uint8_rgb` of the normalised items. Other datasets are
    converted item by item when torch-fidelity reads them (i.e. not at all on a cache hit).
    """
    if not _is_image_dataset(dataset) or dataset.shape[0] not in (1, 3):
        raise ValueError(f"expected an image dataset with 1 or 3 channels, got {type(dataset).__name__} "
                         f"of item shape {getattr(dataset, 'shape', None)}")
    if isinstance(dataset, TensorImages):
        images = dataset.images.cpu()
        return UInt8Images(images.expand(-1, 3, -1, -1) if images.shape[1] == 1 else images)
    return _UInt8View(dataset)


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
    if _check_extractor(feature_extractor) == FMNIST_CLASSIFIER:
        name += f"-w{_registered_fmnist().WEIGHTS_SHA256[:12]}"
    return name


def image_fidelity_metrics(images: Tensor | Dataset, batch_size: int, device: torch.device | str = "cpu", *,
                           feature_extractor: str = INCEPTION,
                           weights_path: str | os.PathLike | None = None,
                           isc: bool = True, fid: bool = False, kid: bool = False,
                           reference: Dataset | str | None = None,
                           reference_cache_name: str | None = None,
                           cache_root: str | os.PathLike | None = None,
                           splits: int = 10, download: bool = True,
                           extra: Mapping[str, Any] | None = None) -> dict[str, float]:
    """IS and optionally FID/KID of a fixed set of images, by torch-fidelity's ``calculate_metrics``.

    Args:
        images: uint8 ``N×3×H×W`` tensor, a Dataset of such tensors, or a dadam3 image
            dataset (float in [-1, 1], converted by :func:`uint8_images`).
        batch_size: images per forward pass of the feature extractor.
        device: where the feature extractor runs.
        feature_extractor: one of :data:`FEATURE_EXTRACTORS`.
        weights_path: its weights file (default: torch.hub cache / packaged file).
        isc, fid, kid: which metrics.
        reference: for FID/KID: a dadam3 image dataset (converted by :func:`uint8_images`
            and, for :class:`TensorImages`, cached under :func:`dataset_cache_name`), or
            anything torch-fidelity takes as ``input2``.
        reference_cache_name: overrides the automatic cache name (``None``: automatic or none).
        cache_root: torch-fidelity's cache directory (default ``default_cache_dir()/fidelity``).
        splits: IS splits. download: may fetch the Inception weights.
        extra: passed on to ``calculate_metrics`` unchanged (last, so it can override).

    Returns:
        a subset of ``is_mean, is_std, fid, kid_mean, kid_std``.
    """
    if isinstance(images, Tensor):
        images = UInt8Images(images)
    elif _is_image_dataset(images):
        images = uint8_images(images)
    check_metric_args(len(images), batch_size, isc, fid, kid, splits, reference)
    weights = resolve_feature_extractor_weights(feature_extractor, weights_path, download)
    return calculate(images, batch_size, device, feature_extractor, weights, isc, fid, kid, reference,
                     reference_cache_name, cache_root, splits, extra)


def calculate(images: Dataset, batch_size: int, device: torch.device | str, feature_extractor: str, weights: str,
              isc: bool, fid: bool, kid: bool, reference: Dataset | str | None, reference_cache_name: str | None,
              cache_root: str | os.PathLike | None, splits: int, extra: Mapping[str, Any] | None) -> dict[str, float]:
    """:func:`image_fidelity_metrics` once its arguments are checked and ``weights`` resolved
    (also the end of :func:`~dadam3.metrics.inception.fidelity_metrics`)."""
    if (fid or kid) and _is_image_dataset(reference):
        if reference_cache_name is None and isinstance(reference, TensorImages):
            reference_cache_name = dataset_cache_name(reference, feature_extractor)
        reference = uint8_images(reference)

    import torch_fidelity  # heavy import, only when actually evaluating

    device = torch.device(device)
    kwargs: dict[str, Any] = dict(
        input1=images, isc=isc, fid=fid, kid=kid, feature_extractor=feature_extractor,
        cuda=device.type == "cuda", batch_size=batch_size, isc_splits=splits,
        feature_extractor_weights_path=weights, verbose=False,
        cache_root=str(cache_root) if cache_root is not None else os.path.join(default_cache_dir(), "fidelity"),
        save_cpu_ram=True,  # in-memory tensors: DataLoader worker processes would only add overhead
    )
    if fid or kid:
        kwargs.update(input2=reference, input2_cache_name=reference_cache_name)
        if kid:
            n_ref = len(reference) if isinstance(reference, Dataset) else len(images)
            kwargs["kid_subset_size"] = min(1000, len(images), n_ref)
    kwargs.update(extra or {})
    on_device = torch.cuda.device(device) if device.type == "cuda" and device.index is not None \
        else nullcontext()
    with on_device:
        result = torch_fidelity.calculate_metrics(**kwargs)
    return {_TF_KEYS[k]: float(v) for k, v in result.items() if k in _TF_KEYS}
