"""The simulated multi-node WGAN-GP trainer: all M node copies in one batched computation.

One iteration k (the paper's simultaneous game, ``n_critic = 1``)::

    x ~ each node's data, z ~ N(0, I), eps ~ U[0, 1]       (one batch per node: [M, B, ...])
    grads  <- [grad_theta L_G, grad_alpha L_D] at the parameters (Z_k)   (wgan_gp_step)
    step_together([opt_d, opt_g])          (update + gossip, one exchange per round for both
                                            players; params <- Z_{k+1})

``autocast="bf16"`` runs the gradient evaluation (forward passes, penalty, backward) under
``torch.autocast``; parameters, gradients, optimizer state and gossip stay float32.

With ``n_critic > 1`` the critic takes ``n_critic`` steps (fresh batches), then the
generator one (alternating form, for users who want it; not the paper's).

Everything a run needs to continue bit-identically is in its checkpoint: stacked
parameters and buffers, both optimizers' states, the data sampler's state, the noise
generator, all global RNG states, bytes sent and the running sums of the current
logging window.
"""
from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch

from dadam3.checkpoint import atomic_save, capture_rng_state, checkpoint_path, restore_rng_state
from dadam3.data.node_sampler import node_seed
from dadam3.distributed import NodeList, Placement, node_rows, stack_node_states
from dadam3.errors import Diverged, RunStopped
from dadam3.gan.stacked import StackedNet
from dadam3.gan.wgan_gp import critic_step, generator_step, wgan_gp_step
from dadam3.metrics.consensus import consensus_distance
from dadam3.optim import step_together
from dadam3.run_logging import progress
from dadam3.schema import LoopSettings

LOSS_KEYS = ("loss_d", "loss_g", "gp", "wasserstein")
# checkpoint entries with one part per node: gathered from the ranks, sliced again on load
NODE_ENTRIES = ("G", "D", "opt_g", "opt_d", "window", "sampler", "noise")
NOISE_STREAM = 1             # node_seed stream of the generator noise and interpolation weights
CHECKPOINT_KIND = "dadam3.train/1"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def noise_generator(device: torch.device, seed: int) -> torch.Generator:
    """The generator z and eps are drawn from: on ``device`` (a CUDA generator on CUDA), seeded.

    A seam: tests that fake CUDA without a driver (``tests/test_fake_cuda.py``) hand out a CPU one.
    """
    return torch.Generator(device=device).manual_seed(seed)


def first_false(mask: torch.Tensor) -> int | None:
    """Index of the first False in the bool vector ``mask`` (a node), or None if all are True.

    The NaN checks' one host read of a device value (a sync); a seam that tests on fake
    tensors, which have no values, replace.
    """
    if bool(mask.all()):
        return None
    return int((~mask).nonzero()[0])


class TrainingDiverged(Diverged):
    """A loss or parameter became NaN/Inf; the message names the node and iteration."""


class Interrupted(RunStopped):
    """SIGINT or SIGTERM: the run saved a checkpoint after the current iteration and stopped."""

    prefix = "stopped"

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class CheckpointNotWritten(RunStopped):
    """The checkpoint could not be written (disk full, file-size limit): the previous ``last.pt``
    stays, the log ends with an ``interrupted`` record giving the reason."""

    prefix = "error: checkpoint not written"


@dataclass
class TrainState:
    """What advances during training, besides nets, optimizers and sampler."""
    iteration: int = 0
    elapsed: float = 0.0                      # wall seconds of all earlier processes
    window: dict[str, torch.Tensor] = field(default_factory=dict)   # sums over the logging window
    window_count: int = 0


