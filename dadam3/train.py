"""``python -m dadam3.train``: simulated multi-node WGAN-GP training (Section 5.2-5.3).

Builds everything from the config at this edge and hands plain objects to
:class:`dadam3.gan.trainer.WGANTrainer`. Writes into the Hydra run directory:
``metrics.jsonl`` (one record per logged iteration), ``samples/`` (PNG grids from a fixed
noise batch, per node and for the node-averaged model), ``checkpoints/last.pt`` and
``.hydra/config.yaml`` (the resolved config). Examples::

    python -m dadam3.train experiment=toy_gaussians
    python -m dadam3.train dataset=cifar10 dataset.root=~/data optimizer=dadam3 nodes=5
    python -m dadam3.train -m optimizer=dadam3,dosg optimizer.lr=1e-4,5e-5 seed=0,1
    python -m dadam3.train resume=outputs/train/.../run_dir iterations=60000
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from dadam3.checkpoint import load, resolve_resume_path
from dadam3.config import CONFIG_DIR, optimizer_args, run_cli, topology_args
from dadam3.cuda_flags import check_cuda_flags, set_cuda_flags
from dadam3.data import NodeSampler, build_dataset, mode_metrics
from dadam3.errors import ConfigError, check_range
from dadam3.gan.stacked import build_stacked_nets
from dadam3.gan.trainer import TrainingDiverged, TrainSettings, WGANTrainer
from dadam3.optim import build_optimizer, mixer_for, validate_hparams
from dadam3.run_logging import build_logger

log = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "float64": torch.float64}
# keys a resumed run must share with its checkpoint
RESUME_KEYS = ("nodes", "batch_size", "dataset.name", "model.arch", "model.width", "optimizer.name")


def _int(cfg_value, key: str, low: int) -> int:
    if isinstance(cfg_value, bool) or not isinstance(cfg_value, int) or cfg_value < low:
        raise ConfigError(key, cfg_value, f"must be an integer >= {low}")
    return cfg_value


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError("device", name, "allowed: auto, cpu, cuda, cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", name, "CUDA is not available on this machine; use device=cpu or auto")
    return device


def build_trainer(cfg: DictConfig, run_dir: Path) -> WGANTrainer:
    """Everything from the config: data, nets, optimizers, logger, hooks; resumes if asked."""
    nodes = _int(cfg.nodes, "nodes", 1)
    batch = _int(cfg.batch_size, "batch_size", 1)
    iterations = _int(cfg.iterations, "iterations", 1)
    seed = _int(cfg.seed, "seed", 0)
    n_critic = _int(cfg.n_critic, "n_critic", 1)
    check_range("gp_lambda", cfg.gp_lambda, 0.0, None)
    if cfg.dtype not in DTYPES:
        raise ConfigError("dtype", cfg.dtype, f"allowed: {', '.join(DTYPES)}")
    dtype, device = DTYPES[cfg.dtype], resolve_device(cfg.device)
    check_cuda_flags(cfg.cuda.tf32, cfg.cuda.cudnn_benchmark)
    if device.type == "cuda":
        log.info("CUDA: %s", set_cuda_flags(cfg.cuda.tf32, cfg.cuda.cudnn_benchmark))
    if cfg.get("threads") is not None:
        torch.set_num_threads(_int(cfg.threads, "threads", 1))

    opt_name, hparams = optimizer_args(cfg.optimizer)
    validate_hparams(opt_name, hparams)                # cheap checks before any data is read
    topology, rounds, topology_kw = topology_args(cfg.topology)
    mixer = mixer_for(opt_name, nodes, topology, rounds, **topology_kw)

    ckpt, resume_path = None, None
    if cfg.resume:
        resume_path = resolve_resume_path(cfg.resume)
        ckpt = load(resume_path, map_location="cpu")
        _check_resume_compatible(cfg, ckpt.get("config", {}), resume_path)
        run_dir = resume_path.parent.parent       # continue in the original run directory
        log.info("resuming from %s (iteration %d), writing into %s", resume_path, ckpt["iteration"], run_dir)

    torch.manual_seed(seed)
    d = OmegaConf.to_container(cfg.dataset, resolve=True)
    name, root, partition, alpha = d.pop("name"), d.pop("root", None), d.pop("partition", "iid"), d.pop("alpha", 0.5)
    download, image_size = d.pop("download", False), d.pop("image_size", None)
    dataset = build_dataset(name, root, image_size=image_size, download=download, train=True, **d)
    sampler = NodeSampler(dataset, nodes, batch, partition=partition, alpha=alpha, seed=seed, device=device,
                          prefetch=bool(cfg.get("prefetch", False)))

    m = OmegaConf.to_container(cfg.model, resolve=True)
    arch = m.pop("arch")
    is_image = len(dataset.shape) == 3
    if is_image and arch == "mlp":
        raise ConfigError("model", "mlp", f"dataset {name} is images; use model=dcgan32 or model=dcgan64")
    if not is_image and arch != "mlp":
        raise ConfigError("model", arch, f"dataset {name} is 2-D points; use model=mlp")
    if is_image:
        m.update(channels=dataset.shape[0], image_size=dataset.shape[-1])
    G, D = build_stacked_nets(arch, nodes, **m)
    G, D = G.to(device=device, dtype=dtype), D.to(device=device, dtype=dtype)
    nz = G.in_shape[0]

    opt_g = build_optimizer(opt_name, G.parameters(), mixer, **hparams)
    opt_d = build_optimizer(opt_name, D.parameters(), mixer, **hparams)

    logger = _build_logger(cfg, run_dir, ckpt)
    settings = TrainSettings(iterations=iterations, batch_size=batch, nz=nz, n_critic=n_critic,
                             gp_lambda=float(cfg.gp_lambda), log_every=_int(cfg.log_every, "log_every", 1),
                             sample_every=_int(cfg.sample_every, "sample_every", 1),
                             checkpoint_every=_int(cfg.checkpoint_every, "checkpoint_every", 0),
                             eval_every=_int(cfg.metrics.every, "metrics.every", 0), seed=seed,
                             progress=bool(cfg.progress))
    evaluate = _mode_evaluator(dataset, cfg) if not is_image else _inception_evaluator(cfg, device)
    trainer = WGANTrainer(G, D, opt_g, opt_d, sampler, settings, run_dir, logger, device, dtype,
                          sample_images=_image_sampler(seed) if is_image else _point_sampler(dataset, seed),
                          evaluate=evaluate)
    trainer.config = OmegaConf.to_container(cfg, resolve=True)
    if ckpt is not None:
        if ckpt["iteration"] >= iterations:
            raise ConfigError("iterations", iterations,
                              f"the checkpoint is already at iteration {ckpt['iteration']}; raise iterations to continue")
        trainer.load_checkpoint(ckpt)
    return trainer


def _check_resume_compatible(cfg: DictConfig, saved: dict, path: Path) -> None:
    for key in RESUME_KEYS:
        now, then = OmegaConf.select(cfg, key), OmegaConf.select(OmegaConf.create(saved), key) if saved else None
        if saved and now != then:
            raise ConfigError(key, now, f"the checkpoint {path} was made with {key}={then}")


def _build_logger(cfg: DictConfig, run_dir: Path, ckpt):
    """metrics.jsonl always; with logger=wandb the same records go to wandb too."""
    lg = cfg.logger
    kw: dict[str, Any] = {}
    if lg.kind == "wandb":
        kw = dict(project=lg.project, group=lg.group, job_type=lg.job_type, mode=lg.mode,
                  config=OmegaConf.to_container(cfg, resolve=True), name=lg.get("name"),
                  run_id=(ckpt or {}).get("wandb_run_id"))
    elif lg.kind != "jsonl":
        raise ConfigError("logger", lg.kind, "allowed: jsonl, wandb")
    return build_logger(lg.kind, run_dir / "metrics.jsonl",
                        resume_from_iteration=ckpt["iteration"] if ckpt is not None else None, **kw)


def _image_sampler(seed: int):
    """Sample grids from a fixed noise batch: one PNG per node and one of the node-averaged model."""
    from torchvision.utils import save_image

    def sample(trainer: WGANTrainer, k: int) -> None:
        out = trainer.run_dir / "samples"
        out.mkdir(parents=True, exist_ok=True)
        z = _fixed_noise(trainer, trainer.s.samples_per_grid, seed + 7)
        was_training = trainer.G.training
        trainer.G.eval()
        with torch.no_grad():
            per_node = trainer.G(z.expand(trainer.M, *z.shape))
            averaged = trainer.G.averaged_module().eval()(z)
        trainer.G.train(was_training)
        for i in range(trainer.M):
            save_image(per_node[i].float() * 0.5 + 0.5, out / f"iter_{k:06d}_node{i:02d}.png", nrow=8)
        save_image(averaged.float() * 0.5 + 0.5, out / f"iter_{k:06d}_avg.png", nrow=8)
        trainer.logger.log_images("samples/averaged", averaged.float() * 0.5 + 0.5, step=k)
    return sample


def _point_sampler(dataset, seed: int, n: int = 1000):
    """Scatter plots of 2-D samples: every node's generator and the node-averaged one."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def sample(trainer: WGANTrainer, k: int) -> None:
        out = trainer.run_dir / "samples"
        out.mkdir(parents=True, exist_ok=True)
        pts, avg = _sample_points(trainer, n, seed)
        fig, axes = plt.subplots(1, 2, figsize=(8, 4), sharex=True, sharey=True)
        for ax, title, data in ((axes[0], "every node", pts.reshape(-1, 2)), (axes[1], "averaged model", avg)):
            ax.scatter(*dataset.centers.T.numpy(), c="red", marker="x", s=40, label="modes")
            ax.scatter(*data.T.cpu().numpy(), s=2, alpha=0.4)
            ax.set_title(f"{title}, iteration {k}")
            ax.set_aspect("equal")
        fig.tight_layout()
        fig.savefig(out / f"iter_{k:06d}.png", dpi=100)
        plt.close(fig)
    return sample


