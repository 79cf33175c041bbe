"""The gradient evaluation of one iteration captured as a CUDA graph and replayed (``cuda.graphs=true``).

Eager mode dispatches ~650 aten ops per iteration whatever M is; below ~15 ms per
iteration the host cannot keep up. A CUDA graph records the kernels of one
:func:`~dadam3.gan.wgan_gp.wgan_gp_step` once and replays them with one launch:

* static inputs: the real batch, the noise z and the interpolation weights ε live in
  buffers allocated once; every iteration the trainer draws into them (the same per-node
  random streams as the eager path, so the values are the same);
* warm-up: a few eager evaluations on a side stream before the capture (cuDNN's autotuning,
  the ``.grad`` tensors allocated); the nets' buffers (BatchNorm running statistics) are
  restored afterwards, so the warm-up leaves no trace in the training;
* capture: the whole gradient evaluation (forward passes, the penalty's double backward,
  both players' gradients written into the fixed ``.grad`` views of the optimizers' flat
  buffers); autocast runs with its weight-cast cache off, as capture requires;
* replay: one ``graph.replay()``; the returned values are copied out of the static outputs.

The optimizer step stays eager (see :mod:`dadam3.optim`): capturing it would need its
per-iteration scalars (step size schedules, bias corrections) as device tensors updated
in place and its gossip buffers at fixed addresses; the gradient evaluation is where the
~650 ops are.

:class:`GraphedGradients` falls back to the same evaluation run eagerly on the static
buffers, with a one-line ``reason``, where capture is impossible: not a CUDA device, a
BatchNorm with ``momentum=None`` (reads a counter on the host), or a capture that fails.
If the parameters are found at new addresses after the capture (an optimizer that rebinds
them), it stops replaying and says so rather than read stale memory.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

from dadam3.gan.wgan_gp import GP_LAMBDA, wgan_gp_step

WARMUP = 3


def capture_obstacle(G, D, device: torch.device) -> str | None:
    """Why the pair cannot be captured on ``device`` (None: it can be tried)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"the run is on {device.type}, not a CUDA device"
    for net in (G, D):
        for m in net.modules():
            if getattr(m, "momentum", 0.0) is None and hasattr(m, "running_mean"):
                return "a BatchNorm with momentum=None reads its counter on the host every forward pass"
    return None


class GraphedGradients:
    """``wgan_gp_step(G, D, real, z, eps)`` on static buffers, captured once on CUDA and replayed.

    ``shapes``: ``(real, z, eps)`` shapes; ``autocast``: run under bf16 autocast.
    ``__call__(fill)`` calls ``fill(real, z, eps)`` to write this iteration's inputs into
    the static buffers, evaluates, and returns the per-node values (fresh tensors).
    ``reason`` is None while the graph is used, else one line saying why it runs eagerly."""

    def __init__(self, G, D, shapes, device: torch.device, dtype: torch.dtype, gp_lambda: float = GP_LAMBDA,
                 autocast: bool = False, warmup: int = WARMUP):
        self.G, self.D, self.gp_lambda, self.autocast, self.warmup = G, D, gp_lambda, autocast, warmup
        self.device = device
        self.inputs = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.reason = capture_obstacle(G, D, device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self._static_out: dict[str, torch.Tensor] | None = None
        self._params = [p for net in (G, D) for p in net.parameters() if p.requires_grad]
        self._addresses: list[int] = []

    def _cast(self):
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)

    def _evaluate(self) -> dict[str, torch.Tensor]:
        with self._cast():
            return wgan_gp_step(self.G, self.D, *self.inputs, gp_lambda=self.gp_lambda)

    def __call__(self, fill: Callable[..., None]) -> dict[str, torch.Tensor]:
        fill(*self.inputs)
        if self.reason is None and self.graph is None:
            self._capture()
        if self.reason is None and [p.data_ptr() for p in self._params] != self._addresses:
            self.reason = "the parameters moved in memory after the capture (the optimizer rebinds them)"
        if self.reason is not None:
            return self._evaluate()
        self.graph.replay()
        return {k: v.clone() for k, v in self._static_out.items()}

    def _capture(self) -> None:
        nets_state = [t.detach().clone() for net in (self.G, self.D) for t in net.buffers()]
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(self.warmup):
                    self._evaluate()
            torch.cuda.current_stream(self.device).wait_stream(side)
            self._restore(nets_state)
            graph = torch.cuda.CUDAGraph()
            # thread_local: a data-loading thread's own CUDA calls do not break the capture
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._static_out = self._evaluate()
        except Exception as e:      # noqa: BLE001 (any capture failure: fall back, say why in one line)
            self._restore(nets_state)
            self.reason = f"capture failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return
        self.graph = graph
        self._addresses = [p.data_ptr() for p in self._params]

    def _restore(self, state: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for t, saved in zip((t for net in (self.G, self.D) for t in net.buffers()), state):
                t.copy_(saved)
