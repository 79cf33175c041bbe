"""Synthetic images for smoke tests and speed runs: no files, deterministic per index.

Image ``i`` is a coarse grid of uniform values in [-1, 1] (about ``image_size / 8``
cells a side) upsampled bilinearly to ``image_size``: smooth colour blobs, so a GAN
has something to fit. The grid values come from an integer hash of ``(seed, i, cell)``
computed with int64 tensor ops, so

* the same index always gives the same image, whatever batch it is fetched in;
* generation is one vectorised pass per batch, on whatever device the dataset is on.

Labels are ``i mod num_classes`` (so label-based partitions can be tried on it).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from dadam3.errors.config import check_int

_MASK = 0xFFFFFFFF
MAX_CHANNELS = 16           # dataset.channels' range too (dadam3/run/schema/groups.py)
MAX_LENGTH = 2**31 - 1
_GOLDEN = 0x9E3779B9
_TEST_SALT = 0x5BD1E995   # train=False draws a different (but still fixed) set of images


def hash32(x: Tensor) -> Tensor:
    """A 32-bit integer mixer on int64 tensors holding values in [0, 2^32).

    Every product stays below 2^59, so nothing overflows and CPU and GPU agree bit for bit.
    """
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK
    return (x >> 16) ^ x


class FakeImages(Dataset):
    """``length`` synthetic float32 images ``[channels, image_size, image_size]`` in [-1, 1]."""

    name = "fake"

    def __init__(self, channels: int = 3, image_size: int = 32, length: int = 50_000,
                 num_classes: int = 10, seed: int = 0, train: bool = True,
                 device: torch.device | str = "cpu"):
        self.channels = check_int("channels", channels, 1, MAX_CHANNELS)
        self.image_size = check_int("image_size", image_size, 1)
        self.length = check_int("length", length, 1, MAX_LENGTH)
        self.num_classes = check_int("num_classes", num_classes, 1)
        self.seed = check_int("seed", seed)
        self.train = bool(train)
        self.device = torch.device(device)
        self.grid = max(2, self.image_size // 8)
        self.labels = torch.arange(self.length, dtype=torch.int64) % self.num_classes
        salt = 0 if self.train else _TEST_SALT
        self._key = int(hash32(torch.tensor((self.seed & _MASK) ^ salt)).item())

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.channels, self.image_size, self.image_size)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Tensor:
        if not -self.length <= index < self.length:
            raise IndexError(f"index {index} out of range for {self.length} fake images")
        return self.get_batch(torch.tensor([index % self.length]))[0]

    def get_batch(self, indices: Tensor) -> Tensor:
        idx = indices.reshape(-1).to(self.device, torch.int64)
        per_image = hash32(hash32(idx & _MASK) ^ self._key)                       # [B]
        cells = torch.arange(self.channels * self.grid * self.grid, device=self.device)
        per_cell = hash32((cells * _GOLDEN) & _MASK)                               # [C*g*g]
        bits = hash32((per_image[:, None] + per_cell[None, :]) & _MASK)           # [B, C*g*g]
        coarse = (bits.to(torch.float64) * (2.0 / _MASK) - 1.0).to(torch.float32)
        coarse = coarse.view(-1, self.channels, self.grid, self.grid)
        return F.interpolate(coarse, size=(self.image_size, self.image_size), mode="bilinear",
                             align_corners=False).clamp_(-1.0, 1.0)

    def to(self, device: torch.device | str) -> "FakeImages":
        """The same images, generated on ``device``."""
        return FakeImages(self.channels, self.image_size, self.length, self.num_classes,
                          self.seed, self.train, device)
