"""Sweeps through Hydra's submitit launcher: the shipped SLURM launcher config composes with the
paper presets, and a tiny real sweep runs with hydra/launcher=submitit_local, two tasks per
job, each task a rank of placement=distributed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from dadam3.run.config import CONFIG_DIR
from dadam3.run.loggers import read_jsonl
from dadam3.run.schema import register

ROOT = Path(__file__).resolve().parent.parent


def test_slurm_launcher_config_composes():
    register()                     # the schemas in Hydra's ConfigStore (done on import of dadam3.run.schema)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", return_hydra_config=True,
                      overrides=["hydra/launcher=slurm_gpus", "placement=distributed", "experiment=fig4_cifar100",
                                 "hydra.launcher.nodes=2", "hydra.launcher.partition=gpu"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node, launcher.partition) == (2, 4, 4, "gpu")
    assert cfg.placement == "distributed" and cfg.nodes == 15


@pytest.mark.slow
def test_submitit_local_sweep_of_distributed_runs(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "dadam3.train", "-m", "hydra/launcher=submitit_local",
         "hydra.launcher.tasks_per_node=2", "hydra.launcher.timeout_min=10", "placement=distributed",
         "distributed.timeout_s=60", "experiment=toy_gaussians", "loop.n_critic=1", "model.hidden=16",
         "loop.batch_size=8",
         "loop.iterations=4", "loop.log_every=2", "metrics.every=4", "metrics.samples=100", "loop.sample_every=4",
         "optimizer=dadam3,dosg", f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=${hydra.job.num}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    for job in ("0", "1"):
        recs = read_jsonl(tmp_path / job / "metrics.jsonl")
        assert recs[-1]["status"] == "finished" and recs[-1]["iteration"] == 4
        assert len(recs[-2]["loss_d_nodes"]) == 5
        log = (tmp_path / job / "train.log").read_text()
        assert "rank 0/2" in log and "rank 1/2" in log, log[-2000:]


@pytest.mark.slow
def test_fmnist_scripts_smoke_and_the_analysis_notebook(tmp_path):
    """scripts/fmnist_fig2.sh and fmnist_fig3.sh end to end in smoke mode (seconds-long runs on the
    committed 1000-image subset; one seed each: the suite's slowest test), then notebooks/gan_results.ipynb
    executed on their output."""
    import nbformat
    from nbclient import NotebookClient

    env = {**os.environ, "SMOKE": "1", "FMNIST_OUT": str(tmp_path / "fmnist"), "SEEDS": "0 1",
           "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "DADAM3_CACHE": str(tmp_path / "cache")}
    for script, methods, seeds in (("fmnist_fig2.sh", ("adam3", "oadagrad"), (0,)),
                                   ("fmnist_fig3.sh", ("dadam3", "cadam3", "dosg", "cosg"), (0,))):
        env["SEEDS"] = " ".join(map(str, seeds))
        r = subprocess.run(["bash", f"scripts/{script}"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=1800)      # a hang, not a slow machine: 766 s for the whole test under load
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        assert "total wall time" in r.stdout
        fig = script.split("_")[1].removesuffix(".sh")
        out = tmp_path / "fmnist" / fig
        assert (out / f"{fig}_fidelity.png").is_file()
        summary = (out / "summary.md").read_text()
        assert all(f"| {m[0].upper()}" in summary or m in summary.lower() for m in methods)
        assert "Last sample grid" in summary and not list(out.glob("samples_*.png"))   # a path, not a copy
        for m in methods:
            for seed in seeds:
                assert not (out / m / f"seed{seed}" / "images").exists()   # byte copies of samples/*_avg.png removed
                recs = read_jsonl(out / m / f"seed{seed}" / "metrics.jsonl")
                assert recs[-1]["status"] == "finished" and "fid_mean" in recs[-2] and "is_avg_model" in recs[-2]
    nb = nbformat.read(ROOT / "notebooks" / "gan_results.ipynb", as_version=4)
    os.environ["DADAM3_RESULTS"] = str(tmp_path)
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
                       ).execute()
    finally:
        del os.environ["DADAM3_RESULTS"]
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "fig3" in outputs and "fid_mean" in outputs


@pytest.mark.slow
def test_fmnist_paper_scale_smoke_goes_part_way_then_further(tmp_path):
    """scripts/fmnist_paper_scale.sh in smoke mode for Fig. 2, seed 0: a run that finished at
    ITERATIONS is continued from its checkpoint when called again with a larger ITERATIONS."""
    env = {**os.environ, "SMOKE": "1", "FMNIST_OUT": str(tmp_path), "SEEDS": "0", "FIGS": "fig2",
           "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "DADAM3_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "paper_fig2"
    for iterations in (4, 6):
        r = subprocess.run(["bash", "scripts/fmnist_paper_scale.sh"], cwd=ROOT,
                           env={**env, "ITERATIONS": str(iterations)}, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        for m in ("adam3", "oadagrad"):
            run = out / m / "seed0"
            recs = read_jsonl(run / "metrics.jsonl")
            assert recs[-1]["status"] == "finished" and recs[-1]["iteration"] == iterations
            assert "width: 0.03125" in (run / "config_resolved.yaml").read_text()   # smoke, not the preset's 1
            assert not list((run / "samples").glob("*_node00.png"))   # M = 1: node 0 is the averaged model
        assert f"| Adam3 | 1 | {iterations} |" in (out / "summary.md").read_text()
    assert "resuming from iteration 4" in r.stderr + r.stdout
    assert (out / "paper_fig2_fidelity.png").is_file()
