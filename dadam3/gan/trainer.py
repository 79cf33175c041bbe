"""The simulated multi-node WGAN-GP trainer: all M node copies in one batched computation.

One iteration k (the paper's simultaneous game, ``n_critic = 1``)::

    x ~ each node's data, z ~ N(0, I), eps ~ U[0, 1]       (one batch per node: [M, B, ...])
    grads  <- [grad_theta L_G, grad_alpha L_D] at the parameters (Z_k)   (wgan_gp_step)
    opt_d.step(); opt_g.step()                               (update + gossip; params <- Z_{k+1})

With ``n_critic > 1`` the critic takes ``n_critic`` steps (fresh batches), then the
generator one (alternating form, for users who want it; not the paper's).

Everything a run needs to continue bit-identically is in its checkpoint: stacked
parameters and buffers, both optimizers' states, the data sampler's state, the noise
generator, all global RNG states, bytes sent and the running sums of the current
logging window.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from dadam3.checkpoint import atomic_save, capture_rng_state, checkpoint_path, restore_rng_state
from dadam3.errors import Diverged
from dadam3.gan.stacked import StackedNet
from dadam3.gan.wgan_gp import critic_step, generator_step, wgan_gp_step
from dadam3.metrics.consensus import consensus_distance
from dadam3.run_logging import progress
from dadam3.settings import LoopSettings

LOSS_KEYS = ("loss_d", "loss_g", "gp", "wasserstein")


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
                 evaluate: Callable[[StackedNet, int], dict] | None = None, config: dict | None = None):
        self.G, self.D, self.opt_g, self.opt_d = G, D, opt_g, opt_d
        self.sampler, self.s, self.run_dir, self.logger = sampler, settings, Path(run_dir), logger
        self.device, self.dtype = device, dtype
        self.sample, self.evaluate = sample, evaluate
        self.nz = G.in_shape[0]
        self.M = G.num_nodes
        self.mixer = opt_g.mixer
        self.noise = noise_generator(device, settings.seed + 1)
        self.state = TrainState()
        self.config = config
        self._start = time.perf_counter()

    # ------------------------------------------------------------------ one iteration
    def _draw(self):
        M, B = self.M, self.s.batch_size
        real = self.sampler.next_batch().to(self.dtype)
        z = torch.randn(M, B, self.nz, generator=self.noise, device=self.device, dtype=self.dtype)
        eps = torch.rand(M, B, generator=self.noise, device=self.device, dtype=self.dtype)
        return real, z, eps

    def train_step(self) -> dict[str, torch.Tensor]:
        """One iteration; returns per-node values [M] (of the last critic step and the generator)."""
        if self.s.n_critic == 1:
            out = wgan_gp_step(self.G, self.D, *self._draw(), gp_lambda=self.s.gp_lambda)
            self._check_finite(out)
            out["operator_norm"] = self._operator_norm()
            self.opt_d.step()
            self.opt_g.step()
            return out
        for _ in range(self.s.n_critic):
            out = critic_step(self.G, self.D, *self._draw(), gp_lambda=self.s.gp_lambda)
            self._check_finite(out)
            self.opt_d.step()
        z = torch.randn(self.M, self.s.batch_size, self.nz, generator=self.noise, device=self.device,
                        dtype=self.dtype)
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
        vals = torch.stack([out[k] for k in out if k in LOSS_KEYS or k == "d_fake"])
        node = first_false(torch.isfinite(vals).all(0))
        if node is not None:
            bad = [k for k in out if k in LOSS_KEYS and not bool(torch.isfinite(out[k][node]))]
            self._diverged(f"NaN/Inf in {', '.join(bad) or 'the critic scores'} of node {node} "
                           f"at iteration {self.state.iteration + 1}", node)

    def _check_params_finite(self) -> None:
        for name, net in (("generator", self.G), ("critic", self.D)):
            for pname, p in net.named_parameters():
                node = first_false(torch.isfinite(p.detach().reshape(self.M, -1)).all(1))
                if node is not None:
                    self._diverged(f"NaN/Inf in {name} parameter {pname} of node {node} "
                                   f"at iteration {self.state.iteration}", node)

    def _diverged(self, message: str, node: int) -> None:
        last = checkpoint_path(self.run_dir)
        kept = f"; last good checkpoint: {last}" if last.is_file() else "; no checkpoint was written yet"
        self.logger.log({"iteration": self.state.iteration + 1, "status": "diverged", "node": node,
                         "message": message}, step=self.state.iteration + 1)
        raise TrainingDiverged(message + kept)

    # ------------------------------------------------------------------ the loop
    def fit(self) -> None:
        s, st = self.s, self.state
        bar = progress(s.iterations, initial=st.iteration, desc="train", disable=not s.progress)
        try:
            while st.iteration < s.iterations:
                out = self.train_step()
                st.iteration += 1
                k = st.iteration
                self._accumulate(out)
                last = k == s.iterations
                do_eval = bool(s.eval_every) and self.evaluate is not None and (k % s.eval_every == 0 or last)
                if k % s.log_every == 0 or last or do_eval:
                    self._check_params_finite()
                    # an off-grid record (last iteration, evaluation) leaves the window running, so a
                    # run resumed from here logs exactly what an uninterrupted one does
                    rec = self._record(reset=k % s.log_every == 0)
                    if do_eval:
                        rec.update(self.evaluate(self.G, k))
                    self.logger.log(rec, step=k)
                    bar.set_postfix(loss_d=f"{rec['loss_d']:.3g}", loss_g=f"{rec['loss_g']:.3g}")
                if self.sample is not None and (k % s.sample_every == 0 or last):
                    self.sample(self.G, k)
                if (s.checkpoint_every and k % s.checkpoint_every == 0) or last:
                    self._check_params_finite()
                    self.save_checkpoint()
                bar.update(1)
        finally:
            bar.close()

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
            per_node = (total / st.window_count).double().cpu()
            rec[key] = float(per_node.mean())
            rec[f"{key}_nodes"] = per_node.tolist()
        rec["consensus_distance_g"] = consensus_distance(self.G.parameters())
        rec["consensus_distance_d"] = consensus_distance(self.D.parameters())
        rec["consensus_distance"] = rec["consensus_distance_g"] + rec["consensus_distance_d"]
        sent = self.mixer.bytes_sent if self.mixer is not None else torch.zeros(self.M).numpy()
        rec["bytes_sent_nodes"] = [float(b) for b in sent]
        rec["bytes_sent"] = float(sent.mean())
        if reset:
            st.window, st.window_count = {}, 0
        return rec

    def finish(self) -> None:
        """The final ``finished`` record; closes the logger."""
        self.logger.log({"iteration": self.state.iteration, "status": "finished", "time": self.wall_time()},
                        step=self.state.iteration)
        self.logger.finish()

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
            "noise": self.noise.get_state(),
            "rng": capture_rng_state(),
            "wandb_run_id": next((lg.run_id for lg in getattr(self.logger, "loggers", []) if hasattr(lg, "run_id")),
                                 None),
            "config": self.config,
        }

    def save_checkpoint(self) -> Path:
        return atomic_save(self.checkpoint(), checkpoint_path(self.run_dir))

    def load_checkpoint(self, ckpt: dict[str, Any]) -> None:
        self.G.load_state_dict(ckpt["G"])
        self.D.load_state_dict(ckpt["D"])
        self.opt_g.load_state_dict(ckpt["opt_g"])
        self.opt_d.load_state_dict(ckpt["opt_d"])
        if self.mixer is not None and ckpt["bytes_sent"] is not None:
            self.mixer.bytes_sent[:] = ckpt["bytes_sent"]
        self.sampler.load_state_dict(ckpt["sampler"])
        self.noise.set_state(ckpt["noise"])
        restore_rng_state(ckpt["rng"])
        self.state = TrainState(iteration=ckpt["iteration"], elapsed=ckpt["elapsed"],
                                window={k: v.to(self.device) for k, v in ckpt["window"].items()},
                                window_count=ckpt["window_count"])
        self._start = time.perf_counter()
