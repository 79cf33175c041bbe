"""The simulated multi-node WGAN-GP training loop: all M node copies in one batched computation.

One iteration k (the paper's simultaneous game, ``n_critic = 1``; :meth:`WGANTrainer.train_step`)::

    x ~ each node's data, z ~ N(0, I), eps ~ U[0, 1]       (one batch per node: [M, B, ...])
    grads  <- [grad_theta L_G, grad_alpha L_D] at the parameters (Z_k)   (wgan_gp_step)
    step_together([opt_d, opt_g])          (the gossip step: update + mixing, one exchange per
                                            round for both players; params <- Z_{k+1})
    records <- the losses and operator norm per node, into the logging window

``autocast="bf16"`` runs the gradient evaluation (forward passes, penalty, backward) under
``torch.autocast``; parameters, gradients, optimizer state and gossip stay float32.

With ``n_critic > 1`` the critic takes ``n_critic`` steps (fresh batches), then the
generator one (alternating form, for users who want it; not the paper's).

Around the iteration (other modules' concerns): finiteness is noted on the device and read
before anything is written (:mod:`dadam3.gan.finiteness`); records are gathered from the ranks
(:mod:`dadam3.gan.records`) on the logging grid (:mod:`dadam3.log_rewind`); stop signals
(:mod:`dadam3.signals`) end the run checkpointed. Everything a run needs to continue
bit-identically is in its checkpoint (:meth:`WGANTrainer.checkpoint`; what it holds, its
sharding and writing: :mod:`dadam3.checkpoint`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from dadam3.checkpoint import NodeList, checkpoint_path, rank_rows, restore_rng_state, stamped, write_checkpoint
from dadam3.data.node_sampler import node_seed
from dadam3.distributed.failures import DistributedTimeout
from dadam3.distributed.placement import Placement
from dadam3.divergence import loss_beyond
from dadam3.errors import StoppedAtOnce, WriteFailed
from dadam3.gan.clipping import clip_node_grads_
from dadam3.gan.cuda_graph import GraphedGradients
from dadam3.gan.finiteness import Divergence, FinitenessWatch, TrainingDiverged
from dadam3.gan.records import LoggingWindow, bytes_record, consensus_record, gathered_net
from dadam3.gan.stacked import StackedNet
from dadam3.gan.stops import RunStops
from dadam3.gan.wgan_gp import critic_step, generator_step, wgan_gp_step
from dadam3.log_rewind import LoggingGrid
from dadam3.metrics.evaluation import Evaluation
from dadam3.mixing import Mixer
from dadam3.optim import step_together
from dadam3.run_logging import progress
from dadam3.schema import LoopSettings
from dadam3.signals import StopSignals, overdue

NOISE_STREAM = 1             # node_seed stream of the generator noise and interpolation weights


def noise_generator(device: torch.device, seed: int) -> torch.Generator:
    """The generator z and eps are drawn from: on ``device`` (a CUDA generator on CUDA), seeded.

    A seam: tests that fake CUDA without a driver (``tests/test_fake_cuda.py``) hand out a CPU one.
    """
    return torch.Generator(device=device).manual_seed(seed)


@dataclass(frozen=True)
class RunContext:
    """Where a trainer's run lives and what it reports beyond the nets."""

    run_dir: Path
    device: torch.device
    dtype: torch.dtype
    placement: Placement
    mixer: Mixer | None = None            # the players' mixer: bytes each node sent (None: single-node Adam3)
    config: dict | None = None            # the resolved run config, stored in checkpoints
    lock: Any = None                      # the run directory (dadam3.run_dir.RunDir), released at the end
    full_G: StackedNet | None = None      # rank 0 under torch.distributed: all M nodes, for the hooks
    seed: int = 0                         # the run's seed: the nodes' noise streams


@dataclass
class TrainState:
    """What advances during training, besides nets, optimizers and sampler."""
    iteration: int = 0
    elapsed: float = 0.0                      # wall seconds of all earlier processes
    window: LoggingWindow = field(default_factory=LoggingWindow)


