"""Your own nets from the command line (issue 27 point 3): ``model=custom`` with ``_target_``s
from a package on PYTHONPATH, extra keyword arguments passed through, the start-up checks (the
generator's and the critic's shapes, no batch-coupling norm in the critic) one line each, exit
status 2, no run directory; and ``build_trainer(nets=...)`` for Python callers."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from dadam3.errors.config import ConfigError
from dadam3.gan import VmapNet
from dadam3.gan.own_nets import check_nets, stack_own_nets
from dadam3.gan.stacked import StackedNet
from dadam3.gan.nets import build_nets
from dadam3.run.schema import compose, train_settings
from dadam3.train import build_trainer
from trainer_runs import ROOT, cli

NETS = textwrap.dedent('''
    import torch.nn as nn

    class Generator(nn.Module):
        """[B, nz] -> [B, 1, 8, 8], with a LayerNorm (no stacked version: the VmapNet path)."""
        def __init__(self, nz, width=8, out=64):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(nz, width), nn.LayerNorm(width), nn.ReLU(), nn.Linear(width, out),
                                      nn.Tanh())
        def forward(self, z):
            return self.body(z).reshape(z.shape[0], 1, 8, 8)

    class Critic(nn.Module):
        def __init__(self, width=8, scores=1, norm="none"):
            super().__init__()
            norms = {"batch": lambda: nn.BatchNorm2d(width), "lazy": lambda: nn.LazyBatchNorm2d(),
                     "sync": lambda: nn.SyncBatchNorm(width)}
            norm_layer = norms.get(norm, lambda: nn.GroupNorm(1, width))()
            self.body = nn.Sequential(nn.Conv2d(1, width, 4, 2, 1), norm_layer, nn.LeakyReLU(0.2),
                                      nn.Flatten(), nn.Linear(width * 16, scores))
            self.scores = scores
        def forward(self, x):
            s = self.body(x)
            return s.flatten() if self.scores == 1 else s
''')
POINTS = textwrap.dedent('''
    import torch.nn as nn

    class Generator(nn.Module):
        def __init__(self, nz, width=16):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(nz, width), nn.LayerNorm(width), nn.ReLU(), nn.Linear(width, 2))
        def forward(self, z):
            return self.body(z)

    class Critic(nn.Module):
        def __init__(self, width=16):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(2, width), nn.ReLU(), nn.Linear(width, 1), nn.Flatten(0))
        def forward(self, x):
            return self.body(x)
''')
BASE = ["dataset=fake", "dataset.length=32", "dataset.channels=1", "dataset.image_size=8", "device=cpu", "nodes=2",
        "loop.batch_size=4", "loop.iterations=2", "loop.progress=false", "loop.n_critic=1", "metrics.every=0",
        "model=custom", "model.generator._target_=mypkg.nets.Generator", "model.critic._target_=mypkg.nets.Critic",
        "model.nz=16"]


@pytest.fixture
def mypkg(tmp_path, monkeypatch):
    pkg = tmp_path / "lib" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(NETS)
    (pkg / "points.py").write_text(POINTS)
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "lib"), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    return env


def test_a_cli_run_trains_your_own_nets_with_extra_keyword_arguments(tmp_path, mypkg):
    run = tmp_path / "run"
    r = cli(*BASE, "+model.critic.width=4", "+model.generator.width=6", f"hydra.run.dir={run}", env=mypkg)
    assert r.returncode == 0, r.stderr[-2000:]
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=False)
    assert ckpt["iteration"] == 2
    assert ckpt["D"]["body.0.weight"].shape == (2, 4, 1, 4, 4)          # width=4 reached the critic, M = 2 rows
    assert ckpt["G"]["body.0.weight"].shape == (2, 6, 16)               # width=6 and nz=16 reached the generator
    assert (run / "metrics.jsonl").read_text().strip()
    r = cli(f"resume={run}", "loop.iterations=3", env=mypkg)          # the run's own overrides rebuild the nets
    assert r.returncode == 0, r.stderr[-2000:]
    assert torch.load(run / "checkpoints" / "last.pt", weights_only=False)["iteration"] == 3


@pytest.mark.parametrize("extra, line", [
    (["+model.critic.norm=batch"], "model.critic=Critic: layer body.1 is a BatchNorm2d, which couples the samples"),
    (["+model.critic.norm=lazy"], "model.critic=Critic: layer body.1 is a LazyBatchNorm2d, which couples the samples"),
    (["+model.critic.norm=sync"], "model.critic=Critic: layer body.1 is a SyncBatchNorm, which couples the samples"),
    (["+model.critic.scores=1", "+model.critic.width=2", "model.critic._target_=mypkg.nets.Generator"],
     "model.critic._target_=mypkg.nets.Generator: cannot be built: "),
    (["+model.critic.scores=3"], "model.critic=Critic: maps a batch [2, 1, 8, 8] to [2, 3]; it must give one score"),
    (["+model.generator.out=48"], "model.generator=Generator: fails on a batch [2, 16]: RuntimeError"),
    (["model.nz=0"], "model.nz=0: must be an integer >= 1"),
    (["model.critic._target_=mypkg.nets.Nothing"], "model.critic._target_=mypkg.nets.Nothing: cannot be built: "),
    (["model.critic._target_=null"], "model.critic._target_=None: names your net as a dotted path"),
    (["model.generator._target_=Generator"], "model.generator._target_=Generator: names your net as a dotted path"),
])
def test_a_refused_net_is_one_line_exit_2_and_no_run_directory(tmp_path, mypkg, extra, line):
    run = tmp_path / "run"
    r = cli(*BASE, *extra, f"hydra.run.dir={run}", env=mypkg)
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert line in last, r.stderr[-2000:]
    assert not run.exists()


def test_the_checks_name_the_shapes_and_the_coupling_layer():
    G, D = build_nets("mlp", hidden=8)                                  # [B, 8] -> [B, 2] -> [B]
    check_nets(G, D, 8, (2,))
    with pytest.raises(ConfigError, match=r"^generator=SequentialNet: maps noise \[2, 8\] to \[2, 2\]; the data are "
                                          r"\[2, 3\]"):
        check_nets(G, D, 8, (3,))
    wide = nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 1))              # [B, 1]: would broadcast
    with pytest.raises(ConfigError, match=r"^critic=Sequential: maps a batch \[2, 2\] to \[2, 1\]"):
        check_nets(G, wide, 8, (2,))
    for norm in (nn.BatchNorm1d(4), nn.SyncBatchNorm(4), nn.LazyBatchNorm1d()):
        bn = nn.Sequential(nn.Linear(2, 4), norm, nn.Linear(4, 1), nn.Flatten(0))
        with pytest.raises(ConfigError, match=rf"^critic=Sequential: layer 1 is a {type(norm).__name__}, which"):
            check_nets(G, bn, 8, (2,))
    ok = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4), nn.Linear(4, 1), nn.Flatten(0))
    check_nets(G, ok, 8, (2,))
    assert torch.equal(ok[0].weight, ok[0].weight.clone())             # the real nets ran nothing (meta copies)


def _batch_norms() -> list[nn.Module]:
    """Every batch-coupling layer torch has (torch.nn's and torch.ao's quantized ones), and a
    user's own batch norm on their base class."""
    from torch.ao.nn.intrinsic.quantized import BNReLU2d, BNReLU3d
    from torch.ao.nn.quantized import BatchNorm2d as QuantizedBatchNorm2d, BatchNorm3d as QuantizedBatchNorm3d

    class MyBatchNorm(nn.modules.batchnorm._BatchNorm):
        def _check_input_dim(self, x):
            pass
    return [nn.BatchNorm1d(4), nn.BatchNorm2d(4), nn.BatchNorm3d(4), nn.SyncBatchNorm(4), nn.LazyBatchNorm1d(),
            nn.LazyBatchNorm2d(), nn.LazyBatchNorm3d(), QuantizedBatchNorm2d(4), QuantizedBatchNorm3d(4),
            BNReLU2d(4), BNReLU3d(4), MyBatchNorm(4)]


