"""What a run draws from its generators: sample grids and scatter plots to look at, and the
samples that evaluation scores.

Functions of plain arguments (the node-stacked generator, a fixed noise batch, an output
directory, the iteration); the builder binds them into the trainer's :class:`SampleGrids`
with :func:`sample_hook`, and hands :class:`GeneratorDraws` to
:func:`dadam3.metrics.evaluation.evaluation_hook` (so metrics/ never imports gan/). Generator
outputs are images in [-1, 1] (tanh); they are mapped to [0, 1] exactly once, when a PNG is written.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import Tensor

from dadam3.errors.files import write_whole, writing
from dadam3.gan.stacked import StackedNet

Sampler = Callable[[int], Tensor]          # n -> n generated samples


def fixed_noise(n: int, nz: int, seed: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """The same ``n`` noise vectors ``[n, nz]`` at every call (drawn on the CPU, then moved)."""
    z = torch.randn(n, nz, generator=torch.Generator().manual_seed(seed))
    return z.to(device, dtype)


@contextmanager
def eval_mode(G: StackedNet) -> Iterator[StackedNet]:
    """``G`` in eval mode (BatchNorm running statistics) inside the block, its own mode after."""
    was_training = G.training
    G.eval()
    try:
        yield G
    finally:
        G.train(was_training)


@torch.no_grad()
def generate(G: StackedNet, z: Tensor) -> tuple[Tensor, Tensor]:
    """Every node's samples ``[M, n, ...]`` and the node-averaged model's ``[n, ...]`` from the
    same noise ``z`` ``[n, nz]``, in eval mode (BatchNorm running statistics), as float32."""
    with eval_mode(G):
        per_node = G(z.expand(G.num_nodes, *z.shape))
        averaged = G.averaged_module().eval()(z)
    return per_node.float(), averaged.float()


def save_image_grids(G: StackedNet, iteration: int, z: Tensor, out_dir: Path, logger=None) -> None:
    """``iter_<k>_node<i>.png`` for every node and ``iter_<k>_avg.png`` for the node-averaged
    model; the averaged grid also goes to ``logger.log_images`` (which takes [-1, 1] images)."""
    from torchvision.utils import save_image

    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    per_node, averaged = generate(G, z)
    grids = [(per_node[i], out_dir / f"iter_{iteration:06d}_node{i:02d}.png") for i in range(G.num_nodes)]
    for images, path in [*grids, (averaged, out_dir / f"iter_{iteration:06d}_avg.png")]:
        # written under a temporary name, renamed when complete: a failed write is one line, no partial PNG
        write_whole(path, lambda f, images=images: save_image(to_unit_range(images), f, nrow=8, format="png"))
    if logger is not None:
        logger.log_images("samples/averaged", averaged, step=iteration)


def to_unit_range(images: Tensor) -> Tensor:
    """Generator images in [-1, 1] -> [0, 1] (what PNG writers expect)."""
    return images * 0.5 + 0.5


def save_point_scatter(G: StackedNet, iteration: int, z: Tensor, centers: Tensor, out_dir: Path) -> None:
    """``iter_<k>.png``: every node's 2-D samples and the node-averaged model's, with the modes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    per_node, averaged = generate(G, z)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4), sharex=True, sharey=True)
    for ax, title, data in ((axes[0], "every node", per_node.reshape(-1, 2)), (axes[1], "averaged model", averaged)):
        ax.scatter(*centers.T.numpy(), c="red", marker="x", s=40, label="modes")
        ax.scatter(*data.T.cpu().numpy(), s=2, alpha=0.4)
        ax.set_title(f"{title}, iteration {iteration}")
        ax.set_aspect("equal")
    fig.tight_layout()
    path = out_dir / f"iter_{iteration:06d}.png"
    try:
        write_whole(path, lambda f: fig.savefig(f, dpi=100, format="png"))
    finally:
        plt.close(fig)


@dataclass(frozen=True)
class SampleGrids:
    """What the trainer draws to look at: ``write(G, iteration)`` every ``every`` iterations
    (and at the last)."""
    every: int
    write: Callable[[StackedNet, int], None]

    def due(self, k: int, last: bool) -> bool:
        return k % self.every == 0 or last


def sample_hook(dataset, draws: "GeneratorDraws", out_dir: Path, every: int, logger=None, images_per_grid: int = 64,
                points: int = 1000) -> SampleGrids:
    """The trainer's sample grids: image grids, or scatter plots for 2-D data, from fixed noise."""
    if len(dataset.shape) == 3:
        return SampleGrids(every, partial(save_image_grids, z=draws.fixed_noise(images_per_grid, 7), out_dir=out_dir,
                                          logger=logger))
    return SampleGrids(every, partial(save_point_scatter, z=draws.fixed_noise(points, 7), centers=dataset.centers,
                                      out_dir=out_dir))


class GeneratorDraws:
    """What evaluation draws from the node-stacked generator (the
    :class:`dadam3.metrics.evaluation.Draws` the metrics see): fixed-noise samples of every node
    and of the averaged model, or samplers that draw fresh noise from the global RNG."""

    def __init__(self, nz: int, seed: int, device: torch.device, dtype: torch.dtype):
        self.nz, self.seed, self.device, self.dtype = nz, seed, device, dtype

    def fixed_noise(self, n: int, offset: int) -> Tensor:
        """``n`` fixed noise vectors, seeded with the run's seed + ``offset``."""
        return fixed_noise(n, self.nz, self.seed + offset, self.device, self.dtype)

    def fixed(self, n: int) -> Callable[[StackedNet], tuple[Tensor, Tensor]]:
        """G -> :func:`generate` from the same ``n`` noise vectors at every call."""
        return partial(generate, z=self.fixed_noise(n, 11))

    @contextmanager
    def samplers(self, G: StackedNet, per_node: bool = True) -> Iterator[tuple[list[Sampler], Sampler]]:
        """Inside the block, with ``G`` in eval mode: ``n -> n`` images of every node's generator
        (none unless ``per_node``) and of the node-averaged one, each an eval-mode copy, noise
        ``torch.randn`` on ``G``'s device and dtype."""
        ref = next(G.parameters())
        with eval_mode(G):
            nets = [G.node_module(i).eval() for i in range(G.num_nodes)] if per_node else []
            averaged = G.averaged_module().eval()
            yield [_sampler(net, self.nz, ref) for net in nets], _sampler(averaged, self.nz, ref)


def _sampler(net: torch.nn.Module, nz: int, ref: Tensor) -> Sampler:
    return lambda b: net(torch.randn(b, nz, device=ref.device, dtype=ref.dtype))
