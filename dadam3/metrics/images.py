"""Generated and data-set images as torch-fidelity's input: uint8 ``N×3×H×W``.

dadam3's images are float ``C×H×W`` in [-1, 1] (C = 1 or 3); torch-fidelity's feature
extractors take uint8 RGB. :func:`to_uint8_rgb` is the one conversion; :func:`generate_uint8`
samples a generator through it under a fixed seed, :func:`uint8_images` views a data set.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from dadam3.data.containers import ImageDataset, TensorImages


def to_uint8_rgb(images: Tensor) -> Tensor:
    """Images in [-1, 1], ``N×C×H×W`` with C ∈ {1, 3} → uint8 ``N×3×H×W`` on CPU.

    Values are clamped to [-1, 1] and rounded to the nearest of 256 levels; grayscale is
    repeated to three channels (what torch-fidelity's InceptionV3 requires).
    """
    if images.dim() != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"expected N×C×H×W images with C in (1, 3), got shape {tuple(images.shape)}")
    x = ((images.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).cpu()
    return x.expand(-1, 3, -1, -1).contiguous() if x.shape[1] == 1 else x


class UInt8Images(Dataset):
    """A fixed set of uint8 ``N×3×H×W`` images, as torch-fidelity takes a Dataset input."""

    def __init__(self, images: Tensor):
        if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"expected uint8 N×3×H×W, got {images.dtype} {tuple(images.shape)}")
        self.images = images

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int) -> Tensor:
        return self.images[i]


def generate_uint8(sample_fn: Callable[[int], Tensor], num_samples: int, batch_size: int,
                   seed: int | None = 0, device: torch.device | str = "cpu") -> Tensor:
    """Call ``sample_fn(n)`` in batches (no grad) and return all images as uint8 ``N×3×H×W``.

    With ``seed`` set, sampling runs inside ``torch.random.fork_rng`` seeded with it: every
    evaluation sees the same noise and the training RNG stream is left untouched.
    """
    device = torch.device(device)
    devices = ([device.index if device.index is not None else torch.cuda.current_device()]
               if device.type == "cuda" else [])
    fork = torch.random.fork_rng(devices=devices) if seed is not None else nullcontext()
    out = []
    with fork, torch.no_grad():
        if seed is not None:
            torch.manual_seed(seed)
        for start in range(0, num_samples, batch_size):
            n = min(batch_size, num_samples - start)
            x = sample_fn(n)
            if x.shape[0] != n:
                raise ValueError(f"sample_fn({n}) returned {x.shape[0]} images")
            out.append(to_uint8_rgb(x))
    return torch.cat(out)


def is_image_dataset(x: Any) -> bool:
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
    :func:`to_uint8_rgb` of the normalised items. Other datasets are
    converted item by item when torch-fidelity reads them (i.e. not at all on a cache hit).
    """
    if not is_image_dataset(dataset) or dataset.shape[0] not in (1, 3):
        raise ValueError(f"expected an image dataset with 1 or 3 channels, got {type(dataset).__name__} "
                         f"of item shape {getattr(dataset, 'shape', None)}")
    if isinstance(dataset, TensorImages):
        images = dataset.images.cpu()
        return UInt8Images(images.expand(-1, 3, -1, -1) if images.shape[1] == 1 else images)
    return _UInt8View(dataset)
