"""dadam3.data: real on-disk formats written to tmp_path and read through torchvision."""
from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torchvision import transforms

from dadam3.data import (DecodedImages, FakeImages, GaussianRing, NodeSampler, TensorImages,
                         build_dataset, mode_metrics, ring_centers)
from dadam3.errors.config import ConfigError
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer

from trainer_runs import config

torch.set_num_threads(1)

IMAGENETTE_WNIDS = ["n01440764", "n02102040", "n02979186", "n03000684", "n03028079",
                    "n03394916", "n03417042", "n03425413", "n03445777", "n03888257"]


def level(v: int) -> float:
    """What ToTensor + Normalize(0.5, 0.5) makes of the uint8 value ``v``."""
    return ((torch.tensor(float(v)) / 255 - 0.5) / 0.5).item()


def md5_off(monkeypatch: pytest.MonkeyPatch, module) -> None:
    """Tests write their own files, so torchvision's md5s cannot match: check existence only."""
    monkeypatch.setattr(module, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))


# ----------------------------------------------------------------------------- writers
def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> None:
    """An IDX file as on yann.lecun.com: magic 0x0000080<ndim>, big-endian dims, uint8 data."""
    a = np.ascontiguousarray(array, dtype=np.uint8)
    blob = struct.pack(">BBBB", 0, 0, 0x08, a.ndim) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(f"{path}.gz", "wb") as f:
            f.write(blob)
    else:
        path.write_bytes(blob)


def write_mnist(root: Path, gz: bool = False) -> np.ndarray:
    rng = np.random.default_rng(0)
    raw = root / "MNIST" / "raw"
    train = rng.integers(0, 256, (12, 28, 28), dtype=np.uint8)
    train[0] = 51                     # a flat image: stays 51 after resizing
    for prefix, images in (("train", train), ("t10k", train[:5])):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images, gz)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(len(images)) % 10, gz)
    return train


def write_pickle(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def cifar_rows(n: int, seed: int) -> np.ndarray:
    """``[n, 3072]`` rows: 1024 red, 1024 green, 1024 blue values, each a row-major 32×32."""
    rows = np.random.default_rng(seed).integers(0, 256, (n, 3072), dtype=np.uint8)
    rows[0, 0] = 255            # R at (0, 0)
    rows[0, 1024] = 0           # G at (0, 0)
    rows[0, 2048 + 33] = 51     # B at (1, 1)
    return rows


def write_cifar10(root: Path, per_batch: int = 3) -> None:
    folder = root / "cifar-10-batches-py"
    for k, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        write_pickle(folder / name, {"batch_label": name, "data": cifar_rows(per_batch, k),
                                     "labels": [(k + j) % 10 for j in range(per_batch)],
                                     "filenames": [f"{name}_{j}.png" for j in range(per_batch)]})
    write_pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)],
                                           "num_cases_per_batch": per_batch, "num_vis": 3072})


def write_cifar100(root: Path, n: int = 6) -> None:
    folder = root / "cifar-100-python"
    for k, name in enumerate(["train", "test"]):
        write_pickle(folder / name, {"data": cifar_rows(n, k), "fine_labels": list(range(n)),
                                     "coarse_labels": [j % 20 for j in range(n)],
                                     "filenames": [f"{j}.png" for j in range(n)]})
    write_pickle(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)],
                                   "coarse_label_names": [f"k{i}" for i in range(20)]})


