"""Datasets of Section 5.2 and how the M nodes sample them.

>>> ds = build_dataset("cifar10", root="data")              # 3×32×32 in [-1, 1]
>>> sampler = NodeSampler(ds, nodes=5, batch_size=64, device="cuda")
>>> x = sampler.next_batch()                                 # [5, 64, 3, 32, 32]

The names are loaded on first access (as in :mod:`dadam3.metrics`): the image containers
import torchvision, which costs ~2 s (it loads ``torch._dynamo``), and the runs that only need
:data:`PARTITIONS` (the schema, the synthetic game) should not pay it; nor should a training run
on generated data (``fake``, ``gaussians``) or one refused at start: :func:`build_dataset` imports
the file-backed loaders (:mod:`dadam3.data.image_files`) only for the data sets read from files.
"""
from __future__ import annotations

import importlib
from typing import Any

from dadam3.data.partition import PARTITIONS

# decode threads of the sets decoded on the fly (celeba, imagenette): build_dataset's default and
# dataset.workers' (the schema reads it here, without importing torchvision)
DECODE_WORKERS = 4
# where Debian's dataset-fashion-mnist package puts the four .gz files (dataset.root's default)
FASHION_MNIST_DEBIAN_ROOT = "/usr/share/datasets/fashion-mnist"

_LAZY = {
    "dadam3.data.containers": ("DecodedImages", "ImageDataset", "ImageFiles", "TensorImages"),
    "dadam3.data.datasets": ("NAMES", "build_dataset"),
    "dadam3.data.fake": ("FakeImages",),
    "dadam3.data.gaussians": ("GaussianRing", "mode_metrics", "ring_centers"),
    "dadam3.data.node_sampler": ("NodeSampler",),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["PARTITIONS", "DECODE_WORKERS", "FASHION_MNIST_DEBIAN_ROOT", *_MODULE_OF]


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(_MODULE_OF[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
