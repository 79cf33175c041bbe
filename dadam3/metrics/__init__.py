"""Evaluation metrics: consensus distance of node copies, IS/FID/KID through torch-fidelity.

* :mod:`~dadam3.metrics.consensus` — (1/M) Σ‖x_i − x̄‖².
* :mod:`~dadam3.metrics.inception` — the IS formula, InceptionV3 weights, sampling a
  generator into uint8 images, :func:`fidelity_metrics`.
* :mod:`~dadam3.metrics.fidelity` — the torch-fidelity call with a chosen feature extractor
  (InceptionV3 or the Fashion-MNIST classifier) and cached reference features of a data set.
* :mod:`~dadam3.metrics.fmnist_classifier` — that classifier, registered with torch-fidelity.

The torch-fidelity names are loaded on first access: importing torch-fidelity costs ~2 s,
which runs that only need :func:`consensus_distance` (e.g. the synthetic game) should not pay.
"""
from __future__ import annotations

import importlib
from typing import Any

from dadam3.metrics.consensus import consensus_distance

_LAZY = {
    "dadam3.metrics.inception": (
        "INCEPTION_WEIGHTS_FILENAME",
        "INCEPTION_WEIGHTS_URL",
        "UInt8Images",
        "fidelity_metrics",
        "generate_uint8",
        "inception_score",
        "inception_score_from_probs",
        "inception_weights_cache_path",
        "resolve_inception_weights",
        "to_uint8_rgb",
    ),
    "dadam3.metrics.fidelity": (
        "FEATURE_EXTRACTORS",
        "dataset_cache_name",
        "default_cache_dir",
        "image_fidelity_metrics",
        "resolve_feature_extractor_weights",
        "uint8_images",
    ),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["consensus_distance", *_MODULE_OF]


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(_MODULE_OF[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