def save_image(path: Path, array: np.ndarray, fmt: str = "JPEG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, format=fmt, quality=95)


def solid(h: int, w: int, rgb: tuple[int, int, int]) -> np.ndarray:
    return np.broadcast_to(np.array(rgb, dtype=np.uint8), (h, w, 3)).copy()


def write_imagenette(root: Path, split: str = "train", wnids: list[str] = IMAGENETTE_WNIDS) -> None:
    for k, wnid in enumerate(wnids):    # "160px" release: shorter side 160, files <wnid>_<n>.JPEG
        save_image(root / "imagenette2-160" / split / wnid / f"{wnid}_{k}.JPEG",
                   solid(160, 213, (20 * k, 255 - 20 * k, 128)))


def celeba_face(k: int) -> np.ndarray:
    """178×218 like aligned CelebA: red bands outside the central 178×178 square, blue inside."""
    img = solid(218, 178, (255, 0, 0))
    img[20:198] = (0, 0, 255 - k)
    return img


def write_celeba_torchvision(root: Path, n: int = 6, partition: tuple[int, ...] = (0, 0, 0, 1, 2, 2)) -> None:
    # (torchvision's CelebA cannot select a split holding exactly one image: squeeze -> 0-d)
    base = root / "celeba"
    names = [f"{i + 1:06d}.jpg" for i in range(n)]
    for k, name in enumerate(names):
        save_image(base / "img_align_celeba" / name, celeba_face(k))
    attrs = ["5_o_Clock_Shadow", "Arched_Eyebrows"]
    lm = ["lefteye_x", "lefteye_y", "righteye_x", "righteye_y", "nose_x", "nose_y",
          "leftmouth_x", "leftmouth_y", "rightmouth_x", "rightmouth_y"]
    files = {
        "list_eval_partition.txt": [f"{m} {p}" for m, p in zip(names, partition)],
        "identity_CelebA.txt": [f"{m} {100 + i}" for i, m in enumerate(names)],
        "list_bbox_celeba.txt": [str(n), "image_id x_1 y_1 width height"]
                                + [f"{m} 95 71 226 313" for m in names],
        "list_landmarks_align_celeba.txt": [str(n), " ".join(lm)]
                                           + [f"{m} 69 109 106 113 77 142 73 152 108 154" for m in names],
        "list_attr_celeba.txt": [str(n), " ".join(attrs)] + [f"{m} -1  1" for m in names],
    }
    for fname, lines in files.items():
        (base / fname).write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- MNIST
@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_files(tmp_path: Path, gz: bool) -> None:
    raw_images = write_mnist(tmp_path, gz=gz)
    ds = build_dataset("mnist", tmp_path)
    assert isinstance(ds, TensorImages) and len(ds) == 12 and ds.shape == (1, 32, 32)
    x = ds.get_batch(torch.arange(12))
    assert x.dtype == torch.float32 and x.shape == (12, 1, 32, 32)
    assert x.min() >= -1 and x.max() <= 1
    assert torch.all(x[0] == level(51))                       # flat 51 stays 51 → -0.6
    assert ds.labels.tolist() == [i % 10 for i in range(12)]
    # preloaded fast path == torchvision's per-item PIL pipeline, bit for bit
    write_mnist(tmp_path / "ref")            # the same files uncompressed: torchvision reads only those
    ref = torchvision.datasets.MNIST(str(tmp_path / "ref"), transform=transforms.Compose(
        [transforms.Resize(32), transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))]))
    for i in (0, 3, 11):
        assert torch.equal(ds[i], ref[i][0])
    assert len(build_dataset("mnist", tmp_path, train=False)) == 5
    assert raw_images.shape == (12, 28, 28)


def test_mnist_missing_names_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MNIST not found at .*MNIST/raw") as err:
        build_dataset("mnist", tmp_path / "nothing")
    assert err.value.key == "root" and "download=true" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_truncated_gz_leaves_no_decompressed_file(tmp_path: Path) -> None:
    """The issue's reproducer: a truncated .gz is one line, every time; MNIST's .gz files are read as
    they lie, so nothing decompressed (a 0-byte file a later run would trust) is ever left beside them."""
    write_mnist(tmp_path, gz=True)
    raw = tmp_path / "MNIST" / "raw"
    gz = raw / "train-images-idx3-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:-100])
    for _ in range(2):
        with pytest.raises(ConfigError) as err:
            build_dataset("mnist", tmp_path)
        msg = str(err.value)
        assert err.value.key == "root" and "cannot read the MNIST idx files" in msg and str(gz) in msg
        assert "\n" not in msg and [p.name for p in raw.iterdir() if not p.name.endswith(".gz")] == []


