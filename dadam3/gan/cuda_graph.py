"""One iteration captured as a CUDA graph and replayed (``cuda.graphs=true``).

Eager mode dispatches ~650 aten ops per iteration whatever M is; below ~15 ms per
iteration the host cannot keep up. A CUDA graph records the kernels once and replays them
with one launch. Two scopes: :class:`IterationGraph` (the simultaneous game, ``n_critic = 1``,
a static local gossip: the WHOLE iteration) and :class:`GraphedGradients` (time-varying or
distributed gossip: the gradient evaluation only, the optimizer step eager).

Both copy the trainer's draw (the same per-node random streams as the eager path) into static
buffers allocated once; warm up eagerly on a side stream before the capture (cuDNN's
autotuning, the ``.grad`` tensors, the compiled kernels) and restore what that changed, so the
warm-up leaves no trace in the training; capture with autocast's weight-cast cache off, as
capture requires. Each falls back to the same computation run eagerly, with a one-line
``reason``, where capture is impossible (:func:`capture_obstacle`, or a capture that fails).
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable

import torch

from dadam3.gan.wgan_gp import GP_LAMBDA, wgan_gp_step
from dadam3.mixing import LocalMixer

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
    """``wgan_gp_step(G, D, *draw())`` on static buffers, captured once on CUDA and replayed.

    ``draw()`` returns this iteration's ``(real, z, eps)``; the values are copied into the
    static buffers (allocated at the first call, on the drawn tensors' device and dtype).
    ``autocast``: run under bf16 autocast. A call returns the per-node values (fresh
    tensors). ``reason`` is None while the graph is used, else one line saying why it runs
    eagerly (logged once, as a warning)."""

    def __init__(self, G, D, draw: Callable[[], tuple], gp_lambda: float = GP_LAMBDA, autocast: bool = False,
                 warmup: int = WARMUP):
        self.G, self.D, self.draw, self.gp_lambda, self.autocast, self.warmup = G, D, draw, gp_lambda, autocast, warmup
        self.inputs: list[torch.Tensor] = []
        self.reason: str | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self._static_out: dict[str, torch.Tensor] | None = None
        self._params = [p for net in (G, D) for p in net.parameters() if p.requires_grad]
        self._addresses: list[int] = []

    def _cast(self):
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(self.inputs[0].device.type, dtype=torch.bfloat16, cache_enabled=False)

    def _evaluate(self) -> dict[str, torch.Tensor]:
        with self._cast():
            return wgan_gp_step(self.G, self.D, *self.inputs, gp_lambda=self.gp_lambda)

    def __call__(self) -> dict[str, torch.Tensor]:
        drawn = self.draw()
        if not self.inputs:
            self.inputs = [t.clone() for t in drawn]
            self._fall_back(capture_obstacle(self.G, self.D, self.inputs[0].device))
        else:
            for buf, value in zip(self.inputs, drawn):
                buf.copy_(value)
        if self.reason is None and self.graph is None:
            self._capture()
        if self.reason is None and [p.data_ptr() for p in self._params] != self._addresses:
            self._fall_back("the parameters moved in memory after the capture (the optimizer rebinds them)")
        if self.reason is not None:
            return self._evaluate()
        self.graph.replay()
        return {k: v.clone() for k, v in self._static_out.items()}

    def _capture(self) -> None:
        nets_state = [t.detach().clone() for net in (self.G, self.D) for t in net.buffers()]
        device = self.inputs[0].device
        try:
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(self.warmup):
                    self._evaluate()
            torch.cuda.current_stream(device).wait_stream(side)
            self._restore(nets_state)
            graph = torch.cuda.CUDAGraph()
            # thread_local: a data-loading thread's own CUDA calls do not break the capture
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._static_out = self._evaluate()
        except Exception as e:      # any capture failure: fall back, say why in one line
            self._restore(nets_state)
            self._fall_back(f"capture failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            return
        self.graph = graph
        self._addresses = [p.data_ptr() for p in self._params]

    def _restore(self, state: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for t, saved in zip((t for net in (self.G, self.D) for t in net.buffers()), state):
                t.copy_(saved)

    def _fall_back(self, reason: str | None) -> None:
        if reason is not None and self.reason is None:
            self.reason = reason
            logging.getLogger(__name__).warning("cuda.graphs=true: running eagerly: %s", reason)


# ---- the whole iteration ----------------------------------------------------------------------

def iteration_obstacle(mixer) -> str | None:
    """Why the optimizer steps cannot join the captured graph (None: they can): the graph replays
    one gossip schedule and the local kernels; a time-varying W changes its matrix with the
    step, and torch.distributed's exchange is host-driven point-to-point messaging."""
    if mixer is not None and not isinstance(mixer, LocalMixer):
        return f"the gossip runs through {type(mixer).__name__} (messages between ranks)"
    if mixer is not None and mixer.topology.time_varying:
        return "the topology is time-varying (each step mixes with another matrix)"
    return None


class IterationGraph:
    """One simultaneous iteration — ``body(inputs)``: the gradient evaluation, the operator norm,
    the clipping and both players' optimizer steps with every gossip round — captured once as a
    CUDA graph and replayed per iteration.

    What the graph cannot do, the host does around each replay: the draw is copied into the
    static buffers ``inputs``; each optimizer's step counter advances and its step scalars
    (step sizes, bias corrections) are written into its fixed device tensor ``flat.scalars``
    (an asynchronous copy ordered before the replay; the optimizers skip their own write while
    ``scalars_written_by_caller``); the mixer's byte count grows by what one step sends
    (measured during the capture). Before the capture, ``warmup`` eager iterations on a side
    stream (cuDNN's search, the compiled update, the gossip kernel, the ``.grad`` tensors) run
    on the real state, which is restored afterwards: parameters, optimizer buffers and
    counters, byte counts and the nets' buffers — the warm-up leaves no trace.

    ``emulate=True`` (tests, any device): the capture and each replay run ``body`` eagerly with
    the host's side effects undone, as a replay would leave them: the bookkeeping above is what
    keeps the results equal to the plain iteration's. ``reason``: None while the graph is used,
    else one line; the iteration then runs eagerly, as the plain path does."""

    def __init__(self, body: Callable[[list], dict], draw: Callable[[], tuple], nets, optimizers, mixer,
                 warmup: int = WARMUP, emulate: bool = False):
        self.body, self.draw, self.nets, self.opts, self.mixer = body, draw, nets, list(optimizers), mixer
        self.warmup, self.emulate = warmup, emulate
        self.inputs: list[torch.Tensor] = []
        self.reason: str | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self._static_out: dict[str, torch.Tensor] | None = None
        self._bytes_per_step = None

    def __call__(self) -> dict[str, torch.Tensor]:
        drawn = self.draw()
        if not self.inputs:
            self.inputs = [t.clone() for t in drawn]
            device = self.inputs[0].device
            self._fall_back(None if self.emulate else capture_obstacle(*self.nets, device)
                            or iteration_obstacle(self.mixer))
        else:
            for buf, value in zip(self.inputs, drawn):
                buf.copy_(value)
        if self.reason is None and self._bytes_per_step is None:
            self._capture()
        if self.reason is not None:
            return self.body(self.inputs)
        for opt in self.opts:                        # what the step's host code would do, then the replay
            opt.k += 1
            opt._write_scalars(opt.k)
        self._replay()
        if self.mixer is not None:
            self.mixer.bytes_sent += self._bytes_per_step
        return {k: v.clone() for k, v in self._static_out.items()}

    # -- capture and replay
    def _capture(self) -> None:
        saved = self._save()
        try:
            if self.emulate:
                for _ in range(self.warmup):
                    self.body(self.inputs)
            else:
                device = self.inputs[0].device
                side = torch.cuda.Stream(device)
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    for _ in range(self.warmup):
                        self.body(self.inputs)
                torch.cuda.current_stream(device).wait_stream(side)
            self._restore(saved)
            before = None if self.mixer is None else self.mixer.bytes_sent.copy()
            with self._host_effects_held():
                if self.emulate:
                    self._static_out = self.body(self.inputs)
                else:
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                        self._static_out = self.body(self.inputs)
                    self.graph = graph
            self._bytes_per_step = 0.0 if before is None else self.mixer.bytes_sent - before
            self._restore(saved)         # the capture's host effects (counters, bytes); emulated: its values too
        except Exception as e:      # any capture failure: the state as it was, fall back, say why in one line
            self._restore(saved)
            self.graph = None
            self._fall_back(f"capture failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def _replay(self) -> None:
        if not self.emulate:
            self.graph.replay()
            return
        counters = [opt.k for opt in self.opts]
        sent = None if self.mixer is None else self.mixer.bytes_sent.copy()
        with self._host_effects_held():
            self._static_out = self.body(self.inputs)
        for opt, k in zip(self.opts, counters):      # a replay runs no host code: undo the host's effects
            opt.k = k
        if sent is not None:
            self.mixer.bytes_sent[:] = sent

    @contextlib.contextmanager
    def _host_effects_held(self):
        for opt in self.opts:
            opt.scalars_written_by_caller = True
        try:
            yield
        finally:
            for opt in self.opts:
                opt.scalars_written_by_caller = False

    # -- the state a warm-up changes
    def _save(self) -> dict:
        flats = [flat for opt in self.opts for flat in opt.flat]
        return dict(k=[opt.k for opt in self.opts],
                    sent=None if self.mixer is None else self.mixer.bytes_sent.copy(),
                    tensors=[(t, t.detach().clone()) for t in self._stateful(flats)])

    def _stateful(self, flats) -> list[torch.Tensor]:
        return ([t for flat in flats for t in (flat.param_buf, flat.work, *flat.state.values())]
                + [t for net in self.nets for t in net.buffers()])

    def _restore(self, saved: dict) -> None:
        for opt, k in zip(self.opts, saved["k"]):
            opt.k = k
        if saved["sent"] is not None:
            self.mixer.bytes_sent[:] = saved["sent"]
        with torch.no_grad():
            for t, value in saved["tensors"]:
                t.copy_(value)

    def _fall_back(self, reason: str | None) -> None:
        if reason is not None and self.reason is None:
            self.reason = reason
            logging.getLogger(__name__).warning("cuda.graphs=true: running eagerly: %s", reason)