def _fixed_noise(trainer: WGANTrainer, n: int, seed: int) -> torch.Tensor:
    """The same n noise vectors at every call (drawn on the CPU, then moved)."""
    z = torch.randn(n, trainer.s.nz, generator=torch.Generator().manual_seed(seed))
    return z.to(trainer.device, trainer.dtype)


def _sample_points(trainer: WGANTrainer, n: int, seed: int):
    z = _fixed_noise(trainer, n, seed + 7)
    with torch.no_grad():
        return trainer.G(z.expand(trainer.M, *z.shape)).float(), trainer.G.averaged_module()(z).float()


def _mode_evaluator(dataset, cfg: DictConfig):
    """Metz et al. 2017 sample quality: modes covered and share of high-quality samples."""
    n = int(cfg.metrics.samples)

    def evaluate(trainer: WGANTrainer, k: int) -> dict:
        pts, avg = _sample_points(trainer, n, int(cfg.seed) + 11)
        centers = dataset.centers.to(pts.device)
        per_node = [mode_metrics(pts[i], centers, dataset.std) for i in range(trainer.M)]
        avg_m = mode_metrics(avg, centers, dataset.std)
        return {"modes_covered": sum(p["modes_covered"] for p in per_node) / trainer.M,
                "high_quality_share": sum(p["high_quality_share"] for p in per_node) / trainer.M,
                "modes_covered_nodes": [p["modes_covered"] for p in per_node],
                "high_quality_share_nodes": [p["high_quality_share"] for p in per_node],
                "modes_covered_avg_model": avg_m["modes_covered"],
                "high_quality_share_avg_model": avg_m["high_quality_share"]}
    return evaluate