class WGANTrainer(RunStops):
    """Trains node-stacked G, D with two node optimizers (one per player) sharing one mixer.

    ``logger`` is a :mod:`dadam3.run_logging` logger; ``sample(G, iteration)`` and
    ``evaluate`` (its period and ``score(G, iteration) -> dict``) are hooks the entry point provides
    (:func:`dadam3.gan.samples.sample_hook`, :func:`dadam3.metrics.evaluation.evaluation_hook`).
    """

    def __init__(self, G: StackedNet, D: StackedNet, opt_g, opt_d, sampler, settings: LoopSettings, run: RunContext,
                 logger, sample: Callable[[StackedNet, int], None] | None = None,
                 evaluate: Evaluation | None = None):
        self.G, self.D, self.opt_g, self.opt_d, self.sampler, self.s = G, D, opt_g, opt_d, sampler, settings
        self.run, self.logger, self.sample, self.evaluate = run, logger, sample, evaluate
        self.run_dir, self.placement, self.config = Path(run.run_dir), run.placement, run.config
        self.device, self.dtype = run.device, run.dtype
        self.nz, self.M = G.in_shape[0], G.num_nodes
        # every node draws its noise z and interpolation weights eps from its own stream, seeded
        # from (seed, node index), so results do not depend on how nodes are spread over processes
        self.node_ids = list(self.placement.block)
        self.noise = [noise_generator(self.device, node_seed(run.seed, i, NOISE_STREAM)) for i in self.node_ids]
        self.finite = FinitenessWatch(self.node_ids, self.placement)
        self.state = TrainState()
        self._start = time.perf_counter()

    # ------------------------------------------------------------------ one iteration
    def train_step(self) -> dict[str, torch.Tensor]:
        """One iteration; returns per-node values [M] for the records."""
        if self.s.n_critic > 1:
            return self._alternating_step()
        graphed = self._graphed()
        if graphed is not None:                                             # cuda.graphs=true
            out = graphed()
        else:
            with self._autocast():                                          # gradients of the game at Z_k
                out = wgan_gp_step(self.G, self.D, *self._draw(), gp_lambda=self.s.gp_lambda)
        self.finite.note(out, self.state.iteration + 1)
        out["operator_norm"] = self._operator_norm()
        self._clip(self.D, self.G)
        step_together([self.opt_d, self.opt_g])     # the gossip step: one exchange per round for both players
        return out

    def _graphed(self) -> GraphedGradients | None:
        """The CUDA-graph gradient evaluation when the run's ``cuda.graphs`` is true (built on first use)."""
        if getattr(self, "_graph", None) is None and ((self.config or {}).get("cuda") or {}).get("graphs", False):
            self._graph = GraphedGradients(self.G, self.D, self._draw, self.s.gp_lambda, self.s.autocast == "bf16")
        return getattr(self, "_graph", None)

    def _alternating_step(self) -> dict[str, torch.Tensor]:
        """``n_critic`` critic steps on fresh batches, then one generator step (values of the last)."""
        k = self.state.iteration + 1
        for _ in range(self.s.n_critic):
            overdue(f"iteration {k} (n_critic={self.s.n_critic})")      # a long iteration stays interruptible
            with self._autocast():
                out = critic_step(self.G, self.D, *self._draw(), gp_lambda=self.s.gp_lambda)
            self.finite.note(out, k)
            self._clip(self.D)
            self.opt_d.step()
        z = self._noise(lambda g: torch.randn(self.s.batch_size, self.nz, generator=g, device=self.device,
                                              dtype=self.dtype))
        with self._autocast():
            g_out = generator_step(self.G, self.D, z)
        self.finite.note(g_out, k)
        out["loss_g"] = g_out["loss_g"]
        out["operator_norm"] = self._operator_norm()
        self._clip(self.G)
        self.opt_g.step()
        return out

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

    def _clip(self, *nets: StackedNet) -> None:
        """``loop.clip_grad_norm`` (0: off): each node's gradients of each player to norm <= the bound."""
        if self.s.clip_grad_norm:
            for net in nets:
                clip_node_grads_(net, self.s.clip_grad_norm)

    def _operator_norm(self) -> torch.Tensor:
        """Per node ||[grad_theta L_G, grad_alpha L_D]||_2 at the current point: [M]."""
        norms = [torch.linalg.vector_norm(p.grad.detach().reshape(self.M, -1), dim=1)
                 for net in (self.G, self.D) for p in net.parameters() if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack(norms), dim=0)

    # ------------------------------------------------------------------ the loop
    def fit(self) -> None:
        bar = progress(self.s.iterations, initial=self.state.iteration, desc="train",
                       disable=not (self.s.progress and self.placement.is_main))
        try:
            with StopSignals() as stop:
                self._loop(bar, stop)
        except StoppedAtOnce as e:               # a second signal: the record it can still have
            e.echo = self.placement.is_main
            self._terminal_record("interrupted", f"{e}; last checkpoint: {self._last_checkpoint()}")
            raise
        except DistributedTimeout as e:          # a peer died or hung: the survivors end the log
            e.args = (f"{e}; during training iteration {self.state.iteration + 1}",)
            self._terminal_record("interrupted", f"peer failure: {e}; last checkpoint: {self._last_checkpoint()}")
            raise
        finally:
            bar.close()

    def _loop(self, bar, stop: StopSignals) -> None:
        """Iterations until ``iterations``, or until a stop signal (then checkpoint and stop)."""
        s, st = self.s, self.state
        while st.iteration < s.iterations:
            out = self.train_step()
            (signum,) = self.placement.agree_max([stop.signum or 0])
            st.iteration += 1
            k = st.iteration
            st.window.add(out)
            last = k == s.iterations
            do_eval = self.evaluate is not None and (k % self.evaluate.every == 0 or last)
            do_log = self.grid.on_grid(k) or last or do_eval
            do_sample = self.sample is not None and (k % s.sample_every == 0 or last)
            do_save = bool(s.checkpoint_every and k % s.checkpoint_every == 0) or last or bool(signum)
            if do_log or do_sample or do_save:
                self._check_finite()                    # before anything is written
            if do_log or do_sample:
                self.stop_if_write_failed(self._write_outputs(k, do_log, do_eval, do_sample, bar))
            if do_save:
                self.save_checkpoint()
            bar.update(1)
            if signum and not last:
                self._interrupted(signum)

    def _write_outputs(self, k: int, do_log: bool, do_eval: bool, do_sample: bool, bar) -> WriteFailed | None:
        """Iteration k's record and sample grids. Every collective runs whatever fails here; a
        write that failed is returned (and the writes after it skipped)."""
        failed = None
        try:
            if do_log:
                self._log(k, do_eval, bar)
        except WriteFailed as e:
            failed = e
        G = self._gathered_G() if do_sample else None
        try:
            if do_sample and self.placement.is_main and failed is None:
                self.sample(G, k)
        except WriteFailed as e:
            failed = e
        return failed

    @property
    def grid(self) -> LoggingGrid:
        """The iterations every run passing them logs at (stored in checkpoints: dadam3.log_rewind)."""
        return LoggingGrid(self.s.log_every, self.evaluate.every if self.evaluate is not None else 0)

    def _log(self, k: int, evaluate: bool, bar) -> None:
        """The record of iteration k. An off-grid record (last iteration, evaluation) leaves the
        window running, so a run resumed from here logs exactly what an uninterrupted one does."""
        pl, st, mixer = self.placement, self.state, self.run.mixer
        sent = mixer.bytes_sent if mixer is not None else np.zeros(pl.nodes)
        rec = {"iteration": k, "time": self.wall_time(), "status": "running", **st.window.means(pl),
               **consensus_record(self.G, self.D, pl), **bytes_record(sent)}
        breach = loss_beyond(rec, self.s.diverge_above)      # divergence that is not NaN (every rank alike)
        if breach is not None:
            self._diverged(Divergence(breach.message, breach.node, k))
        if k % self.s.log_every == 0:
            st.window = LoggingWindow()
        if evaluate:
            G = self._gathered_G()
            if pl.is_main:
                rec.update(self.evaluate.score(G, k))
        self.logger.log(rec, step=k)
        bar.set_postfix(loss_d=f"{rec['loss_d']:.3g}", loss_g=f"{rec['loss_g']:.3g}")

    def _gathered_G(self) -> StackedNet | None:
        """All M nodes' generator on rank 0 (None on other ranks); a collective when distributed."""
        return gathered_net(self.G, self.run.full_G, self.placement)

    def _check_finite(self) -> None:
        """Stop, naming node and iteration, if a loss or parameter went NaN/Inf (every rank alike)."""
        bad = self.finite.check((("generator", self.G), ("critic", self.D)), self.state.iteration)
        if bad is not None:
            self._diverged(bad)

    def _diverged(self, bad: Divergence) -> None:
        last = checkpoint_path(self.run_dir)
        kept = f"; last good checkpoint: {last}" if last.is_file() else "; no checkpoint was written yet"
        self.logger.log({"iteration": bad.iteration, "status": "diverged", "node": bad.node, "message": bad.message,
                         "time": self.wall_time()}, step=bad.iteration)
        raise self._agreed(TrainingDiverged(bad.message + kept))

    def log_resumed(self, changed: dict[str, list]) -> None:
        """The ``resumed`` record: where the run continues and which settings changed."""
        k = self.state.iteration
        self.logger.log({"iteration": k, "status": "resumed", "changed": changed, "time": self.wall_time()}, step=k)

    def finish(self) -> None:
        """The final ``finished`` record; closes the logger and releases the run directory."""
        self.logger.log({"iteration": self.state.iteration, "status": "finished", "time": self.wall_time()},
                        step=self.state.iteration)
        self.logger.finish()
        if self.run.lock is not None:
            self.run.lock.release()

    def wall_time(self) -> float:
        return self.state.elapsed + time.perf_counter() - self._start

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> dict[str, Any]:
        """This rank's state as a checkpoint (stamped with kind and RNG states: dadam3.checkpoint)."""
        st, mixer = self.state, self.run.mixer
        return stamped({
            "iteration": st.iteration,
            "elapsed": self.wall_time(),
            "window": {k: v.cpu() for k, v in st.window.sums.items()},
            "window_count": st.window.count,
            "G": self.G.state_dict(), "D": self.D.state_dict(),
            "opt_g": self.opt_g.state_dict(), "opt_d": self.opt_d.state_dict(),
            "bytes_sent": None if mixer is None else mixer.bytes_sent.copy(),
            "sampler": self.sampler.state_dict(),
            "noise": NodeList(g.get_state() for g in self.noise),
            "wandb_run_id": next((lg.run_id for lg in getattr(self.logger, "loggers", []) if hasattr(lg, "run_id")),
                                 None),
            "config": self.config,
            "record_on_grid": self.grid.on_grid(st.iteration),
        })

    def save_checkpoint(self) -> Path:
        """Rank 0 writes the checkpoint of all M nodes (a collective when distributed). A write
        that fails stops every rank alike (:class:`CheckpointNotWritten`)."""
        path = checkpoint_path(self.run_dir)
        failure = write_checkpoint(self.checkpoint(), path, self.placement)
        if failure is not None:
            self._checkpoint_failed(path, failure)
        return path

    def load_checkpoint(self, ckpt: dict[str, Any]) -> None:
        """Continue from a checkpoint of all M nodes, whatever the placement that wrote it."""
        ckpt, mixer = rank_rows(ckpt, self.placement.block), self.run.mixer
        self.G.load_state_dict(ckpt["G"])
        self.D.load_state_dict(ckpt["D"])
        self.opt_g.load_state_dict(ckpt["opt_g"])
        self.opt_d.load_state_dict(ckpt["opt_d"])
        if mixer is not None and ckpt["bytes_sent"] is not None:
            mixer.bytes_sent[:] = ckpt["bytes_sent"]
        self.sampler.load_state_dict(ckpt["sampler"])
        for g, state in zip(self.noise, ckpt["noise"], strict=True):
            g.set_state(state)
        restore_rng_state(ckpt["rng"])
        window = LoggingWindow({k: v.to(self.device) for k, v in ckpt["window"].items()}, ckpt["window_count"])
        self.state = TrainState(iteration=ckpt["iteration"], elapsed=ckpt["elapsed"], window=window)
        self._start = time.perf_counter()
