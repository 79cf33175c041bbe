"""errors.py: a library error names its own argument; an entry point says it in config keys.

The library half is tested beside each builder (test_topology, test_data, test_optim, ...);
here: the renaming itself, and the train entry point saying each builder's errors in the
config's keys, before anything is written."""
import pytest

from dadam3.errors import ConfigError, RunStopped, check_range, named_as
from dadam3.schema import train_settings
from dadam3.train import build_trainer
from trainer_runs import config

NAMES = {"rows": "topology.rows", "nodes": "nodes", "name": "topology"}


def test_renamed_says_the_key_and_every_key_assignment_in_the_callers_names():
    e = ConfigError("rows", 4, "must be an integer divisor of nodes=6; or use name=ring (rows=null: auto)")
    said = e.renamed(NAMES)
    assert str(said) == ("topology.rows=4: must be an integer divisor of nodes=6; or use topology=ring "
                         "(topology.rows=null: auto)")
    assert (said.key, said.value) == ("topology.rows", 4)
    # a key the caller does not map stays; a dotted key is not renamed twice; "a = b" is no key
    assert str(ConfigError("p", 0, "x").renamed(NAMES)) == "p=0: x"
    assert str(ConfigError("topology.rows", 4, "set topology.rows=2").renamed(NAMES)) == \
        "topology.rows=4: set topology.rows=2"
    assert str(ConfigError("W", "rho=1", "need rho = ||W|| < 1").renamed({"rho": "x", "W": "topology"})) == \
        "topology=rho=1: need rho = ||W|| < 1"


def test_named_as_renames_config_errors_only_and_keeps_echo():
    quiet = ConfigError("rows", 4, "bad")
    quiet.echo = False
    with pytest.raises(ConfigError) as e, named_as(NAMES):
        raise quiet
    assert str(e.value) == "topology.rows=4: bad" and e.value.echo is False
    with pytest.raises(ConfigError, match=r"^outer.x=2: must be in \[0, 1\)$"), named_as({"x": "outer.x"}), \
            named_as({"y": "inner.y"}):
        check_range("x", 2, 0, 1)
    for other in (ValueError("rows=4"), RunStopped("rows=4")):
        with pytest.raises(type(other), match="^rows=4$"), named_as(NAMES):
            raise other


SMALL = ["model=dcgan32", "model.width=0.03125", "nodes=2", "loop.batch_size=2", "device=cpu", "loop.progress=false",
         "loop.iterations=2"]
FAKE = ["dataset=fake", "dataset.length=64", *SMALL]


@pytest.mark.parametrize("args, start", [
    (["topology=torus", "topology.rows=4"], "topology.rows=4: must be an integer divisor of nodes=2"),
    (["topology=torus", "nodes=5"], "topology=torus: nodes=5 has no factorisation r x c with r, c >= 2: the torus "
                                    "would be a ring; use topology=ring or another nodes"),
    (["topology=explicit", "topology.file=/nonexistent/W.npy"], "topology.file=/nonexistent/W.npy: no such file"),
    (["topology=explicit", "topology.matrix=[[1,0],[0,1]]"], "topology.matrix=rho=1: graph must be connected"),
    (["optimizer=adam3"], "nodes=2: optimizer=adam3 is the single-node algorithm: use nodes=1 (or optimizer=dadam3"),
    (["dataset=fashion_mnist", "dataset.root=/nonexistent"],
     "dataset.root=/nonexistent: Fashion-MNIST not found"),
    (["loop.batch_size=100"], "loop.batch_size=100: node 0 holds only 64 samples"),
    (["dataset.image_size=64"], "dataset.image_size=64: model.arch=dcgan32 makes 32x32 images"),
    (["metrics.every=1", "metrics.inception=true", "metrics.feature_extractor=fmnist_classifier",
      "metrics.inception_weights=/nonexistent/w.pt"],
     "metrics.inception_weights=/nonexistent/w.pt: Fashion-MNIST classifier weights not found"),
])
def test_the_train_entry_point_says_builder_errors_in_config_keys(tmp_path, args, start):
    base = SMALL if args[0].startswith("dataset=") else FAKE
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config([*base, *args])), tmp_path / "run")
    assert str(e.value).startswith(start) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "run").exists()


def test_the_fashion_mnist_remedy_is_said_in_config_keys(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config([*SMALL, "dataset=fashion_mnist", f"dataset.root={tmp_path}"])),
                      tmp_path / "run")
    assert "set dataset.root=/usr/share/datasets/fashion-mnist, or set dataset.download=true" in str(e.value)


def test_distributed_start_up_says_distributed_backend(tmp_path, monkeypatch):
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^distributed.backend=nccl: needs CUDA; use gloo on CPU$"):
        build_trainer(train_settings(config([*FAKE, "placement=distributed", "distributed.backend=nccl"])),
                      tmp_path / "run")
    assert not (tmp_path / "run").exists()
