"""Will the run fit in memory? A lower estimate of what one process allocates, checked before
anything is allocated or written, so that ``nodes=100000`` or ``loop.batch_size=100000000``
is one line (naming the key that costs most) instead of a ``MemoryError`` traceback.

What is counted (bytes, every term a lower bound):

* the mixing matrix: the topology holds W as a dense ``M x M`` float64 array (``8 M^2``);
* every node this process holds (``ceil(M / R)`` of M on R ranks), per player: the
  parameters, their gradients and three optimizer buffers (``5 P``), and one batch's
  activations (the outputs of every layer of G on ``loop.batch_size`` noise vectors and of D
  on as many samples: kept for the backward pass), all in ``dtype``.

Parameter counts and activation sizes come from one node's nets built and run on PyTorch's
``meta`` device (shapes only: nothing is allocated). The available memory is the host's
``MemAvailable`` (or a CUDA device's total memory).
"""
from __future__ import annotations

import math
import os

import torch

from dadam3.errors import ConfigError
from dadam3.gan.nets import build_nets

GIB = 1 << 30
STATE_COPIES = 5           # parameter, gradient, three optimizer buffers


def available_bytes(device: torch.device) -> int | None:
    """Memory a run on ``device`` may use (None: unknown)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device.index or 0).total_memory
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def net_costs(arch: str, batch: int, options: dict, image_shape: dict) -> tuple[int, int]:
    """(parameters, activation values for one batch) of one node's G and D, from the meta device."""
    outputs = []
    with torch.device("meta"):
        G, D = build_nets(arch, **options, **image_shape)
        hooks = [m.register_forward_hook(lambda _m, _i, out: outputs.append(out.numel()))
                 for net in (G, D) for m in net.modules() if not list(m.children())]
        with torch.no_grad():
            D(G(torch.empty(batch, G.in_shape[0])))
        for h in hooks:
            h.remove()
    params = sum(p.numel() for net in (G, D) for p in net.parameters())
    return params, sum(outputs)


def check_fits(s, world_size: int, device: torch.device) -> None:
    """A one-line ConfigError if the run's lower estimate exceeds the available memory (the
    mixing matrix against the host's, everything with the nets against ``device``'s)."""
    M, B, size = s.nodes, s.loop.batch_size, torch.empty((), dtype=s.torch_dtype).element_size()
    local = math.ceil(M / max(1, world_size))
    host = available_bytes(torch.device("cpu"))
    if host is not None and 8 * M * M > host:      # before the nets: their estimate may not be computable
        _refuse("nodes", M, f"the {M}x{M} mixing matrix", 8 * M * M, host)
    avail = host if device.type == "cpu" else available_bytes(device)
    image_shape = dict(channels=1, image_size=s.dataset.image_size) if s.dataset.is_images else {}
    try:
        params, acts = net_costs(s.model.arch, B, dict(s.model.options), image_shape)
    except Exception:            # an estimate never stops a run; the builders say what is wrong
        return
    costs = {"nodes": 8 * M * M if device.type == "cpu" else 0, "model": local * params * size * STATE_COPIES,
             "loop.batch_size": local * acts * size}
    total = sum(costs.values())
    if avail is None:
        return
    if total > avail:
        key = max(costs, key=costs.get)
        what = {"nodes": f"the {M}x{M} mixing matrix",
                "model": f"{local} node(s) x {params:,} parameters x {STATE_COPIES} copies",
                "loop.batch_size": f"{local} node(s) x {acts:,} activation values of one batch"}[key]
        name, value = (("model.hidden", s.model.options["hidden"]) if key == "model" and "hidden" in s.model.options
                       else ("nodes", M) if key == "model" else (key, B if key == "loop.batch_size" else M))
        _refuse(name, value, what, total, avail)


def _refuse(key: str, value, what: str, need: int, avail: int) -> None:
    raise ConfigError(key, value, f"the run needs at least {need / GIB:.1f} GiB ({what}) but "
                                  f"{avail / GIB:.1f} GiB is available{_where()}: choose a smaller value")


def _where() -> str:
    return f" to rank {os.environ['RANK']}" if os.environ.get("WORLD_SIZE", "1") not in ("", "1") else ""
