"""The datasets of Section 5.2 by name (:func:`build_dataset`); those read from files are loaded by
:mod:`dadam3.data.image_files` through torchvision's own dataset classes.

Layouts under ``root`` and what one item is:

* ``mnist`` — ``MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte`` (or the ``.gz``
  files, read as they are): 1×32×32, the 28 px digits resized bilinearly as in the paper.
* ``fashion_mnist`` — the same four idx file names (raw or ``.gz``), either in torchvision's
  layout ``FashionMNIST/raw/`` or directly in ``root`` (the Debian package
  ``dataset-fashion-mnist`` puts the ``.gz`` files in ``/usr/share/datasets/fashion-mnist``):
  1×32×32, resized exactly like MNIST. Only the requested split's two files are needed.
* ``cifar10`` / ``cifar100`` — ``cifar-10-batches-py/`` / ``cifar-100-python/`` (the
  extracted official python archives): 3×32×32.
* ``celeba`` — torchvision's layout ``celeba/img_align_celeba/*.jpg`` plus the annotation
  txt files (``list_eval_partition.txt`` …), or any folder of images, nested or not:
  3×64×64, centre square crop then resize.
* ``imagenette`` — ``imagenette2-160/{train,val}/<wnid>/*.JPEG`` (the "160px" release):
  3×64×64, shorter side resized to 64 then centre crop.
* ``fake`` — no files (:mod:`dadam3.data.fake`): 3×32×32 by default.
* ``gaussians`` — no files (:mod:`dadam3.data.gaussians`): 2-D points, infinite.

Every image is float32 C×H×W normalised with mean 0.5 / std 0.5, i.e. in [-1, 1].
A download goes into a temporary folder moved into ``root`` once complete (:mod:`dadam3.data.fetch`).
MNIST, Fashion-MNIST and CIFAR are preloaded into one uint8 tensor
(:class:`~dadam3.data.containers.TensorImages`); CelebA and Imagenette decode on demand
(:class:`~dadam3.data.containers.DecodedImages`).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dadam3.errors.config import ConfigError
from dadam3.data.fake import FakeImages
from dadam3.data.gaussians import GaussianRing

if TYPE_CHECKING:
    from dadam3.data.containers import ImageDataset

NAMES = ("mnist", "fashion_mnist", "cifar10", "cifar100", "celeba", "imagenette", "fake", "gaussians")

# name -> (default image_size, largest size the source can provide without upsampling
# beyond the paper's own choice: MNIST's 28 px are scaled to 32 as in the paper)
IMAGE_SIZES = {
    "mnist": (32, 32),
    "fashion_mnist": (32, 32),
    "cifar10": (32, 32),
    "cifar100": (32, 32),
    "celeba": (64, 178),       # aligned CelebA images are 178×218
    "imagenette": (64, 160),   # the "160px" release: shorter side 160
    "fake": (32, 1024),
}
MIN_IMAGE_SIZE = 8

# extra keyword options each dataset accepts (anything else is a ConfigError)
OPTIONS: dict[str, tuple[str, ...]] = {
    "mnist": (),
    "fashion_mnist": ("split",),
    "cifar10": (),
    "cifar100": (),
    "celeba": ("split", "crop", "workers"),
    "imagenette": ("workers",),
    "fake": ("channels", "length", "num_classes", "seed"),
    "gaussians": ("modes", "radius", "std"),
}

def build_dataset(name: str, root: str | Path | None, image_size: int | None = None,
                  download: bool = False, train: bool = True, **kw: Any) -> ImageDataset | GaussianRing:
    """The dataset called ``name``; see the module docstring for layouts and shapes.

    Args:
        name: one of :data:`NAMES`.
        root: data directory (unused by ``fake`` and ``gaussians``).
        image_size: output side length; ``None`` gives the paper's size (32 or 64).
        download: let torchvision download missing files (needs internet).
        train: training split (``False``: (Fashion-)MNIST/CIFAR test set, CelebA "test", Imagenette "val").
        **kw: per-dataset options, see :data:`OPTIONS`:
            celeba — ``split`` (overrides ``train``), ``crop`` (square crop side, default the
            shorter side), ``workers`` (decode threads); imagenette — ``workers``;
            fake — ``channels``, ``length``, ``num_classes``, ``seed``;
            gaussians — ``modes``, ``radius``, ``std``.

    Raises:
        ConfigError: unknown name or option, unsupported size, missing or corrupt files.
    """
    key = name.lower() if isinstance(name, str) else name
    if key not in NAMES:
        raise ConfigError("name", name, f"unknown dataset; allowed: {', '.join(NAMES)}")
    unknown = sorted(set(kw) - set(OPTIONS[key]))
    if unknown:
        allowed = ", ".join(OPTIONS[key]) or "none"
        raise ConfigError(unknown[0], kw[unknown[0]],
                          f"not an option of dataset {key}; allowed: {allowed}")
    if key == "gaussians":
        if image_size is not None:
            raise ConfigError("image_size", image_size,
                              "gaussians are 2-D points, not images; leave it unset (null)")
        return GaussianRing(**kw)
    size = _image_size(key, image_size)
    if key == "fake":
        return FakeImages(image_size=size, train=train, **kw)
    if root is None or str(root).strip() == "":
        raise ConfigError("root", root, f"dataset {key} needs a data directory")
    from dadam3.data.image_files import LOADERS      # torchvision (about 1.3 s to import): only for files
    return LOADERS[key](Path(root).expanduser(), size, bool(download), bool(train), **kw)


def _image_size(name: str, image_size: int | None) -> int:
    default, largest = IMAGE_SIZES[name]
    if image_size is None:
        return default
    if isinstance(image_size, bool) or not isinstance(image_size, (int, np.integer)) \
            or not MIN_IMAGE_SIZE <= image_size <= largest:
        raise ConfigError("image_size", image_size,
                          f"{name} provides square images of side {MIN_IMAGE_SIZE}..{largest} "
                          f"(paper: {default})")
    return int(image_size)
