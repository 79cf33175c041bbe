"""Will the run fit in memory? A lower estimate of what one process allocates, checked before
anything is allocated or written, so that ``nodes=100000``, ``loop.batch_size=100000000``,
``model.nz=1000000000``, ``dataset.modes=1000000000`` or ``metrics.samples=1000000000`` is one
line naming the key that dominates the estimate, instead of a ``MemoryError`` traceback or
the kernel's OOM killer.

What is counted (bytes, every term a lower bound):

* the mixing matrix: the topology holds W as a dense ``M x M`` float64 array (``8 M^2``);
* every node this process holds (``ceil(M / R)`` of M on R ranks), per player: the
  parameters, their gradients and three optimizer buffers (``5 P``), and one batch's
  activations (the outputs of every layer of G on ``loop.batch_size`` noise vectors and of D
  on as many samples: kept for the backward pass), all in ``dtype``;
* the data: the ring of Gaussians' ``dataset.modes`` means (float32, and the float64 angles,
  cosines and sines they are made from: 32 bytes a mode);
* the evaluation (when ``metrics.every`` > 0), of ``metrics.samples`` samples: for 2-D points
  every node's and the averaged model's samples (float32) and the distance of each sample to
  each mode (float64, 16 bytes a pair); for images one feature vector (2048 float32) a sample.

Parameter counts and activation sizes come from one node's nets built and run on PyTorch's
``meta`` device (shapes only: nothing is allocated). The key named is the one whose value,
set to 1, shrinks the estimate most (:func:`dominant_key`), against the memory the process may
use (:func:`available_bytes`).
"""
from __future__ import annotations

import math
import os
import resource
from pathlib import Path
from typing import Callable, Mapping

import torch

from dadam3.errors.config import ConfigError
from dadam3.gan.nets import build_nets

GIB = 1 << 30
STATE_COPIES = 5           # parameter, gradient, three optimizer buffers
MODE_BYTES = 32            # a mode's float32 mean and its float64 angle, cosine and sine
PAIR_BYTES = 16            # a sample-to-mode difference (float64, two coordinates) in the mode coverage
FEATURE_BYTES = 2048 * 4   # an image's evaluation feature vector (Inception's pool features, float32)


def available_bytes(device: torch.device) -> int | None:
    """Memory a run on ``device`` may use (None: unknown): a CUDA device's total memory, or for
    the host the least of ``MemAvailable``, the cgroup's room and ``RLIMIT_AS``'s room."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device.index or 0).total_memory
    limits = [v for v in (_mem_available(), _cgroup_room(), _address_space_room()) if v is not None]
    return min(limits) if limits else None


def memory_limits() -> str:
    """What bounds the host's memory here, for the refusal's line."""
    said = [f"{name} {value / GIB:.1f} GiB" for name, value in
            (("MemAvailable", _mem_available()), ("cgroup", _cgroup_room()), ("ulimit -v", _address_space_room()))
            if value is not None]
    return ", ".join(said) or "unknown"


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None        # "max": no limit


def _cgroup_room(root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc/self/cgroup")) -> int | None:
    """What this process's cgroup still allows: v2 ``memory.max - memory.current``, v1
    ``memory.limit_in_bytes - memory.usage_in_bytes`` (the tightest along its path); None: no limit."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":                                    # v2
            base, limit, usage = root, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):                 # v1
            base, limit, usage = root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        d = base / path.lstrip("/")
        while True:
            cap, used = _read_int(d / limit), _read_int(d / usage)
            if cap is not None and cap < 1 << 60:                # v1 says "no limit" with a huge number
                rooms.append(cap - (used or 0))
            if d == base or base not in d.parents:
                break
            d = d.parent
    return max(0, min(rooms)) if rooms else None