class WGANTrainer:
    """Trains node-stacked G, D with two node optimizers (one per player) sharing one mixer.

    ``sample(G, iteration)`` and ``evaluate(G, iteration) -> dict`` are hooks the entry
    point provides (:func:`dadam3.gan.samples.sample_hook`,
    :func:`dadam3.metrics.evaluation.evaluation_hook`); ``logger`` is a
    :mod:`dadam3.run_logging` logger; ``config`` (the resolved run config) is stored in
    checkpoints.
    """

    def __init__(self, G: StackedNet, D: StackedNet, opt_g, opt_d, sampler, settings: LoopSettings,
                 run_dir: Path, logger, device: torch.device, dtype: torch.dtype,
                 sample: Callable[[StackedNet, int], None] | None = None,
                 evaluate: Callable[[StackedNet, int], dict] | None = None, config: dict | None = None,
                 run_dir_lock=None, placement: Placement | None = None, full_G: StackedNet | None = None):
        self.G, self.D, self.opt_g, self.opt_d = G, D, opt_g, opt_d
        self.sampler, self.s, self.run_dir, self.logger = sampler, settings, Path(run_dir), logger
        self.device, self.dtype = device, dtype
        self.sample, self.evaluate = sample, evaluate
        self.nz = G.in_shape[0]
        self.M = G.num_nodes
        self.mixer = opt_g.mixer
        # every node draws its noise z and interpolation weights eps from its own stream, seeded
        # from (seed, node index), so results do not depend on how nodes are spread over processes
        self.placement = placement or Placement(self.M)
        self.node_ids = list(self.placement.block)
        self.full_G = G if not self.placement.distributed else full_G   # rank 0: all M nodes, for hooks
        self.noise = [noise_generator(device, node_seed(settings.seed, i, NOISE_STREAM)) for i in self.node_ids]
        self.state = TrainState()
        self._first_bad: dict[str, torch.Tensor] = {}   # per loss: [M] first non-finite iteration (0: none)
        self.config = config
        self.run_dir_lock = run_dir_lock        # held until the run ends (dadam3.run_dir.RunDir)
        self._start = time.perf_counter()

    # ------------------------------------------------------------------ one iteration
    def _draw(self):
        B = self.s.batch_size
        real = self.sampler.next_batch().to(self.dtype)
        z = self._noise(lambda g: torch.randn(B, self.nz, generator=g, device=self.device, dtype=self.dtype))
        eps = self._noise(lambda g: torch.rand(B, generator=g, device=self.device, dtype=self.dtype))
        return real, z, eps

    def _noise(self, draw: Callable[[torch.Generator], torch.Tensor]) -> torch.Tensor:
        """``[M, ...]``: row i drawn from node i's own generator."""
        return torch.stack([draw(g) for g in self.noise])

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.s.autocast == "bf16")

    def train_step(self) -> dict[str, torch.Tensor]:
        """One iteration; returns per-node values [M] (of the last critic step and the generator)."""
        if self.s.n_critic == 1:
            with self._autocast():
                out = wgan_gp_step(self.G, self.D, *self._draw(), gp_lambda=self.s.gp_lambda)
            self._check_finite(out)
            out["operator_norm"] = self._operator_norm()
            step_together([self.opt_d, self.opt_g])
            return out
        for _ in range(self.s.n_critic):
            with self._autocast():
                out = critic_step(self.G, self.D, *self._draw(), gp_lambda=self.s.gp_lambda)
            self._check_finite(out)
            self.opt_d.step()
        z = self._noise(lambda g: torch.randn(self.s.batch_size, self.nz, generator=g, device=self.device,
                                              dtype=self.dtype))
        with self._autocast():
            g_out = generator_step(self.G, self.D, z)
        self._check_finite(g_out)
        out["loss_g"] = g_out["loss_g"]
        out["operator_norm"] = self._operator_norm()
        self.opt_g.step()
        return out

    def _operator_norm(self) -> torch.Tensor:
        """Per node ||[grad_theta L_G, grad_alpha L_D]||_2 at the current point: [M]."""
        norms = [torch.linalg.vector_norm(p.grad.detach().reshape(self.M, -1), dim=1)
                 for net in (self.G, self.D) for p in net.parameters() if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack(norms), dim=0)

    def _check_finite(self, out: dict[str, torch.Tensor]) -> None:
        """Note, on the device, the first iteration at which each value of ``out`` stopped being
        finite on each node; read back only where something is about to be written
        (:meth:`_check_finite_so_far`), so an iteration never waits for the device."""
        k = self.state.iteration + 1
        for key in out:
            if key in LOSS_KEYS or key == "d_fake":
                first = self._first_bad.get(key)
                if first is None:
                    first = self._first_bad[key] = torch.zeros(out[key].shape, dtype=torch.int64, device=out[key].device)
                first.masked_fill_(~torch.isfinite(out[key]) & (first == 0), k)

    def _check_finite_so_far(self) -> None:
        """Stop, naming node and iteration, if a loss went NaN/Inf since the run (re)started:
        the earliest iteration, then the lowest node index."""
        node, message, iteration = None, None, self.state.iteration
        if self._first_bad:
            keys = list(self._first_bad)
            firsts = torch.stack([self._first_bad[key] for key in keys])                      # [keys, M]
            never = torch.iinfo(torch.int64).max
            per_node = torch.where(firsts == 0, never, firsts).min(0).values                  # [M]
            i = first_false((per_node != per_node.min()) | (per_node == never))
            if i is not None:
                node, iteration = self.node_ids[i], int(per_node[i])
                bad = [key for key, f in zip(keys, firsts[:, i].tolist()) if f == iteration and key in LOSS_KEYS]
                message = (f"NaN/Inf in {', '.join(bad) or 'the critic scores'} of node {node} "
                           f"at iteration {iteration}")
        self._agree_finite(node, message, iteration)

    def _check_params_finite(self) -> None:
        node, message = None, None
        for name, net in (("generator", self.G), ("critic", self.D)):
            for pname, p in net.named_parameters():
                i = first_false(torch.isfinite(p.detach().reshape(self.M, -1)).all(1))
                if node is None and i is not None:
                    node = self.node_ids[i]
                    message = f"NaN/Inf in {name} parameter {pname} of node {node} after iteration {self.state.iteration}"
        self._agree_finite(node, message, self.state.iteration)

    def _agree_finite(self, node: int | None, message: str | None, iteration: int) -> None:
        """Every rank stops at the same check, naming the earliest iteration and, at it, the lowest
        node that went bad (over all ranks)."""
        M, never = self.placement.nodes, 1 << 62
        code = never if node is None else iteration * M + node                  # (iteration, node) in one int
        (first,) = self.placement.agree_max([never - code])                     # max of never - code: min code
        if first == 0:
            return
        first = never - first
        first_iteration, first_node = divmod(first, M)
        message = next(m for n, m in self.placement.all_objects((node, message)) if n == first_node and m)
        self._diverged(message, first_node, first_iteration)

    def _diverged(self, message: str, node: int, iteration: int) -> None:
        last = checkpoint_path(self.run_dir)
        kept = f"; last good checkpoint: {last}" if last.is_file() else "; no checkpoint was written yet"
        self.logger.log({"iteration": iteration, "status": "diverged", "node": node, "message": message,
                         "time": self.wall_time()}, step=iteration)
        raise self._agreed(TrainingDiverged(message + kept))

    # ------------------------------------------------------------------ the loop
    def fit(self) -> None:
        bar = progress(self.s.iterations, initial=self.state.iteration, desc="train",
                       disable=not (self.s.progress and self.placement.is_main))
        try:
            with StopSignals() as stop:
                self._loop(bar, stop)
        finally:
            bar.close()

    def _loop(self, bar, stop: "StopSignals") -> None:
        """Iterations until ``iterations``, or until a stop signal (then checkpoint and stop)."""
        s, st = self.s, self.state
        while st.iteration < s.iterations:
            out = self.train_step()
            (signum,) = self.placement.agree_max([stop.signum or 0])
            st.iteration += 1
            k = st.iteration
            self._accumulate(out)
            last = k == s.iterations
            do_eval = self._evaluating and (k % s.eval_every == 0 or last)
            checked = False
            if self.logs_on_grid(k) or last or do_eval:
                self._check_finite_so_far()
                self._check_params_finite()
                checked = True
                # an off-grid record (last iteration, evaluation) leaves the window running, so a
                # run resumed from here logs exactly what an uninterrupted one does
                rec = self._record(reset=k % s.log_every == 0)
                if do_eval:
                    G = self._gathered_G()
                    if self.placement.is_main:
                        rec.update(self.evaluate(G, k))
                self.logger.log(rec, step=k)
                bar.set_postfix(loss_d=f"{rec['loss_d']:.3g}", loss_g=f"{rec['loss_g']:.3g}")
            if self.sample is not None and (k % s.sample_every == 0 or last):
                if not checked:
                    self._check_finite_so_far()
                    self._check_params_finite()
                    checked = True
                G = self._gathered_G()
                if self.placement.is_main:
                    self.sample(G, k)
            if (s.checkpoint_every and k % s.checkpoint_every == 0) or last or signum:
                if not checked:
                    self._check_finite_so_far()
                    self._check_params_finite()
                self.save_checkpoint()
            bar.update(1)
            if signum and not last:
                self._interrupted(signum)

    @property
    def _evaluating(self) -> bool:
        return bool(self.s.eval_every) and self.evaluate is not None

    def logs_on_grid(self, k: int) -> bool:
        """Whether every run passing iteration k writes its record there (not only a run that
        ends at k); stored in checkpoints, so a resumed log can be rewound exactly."""
        return k % self.s.log_every == 0 or (self._evaluating and k % self.s.eval_every == 0)

    def _accumulate(self, out: dict[str, torch.Tensor]) -> None:
        w = self.state.window
        for key in (*LOSS_KEYS, "operator_norm"):
            if key in out:
                w[key] = w[key] + out[key] if key in w else out[key].clone()
        self.state.window_count += 1

    def _record(self, reset: bool = True) -> dict[str, Any]:
        st = self.state
        rec: dict[str, Any] = {"iteration": st.iteration, "time": self.wall_time(), "status": "running"}
        for key, total in st.window.items():
            per_node = self.placement.gather_rows((total / st.window_count).double().cpu())
            rec[key] = float(per_node.mean())
            rec[f"{key}_nodes"] = per_node.tolist()
        pl = self.placement
        distance = partial(consensus_distance, all_sum=pl.all_sum, nodes=pl.nodes) if pl.distributed \
            else consensus_distance
        rec["consensus_distance_g"] = distance(self.G.parameters())
        rec["consensus_distance_d"] = distance(self.D.parameters())
        rec["consensus_distance"] = rec["consensus_distance_g"] + rec["consensus_distance_d"]
        sent = self.mixer.bytes_sent if self.mixer is not None else torch.zeros(self.placement.nodes).numpy()
        rec["bytes_sent_nodes"] = [float(b) for b in sent]
        rec["bytes_sent"] = float(sent.mean())
        if reset:
            st.window, st.window_count = {}, 0
        return rec

    def _gathered_G(self) -> StackedNet | None:
        """All M nodes' generator on rank 0 (None on other ranks); a collective when distributed."""
        if not self.placement.distributed:
            return self.G
        parts = self.placement.gather_to_main({k: v.cpu() for k, v in self.G.state_dict().items()})
        if parts is None:
            return None
        self.full_G.load_state_dict(stack_node_states(parts))
        return self.full_G

    def _interrupted(self, signum: int) -> None:
        name, k = signal.Signals(signum).name, self.state.iteration
        self.logger.log({"iteration": k, "status": "interrupted", "signal": name, "time": self.wall_time()}, step=k)
        self.logger.finish()
        raise self._agreed(Interrupted(f"{name} after iteration {k}; checkpoint saved; continue with "
                                       f"`python -m dadam3.train resume={self.run_dir}`", signum))

    def _agreed(self, stop: RunStopped) -> RunStopped:
        """A stop every rank agreed on is printed by rank 0 only."""
        stop.echo = self.placement.is_main
        return stop

    def log_resumed(self, changed: dict[str, list]) -> None:
        """The ``resumed`` record: where the run continues and which settings changed."""
        k = self.state.iteration
        self.logger.log({"iteration": k, "status": "resumed", "changed": changed, "time": self.wall_time()}, step=k)

    def finish(self) -> None:
        """The final ``finished`` record; closes the logger."""
        self.logger.log({"iteration": self.state.iteration, "status": "finished", "time": self.wall_time()},
                        step=self.state.iteration)
        self.logger.finish()
        if self.run_dir_lock is not None:
            self.run_dir_lock.release()

    def wall_time(self) -> float:
        return self.state.elapsed + time.perf_counter() - self._start

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> dict[str, Any]:
        st = self.state
        return {
            "iteration": st.iteration,
            "elapsed": self.wall_time(),
            "window": {k: v.cpu() for k, v in st.window.items()},
            "window_count": st.window_count,
            "G": self.G.state_dict(), "D": self.D.state_dict(),
            "opt_g": self.opt_g.state_dict(), "opt_d": self.opt_d.state_dict(),
            "bytes_sent": None if self.mixer is None else self.mixer.bytes_sent.copy(),
            "sampler": self.sampler.state_dict(),
            "noise": NodeList(g.get_state() for g in self.noise),
            "rng": capture_rng_state(),
            "wandb_run_id": next((lg.run_id for lg in getattr(self.logger, "loggers", []) if hasattr(lg, "run_id")),
                                 None),
            "config": self.config,
            "kind": CHECKPOINT_KIND,
            "record_on_grid": self.logs_on_grid(self.state.iteration),
        }

    def save_checkpoint(self) -> Path:
        """Rank 0 writes the checkpoint of all M nodes (a collective when distributed). A write
        that fails stops every rank alike (:class:`CheckpointNotWritten`)."""
        ckpt, path, error = self.checkpoint(), checkpoint_path(self.run_dir), None
        if self.placement.distributed:
            parts = self.placement.gather_to_main({k: ckpt[k] for k in NODE_ENTRIES})
            if parts is not None:
                ckpt.update({k: stack_node_states([p[k] for p in parts]) for k in NODE_ENTRIES})
        if self.placement.is_main:
            try:
                atomic_save(ckpt, path)
            except OSError as e:
                error = e
        (failed,) = self.placement.agree_max([int(error is not None)])
        if failed:
            self._checkpoint_failed(path, error)
        return path

    def _checkpoint_failed(self, path: Path, error: OSError | None) -> None:
        k = self.state.iteration
        reason = f"checkpoint write failed: {error.strerror or error}" if error is not None else "on rank 0"
        kept = "the previous checkpoint is kept" if path.is_file() else "no checkpoint was written yet"
        try:
            self.logger.log({"iteration": k, "status": "interrupted", "reason": reason, "time": self.wall_time()},
                            step=k)
            self.logger.finish()
        except OSError:
            pass                            # the log's disk may be full too
        raise self._agreed(CheckpointNotWritten(f"{path} after iteration {k} ({reason}); {kept}; free space and "
                                                f"continue with `python -m dadam3.train resume={self.run_dir}`"))

    def load_checkpoint(self, ckpt: dict[str, Any]) -> None:
        """Continue from a checkpoint of all M nodes, whatever the placement that wrote it."""
        ckpt = {**ckpt, **{k: node_rows(ckpt[k], self.placement.block) for k in NODE_ENTRIES if k != "sampler"}}
        self.G.load_state_dict(ckpt["G"])
        self.D.load_state_dict(ckpt["D"])
        self.opt_g.load_state_dict(ckpt["opt_g"])
        self.opt_d.load_state_dict(ckpt["opt_d"])
        if self.mixer is not None and ckpt["bytes_sent"] is not None:
            self.mixer.bytes_sent[:] = ckpt["bytes_sent"]
        self.sampler.load_state_dict(ckpt["sampler"])
        for g, state in zip(self.noise, ckpt["noise"], strict=True):
            g.set_state(state)
        restore_rng_state(ckpt["rng"])
        self.state = TrainState(iteration=ckpt["iteration"], elapsed=ckpt["elapsed"],
                                window={k: v.to(self.device) for k, v in ckpt["window"].items()},
                                window_count=ckpt["window_count"])
        self._start = time.perf_counter()


class StopSignals:
    """While active, SIGINT and SIGTERM only set ``signum`` (the loop finishes its iteration,
    checkpoints and stops); a second signal falls back to the previous handler. Outside the
    main thread (where Python allows no handlers) it does nothing."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
