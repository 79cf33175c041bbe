"""The simulated multi-node WGAN-GP trainer: records, samples, exact resume, NaN stop,
one-line config errors, sweeps and the wandb logger (offline, read back)."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import dadam3.gan.iteration as iteration
from dadam3.run.checkpoint import checkpoint_path, load
from dadam3.run.start import set_cuda_flags
from dadam3.errors.config import ConfigError
from dadam3.gan.samples import fixed_noise, generate
from dadam3.gan.finiteness import TrainingDiverged
from dadam3.run.loggers import read_jsonl
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer

from trainer_runs import ROOT, TOY, cli, config, train

IMAGES = ["dataset=fake", "dataset.length=64", "model=dcgan32", "model.width=0.03125", "nodes=3", "loop.batch_size=4",
          "device=cpu", "loop.progress=false", "loop.log_every=2", "loop.sample_every=4", "loop.checkpoint_every=3",
          "metrics.every=0", "optimizer.lr=1e-3"]


def test_paper_defaults():
    cfg = config([])
    o = cfg.optimizer
    assert (o.name, o.lr, o.beta1, o.beta2, o.beta3) == ("dadam3", 5e-5, 0.5, 0.999, 0.5)
    assert (cfg.loop.batch_size, cfg.loop.iterations, cfg.topology.name, cfg.loop.n_critic) == (64, 30000, "ring", 1)
    assert [config([f"experiment={e}"]).nodes for e in ("fig3_mnist", "fig3_cifar10", "fig4_cifar100",
                                                        "fig4_imagenette", "fig2_celeba", "fig2_cifar10")] \
        == [5, 5, 15, 15, 1, 1]


def test_toy_run_writes_records_samples_and_checkpoint(tmp_path):
    t = train(TOY + ["loop.iterations=8"], tmp_path)
    *recs, last = read_jsonl(tmp_path / "metrics.jsonl")
    assert [(r["iteration"], r["status"]) for r in recs] == [(2, "running"), (4, "running"), (6, "running"),
                                                            (8, "running")]
    assert (last["iteration"], last["status"]) == (8, "finished")
    r = recs[-1]
    for key in ("time", "loss_d", "loss_g", "gp", "wasserstein", "operator_norm", "consensus_distance",
                "bytes_sent", "modes_covered", "high_quality_share"):
        assert key in r
    for key in ("loss_d_nodes", "loss_g_nodes", "gp_nodes", "bytes_sent_nodes", "operator_norm_nodes"):
        assert len(r[key]) == 5
    # ring, float32: 2 neighbours x 4 bytes x (Z_1 = X_0 W at start + 2 mixings (X_k, Z_{k+1}) per iteration)
    n_params = sum(p[0].numel() for net in (t.G, t.D) for p in net.parameters())
    assert r["bytes_sent_nodes"] == [2 * 4 * (1 + 8 * 2) * n_params] * 5
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["iter_000004.png", "iter_000008.png"]
    assert load(checkpoint_path(tmp_path))["iteration"] == 8


def test_operator_norm_is_the_per_node_norm_of_both_players_gradients(tmp_path):
    t = build_trainer(train_settings(config(TOY + ["loop.iterations=1", "dtype=float64"])), tmp_path)
    iteration.wgan_gp_step(t.G, t.D, *t.step._draw(), gp_lambda=10.0)
    grads = [p.grad for net in (t.G, t.D) for p in net.parameters()]
    by_hand = torch.stack([torch.cat([g[i].reshape(-1) for g in grads]).norm() for i in range(t.M)])
    torch.testing.assert_close(iteration.operator_norm((t.G, t.D)), by_hand, rtol=1e-12, atol=0)


def test_logged_sample_grid_has_the_generators_pixel_values(tmp_path):
    """The grid sent to the logger shows the averaged model's images mapped [-1, 1] -> [0, 1]
    once (it used to be mapped twice: every pixel in [0.5, 1])."""
    t = train(IMAGES + ["loop.iterations=4"], tmp_path)
    grid = torch.from_numpy(np.array(Image.open(tmp_path / "images" / "samples_averaged" / "00000004.png")))
    _, averaged = generate(t.G, fixed_noise(64, t.step.nz, 0 + 7, torch.device("cpu"), torch.float32))
    size = averaged.shape[-1]
    for row, col in ((0, 0), (0, 7), (7, 7)):                   # tiles of make_grid(nrow=8, padding=2)
        top, left = 2 + row * (size + 2), 2 + col * (size + 2)
        tile = grid[top:top + size, left:left + size].permute(2, 0, 1).float() / 255
        expected = (averaged[row * 8 + col] * 0.5 + 0.5).clamp(0, 1)
        assert (tile - expected).abs().max() <= 1 / 255 + 1e-6
    assert float(averaged.min()) < -0.05                         # the generator uses the lower half


def test_image_run_samples_per_node_and_averaged(tmp_path):
    train(IMAGES + ["loop.iterations=4"], tmp_path)
    names = sorted(p.name for p in (tmp_path / "samples").iterdir())
    assert names == ["iter_000004_avg.png", "iter_000004_node00.png", "iter_000004_node01.png",
                     "iter_000004_node02.png"]


@pytest.mark.parametrize("overrides", [TOY, IMAGES, TOY + ["loop.n_critic=2", "optimizer=dp_oadam"]],
                         ids=["toy", "images", "alternating"])
def test_resume_is_bit_identical(tmp_path, overrides):
    full = train(overrides + ["loop.iterations=8"], tmp_path / "full")
    train(overrides + ["loop.iterations=5"], tmp_path / "cut")
    resumed = train(overrides + ["loop.iterations=8", f"resume={tmp_path / 'cut'}"], tmp_path / "ignored")
    assert resumed.run_dir == tmp_path / "cut"
    for a, b in ((full.G, resumed.G), (full.D, resumed.D)):
        for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
            assert torch.equal(x, y), name
    sa, sb = full.opt_g.state_dict(), resumed.opt_g.state_dict()
    assert sa["k"] == sb["k"] == 8
    for i in sa["state"]:
        for key, v in sa["state"][i].items():
            assert torch.equal(v, sb["state"][i][key]) if torch.is_tensor(v) else v == sb["state"][i][key]

    def strip(recs):  # the records on the logging grid, without wall time
        return [{k: v for k, v in r.items() if k != "time"} for r in recs
                if r["status"] == "running" and r["iteration"] % 2 == 0]
    full, cut = (read_jsonl(tmp_path / name / "metrics.jsonl") for name in ("full", "cut"))
    assert strip(full) == strip(cut)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_run_resumes_to_the_same_point(tmp_path, restore_cuda_flags):
    """On CUDA (cuDNN autotuning off) a resumed image run ends where an uninterrupted one does;
    the checkpoint holds the CUDA generator states."""
    cuda = [o for o in IMAGES if o != "device=cpu"] + ["device=cuda", "cuda.cudnn_benchmark=false"]
    full = train(cuda + ["loop.iterations=6"], tmp_path / "full")
    assert next(full.G.parameters()).is_cuda
    train(cuda + ["loop.iterations=3"], tmp_path / "cut")
    assert load(checkpoint_path(tmp_path / "cut"))["rng"]["cuda"]
    resumed = train(cuda + ["loop.iterations=6", f"resume={tmp_path / 'cut'}"], tmp_path / "ignored")
    for a, b in ((full.G, resumed.G), (full.D, resumed.D)):
        for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=name)


def test_nan_stops_with_node_and_iteration_and_keeps_last_checkpoint(tmp_path, monkeypatch):
    real_step = iteration.wgan_gp_step
    calls = {"n": 0}

    def poisoned(G, D, *args, **kw):
        calls["n"] += 1
        if calls["n"] == 5:
            with torch.no_grad():
                next(iter(D.parameters()))[2].fill_(float("nan"))
        return real_step(G, D, *args, **kw)

    monkeypatch.setattr(iteration, "wgan_gp_step", poisoned)
    with pytest.raises(TrainingDiverged, match=r"node 2 at iteration 5; last good checkpoint: .*last.pt"):
        train(TOY + ["loop.iterations=8"], tmp_path)
    last = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert last["status"] == "diverged" and last["node"] == 2 and last["iteration"] == 5
    ckpt = load(checkpoint_path(tmp_path))
    assert ckpt["iteration"] == 3
    assert all(torch.isfinite(v).all() for v in ckpt["D"].values())


@pytest.mark.parametrize("args, start", [
    (["dataset=imagenet"], "error: dataset=imagenet: unknown dataset; allowed: celeba, cifar10"),
    (["loop.batch_size=0"], "error: loop.batch_size=0: must be an integer >= 1"),
    (["nodes=0"], "error: nodes=0: must be an integer >= 1"),
    (["dataset=fake", "dataset.image_size=64"], "error: dataset.image_size=64: model.arch=dcgan32 makes 32x32"),
    (["dataset=mnist", "dataset.root=/nonexistent"], "error: dataset.root=/nonexistent"),
    (["optimizer.beta3=1.0"], "error: optimizer.beta3=1.0: must be in [0, 1)"),
    (["resume=/nonexistent/run"], "error: resume=/nonexistent/run: no checkpoint"),
])
def test_bad_config_is_one_line(tmp_path, args, start):
    r = cli(*args, "device=cpu", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), r.stderr


def test_cuda_flags_are_checked_on_every_device():
    with pytest.raises(ConfigError, match=r"^cuda.tf32=maybe: must be true or false$"):
        train_settings(config([*TOY, "cuda.tf32=maybe"]))
    with pytest.raises(ConfigError, match=r"^cuda.cudnn_benchmark=1: must be true or false$"):
        train_settings(config([*TOY, "cuda.cudnn_benchmark=1"]))


@pytest.fixture
def restore_cuda_flags():
    be = torch.backends
    saved = be.cuda.matmul.fp32_precision, be.cudnn.conv.fp32_precision, be.cudnn.benchmark
    yield
    be.cuda.matmul.fp32_precision, be.cudnn.conv.fp32_precision, be.cudnn.benchmark = saved


@pytest.mark.parametrize("tf32, bench", [(True, True), (False, False), (True, False)])
def test_set_cuda_flags(restore_cuda_flags, tf32, bench):
    said = set_cuda_flags(tf32, bench)
    be = torch.backends
    assert be.cuda.matmul.fp32_precision == be.cudnn.conv.fp32_precision == ("tf32" if tf32 else "ieee")
    assert be.cudnn.benchmark is bench
    assert f"cudnn.benchmark={bench}" in said


@pytest.mark.slow
def test_command_line_sweep(tmp_path):
    r = cli("-m", "optimizer=dadam3,dosg", "optimizer.lr=1e-4,5e-5", "seed=0,1", *TOY, "loop.iterations=2",
            f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=${hydra.job.num}")
    assert r.returncode == 0, r.stderr
    runs = sorted(tmp_path.glob("*/metrics.jsonl"))
    assert len(runs) == 8
    cfgs = {(c["optimizer"]["name"], c["optimizer"]["lr"], c["seed"]) for c in
            (json.loads(json.dumps(__import__("yaml").safe_load((p.parent / "config_resolved.yaml").read_text())))
             for p in runs)}
    assert len(cfgs) == 8


@pytest.mark.slow
def test_wandb_offline_logger_read_back(tmp_path):
    env = {**os.environ, "WANDB_SILENT": "true"}
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        (tmp_path / var).mkdir()
        env[var] = str(tmp_path / var)
    run_dir = tmp_path / "run"
    r = cli(*TOY, "loop.iterations=4", "logger=wandb", "logger.mode=offline", f"hydra.run.dir={run_dir}", env=env)
    assert r.returncode == 0, r.stderr
    assert len(read_jsonl(run_dir / "metrics.jsonl")) == 3   # local records never depend on wandb
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    proc = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", str(run_file), "--json"],
                          capture_output=True, text=True, timeout=120,
                          env={**env, "TMPDIR": str(run_file.parent.parent)})
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["run_group"] == "gaussians-M5-ring" and run["job_type"] == "dadam3"
    steps = {r["history"]["step"]["num"]: r["history"]["item"] for r in records if r["type"] == "history"
             and "loss_d" in r["history"]["item"]}
    local = {r["iteration"]: r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss_d" in r}
    assert sorted(steps) == sorted(local) == [2, 4]
    assert steps[4]["loss_d"] == pytest.approx(local[4]["loss_d"])


@pytest.mark.slow
def test_gpu_benchmarks_script_smoke(tmp_path):
    """scripts/gpu_benchmarks.sh end to end at tiny sizes on the CPU (its real run is on a GPU)."""
    env = dict(os.environ, PYTHON=sys.executable, DEVICE="cpu", ITERATIONS="4",
               BENCH_ARGS="--nodes 2 --width 0.0625 --batch 2 --iters 3 --warmup 1",
               TRAIN_ARGS="model.width=0.03125 loop.batch_size=2 loop.log_every=2 dataset.length=64",
               DIST_RANKS="1 2", DIST_ARGS="--nodes 3 --floats 100 --mixes 2",
               DIST_TRAIN_ARGS="model.width=0.03125 loop.batch_size=2 dataset.length=64",
               TEST_PATHS="tests/test_mixing.py")   # its step 1 on one small file: the suite runs the rest itself
    r = subprocess.run(["bash", "scripts/gpu_benchmarks.sh", str(tmp_path)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = (tmp_path / "summary.txt").read_text()
    assert " passed" in summary.split("== CUDA tests")[1].split("== bench_gan")[0], summary
    assert "| 2 |" in summary and summary.count("status finished") == 2, summary
    assert "one round :" in summary and "ms/iteration (slowest rank)" in summary, summary
    assert summary.count("R=2:") == 2 and "R=4" not in summary, summary
    m15 = read_jsonl(tmp_path / "train_m15.jsonl")
    assert m15[-1]["status"] == "finished" and m15[-1]["iteration"] == 4
    assert len(m15[-2]["loss_d_nodes"]) == 15


def test_bf16_autocast_trains_on_the_cpu_and_differs_only_by_rounding(tmp_path):
    """loop.autocast=bf16: the gradient evaluation (penalty's double backward included) runs in bf16,
    parameters and optimizer state stay float32; losses stay finite and close to float32's."""
    image = ["dataset=fake", "model=dcgan32", "model.width=0.0625", "nodes=2", "loop.batch_size=4",
             "loop.iterations=6", "loop.progress=false", "loop.log_every=3", "metrics.every=0", "loop.sample_every=6",
             "loop.checkpoint_every=6"]
    runs = {}
    for cast in ("null", "bf16"):
        t = train(image + [f"loop.autocast={cast}"], tmp_path / cast)
        recs = read_jsonl(tmp_path / cast / "metrics.jsonl")
        assert recs[-1]["status"] == "finished"
        assert all(p.dtype == torch.float32 for p in t.G.parameters())
        assert all(v.dtype == torch.float32 for st in t.opt_d.state.values() for v in st.values())
        runs[cast] = [r for r in recs if r["status"] == "running"]
    for a, b in zip(runs["null"], runs["bf16"]):
        assert math.isfinite(b["loss_d"]) and math.isfinite(b["gp"])
        assert abs(a["loss_d"] - b["loss_d"]) < 0.1 * max(1.0, abs(a["loss_d"]))    # bf16 rounding, not another run
    with pytest.raises(ConfigError, match="autocast.*dtype=float32"):
        train_settings(config(image + ["loop.autocast=bf16", "dtype=float64"]))
    with pytest.raises(ConfigError, match="autocast"):
        train_settings(config(image + ["loop.autocast=fp8"]))


# ---------------------------------------------------------------- issue 27: the iteration has one home

def _function(path, name):
    import ast
    tree = ast.parse((ROOT / path).read_text())
    return next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == name)


