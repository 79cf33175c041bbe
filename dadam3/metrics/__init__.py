"""Evaluation metrics: consensus distance of node copies, IS/FID/KID through torch-fidelity.

* :mod:`~dadam3.metrics.consensus` — (1/M) Σ‖x_i − x̄‖².
* :mod:`~dadam3.metrics.spec` — :class:`FidelitySpec` (what to compute and how, one frozen
  value) and the one table of feature extractors.
* :mod:`~dadam3.metrics.images` — images as torch-fidelity's input (uint8 RGB), sampling a
  generator into them.
* :mod:`~dadam3.metrics.inception` — torch-fidelity's InceptionV3 weights: cache, download, check.
* :mod:`~dadam3.metrics.fidelity` — the torch-fidelity call (:func:`fidelity_metrics` of a
  generator, :func:`image_fidelity_metrics` of fixed images) and cached reference features.
* :mod:`~dadam3.metrics.fmnist_classifier` — the Fashion-MNIST classifier, registered with torch-fidelity.
* :mod:`~dadam3.metrics.evaluation` — the trainer's evaluation hook.

Imports go one way: spec ← images, inception ← fidelity ← evaluation. The torch-fidelity
names are loaded on first access: importing torch-fidelity costs ~2 s, which runs that only
need :func:`consensus_distance` (e.g. the synthetic game) should not pay.
"""
from __future__ import annotations

import importlib
from typing import Any

from dadam3.metrics.consensus import consensus_distance
from dadam3.metrics.spec import FEATURE_EXTRACTORS, FidelitySpec, default_cache_dir

_LAZY = {
    "dadam3.metrics.images": ("UInt8Images", "generate_uint8", "to_uint8_rgb", "uint8_images"),
    "dadam3.metrics.inception": ("INCEPTION_WEIGHTS_FILENAME", "INCEPTION_WEIGHTS_URL", "inception_weights_cache_path",
                                 "resolve_inception_weights"),
    "dadam3.metrics.fidelity": ("dataset_cache_name", "fidelity_metrics", "image_fidelity_metrics",
                                "resolve_feature_extractor_weights"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["consensus_distance", "FEATURE_EXTRACTORS", "FidelitySpec", "default_cache_dir", *_MODULE_OF]


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(_MODULE_OF[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
