"""dataset=fashion_mnist and dadam3.data.idx, on the committed real subset.

``tests/data/fashion_mnist/`` holds the first 1000 Fashion-MNIST test images and labels as
the original ``t10k-*.gz`` files (written by ``scripts/make_fashion_mnist_subset.py``);
nothing here needs the full data set.
"""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torchvision import transforms

from dadam3.data import TensorImages, build_dataset
from dadam3.data.idx import IdxError, read_idx, write_idx
from dadam3.errors.config import ConfigError
from dadam3.run.schema import compose

torch.set_num_threads(1)

SUBSET = Path(__file__).resolve().parent / "data" / "fashion_mnist"
FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
# the first ten test labels of Fashion-MNIST (ankle boot, pullover, trouser, trouser, shirt, ...)
FIRST_LABELS = [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]


def listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in folder.rglob("*"))


def gunzip(src: Path, dst: Path) -> None:
    with gzip.open(src, "rb") as f:
        dst.write_bytes(f.read())


def raw_idx_for_torchvision(raw: Path) -> None:
    """The subset as raw idx files in ``raw``; torchvision's (Fashion)MNIST insists on all four
    files, so the test split is also written under the training names."""
    raw.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        for prefix in ("t10k", "train"):
            gunzip(SUBSET / f"{name}.gz", raw / name.replace("t10k", prefix))


# ----------------------------------------------------------------------------- idx files
def test_subset_files_are_real_idx_with_count_1000() -> None:
    images = read_idx(SUBSET / f"{FILES[0]}.gz", ndim=3)
    labels = read_idx(SUBSET / f"{FILES[1]}.gz", ndim=1)
    assert images.dtype == torch.uint8 and images.shape == (1000, 28, 28)
    assert labels.shape == (1000,) and labels[:10].tolist() == FIRST_LABELS
    assert sorted(torch.bincount(labels.long(), minlength=10).tolist())[0] > 80   # all ten classes
    with gzip.open(SUBSET / f"{FILES[0]}.gz", "rb") as f:
        assert f.read(16) == bytes.fromhex("00000803" "000003e8" "0000001c" "0000001c")
    assert "MIT" in (SUBSET / "LICENSE").read_text() and "Zalando" in (SUBSET / "LICENSE").read_text()


def test_read_idx_equals_torchvision_reader_and_write_roundtrips(tmp_path: Path) -> None:
    raw = tmp_path / FILES[0]
    gunzip(SUBSET / f"{FILES[0]}.gz", raw)
    ours = read_idx(raw)
    assert torch.equal(ours, torchvision.datasets.mnist.read_image_file(str(raw)))
    assert torch.equal(ours, read_idx(SUBSET / f"{FILES[0]}.gz"))
    write_idx(tmp_path / "again.gz", ours)
    write_idx(tmp_path / "again2.gz", ours.numpy())
    assert (tmp_path / "again.gz").read_bytes() == (tmp_path / "again2.gz").read_bytes()  # no time stamp
    assert torch.equal(read_idx(tmp_path / "again.gz", ndim=3), ours)


@pytest.mark.parametrize("blob,match", [
    (b"\x00\x00\x0d\x01" + b"\x00" * 8, "not a uint8 IDX"),        # float32 type code
    (b"\x00\x00\x08\x01\x00\x00", "truncated header"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x05" + b"\x01" * 4, "header says 5 values, file holds 4"),
    (b"\x00\x00\x08\x02\x00\x00\x00\x01\x00\x00\x00\x01\x07", "rank 2, expected 1"),
])
def test_read_idx_rejects_bad_files(tmp_path: Path, blob: bytes, match: str) -> None:
    (tmp_path / "f").write_bytes(blob)
    with pytest.raises(IdxError, match=match):
        read_idx(tmp_path / "f", ndim=1)


# ----------------------------------------------------------------------------- the dataset
def check_subset(ds) -> None:
    assert isinstance(ds, TensorImages) and ds.name == "fashion_mnist"
    assert len(ds) == 1000 and ds.shape == (1, 32, 32) and ds.images.dtype == torch.uint8
    x = ds.get_batch(torch.arange(1000))
    assert x.dtype == torch.float32 and x.shape == (1000, 1, 32, 32)
    assert x.min() == -1 and x.max() == 1        # black background, some white pixels
    assert ds.labels.dtype == torch.int64 and ds.labels[:10].tolist() == FIRST_LABELS


def test_debian_flat_gz_layout_read_in_place_without_writing() -> None:
    before = listing(SUBSET)
    check_subset(build_dataset("fashion_mnist", SUBSET, train=False))
    assert listing(SUBSET) == before             # nothing decompressed next to the .gz files


def test_read_only_root(tmp_path: Path) -> None:
    root = tmp_path / "ro"
    shutil.copytree(SUBSET, root)
    os.chmod(root, 0o555)
    try:
        before = listing(root)
        check_subset(build_dataset("fashion_mnist", root, train=False))
        assert listing(root) == before
    finally:
        os.chmod(root, 0o755)


@pytest.mark.parametrize("compressed", [True, False])
def test_torchvision_layout_equals_torchvision_class(tmp_path: Path, compressed: bool) -> None:
    """Same items as torchvision's FashionMNIST with the per-item PIL Resize(32) pipeline."""
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in FILES:
        if compressed:
            shutil.copy(SUBSET / f"{name}.gz", raw)
        else:
            gunzip(SUBSET / f"{name}.gz", raw / name)
    ds = build_dataset("fashion_mnist", tmp_path, train=False)
    check_subset(ds)
    raw_idx_for_torchvision(raw)                # torchvision itself reads only raw idx files
    ref = torchvision.datasets.FashionMNIST(str(tmp_path), train=False, transform=transforms.Compose(
        [transforms.Resize(32), transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))]))
    assert torch.equal(ds.labels, ref.targets)
    for i in (0, 1, 517, 999):
        assert torch.equal(ds[i], ref[i][0])


