r"""Inception Score (and FID/KID) of generated images, computed by torch-fidelity.

Paper Sec. 5.3 (Salimans et al., 2016)::

    log IS = E_{x ~ p_g} KL( p(y|x) || p(y) ),     p(y) = E_{x ~ p_g} p(y|x)

:func:`inception_score_from_probs` is that formula on given class probabilities (so it can
be tested); :func:`inception_score` / :func:`fidelity_metrics` sample a generator and hand
the images to ``torch_fidelity.calculate_metrics`` with its TF-ported InceptionV3 — the
network the published IS/FID numbers refer to — unless the caller names another feature
extractor (``feature_extractor="dadam3-fmnist-classifier"``, see
:mod:`dadam3.metrics.fidelity`). Nothing here ever substitutes another classifier on its
own: without the chosen extractor's weights these functions raise :class:`ConfigError`.

Weights: torch-fidelity fetches ``URL_INCEPTION_V3`` with ``torch.hub`` into
``$TORCH_HOME/hub/checkpoints/`` (``TORCH_HOME`` defaults to ``~/.cache/torch``). We look
there first, download to the same place when allowed, and then always pass the file to
torch-fidelity explicitly, so torch-fidelity itself never goes to the network.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any
from urllib.parse import urlparse

import torch
from torch import Tensor
from torch.utils.data import Dataset

from dadam3.errors import ConfigError

# The constant torch-fidelity itself downloads; importing it keeps us in step with upgrades.
from torch_fidelity.feature_extractor_inceptionv3 import URL_INCEPTION_V3

INCEPTION_WEIGHTS_URL: str = URL_INCEPTION_V3
INCEPTION_WEIGHTS_FILENAME: str = os.path.basename(urlparse(URL_INCEPTION_V3).path)

WEIGHTS_KEY = "metrics.inception_weights"
INCEPTION_FIRST_KEY = "Conv2d_1a_3x3.conv.weight"   # torch-fidelity's FeatureExtractorInceptionV3


def inception_score_from_probs(probs: Tensor, splits: int = 10) -> tuple[float, float]:
    """IS = exp(mean_x KL(p(y|x) || p(y))) per split; returns (mean, std) over splits.

    ``probs`` is ``[N, K]`` with rows summing to 1. Split ``i`` holds rows
    ``i*N//splits : (i+1)*N//splits`` (torch-fidelity's chunking, no shuffling here) and
    ``p(y)`` is that split's mean row. ``std`` is the population std (numpy's default, as
    torch-fidelity and the original TF code report it). ``0·log 0`` is taken as 0, so
    one-hot predictions are fine.
    """
    if probs.dim() != 2:
        raise ValueError(f"probs must be [N, K], got shape {tuple(probs.shape)}")
    n = probs.shape[0]
    if not 1 <= splits <= n:
        raise ConfigError("metrics.is_splits", splits, f"must be in [1, {n}] (number of samples)")
    p = probs.detach().to(torch.float64)
    scores = []
    for i in range(splits):
        chunk = p[i * n // splits:(i + 1) * n // splits]
        marginal = chunk.mean(dim=0, keepdim=True)
        kl = (torch.special.xlogy(chunk, chunk) - torch.special.xlogy(chunk, marginal)).sum(dim=1)
        scores.append(kl.mean().exp())
    s = torch.stack(scores)
    return float(s.mean()), float(s.std(correction=0))


def inception_weights_cache_path() -> str:
    """Where torch-fidelity (via ``torch.hub.load_state_dict_from_url``) caches the weights."""
    return os.path.join(torch.hub.get_dir(), "checkpoints", INCEPTION_WEIGHTS_FILENAME)


def resolve_inception_weights(weights_path: str | os.PathLike | None = None,
                              download: bool = True) -> str:
    """Return a local path to torch-fidelity's InceptionV3 weights or raise a one-line ConfigError.

    An explicit ``weights_path`` must exist. Otherwise the torch.hub cache is used, and when
    the file is missing there and ``download`` is true it is fetched with
    ``torch.hub.download_url_to_file`` (which writes a ``.partial`` file and renames it, so
    a failed download leaves nothing behind).
    """
    if weights_path is not None:
        path = os.path.expanduser(str(weights_path))
        if os.path.isfile(path):
            return check_inception_weights(path)
        raise ConfigError(WEIGHTS_KEY, str(weights_path),
                          f"Inception weights not found at this path; download "
                          f"{INCEPTION_WEIGHTS_URL} to it or set {WEIGHTS_KEY}=PATH")
    cached = inception_weights_cache_path()
    if os.path.isfile(cached):
        return cached
    reason = "downloads disabled"
    if download:
        created = _missing_dirs(os.path.dirname(cached))
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        try:
            torch.hub.download_url_to_file(INCEPTION_WEIGHTS_URL, cached, progress=False)
            return cached
        except Exception as e:  # no network, proxy, HTTP error, disk full ...
            reason = f"download failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            for d in created:  # leave the cache as we found it
                try:
                    os.rmdir(d)
                except OSError:
                    break
    raise ConfigError(WEIGHTS_KEY, None,
                      f"Inception weights not found in the torch.hub cache ({reason}); "
                      f"download {INCEPTION_WEIGHTS_URL} to {cached} "
                      f"or set {WEIGHTS_KEY}=PATH")


def check_inception_weights(path: str) -> str:
    """``path`` if it holds torch-fidelity's InceptionV3 state dict, else a one-line ConfigError
    (checked at start-up, so a bad file cannot stop a run at its first evaluation). The ~100 MB
    file is read once while its size and modification time stay the same (every evaluation
    of every node resolves the weights again)."""
    st = os.stat(path)
    return _checked_inception_file(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _checked_inception_file(path: str, size: int, mtime_ns: int) -> str:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ConfigError(WEIGHTS_KEY, path, f"not torch-fidelity's Inception weights (cannot be read: "
                                             f"{type(e).__name__})") from None
    if not isinstance(state, Mapping) or INCEPTION_FIRST_KEY not in state:
        raise ConfigError(WEIGHTS_KEY, path, f"not torch-fidelity's Inception weights (no {INCEPTION_FIRST_KEY}); "
                                             f"download {INCEPTION_WEIGHTS_URL}")
    return path


def _missing_dirs(path: str) -> list[str]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    out = []
    while path and not os.path.isdir(path):
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return out


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


def fidelity_metrics(sample_fn: Callable[[int], Tensor], num_samples: int, batch_size: int,
                     device: torch.device | str = "cpu",
                     weights_path: str | os.PathLike | None = None, *,
                     isc: bool = True, fid: bool = False, kid: bool = False,
                     reference: Dataset | str | None = None,
                     reference_cache_name: str | None = None,
                     splits: int = 10, seed: int | None = 0, download: bool = True,
                     extra: Mapping[str, Any] | None = None,
                     feature_extractor: str = "inception-v3-compat",
                     cache_root: str | os.PathLike | None = None) -> dict[str, float]:
    """IS and optionally FID/KID of ``num_samples`` images from ``sample_fn`` via torch-fidelity.

    ``sample_fn(n)`` returns ``n×C×H×W`` images in [-1, 1] (C = 1 or 3). ``reference``
    (needed for FID/KID) is a dadam3 image dataset (e.g. the training set; its features are
    then cached, see :mod:`dadam3.metrics.fidelity`) or anything torch-fidelity accepts as
    ``input2``: a Dataset of uint8 ``3×H×W`` tensors (see :class:`UInt8Images`), a registered
    name such as ``"cifar10-train"`` or an image directory; ``reference_cache_name`` lets
    torch-fidelity cache its statistics under ``cache_root``. ``feature_extractor`` is
    ``"inception-v3-compat"`` (default) or ``"dadam3-fmnist-classifier"``; ``weights_path``
    its weights. ``extra`` is passed on to ``calculate_metrics`` unchanged. The weights are
    resolved before ``sample_fn`` is first called. Returns a subset of
    ``is_mean, is_std, fid, kid_mean, kid_std``.
    """
    from dadam3.metrics import fidelity  # imports this module: not at the top

    fidelity.check_metric_args(num_samples, batch_size, isc, fid, kid, splits, reference)
    weights = fidelity.resolve_feature_extractor_weights(feature_extractor, weights_path, download)
    images = generate_uint8(sample_fn, num_samples, batch_size, seed=seed, device=device)
    return fidelity.calculate(UInt8Images(images), batch_size, device, feature_extractor, weights, isc, fid, kid,
                              reference, reference_cache_name, cache_root, splits, extra)


def inception_score(sample_fn: Callable[[int], Tensor], num_samples: int, batch_size: int,
                    device: torch.device | str = "cpu",
                    weights_path: str | os.PathLike | None = None,
                    splits: int = 10, seed: int | None = 0,
                    download: bool = True) -> dict[str, float]:
    """``{"is_mean", "is_std"}`` of ``num_samples`` generated images; see :func:`fidelity_metrics`."""
    return fidelity_metrics(sample_fn, num_samples, batch_size, device, weights_path,
                            isc=True, splits=splits, seed=seed, download=download)