def test_mnist_images_and_labels_that_disagree_are_refused(tmp_path: Path) -> None:
    write_mnist(tmp_path)
    raw = tmp_path / "MNIST" / "raw"
    write_idx(raw / "train-images-idx3-ubyte", np.zeros((100, 28, 28), np.uint8))
    write_idx(raw / "train-labels-idx1-ubyte", np.zeros(60, np.uint8))
    with pytest.raises(ConfigError) as err:
        build_dataset("mnist", tmp_path)
    assert str(err.value) == (f"root={tmp_path}: {raw / 'train-images-idx3-ubyte'} holds (100, 28, 28) images and "
                              f"{raw / 'train-labels-idx1-ubyte'} 60 labels; expected [N, 28, 28] and N (one label "
                              "per image)")


def test_a_download_is_moved_into_place_only_when_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision downloads and extracts into a temporary folder; a failure leaves nothing in root."""
    def broken(self):
        raw = Path(self.raw_folder)
        raw.mkdir(parents=True)
        (raw / "train-images-idx3-ubyte").write_bytes(b"\0\0\x08\x03partial")
        raise RuntimeError("connection reset")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", broken)
    with pytest.raises(ConfigError) as err:
        build_dataset("mnist", tmp_path, download=True)
    assert err.value.key == "download" and "connection reset" in str(err.value) and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(torchvision.datasets.MNIST, "download", lambda self: write_mnist(Path(self.root)))
    assert len(build_dataset("mnist", tmp_path, download=True)) == 12
    assert [p.name for p in tmp_path.iterdir()] == ["MNIST"]


# ----------------------------------------------------------------------------- CIFAR
def test_cifar10_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_cifar10(tmp_path)
    md5_off(monkeypatch, torchvision.datasets.cifar)
    ds = build_dataset("cifar10", tmp_path)
    assert len(ds) == 15 and ds.shape == (3, 32, 32)
    x = ds[0]
    assert x[0, 0, 0] == 1.0 and x[1, 0, 0] == -1.0 and x[2, 1, 1] == level(51)
    assert ds.labels[:3].tolist() == [0, 1, 2]
    ref = torchvision.datasets.CIFAR10(str(tmp_path), transform=transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)]))
    assert torch.equal(ds.get_batch(torch.tensor([4, 14])), torch.stack([ref[4][0], ref[14][0]]))
    assert len(build_dataset("cifar10", tmp_path, train=False)) == 3


def test_cifar10_md5_mismatch_is_reported(tmp_path: Path) -> None:
    write_cifar10(tmp_path)     # our files cannot match the official md5s
    with pytest.raises(ConfigError, match="rejected by torchvision"):
        build_dataset("cifar10", tmp_path)


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def test_a_cifar_batch_holding_code_is_never_unpickled(tmp_path: Path) -> None:
    """CIFAR's python release is pickles: torchvision unpickles only files whose md5 is the official
    release's, so a batch someone changed is refused before it is read."""
    write_cifar10(tmp_path)
    marker = tmp_path / "marker"
    write_pickle(tmp_path / "cifar-10-batches-py" / "data_batch_1", {"data": _Payload(marker), "labels": []})
    with pytest.raises(ConfigError, match="rejected by torchvision"):
        build_dataset("cifar10", tmp_path)
    assert not marker.exists()


def test_cifar100_fine_labels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_cifar100(tmp_path)
    md5_off(monkeypatch, torchvision.datasets.cifar)
    ds = build_dataset("cifar100", tmp_path)
    assert len(ds) == 6 and ds.shape == (3, 32, 32) and ds.labels.tolist() == list(range(6))
    assert ds[0][0, 0, 0] == 1.0 and ds[0][2, 1, 1] == level(51)


def test_cifar_missing_names_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"CIFAR-100 not found at .*cifar-100-python"):
        build_dataset("cifar100", tmp_path)


# ----------------------------------------------------------------------------- Imagenette
def test_imagenette_tree(tmp_path: Path) -> None:
    write_imagenette(tmp_path)
    ds = build_dataset("imagenette", tmp_path, workers=2)
    assert isinstance(ds, DecodedImages) and isinstance(ds.base, torchvision.datasets.Imagenette)
    assert len(ds) == 10 and ds.shape == (3, 64, 64)
    assert ds.labels.tolist() == list(range(10))         # one image per wnid, sorted wnids
    x = ds.get_batch(torch.arange(10))
    assert x.shape == (10, 3, 64, 64) and x.min() >= -1 and x.max() <= 1
    assert torch.equal(x, torch.stack([ds[i] for i in range(10)]))   # threads keep order
    k = 3   # solid (60, 195, 128); JPEG moves colours by a few levels
    assert torch.allclose(x[k].mean((1, 2)), torch.tensor([level(60), level(195), level(128)]), atol=0.05)


