"""The data sets read from files (MNIST, Fashion-MNIST, CIFAR-10/100, CelebA, Imagenette), each
loaded through torchvision's own dataset classes into a :class:`~dadam3.data.containers.ImageDataset`:
:data:`LOADERS`, by name, called by :func:`dadam3.data.datasets.build_dataset` (layouts, shapes and
options are listed there). Its own module so that a run on generated data (``fake``, ``gaussians``)
never imports torchvision.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor
from torchvision import datasets, transforms
from torchvision.transforms.v2 import functional as F2

from dadam3.errors.config import ConfigError, check_choice, check_int
from dadam3.data import DECODE_WORKERS, FASHION_MNIST_DEBIAN_ROOT
from dadam3.data.containers import (CenterSquareCrop, DecodedImages, ImageDataset, ImageFiles,
                                    TensorImages, ToRGB, find_image_files)
from dadam3.data.fetch import fetch
from dadam3.data.idx import IdxError, find_idx_files, read_idx

CELEBA_SPLITS = ("train", "valid", "test", "all")


def _normalize(channels: int) -> transforms.Normalize:
    return transforms.Normalize((0.5,) * channels, (0.5,) * channels)


# ---------------------------------------------------------------- MNIST / CIFAR (preloaded)

def _load_mnist(root: Path, size: int, download: bool, train: bool) -> TensorImages:
    """The split's two idx files in ``root/MNIST/raw`` (raw or ``.gz``, never decompressed here)."""
    raw = root / "MNIST" / "raw"
    names = [Path(f).stem for f, _ in datasets.MNIST.resources][:2 if train else 4][-2:]   # the split's idx files
    hint = "set {download=true} or place the idx files (raw or .gz) there"     # said by _construct
    if download and find_idx_files(raw, names) is None:
        _construct(lambda: fetch(lambda r: datasets.MNIST(r, train=train, download=True), root),
                   "MNIST", root, raw, names, True, hint)
    if (files := find_idx_files(raw, names)) is None:
        raise ConfigError("root", str(root), f"MNIST not found at {raw} (missing {' or '.join(names)}, raw or .gz); "
                                             f"{hint}", {"download": download})
    images, labels = _read_split(root, files, "MNIST")
    return TensorImages(_resize_uint8(images.unsqueeze(1), size), labels.to(torch.int64), "mnist")