@pytest.mark.parametrize("norm", _batch_norms(), ids=lambda m: f"{type(m).__module__}.{type(m).__name__}")
def test_every_batch_norm_is_refused_in_the_critic_however_deep(norm):
    G, _ = build_nets("mlp", hidden=8)
    inner = nn.Sequential(nn.Linear(2, 4), nn.Sequential(nn.Identity(), norm))
    D = nn.Sequential(inner, nn.Linear(4, 1), nn.Flatten(0))
    with pytest.raises(ConfigError, match=rf"^critic=Sequential: layer 0.1.1 is a {type(norm).__name__}, which "
                                          "couples the samples of a batch"):
        check_nets(G, D, 8, (2,))
    check_nets(nn.Sequential(G, nn.Sequential(nn.Identity())), nn.Sequential(nn.Linear(2, 1), nn.Flatten(0)), 8, (2,))


def test_stack_own_nets_takes_the_stacked_path_when_it_can():
    G, D = build_nets("mlp", hidden=8)
    Gs, Ds = stack_own_nets(G, D, 3, 8, (2,))
    assert isinstance(Gs, StackedNet) and isinstance(Ds, StackedNet) and Gs.in_shape[0] == 8
    ln = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4), nn.Linear(4, 1), nn.Flatten(0))
    Gs, Ds = stack_own_nets(G, ln, 3, 8, (2,))
    assert isinstance(Ds, VmapNet) and Ds.in_shape == (2,) and Ds(torch.zeros(3, 5, 2)).shape == (3, 5)