def _address_space_room() -> int | None:
    """``RLIMIT_AS`` less the address space this process has mapped already (None: unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft == resource.RLIM_INFINITY:
        return None
    mapped = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                mapped = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return max(0, soft - mapped)


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


def dominant_key(values: Mapping[str, float], estimate: Callable[[Mapping[str, float]], int]) -> str:
    """The key of ``values`` whose value, set to 1 (the others kept), shrinks ``estimate`` most:
    the one to make smaller. A key already at or below 1 cannot be the one."""
    shrunk = {key: estimate({**values, key: 1}) for key, v in values.items() if v > 1}
    return min(shrunk, key=lambda key: (shrunk[key], key != "nodes")) if shrunk else next(iter(values))


def check_fits(s, world_size: int, device: torch.device) -> None:
    """A one-line ConfigError naming the dominant key (:func:`dominant_key`) if the run's lower
    estimate exceeds the memory it may use (the host's for the mixing matrix, the data and a
    2-D evaluation; ``device``'s for the nets and an image evaluation)."""
    M, B, size = s.nodes, s.loop.batch_size, torch.empty((), dtype=s.torch_dtype).element_size()
    host = available_bytes(torch.device("cpu"))
    if host is not None and 8 * M * M > host:      # before the nets: their estimate may not be computable
        _refuse("nodes", M, f"the {M}x{M} mixing matrix", 8 * M * M, host)
    image_shape = dict(channels=1, image_size=s.dataset.image_size) if s.dataset.is_images else {}
    options = dict(s.model.options)
    sizes = {key: value for key, value in options.items()
             if isinstance(value, (int, float)) and not isinstance(value, bool)}
    modes = getattr(s.dataset, "modes", 0) if not s.dataset.is_images else 0
    samples = s.metrics.samples if s.metrics.every else 0
    values = {"nodes": M, "loop.batch_size": B, **{f"model.{k}": v for k, v in sizes.items()}}
    if modes:
        values["dataset.modes"] = modes
    if samples:
        values["metrics.samples"] = samples
    nets: dict[tuple, tuple[int, int]] = {}

    def parts(v: Mapping[str, float]) -> dict[str, int]:
        opts = {**options, **{k: type(sizes[k])(v[f"model.{k}"]) for k in sizes}}
        key = tuple(sorted(opts.items(), key=str))
        if key not in nets:
            params, acts_of_two = net_costs(s.model.arch, 2, opts, image_shape)   # 2: a batch norm needs > 1
            nets[key] = params, acts_of_two / 2
        params, acts = nets[key]
        local, n, modes_ = math.ceil(v["nodes"] / max(1, world_size)), v.get("metrics.samples", 0), v.get(
            "dataset.modes", 0)
        evaluation = (((v["nodes"] + 1) * n * 2 * 4 + n * max(1, modes_) * PAIR_BYTES) if not s.dataset.is_images
                      else n * FEATURE_BYTES)
        return {"matrix": 8 * v["nodes"] ** 2, "data": modes_ * MODE_BYTES, "evaluation": evaluation,
                "model": local * params * size * STATE_COPIES, "batch": int(local * acts * v["loop.batch_size"] * size)}

    try:
        costs = parts(values)
    except Exception:            # an estimate never stops a run; the builders say what is wrong
        return
    on_host = ("matrix", "data") + (("evaluation",) if not s.dataset.is_images else ())
    if device.type == "cpu":
        pools = {"host": (sum(costs.values()), host)}
    else:
        pools = {"host": (sum(costs[p] for p in on_host), host),
                 "device": (sum(c for p, c in costs.items() if p not in on_host), available_bytes(device))}
    for pool, (need, avail) in pools.items():
        if avail is None or need <= avail:
            continue
        in_pool = (lambda p: True) if pool == "host" and device.type == "cpu" else (
            (lambda p: p in on_host) if pool == "host" else (lambda p: p not in on_host))
        try:
            key = dominant_key(values, lambda v: sum(c for p, c in parts(v).items() if in_pool(p)))
        except Exception:
            key = "nodes"
        biggest = max((p for p in costs if in_pool(p)), key=costs.get)
        what = {"matrix": f"the {M}x{M} mixing matrix", "data": f"the data's {modes:,} modes",
                "evaluation": f"the evaluation of {samples:,} samples",
                "model": f"{math.ceil(M / max(1, world_size))} node(s) x the nets' parameters x {STATE_COPIES} copies",
                "batch": f"{math.ceil(M / max(1, world_size))} node(s) x one batch's activations"}[biggest]
        _refuse(key, values[key], what, need, avail, pool == "host")


def _refuse(key: str, value, what: str, need: int, avail: int, host: bool = True) -> None:
    limits = f" ({memory_limits()})" if host else ""
    raise ConfigError(key, value, f"the run needs at least {need / GIB:.1f} GiB ({what}) but "
                                  f"{avail / GIB:.1f} GiB is available{_where()}{limits}: choose a smaller value")


def check_bytes(key: str, value, what: str, need: int) -> None:
    """The same refusal for an estimate made elsewhere (the synthetic runner's)."""
    avail = available_bytes(torch.device("cpu"))
    if avail is not None and need > avail:
        _refuse(key, value, what, need, avail)


def _where() -> str:
    return f" to rank {os.environ['RANK']}" if os.environ.get("WORLD_SIZE", "1") not in ("", "1") else ""