def test_imagenette_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Imagenette \(160px\) not found at .*imagenette2-160/train"):
        build_dataset("imagenette", tmp_path)
    write_imagenette(tmp_path, wnids=["n01440764", "n03888605"])   # parallel bars is not Imagenette
    with pytest.raises(ConfigError, match="n03888605"):
        build_dataset("imagenette", tmp_path)


# ----------------------------------------------------------------------------- CelebA
def test_celeba_torchvision_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_celeba_torchvision(tmp_path)
    md5_off(monkeypatch, torchvision.datasets.celeba)
    ds = build_dataset("celeba", tmp_path)
    assert isinstance(ds.base, torchvision.datasets.CelebA)
    assert len(ds) == 3 and ds.shape == (3, 64, 64) and ds.labels is None     # split "train"
    x = ds[0]
    assert x.shape == (3, 64, 64) and x.min() >= -1 and x.max() <= 1
    # the centre square is blue; the red bands outside it are cropped away
    assert torch.allclose(x.mean((1, 2)), torch.tensor([-1.0, -1.0, 1.0]), atol=0.05)
    assert len(build_dataset("celeba", tmp_path, train=False)) == 2
    assert len(build_dataset("celeba", tmp_path, split="all")) == 6


def test_celeba_bad_annotations_fall_back_to_folder(tmp_path: Path) -> None:
    write_celeba_torchvision(tmp_path)   # md5 of our txt files fails torchvision's check
    with pytest.warns(UserWarning, match="plain folder"):
        ds = build_dataset("celeba", tmp_path)
    assert len(ds) == 6 and ds.shape == (3, 64, 64)


def test_celeba_plain_folder(tmp_path: Path) -> None:
    save_image(tmp_path / "a.png", celeba_face(0), "PNG")
    save_image(tmp_path / "x" / "y" / "b.jpg", celeba_face(1))
    Image.fromarray(np.full((60, 100), 200, np.uint8)).save(tmp_path / "x" / "gray.png")  # L, landscape
    (tmp_path / "notes.txt").write_text("not an image")
    ds = build_dataset("celeba", tmp_path, image_size=32)
    assert len(ds) == 3 and ds.shape == (3, 32, 32)
    x = ds.get_batch(torch.arange(3))
    assert x.shape == (3, 3, 32, 32)
    assert torch.allclose(x[0].mean((1, 2)), torch.tensor([-1.0, -1.0, 1.0]), atol=0.05)   # a.png
    assert torch.allclose(x[1], torch.full((3, 32, 32), level(200)))                        # gray.png


def test_celeba_missing_names_both_layouts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="img_align_celeba.*list_eval_partition.txt") as err:
        build_dataset("celeba", tmp_path)
    assert err.value.key == "root"


# ----------------------------------------------------------------------------- builder errors
@pytest.mark.parametrize("kwargs, key", [
    (dict(name="imagenet"), "name"),
    (dict(name="cifar10", image_size=64), "image_size"),
    (dict(name="fake", image_size=4), "image_size"),
    (dict(name="fake", image_size=32.0), "image_size"),
    (dict(name="gaussians", image_size=32), "image_size"),
    (dict(name="mnist", colour=True), "colour"),
    (dict(name="fake", channels=0), "channels"),
    (dict(name="gaussians", std=0.0), "std"),
    (dict(name="celeba", split="dev"), "split"),
    (dict(name="cifar10", root=None), "root"),
])
def test_build_dataset_rejects(tmp_path: Path, kwargs: dict, key: str) -> None:
    kwargs = {"root": tmp_path, **kwargs}
    with pytest.raises(ConfigError) as err:
        build_dataset(**kwargs)
    assert err.value.key == key and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- fake / gaussians