def test_the_loop_has_no_schedule_arithmetic_and_the_trainer_is_built_complete():
    """Each output says when it is due (no ``%`` in the loop); the trainer takes at most 6
    arguments and nothing is assigned to it after construction (in the package)."""
    import ast
    loop = _function("dadam3/run/trainer.py", "_loop")
    assert not [n for n in ast.walk(loop) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)]
    init = _function("dadam3/run/trainer.py", "__init__")
    assert len(init.args.args) - 1 <= 6
    assigned = [f"{path.name}:{n.lineno}" for path in (ROOT / "dadam3").rglob("*.py")
                for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Assign, ast.AugAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "trainer"]
    assert assigned == []


def test_each_output_decides_when_it_is_due(tmp_path):
    from dadam3.run.state import Checkpointer
    from dadam3.distributed import Placement
    from dadam3.run.records import Records
    from dadam3.gan.samples import SampleGrids
    from dadam3.run.rewind import LoggingGrid
    from dadam3.metrics.evaluation import Evaluation
    saver = Checkpointer(tmp_path, Placement(2), 3, {})
    assert [k for k in range(1, 10) if saver.due(k, last=k == 8)] == [3, 6, 8, 9]
    assert saver.due(4, last=False, stopping=True) and not Checkpointer(tmp_path, Placement(2), 0, {}).due(3, False)
    assert [k for k in range(1, 9) if SampleGrids(4, print).due(k, k == 7)] == [4, 7, 8]
    assert [k for k in range(1, 9) if Evaluation(5, print).due(k, k == 8)] == [5, 8]
    records = Records(None, LoggingGrid(2, 5), Placement(2))
    assert [k for k in range(1, 12) if records.due(k, k == 11, evaluating=k == 7)] == [2, 4, 5, 6, 7, 8, 10, 11]


def test_the_key_placement_had_before_is_an_unknown_key():
    with pytest.raises(ConfigError, match=r"^backend=local: unknown key"):
        config(TOY + ["backend=local"])
    assert train_settings(config(TOY + ["placement=local"])).placement == "local"