def _load_fashion_mnist(root: Path, size: int, download: bool, train: bool, split: str | None = None) -> TensorImages:
    """Fashion-MNIST (Xiao, Rasul, Vollgraf 2017) from ``root/FashionMNIST/raw`` or ``root``.

    torchvision's ``datasets.FashionMNIST`` reads only uncompressed files under
    ``root/FashionMNIST/raw``; rather than decompressing (which needs a writable root or a
    copy), the split's two idx files are read here, ``.gz`` or raw, in either layout, with
    :func:`~dadam3.data.idx.read_idx` (gzip + numpy). Nothing is ever written into ``root``,
    which may be read-only. torchvision's class is used only to download
    (``download=True`` and no files found), into a temporary folder moved into its own layout
    when complete (:func:`~dadam3.data.fetch.fetch`). The images go through the
    same :func:`_resize_uint8` as MNIST. ``split`` (``train`` | ``test``) overrides ``train``
    (smoke runs train on the committed 1000 test images).
    """
    if split is not None:
        train = check_choice("split", split, ("train", "test")) == "train"
    prefix = "train" if train else "t10k"
    names = [f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"]
    tv_raw = root / "FashionMNIST" / "raw"
    files = find_idx_files(tv_raw, names) or find_idx_files(root, names)
    if files is None and download:
        _construct(lambda: fetch(lambda r: datasets.FashionMNIST(r, train=train, download=True), root),
                   "Fashion-MNIST", root, tv_raw, names, download, "")
        files = find_idx_files(tv_raw, names)
    if files is None:
        raise ConfigError("root", str(root),
                          f"Fashion-MNIST not found: neither {tv_raw} nor {root} holds "
                          f"{' and '.join(names)} (raw or .gz); apt-get install dataset-fashion-mnist "
                          f"and set {{root={FASHION_MNIST_DEBIAN_ROOT}}}, or set {{download=true}}",
                          {"root": str(root), "download": download})
    else:
        images, labels = _read_split(root, files, "Fashion-MNIST")
    return TensorImages(_resize_uint8(images.unsqueeze(1), size), labels.to(torch.int64), "fashion_mnist")


def _read_split(root: Path, files: list[Path], title: str) -> tuple[Tensor, Tensor]:
    """The uint8 ``[N, 28, 28]`` images and ``[N]`` labels of one split; checks they match (one
    line naming both files and their counts)."""
    try:
        images, labels = read_idx(files[0], ndim=3), read_idx(files[1], ndim=1)
    except (OSError, IdxError) as e:
        raise ConfigError("root", str(root),
                          f"cannot read the {title} idx files ({one_line(e)}); they may be "
                          "corrupt: reinstall them or set {download=true} with an empty root",
                          {"download": False}) from None
    if images.shape[0] != labels.shape[0] or tuple(images.shape[1:]) != (28, 28):
        raise ConfigError("root", str(root),
                          f"{files[0]} holds {tuple(images.shape)} images and {files[1]} "
                          f"{labels.shape[0]} labels; expected [N, 28, 28] and N (one label per image)")
    return images, labels


def _load_cifar(cls: type[datasets.CIFAR10], name: str, title: str,
                root: Path, size: int, download: bool, train: bool) -> TensorImages:
    folder = root / cls.base_folder
    names = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    hint = f"set {{download=true}} or extract {cls.filename} into {root}"     # said by _construct
    if download and not all((folder / n).is_file() for n in names):
        _construct(lambda: fetch(lambda r: cls(r, train=train, download=True), root),
                   title, root, folder, names, True, hint)
    base = _construct(lambda: cls(str(root), train=train, download=False),
                      title, root, folder, names, False, hint)
    images = torch.from_numpy(np.ascontiguousarray(base.data)).permute(0, 3, 1, 2)   # HWC -> CHW
    images = _resize_uint8(images, size)
    return TensorImages(images, torch.as_tensor(base.targets, dtype=torch.int64), name)


def _load_cifar10(root: Path, size: int, download: bool, train: bool) -> TensorImages:
    return _load_cifar(datasets.CIFAR10, "cifar10", "CIFAR-10", root, size, download, train)


def _load_cifar100(root: Path, size: int, download: bool, train: bool) -> TensorImages:
    return _load_cifar(datasets.CIFAR100, "cifar100", "CIFAR-100", root, size, download, train)


def _resize_uint8(images: Tensor, size: int) -> Tensor:
    """Resize uint8 ``[N, C, H, W]`` to ``size × size`` in one call (bilinear, antialiased).

    torchvision's uint8 tensor kernel: for the paper's MNIST 28 → 32 it gives exactly the
    pixels of the per-item PIL ``Resize(32) → ToTensor`` pipeline (tested); for other
    downscales it may differ from PIL by one grey level on a few pixels.
    """
    if tuple(images.shape[-2:]) == (size, size):
        return images.contiguous()
    return F2.resize(images, [size, size], antialias=True).contiguous()


def _construct(make: Callable[[], Any], title: str, root: Path, where: Path, names: list[str],
               download: bool, hint: str) -> Any:
    """Run a torchvision constructor, turning its failures into one-line ConfigErrors (``hint``: a
    template that may name ``{download=...}``, see :class:`ConfigError`)."""
    try:
        return make()
    except (RuntimeError, OSError) as e:
        reason = one_line(e)
        if download:
            raise ConfigError("download", True,
                              f"downloading {title} into {root} failed ({reason}); "
                              f"place the files at {where} yourself and set {{download=false}}",
                              {"download": True}) from None
        missing = [n for n in names if not (where / n).is_file()]
        if missing:
            raise ConfigError("root", str(root),
                              f"{title} not found at {where} (missing {', '.join(missing)}); {hint}",
                              {"download": download}) from None
        raise ConfigError("root", str(root),
                          f"{title} files at {where} were rejected by torchvision ({reason}); "
                          "they may be corrupt or not the official release: delete them and "
                          "set {download=true}", {"download": download}) from None


def one_line(e: BaseException, limit: int = 300) -> str:
    """An exception as one short line (ConfigError messages are single lines)."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------- CelebA / Imagenette (decoded)

def _load_celeba(root: Path, size: int, download: bool, train: bool, split: str | None = None,
                 crop: int | None = None, workers: int = DECODE_WORKERS) -> DecodedImages:
    split = check_choice("split", split if split is not None else ("train" if train else "test"),
                         CELEBA_SPLITS)
    if crop is not None:
        crop = check_int("crop", crop, 1)
    workers = check_int("workers", workers, 0)
    transform = transforms.Compose([ToRGB(), CenterSquareCrop(crop), transforms.Resize((size, size)),
                                    transforms.ToTensor(), _normalize(3)])
    shape = (3, size, size)
    tv_images = root / "celeba" / "img_align_celeba"
    folder = root
    if download or tv_images.is_dir():
        try:
            if download and not tv_images.is_dir():
                fetch(lambda r: datasets.CelebA(r, split=split, target_type=[], download=True), root)
            base = datasets.CelebA(str(root), split=split, target_type=[], transform=transform,
                                   download=False)
            return DecodedImages(base, shape, None, "celeba", workers)
        except (RuntimeError, OSError, ImportError) as e:
            if download:
                raise ConfigError("download", True,
                                  f"downloading CelebA into {root} failed ({one_line(e)}); needs gdown and "
                                  f"Google Drive access; place the files at {root / 'celeba'} yourself "
                                  "and set {download=false}", {"download": True}) from None
            warnings.warn(f"CelebA at {root / 'celeba'}: torchvision's annotation files are missing or "
                          f"fail their md5 check ({one_line(e)}); using every image in {tv_images} as a plain "
                          f"folder (split {split!r} ignored)", stacklevel=3)
            folder = tv_images
    if not folder.is_dir() or not find_image_files(folder):
        raise ConfigError("root", str(root),
                          f"CelebA not found: expected {tv_images}/*.jpg with list_eval_partition.txt "
                          f"and the other annotation files in {root / 'celeba'} (torchvision layout), "
                          f"or image files anywhere under {root}; set {{download=true}} or place "
                          "the images there", {"download": download})
    if folder == root and split in ("valid", "test"):
        warnings.warn(f"CelebA from a plain folder ({root}) has no splits: using all images "
                      f"(split {split!r} ignored)", stacklevel=3)
    return DecodedImages(ImageFiles(folder, transform), shape, None, "celeba", workers)


def _load_imagenette(root: Path, size: int, download: bool, train: bool,
                     workers: int = DECODE_WORKERS) -> DecodedImages:
    workers = check_int("workers", workers, 0)
    split = "train" if train else "val"
    folder = root / "imagenette2-160" / split
    transform = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size),
                                    transforms.ToTensor(), _normalize(3)])
    if not download and not folder.is_dir():
        raise ConfigError("root", str(root),
                          f"Imagenette (160px) not found at {folder}; set {{download=true}} or "
                          f"extract imagenette2-160.tgz into {root}", {"download": download})
    wnids = ", ".join(sorted(datasets.Imagenette._WNID_TO_CLASS))
    try:
        if download and not folder.is_dir():
            fetch(lambda r: datasets.Imagenette(r, split=split, size="160px", download=True), root)
        base = datasets.Imagenette(str(root), split=split, size="160px", download=False,
                                   transform=transform)
    except KeyError as e:
        raise ConfigError("root", str(root),
                          f"{folder} holds class folder {e.args[0]}, not one of Imagenette's "
                          f"wnids ({wnids})") from None
    except FileNotFoundError as e:
        raise ConfigError("root", str(root), f"no usable images in {folder}: {one_line(e)}") from None
    except (RuntimeError, OSError) as e:
        raise ConfigError("download", download,
                          f"downloading Imagenette into {root} failed ({one_line(e)}); extract "
                          f"imagenette2-160.tgz into {root} and set {{download=false}}",
                          {"download": download}) from None
    # torchvision keeps (path, label) pairs only in the private ``_samples``.
    labels = torch.tensor([label for _, label in base._samples], dtype=torch.int64)
    return DecodedImages(base, (3, size, size), labels, "imagenette", workers)


LOADERS: dict[str, Callable[..., ImageDataset]] = {
    "mnist": _load_mnist,
    "fashion_mnist": _load_fashion_mnist,
    "cifar10": _load_cifar10,
    "cifar100": _load_cifar100,
    "celeba": _load_celeba,
    "imagenette": _load_imagenette,
}
