"""What an IS/FID/KID evaluation computes and how: one frozen :class:`FidelitySpec`, and the
one table of feature extractors.

Cheap to import (no torch-fidelity): the settings check ``metrics.feature_extractor``
against :data:`FEATURE_EXTRACTORS` and the entry point checks the cache directory before
anything heavy is loaded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from dadam3.errors.config import ConfigError

# metrics.feature_extractor -> torch-fidelity's registered name: the only place either is spelled
FEATURE_EXTRACTORS: Mapping[str, str] = MappingProxyType({
    "inception": "inception-v3-compat",              # torch-fidelity's TF-ported InceptionV3
    "fmnist_classifier": "dadam3-fmnist-classifier",  # dadam3.metrics.fmnist_classifier
    "fmnist_mlp": "dadam3-fmnist-mlp",                # the second scorer, dadam3.metrics.fmnist_classifier too
})
INCEPTION = FEATURE_EXTRACTORS["inception"]
IS_SPLITS = 10          # the inception score's splits (metrics.samples must be at least this)
FMNIST_CLASSIFIER = FEATURE_EXTRACTORS["fmnist_classifier"]
FMNIST_MLP = FEATURE_EXTRACTORS["fmnist_mlp"]


@dataclass(frozen=True, kw_only=True)
class FidelitySpec:
    """Which metrics, with which feature extractor, in batches of what size, cached where.

    ``feature_extractor`` is a torch-fidelity name (a value of :data:`FEATURE_EXTRACTORS`),
    ``weights`` its weights file (``None``: the torch.hub cache for Inception, the packaged
    file for the classifier) and ``download`` whether the Inception weights may be fetched.
    ``splits`` are the IS splits; ``cache_root`` is torch-fidelity's cache directory
    (``None``: ``default_cache_dir()/fidelity``); ``extra`` goes to ``calculate_metrics``
    unchanged, last, so it can override.
    """
    batch_size: int
    feature_extractor: str = INCEPTION
    weights: str | os.PathLike | None = None
    download: bool = True
    isc: bool = True
    fid: bool = False
    kid: bool = False
    splits: int = IS_SPLITS
    cache_root: str | os.PathLike | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def check(self, num_samples: int, reference: Any) -> None:
        """One-line ConfigErrors for what cannot be computed from ``num_samples`` images
        against ``reference``."""
        for key, value in (("num_samples", num_samples), ("batch_size", self.batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(key, value, "must be a positive integer")
        if self.isc and not 1 <= self.splits <= num_samples:
            raise ConfigError("splits", self.splits, "must be in [1, {num_samples}]", {"num_samples": num_samples})
        if (self.fid or self.kid) and reference is None:
            raise ConfigError("reference", None, "FID/KID need a reference dataset")
        if not (self.isc or self.fid or self.kid):
            raise ConfigError("isc", self.isc, "and fid and kid are false too: enable at least one")

    @property
    def cache_dir(self) -> str:
        return (os.path.expanduser(str(self.cache_root)) if self.cache_root is not None
                else os.path.join(default_cache_dir(), "fidelity"))


def check_extractor(feature_extractor: str) -> str:
    """``feature_extractor`` if torch-fidelity knows it through dadam3, else a one-line ConfigError."""
    if feature_extractor not in FEATURE_EXTRACTORS.values():
        raise ConfigError("feature_extractor", feature_extractor,
                          f"unknown feature extractor; allowed: {', '.join(FEATURE_EXTRACTORS.values())}")
    return feature_extractor


def default_cache_dir() -> str:
    """``$DADAM3_CACHE``, else ``$XDG_CACHE_HOME/dadam3``, else ``~/.cache/dadam3``."""
    if os.environ.get("DADAM3_CACHE"):
        return os.path.expanduser(os.environ["DADAM3_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return os.path.join(os.path.expanduser(base), "dadam3")
