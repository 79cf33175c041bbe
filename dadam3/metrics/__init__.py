"""Evaluation metrics: consensus distance of node copies, IS/FID/KID through torch-fidelity.

The inception names are loaded on first access: importing torch-fidelity costs ~2 s, which
runs that only need :func:`consensus_distance` (e.g. the synthetic game) should not pay.
"""
from __future__ import annotations

import importlib
from typing import Any

from dadam3.metrics.consensus import consensus_distance

_INCEPTION_NAMES = (
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
)

__all__ = ["consensus_distance", *_INCEPTION_NAMES]


def __getattr__(name: str) -> Any:
    if name in _INCEPTION_NAMES:
        return getattr(importlib.import_module("dadam3.metrics.inception"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