def test_fake_deterministic_per_index() -> None:
    ds = build_dataset("fake", None, image_size=64, length=100)
    assert isinstance(ds, FakeImages) and ds.shape == (3, 64, 64) and len(ds) == 100
    batch = ds.get_batch(torch.tensor([7, 3, 7, 99]))
    assert torch.equal(batch[0], ds[7]) and torch.equal(batch[2], ds[7]) and torch.equal(batch[1], ds[3])
    assert torch.equal(ds[7], build_dataset("fake", None, image_size=64, length=100)[7])
    assert not torch.equal(ds[7], ds[8])
    assert not torch.equal(ds[7], build_dataset("fake", None, image_size=64, length=100, seed=1)[7])
    assert not torch.equal(ds[7], build_dataset("fake", None, image_size=64, length=100, train=False)[7])
    assert batch.min() >= -1 and batch.max() <= 1 and batch.std() > 0.2
    gray = build_dataset("fake", None, channels=1, length=10)
    assert gray[0].shape == (1, 32, 32) and gray.labels.tolist() == list(range(10))


def test_gaussian_ring_samples() -> None:
    ring = build_dataset("gaussians", None)
    assert isinstance(ring, GaussianRing)
    c = ring.centers
    assert c.shape == (8, 2) and torch.allclose(c.norm(dim=1), torch.full((8,), 2.0))
    assert torch.allclose(c[0], torch.tensor([2.0, 0.0])) and torch.allclose(c[2], torch.tensor([0.0, 2.0]), atol=1e-6)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    x = ring.sample(4000, g1)
    assert torch.equal(x, ring.sample(4000, g2)) and x.shape == (4000, 2)
    m = mode_metrics(x, c, ring.std)
    assert m["modes_covered"] == 8 and abs(m["high_quality_share"] - (1 - np.exp(-4.5))) < 0.01


def test_mode_metrics_hand_made() -> None:
    c, std = ring_centers(), 0.02
    one = c[3].repeat(50, 1)
    assert mode_metrics(one, c, std) == {"modes_covered": 1, "high_quality_share": 1.0}
    assert mode_metrics(c.repeat(2, 1), c, std) == {"modes_covered": 8, "high_quality_share": 1.0}
    assert mode_metrics(torch.zeros(10, 2), c, std) == {"modes_covered": 0, "high_quality_share": 0.0}
    half = torch.cat([c[:2], torch.zeros(2, 2)])
    assert mode_metrics(half, c, std) == {"modes_covered": 2, "high_quality_share": 0.5}
    edge = torch.stack([c[0] + torch.tensor([2.9 * std, 0.0]), c[1] + torch.tensor([0.0, 3.1 * std])])
    assert mode_metrics(edge, c, std) == {"modes_covered": 1, "high_quality_share": 0.5}
    with pytest.raises(ConfigError):
        mode_metrics(torch.zeros(3, 3), c, std)


# ----------------------------------------------------------------------------- NodeSampler
def fake(length: int = 120, **kw) -> FakeImages:
    return FakeImages(image_size=8, length=length, **kw)


def test_sampler_shapes_and_device() -> None:
    x = NodeSampler(fake(), nodes=4, batch_size=5).next_batch()
    assert x.shape == (4, 5, 3, 8, 8) and x.dtype == torch.float32 and x.device.type == "cpu"
    p = NodeSampler(GaussianRing(), nodes=3, batch_size=7).next_batch()
    assert p.shape == (3, 7, 2)
    images = TensorImages(torch.randint(0, 256, (30, 1, 4, 4), dtype=torch.uint8), None, "tiny")
    idx = NodeSampler(images, nodes=2, batch_size=3).next_indices()
    batch = NodeSampler(images, nodes=2, batch_size=3).next_batch()
    assert idx.shape == (2, 3) and batch.shape == (2, 3, 1, 4, 4)
    assert torch.equal(batch[1, 2], images[int(idx[1, 2])])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sampler_on_cuda_matches_cpu() -> None:
    images = TensorImages(torch.randint(0, 256, (50, 3, 8, 8), dtype=torch.uint8), None, "tiny")
    for data in (images, fake()):
        cpu = NodeSampler(data, nodes=3, batch_size=4, seed=2).next_batch()
        gpu = NodeSampler(data, nodes=3, batch_size=4, seed=2, device="cuda").next_batch()
        assert gpu.device.type == "cuda" and torch.allclose(gpu.cpu(), cpu, atol=1e-6)


