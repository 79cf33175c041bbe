"""Datasets of Section 5.2 and how the M nodes sample them.

>>> ds = build_dataset("cifar10", root="data")              # 3×32×32 in [-1, 1]
>>> sampler = NodeSampler(ds, nodes=5, batch_size=64, device="cuda")
>>> x = sampler.next_batch()                                 # [5, 64, 3, 32, 32]
"""
from dadam3.data.containers import DecodedImages, ImageDataset, ImageFiles, TensorImages
from dadam3.data.datasets import NAMES, build_dataset
from dadam3.data.fake import FakeImages
from dadam3.data.gaussians import GaussianRing, mode_metrics, ring_centers
from dadam3.data.node_sampler import NodeSampler
from dadam3.data.partition import PARTITIONS

__all__ = [
    "NAMES", "PARTITIONS", "build_dataset", "NodeSampler",
    "ImageDataset", "TensorImages", "DecodedImages", "ImageFiles", "FakeImages",
    "GaussianRing", "ring_centers", "mode_metrics",
]
