"""The global random state that makes a resumed run continue exactly.

:func:`capture_rng_state` holds only tensors, ints, floats, strings, lists and dicts, so it
also loads with ``torch.load(..., weights_only=True)``.
"""
from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch


def capture_rng_state() -> dict[str, Any]:
    """Snapshot every global random generator a run draws from.

    Keys: ``torch`` (CPU generator, uint8 tensor), ``cuda`` (one uint8 tensor per visible
    CUDA device; empty list without CUDA), ``numpy`` (legacy global ``np.random`` state) and
    ``python`` (``random`` module state). All values are plain tensors/ints/floats/lists.
    """
    np_name, np_key, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    py_version, py_internal, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": str(np_name), "key": torch.from_numpy(np_key.astype(np.int64)),
                  "pos": int(np_pos), "has_gauss": int(np_has_gauss),
                  "cached_gaussian": float(np_gauss)},
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`.

    CUDA states are restored on ``min(saved, visible)`` devices; a different device count
    (or no CUDA now) gives a warning rather than an error, since resuming on other
    hardware is legitimate but no longer bit-reproducible.
    """
    torch.set_rng_state(state["torch"].cpu())
    cuda_states = list(state.get("cuda", []))
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if len(cuda_states) != visible and (cuda_states or visible):
        warnings.warn(f"checkpoint has CUDA RNG states for {len(cuda_states)} device(s), "
                      f"{visible} visible now; restoring the first {min(len(cuda_states), visible)}",
                      stacklevel=2)
    for i, s in enumerate(cuda_states[:visible]):
        torch.cuda.set_rng_state(s.cpu(), device=i)
    n = state["numpy"]
    np.random.set_state((n["name"], n["key"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