def test_sampler_iid_epochs() -> None:
    s = NodeSampler(fake(20), nodes=3, batch_size=5, seed=1)
    assert s.shards is None and s.shard_sizes == [20, 20, 20]
    epoch = torch.cat([s.next_indices() for _ in range(4)], dim=1)          # [3, 20]
    for node in epoch:
        assert sorted(node.tolist()) == list(range(20))      # without replacement within an epoch
    assert not torch.equal(epoch[0], epoch[1])                # each node has its own stream
    b = NodeSampler(fake(20), nodes=3, batch_size=5, seed=1)
    assert torch.equal(epoch, torch.cat([b.next_indices() for _ in range(4)], dim=1))
    s7 = NodeSampler(fake(22), nodes=1, batch_size=7)
    seen = [s7.next_indices() for _ in range(4)]              # 22 = 3·7 + 1: the last one is dropped
    assert s7._epoch[0] == 1 and len(set(torch.cat(seen[:3], 1).flatten().tolist())) == 21


def test_sampler_split_disjoint_equal() -> None:
    s = NodeSampler(fake(103), nodes=4, batch_size=5, partition="split", seed=3)
    sets = [set(t.tolist()) for t in s.shards]
    assert [len(t) for t in sets] == [25] * 4
    assert sum(len(a & b) for i, a in enumerate(sets) for b in sets[i + 1:]) == 0
    for _ in range(7):
        for node, idx in enumerate(s.next_indices()):
            assert set(idx.tolist()) <= sets[node]


def label_shares(sampler: NodeSampler, labels: torch.Tensor, classes: int) -> torch.Tensor:
    return torch.stack([torch.bincount(labels[s], minlength=classes) / len(s) for s in sampler.shards])


def test_sampler_dirichlet_skewed_and_seeded() -> None:
    ds = fake(2000, num_classes=10)
    s = NodeSampler(ds, nodes=5, batch_size=8, partition="dirichlet", alpha=0.1, seed=0)
    allidx = torch.cat(s.shards)
    assert len(allidx) == 2000 and len(set(allidx.tolist())) == 2000           # disjoint cover
    assert label_shares(s, ds.labels, 10).max(dim=1).values.mean() > 0.3       # iid would be 0.1
    wide = NodeSampler(ds, nodes=5, batch_size=8, partition="dirichlet", alpha=100.0, seed=0)
    assert label_shares(wide, ds.labels, 10).max(dim=1).values.mean() < 0.2
    same = NodeSampler(ds, nodes=5, batch_size=8, partition="dirichlet", alpha=0.1, seed=0)
    other = NodeSampler(ds, nodes=5, batch_size=8, partition="dirichlet", alpha=0.1, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(s.shards, same.shards))
    assert not all(torch.equal(a, b) for a, b in zip(s.shards, other.shards))
    for node, idx in enumerate(s.next_indices()):
        assert set(idx.tolist()) <= set(s.shards[node].tolist())


@pytest.mark.parametrize("source, kw", [
    ("fake", dict(partition="iid")),
    ("fake", dict(partition="split")),
    ("fake", dict(partition="dirichlet", alpha=0.5)),
    ("gaussians", dict()),
])
def test_sampler_resume_bit_identical(source: str, kw: dict) -> None:
    def make() -> NodeSampler:
        data = fake(90) if source == "fake" else GaussianRing()
        return NodeSampler(data, nodes=3, batch_size=7, seed=11, **kw)

    a = make()
    for _ in range(5):          # past an epoch boundary for every shard size used here
        a.next_batch()
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    b = make()
    b.next_batch()              # b's own progress must be overwritten
    b.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    for _ in range(12):
        assert torch.equal(a.next_batch(), b.next_batch())


def same_state(a: dict, b: dict) -> bool:
    head = {k: v for k, v in a.items() if k != "streams"} == {k: v for k, v in b.items() if k != "streams"}
    return head and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) if torch.is_tensor(x[k])
                                                     else x[k] == y[k] for k in x)
                        for x, y in zip(a["streams"].values(), b["streams"].values(), strict=True)) \
        and list(a["streams"]) == list(b["streams"])


