"""Dataset containers shared by every image dataset.

All of them hand out float32 ``C×H×W`` images normalised with mean 0.5 and std 0.5
(Section 5.2: "normalized to have mean intensity and standard deviation equal to 0.5"),
so values lie in [-1, 1], and all of them offer ``get_batch(indices)`` so that a
:class:`~dadam3.data.node_sampler.NodeSampler` fetches the batches of all M nodes in
one call.

* :class:`TensorImages` — the whole set preloaded as one uint8 tensor; a batch is a
  single indexing op (on the GPU when the tensor lives there). MNIST, CIFAR-10/100.
* :class:`DecodedImages` — a torchvision dataset of image files, decoded and
  transformed on demand (optionally by a thread pool). CelebA, Imagenette.
* :class:`ImageFiles` — a plain (possibly nested) folder of images, torchvision-style.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader, has_file_allowed_extension
from torchvision.datasets.vision import VisionDataset
from torchvision.transforms import functional as TF

from dadam3.errors.files import DataFileError


@runtime_checkable
class ImageDataset(Protocol):
    """What the rest of dadam3 relies on (the sampler, the metrics, the scripts)."""

    name: str
    shape: tuple[int, ...]      # (C, H, W) of one item
    labels: Tensor | None       # int64 [N] class labels on the CPU, or None

    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Tensor: ...
    def get_batch(self, indices: Tensor) -> Tensor: ...


def normalise_uint8(images: Tensor) -> Tensor:
    """uint8 ``[..., C, H, W]`` → float32 in [-1, 1].

    Same operations, in the same order, as ``ToTensor()`` followed by
    ``Normalize(0.5, 0.5)``, so the result is bit-identical to torchvision's pipeline.
    """
    return images.to(torch.float32).div_(255).sub_(0.5).div_(0.5)


class TensorImages(Dataset):
    """A dataset held in memory as one uint8 tensor ``[N, C, H, W]``.

    ``get_batch`` is one gather plus one normalisation; after :meth:`to` (e.g. to
    ``"cuda"``) both run on that device.
    """

    def __init__(self, images: Tensor, labels: Tensor | None, name: str):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise TypeError(f"images must be uint8 [N, C, H, W], got {images.dtype} {tuple(images.shape)}")
        self.images = images
        self.labels = None if labels is None else labels.to("cpu", torch.int64)
        self.name = name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.images.shape[1:])

    @property
    def device(self) -> torch.device:
        return self.images.device

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index: int) -> Tensor:
        return normalise_uint8(self.images[index])

    def get_batch(self, indices: Tensor) -> Tensor:
        return normalise_uint8(self.images[indices.to(self.images.device)])

    def to(self, device: torch.device | str) -> "TensorImages":
        """A copy whose image store lives on ``device`` (no copy when already there)."""
        return TensorImages(self.images.to(device), self.labels, self.name)


class DecodedImages(Dataset):
    """Images decoded on demand from a torchvision dataset whose items are ``(image, target)``.

    ``base`` must already carry the transform that ends in ``ToTensor()`` +
    ``Normalize``. ``workers > 0`` decodes a batch with that many threads (PIL releases
    the GIL while decoding and resizing); the order of the batch never depends on it.
    """

    def __init__(self, base: Dataset, shape: tuple[int, ...], labels: Tensor | None, name: str,
                 workers: int = 0):
        self.base = base
        self.shape = tuple(shape)
        self.labels = labels
        self.name = name
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Tensor:
        """Image ``index``, decoded; a file that cannot be (truncated, damaged) is
        :class:`~dadam3.errors.files.DataFileError` naming it: the run stops with one line and a record."""
        try:
            return self.base[int(index)][0]
        except (OSError, ValueError, SyntaxError) as e:       # PIL: OSError/UnidentifiedImageError, SyntaxError
            files = next((getattr(self.base, a) for a in ("samples", "_samples", "files")      # ImageFolder,
                          if getattr(self.base, a, None) is not None), None)                  # Imagenette, ours
            path = files[int(index)] if files is not None else f"{self.name} image {int(index)}"
            path = path[0] if isinstance(path, tuple) else path
            if isinstance(e, OSError) and e.errno is not None:
                raise                     # the disk, or a file gone: the entry point's boundary says it
            raise DataFileError(path, f"cannot be decoded ({type(e).__name__}: {' '.join(str(e).split())[:100]})",
                                advice=f"the image is truncated or damaged: replace it (or delete the data set's "
                                       f"folder and download {self.name} again)") from None

    def get_batch(self, indices: Tensor) -> Tensor:
        items = indices.reshape(-1).tolist()
        if self.workers > 0 and len(items) > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"decode-{self.name}")
            images = list(self._pool.map(self.__getitem__, items))
        else:
            images = [self[i] for i in items]
        return torch.stack(images)

    def __getstate__(self) -> dict[str, Any]:
        # A thread pool cannot be pickled (DataLoader workers, spawn); rebuild lazily.
        return {**self.__dict__, "_pool": None}


class ImageFiles(VisionDataset):
    """Every image file below ``root`` (any depth), in sorted path order; target is None.

    Accepts the extensions torchvision's ``ImageFolder`` accepts and loads with its
    ``default_loader`` (PIL, converted to RGB).
    """

    def __init__(self, root: str | Path, transform: Callable | None = None,
                 loader: Callable[[str], Any] = default_loader):
        super().__init__(root, transform=transform)
        self.loader = loader
        self.files = find_image_files(root)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[Any, None]:
        image = self.loader(self.files[index])
        if self.transform is not None:
            image = self.transform(image)
        return image, None


def find_image_files(root: str | Path) -> list[str]:
    """Sorted paths of all image files below ``root`` (following no symlinked dirs)."""
    found = []
    for folder, _, names in os.walk(root):
        found.extend(os.path.join(folder, n) for n in names if has_file_allowed_extension(n, IMG_EXTENSIONS))
    return sorted(found)


class CenterSquareCrop:
    """Crop the central ``size × size`` square; ``size=None`` uses the shorter side.

    ``size`` larger than the shorter side is clamped to it (never pads).
    """

    def __init__(self, size: int | None = None):
        self.size = size

    def __call__(self, image: Image.Image) -> Image.Image:
        side = min(image.size) if self.size is None else min(self.size, *image.size)
        return TF.center_crop(image, [side, side])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size})"


class ToRGB:
    """``PIL.Image.convert("RGB")`` as a transform (torchvision's CelebA does not convert)."""

    def __call__(self, image: Image.Image) -> Image.Image:
        return image.convert("RGB")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