def _inception_evaluator(cfg: DictConfig, device: torch.device):
    """Inception score through torch-fidelity: per node (the paper reports the node average)
    and of the node-averaged model. Weights are checked before training starts."""
    mc = cfg.metrics
    if not mc.inception or not mc.every:
        return None
    from dadam3.metrics.inception import inception_score, resolve_inception_weights
    weights = resolve_inception_weights(mc.inception_weights, download=bool(mc.download_weights))

    def evaluate(trainer: WGANTrainer, k: int) -> dict:
        nodes = range(trainer.M) if mc.per_node else []
        was_training = trainer.G.training
        trainer.G.eval()
        try:
            scores = []
            for i in nodes:
                net = trainer.G.node_module(i).eval()
                scores.append(inception_score(lambda b, net=net: net(torch.randn(b, trainer.s.nz, device=device,
                                                                                  dtype=trainer.dtype)),
                                              int(mc.samples), int(mc.batch_size), device, weights))
            avg = trainer.G.averaged_module().eval()
            avg_is = inception_score(lambda b: avg(torch.randn(b, trainer.s.nz, device=device, dtype=trainer.dtype)),
                                     int(mc.samples), int(mc.batch_size), device, weights)
        finally:
            trainer.G.train(was_training)
        rec = {"is_avg_model": avg_is["is_mean"], "is_avg_model_std": avg_is["is_std"]}
        if scores:
            rec.update(is_mean=sum(s["is_mean"] for s in scores) / len(scores),
                       is_nodes=[s["is_mean"] for s in scores])
        return rec
    return evaluate


def run(cfg: DictConfig, run_dir: Path) -> None:
    try:
        trainer = build_trainer(cfg, run_dir)
        (trainer.run_dir / "config_resolved.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        trainer.fit()
        trainer.logger.log({"iteration": trainer.state.iteration, "status": "finished",
                            "time": trainer.wall_time()}, step=trainer.state.iteration)
        trainer.logger.finish()
        log.info("finished %d iterations in %.1f s -> %s", trainer.state.iteration, trainer.wall_time(),
                 trainer.run_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except TrainingDiverged as e:
        print(f"error: training diverged: {e}", file=sys.stderr)
        sys.exit(3)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> None:
    run(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    run_cli(main, groups=("optimizer", "topology", "dataset", "model", "logger", "experiment"))