def test_build_trainer_takes_the_nets(tmp_path):
    G = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    D = nn.Sequential(nn.Linear(2, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 1), nn.Flatten(0))
    s = train_settings(compose("train", ["experiment=toy_gaussians", "model.nz=8", "loop.iterations=2", "nodes=2",
                                         "loop.batch_size=4", "loop.progress=false", "metrics.every=0",
                                         "device=cpu"]))
    t = build_trainer(s, tmp_path / "run", nets=(G, D))
    assert isinstance(t.D, VmapNet) and t.D.num_nodes == 2
    t.fit()
    t.finish()
    assert t.state.iteration == 2
    bad = nn.Sequential(nn.Linear(2, 16), nn.BatchNorm1d(16), nn.Linear(16, 1), nn.Flatten(0))
    with pytest.raises(ConfigError, match=r"^model.critic=Sequential: layer 1 is a BatchNorm1d"):
        build_trainer(s, tmp_path / "other", nets=(G, bad))
    column = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))           # [B, 1] scores
    with pytest.raises(ConfigError, match=r"^model.critic=Sequential: maps a batch \[2, 2\] to \[2, 1\]; it must"):
        build_trainer(s, tmp_path / "other", nets=(G, column))
    wide = nn.Sequential(nn.Linear(8, 3))                                             # [B, 3]: not the data's [B, 2]
    with pytest.raises(ConfigError, match=r"^model.generator=Sequential: maps noise \[2, 8\] to \[2, 3\]"):
        build_trainer(s, tmp_path / "other", nets=(wide, D))
    assert not (tmp_path / "other").exists()


def test_your_nets_on_2d_points_under_two_ranks(tmp_path, mypkg):
    """placement=distributed: each rank stacks its block of nodes; rank 0's hooks see all M."""
    run = tmp_path / "run"
    r = subprocess.run([str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node=2",
                        "-m", "dadam3.train", "experiment=toy_gaussians", "model=custom", "model.nz=8",
                        "model.generator._target_=mypkg.points.Generator", "model.critic._target_=mypkg.points.Critic",
                        "loop.iterations=4", "loop.batch_size=8", "loop.progress=false", "metrics.every=2",
                        "metrics.samples=50", "placement=distributed", "distributed.timeout_s=60",
                        f"hydra.run.dir={run}"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=mypkg)
    assert r.returncode == 0, r.stderr[-3000:]
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=False)
    assert ckpt["iteration"] == 4 and ckpt["G"]["body.1.weight"].shape[0] == 5      # LayerNorm rows: M = 5 nodes