def test_sampler_prefetch_same_batches_and_resume() -> None:
    plain = NodeSampler(fake(60), nodes=2, batch_size=9, seed=4)
    pre = NodeSampler(fake(60), nodes=2, batch_size=9, seed=4, prefetch=True)
    for _ in range(4):
        assert torch.equal(plain.next_batch(), pre.next_batch())
    state = pre.state_dict()           # must not include the batch being prefetched
    assert same_state(state, plain.state_dict())
    resumed = NodeSampler(fake(60), nodes=2, batch_size=9, seed=4)
    resumed.load_state_dict(state)
    for _ in range(6):
        want = plain.next_batch()
        assert torch.equal(want, pre.next_batch()) and torch.equal(want, resumed.next_batch())
    pre.close()


def test_sampler_state_from_other_settings_is_refused() -> None:
    state = NodeSampler(fake(), nodes=2, batch_size=4, seed=0).state_dict()
    with pytest.raises(ConfigError, match="sampler_state.seed"):
        NodeSampler(fake(), nodes=2, batch_size=4, seed=1).load_state_dict(state)
    with pytest.raises(ConfigError, match="sampler_state.length"):
        NodeSampler(fake(121), nodes=2, batch_size=4, seed=0).load_state_dict(state)


@pytest.mark.parametrize("kw, key", [
    (dict(nodes=0), "nodes"),
    (dict(nodes=2.5), "nodes"),
    (dict(batch_size=0), "batch_size"),
    (dict(partition="shards"), "partition"),
    (dict(partition="dirichlet", alpha=0.0), "alpha"),
    (dict(partition="dirichlet", alpha=-1), "alpha"),
    (dict(partition="split", nodes=4, batch_size=31), "batch_size"),    # 120 / 4 = 30 per shard
    (dict(batch_size=121), "batch_size"),
])
def test_sampler_rejects(kw: dict, key: str) -> None:
    args = {"nodes": 2, "batch_size": 4, **kw}
    with pytest.raises(ConfigError) as err:
        NodeSampler(fake(), **args)
    assert err.value.key == key and "\n" not in str(err.value)


def test_sampler_partition_needs_what_it_needs() -> None:
    unlabeled = TensorImages(torch.zeros(40, 1, 4, 4, dtype=torch.uint8), None, "unlabeled")
    with pytest.raises(ConfigError, match="needs class labels") as err:
        NodeSampler(unlabeled, nodes=2, batch_size=4, partition="dirichlet")
    assert err.value.key == "partition"
    with pytest.raises(ConfigError, match="infinite") as err:
        NodeSampler(GaussianRing(), nodes=2, batch_size=4, partition="split")
    assert err.value.key == "partition"


def test_sampler_node_streams_do_not_depend_on_which_nodes_a_process_serves():
    """A rank serving nodes 2..4 of 5 draws exactly the batches those nodes draw in one process,
    for every partition, and the per-node states merge into a full one."""
    ds = FakeImages(length=40, image_size=8)
    for partition in ("iid", "split", "dirichlet"):
        full = NodeSampler(ds, nodes=5, batch_size=3, partition=partition, seed=4)
        part = NodeSampler(ds, nodes=5, batch_size=3, partition=partition, seed=4, node_ids=[2, 3, 4])
        rest = NodeSampler(ds, nodes=5, batch_size=3, partition=partition, seed=4, node_ids=[0, 1])
        for _ in range(9):
            assert torch.equal(full.next_indices()[2:], part.next_indices())
            rest.next_indices()
        merged = {**rest.state_dict(), "streams": {**rest.state_dict()["streams"], **part.state_dict()["streams"]}}
        assert same_state(full.state_dict(), merged)


def test_too_many_nodes_for_the_data_names_nodes(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(["dataset=fake", "dataset.length=4", "dataset.partition=split",
                                             "model.width=0.03125", "nodes=5", "loop.batch_size=1", "device=cpu"])),
                      tmp_path / "run")
    assert str(e.value).startswith("nodes=5: the data set has 4 samples and dataset.partition=split") and \
        "batch_size" not in str(e.value)
