"""torch-fidelity's InceptionV3 weights: where they are, fetching them, checking a file.

The IS/FID/KID computed with them are torch-fidelity's own (:mod:`dadam3.metrics.fidelity`);
nothing here ever substitutes another network: without the weights these functions raise
:class:`ConfigError`.

torch-fidelity fetches ``URL_INCEPTION_V3`` with ``torch.hub`` into
``$TORCH_HOME/hub/checkpoints/`` (``TORCH_HOME`` defaults to ``~/.cache/torch``). We look
there first, download to the same place when allowed, and then always pass the file to
torch-fidelity explicitly, so torch-fidelity itself never goes to the network.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from urllib.parse import urlparse

import torch

from dadam3.errors.config import ConfigError

# The constant torch-fidelity itself downloads; importing it keeps us in step with upgrades.
from torch_fidelity.feature_extractor_inceptionv3 import URL_INCEPTION_V3

INCEPTION_WEIGHTS_URL: str = URL_INCEPTION_V3
INCEPTION_WEIGHTS_FILENAME: str = os.path.basename(urlparse(URL_INCEPTION_V3).path)

INCEPTION_FIRST_KEY = "Conv2d_1a_3x3.conv.weight"   # torch-fidelity's FeatureExtractorInceptionV3


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
        raise ConfigError("weights_path", str(weights_path),
                          f"Inception weights not found at this path; download "
                          f"{INCEPTION_WEIGHTS_URL} to it or set {{weights_path=PATH}}",
                          {"weights_path": str(weights_path)})
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
    raise ConfigError("weights_path", None,
                      f"Inception weights not found in the torch.hub cache ({reason}); "
                      f"download {INCEPTION_WEIGHTS_URL} to {cached} "
                      "or set {weights_path=PATH}", {"weights_path": None})


def check_inception_weights(weights_path: str) -> str:
    """``weights_path`` if it holds torch-fidelity's InceptionV3 state dict, else a one-line
    ConfigError (checked at start-up, so a bad file cannot stop a run at its first evaluation).
    The ~100 MB file is read once while its size and modification time stay the same (every
    evaluation of every node resolves the weights again)."""
    st = os.stat(weights_path)
    return _checked_inception_file(weights_path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _checked_inception_file(path: str, size: int, mtime_ns: int) -> str:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ConfigError("weights_path", path, f"not torch-fidelity's Inception weights (cannot be read: "
                                                f"{type(e).__name__})") from None
    if not isinstance(state, Mapping) or INCEPTION_FIRST_KEY not in state:
        raise ConfigError("weights_path", path, f"not torch-fidelity's Inception weights "
                                                f"(no {INCEPTION_FIRST_KEY}); download {INCEPTION_WEIGHTS_URL}")
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