def test_resize_is_mnists(tmp_path: Path) -> None:
    raw_idx_for_torchvision(tmp_path / "MNIST" / "raw")
    mnist = build_dataset("mnist", tmp_path, train=False)
    fashion = build_dataset("fashion_mnist", SUBSET, train=False)
    assert torch.equal(fashion.images, mnist.images) and torch.equal(fashion.labels, mnist.labels)
    small = build_dataset("fashion_mnist", SUBSET, train=False, image_size=16)
    assert small.shape == (1, 16, 16)


def test_missing_files_one_line_error_names_both_remedies(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        build_dataset("fashion_mnist", SUBSET, train=True)      # the subset has no training files
    msg = str(err.value)
    assert err.value.key == "root" and "\n" not in msg
    assert msg.startswith(f"root={SUBSET}: Fashion-MNIST not found")
    assert str(SUBSET / "FashionMNIST" / "raw") in msg and "train-images-idx3-ubyte" in msg
    assert "apt-get install dataset-fashion-mnist" in msg
    assert "set root=/usr/share/datasets/fashion-mnist, or set download=true" in msg
    # the train entry point says it in the config's keys
    said = str(err.value.renamed({"root": "dataset.root", "download": "dataset.download"}))
    assert said.startswith(f"dataset.root={SUBSET}: Fashion-MNIST not found")
    assert "set dataset.root=/usr/share/datasets/fashion-mnist, or set dataset.download=true" in said
    # half a split is missing too
    shutil.copy(SUBSET / f"{FILES[0]}.gz", tmp_path)
    with pytest.raises(ConfigError, match="t10k-labels-idx1-ubyte"):
        build_dataset("fashion_mnist", tmp_path, train=False)


def test_corrupt_files_one_line_error(tmp_path: Path) -> None:
    shutil.copy(SUBSET / f"{FILES[1]}.gz", tmp_path)
    (tmp_path / f"{FILES[0]}.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ConfigError, match="cannot read the Fashion-MNIST idx files") as err:
        build_dataset("fashion_mnist", tmp_path, train=False)
    assert err.value.key == "root" and "\n" not in str(err.value)
    write_idx(tmp_path / f"{FILES[0]}.gz", np.zeros((999, 28, 28), np.uint8))   # count mismatch
    with pytest.raises(ConfigError, match="999, 28, 28.* 1000 labels"):
        build_dataset("fashion_mnist", tmp_path, train=False)


def test_hydra_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """configs/dataset/fashion_mnist.yaml: root defaults to $DADAM3_DATA, else the Debian directory."""
    def dataset_cfg():
        return compose("train", ["dataset=fashion_mnist"]).dataset

    monkeypatch.delenv("DADAM3_DATA", raising=False)
    d = dataset_cfg()
    assert (d.name, d.root, d.download, d.image_size) == ("fashion_mnist", "/usr/share/datasets/fashion-mnist",
                                                          False, None)
    train_dir = tmp_path / "FashionMNIST" / "raw"      # the subset, renamed as a training split
    train_dir.mkdir(parents=True)
    for name in FILES:
        shutil.copy(SUBSET / f"{name}.gz", train_dir / f"{name.replace('t10k', 'train')}.gz")
    monkeypatch.setenv("DADAM3_DATA", str(tmp_path))
    d = dataset_cfg()
    ds = build_dataset(d.name, d.root, image_size=d.image_size, download=d.download, train=True)
    assert d.root == str(tmp_path) and len(ds) == 1000
