"""errors.py: a library error names its own argument; an entry point says it in config keys.

The library half is tested beside each builder (test_topology, test_data, test_optim, ...);
here: the renaming itself, and the train entry point saying each builder's errors in the
config's keys, before anything is written."""
import pytest

from dadam3.errors.config import ConfigError, check_range, named_as
from dadam3.errors.stops import RunStopped
from dadam3.run.schema import train_settings
from dadam3.train import build_trainer
from trainer_runs import config

NAMES = {"rows": "topology.rows", "nodes": "nodes", "name": "topology"}


def test_renamed_says_the_key_and_every_named_argument_in_the_callers_names():
    e = ConfigError("rows", 4, "must be an integer divisor of {nodes}; or use {name=ring} ({rows=null}: auto)",
                    {"nodes": 6, "name": "torus", "rows": 4})
    assert str(e) == "rows=4: must be an integer divisor of nodes=6; or use name=ring (rows=null: auto)"
    said = e.renamed(NAMES)
    assert str(said) == ("topology.rows=4: must be an integer divisor of nodes=6; or use topology=ring "
                         "(topology.rows=null: auto)")
    assert (said.key, said.value, said.refs) == ("topology.rows", 4, {"nodes": 6, "name": "torus", "rows": 4})
    assert str(said.renamed({"topology": "outer"})) == ("topology.rows=4: must be an integer divisor of nodes=6; "
                                                        "or use outer=ring (topology.rows=null: auto)")
    # a key the caller does not map stays; the text itself is never read: "a=b" in it is no argument
    assert str(ConfigError("p", 0, "x").renamed(NAMES)) == "p=0: x"
    assert str(ConfigError("rows", 4, "set rows=2 (not an argument: plain text)").renamed(NAMES)) == \
        "topology.rows=4: set rows=2 (not an argument: plain text)"
    assert str(ConfigError("W", "rho=1", "need rho = ||W|| < 1").renamed({"rho": "x", "W": "topology"})) == \
        "topology=rho=1: need rho = ||W|| < 1"
    # a value shown as the head's is: strings as they are, other values as repr; braces that name
    # no argument stay as they are
    assert str(ConfigError("x", 1, "{a} {b} ${c}", {"a": "s", "b": 0.5}).renamed({"a": "A"})) == "x=1: A=s b=0.5 ${c}"


def test_explained_keeps_the_named_arguments():
    e = ConfigError("splits", 0, "must be in [1, {num_samples}]", {"num_samples": 8}).explained("see {num_samples}")
    assert str(e.renamed({"num_samples": "metrics.samples"})) == \
        "splits=0: must be in [1, metrics.samples=8]: see metrics.samples=8"


def test_a_library_error_naming_other_arguments_is_said_in_config_keys():
    from dadam3.topologies import build_topology
    with pytest.raises(ConfigError) as e:
        build_topology("explicit", 2)
    assert str(e.value) == "matrix=None: give exactly one of matrix= (a list of rows) or file="
    assert str(e.value.renamed({"matrix": "topology.matrix", "file": "topology.file"})) == \
        "topology.matrix=None: give exactly one of topology.matrix= (a list of rows) or topology.file="


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


def test_nccl_for_a_run_on_the_cpu_is_refused_where_cuda_is_available(tmp_path, monkeypatch):
    """``placement=distributed device=cpu distributed.backend=nccl`` on a GPU machine moved the run
    to ``cuda:LOCAL_RANK``, against ``device=cpu``."""
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    with pytest.raises(ConfigError, match=r"^distributed.backend=nccl: needs CUDA; use gloo on CPU$"):
        build_trainer(train_settings(config([*FAKE, "device=cpu", "placement=distributed",
                                             "distributed.backend=nccl"])), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_distributed_start_up_says_distributed_backend(tmp_path, monkeypatch):
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^distributed.backend=nccl: needs CUDA; use gloo on CPU$"):
        build_trainer(train_settings(config([*FAKE, "placement=distributed", "distributed.backend=nccl"])),
                      tmp_path / "run")
    assert not (tmp_path / "run").exists()
