"""Typed values in every config group of both entry points: a value of the wrong type (a
string where a number is expected, a fraction where an integer is, a list or a mapping where a
scalar is, a number where a name is) is one line naming the key, for every field of every
schema section and group option, walked from the schema itself (a field added later is covered)."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import fields, is_dataclass

import pytest
from omegaconf import OmegaConf

from dadam3.run.schema.presets import group_choices
from dadam3.errors.config import ConfigError
from dadam3.optim import optimizer_spec
from dadam3.run.schema import compose, synthetic_settings, train_settings
from dadam3.run.schema.fields import Choice, Int, Num, OptionName, boolean, text
from dadam3.run.schema.groups import GROUPS
from dadam3.topologies.erdos_renyi import graph_seed, probability
from dadam3.topologies.explicit import matrix_rows, path_text
from dadam3.topologies.torus import divisor
from dadam3.run.schema.runs import SyntheticConfig, TrainConfig
from dadam3.train import build_trainer

from trainer_runs import ROOT, TOY, config

ROOTS = {"train": TrainConfig, "synthetic": SyntheticConfig}
SETTINGS = {"train": train_settings, "synthetic": synthetic_settings}
# base overrides that make a group option usable (an MLP for 2-D points, one node for adam3)
BASE = {("dataset", "gaussians"): ["model=mlp"], ("model", "mlp"): ["dataset=gaussians"],
        ("optimizer", "adam3"): ["nodes=1"]}

FAKE = ["dataset=fake", "dataset.length=64", "model=dcgan32", "model.width=0.03125", "nodes=2", "loop.batch_size=2",
        "device=cpu", "loop.progress=false"]
NUMBER = ["abc", "[1,2]", "{a: 1}", "true"]
WRONG = {"int": ["1.5", *NUMBER], "float": NUMBER, "bool": ["abc", "1", "[true]", "{a: 1}"],
         "str": ["[1,2]", "{a: 1}"], "matrix": ["abc", "[1,2]", "[[a,b]]", "{a: 1}", "[[true]]"]}


def kind(f) -> str | None:
    """What type a schema field holds, from its check (else its annotation)."""
    check = f.metadata.get("check")
    if isinstance(check, Int) or check is graph_seed:
        return "int"
    if isinstance(check, Num) or check in (divisor, probability) or f.type in ("float", "Optional[float]"):
        return "float"
    if check is boolean:
        return "bool"
    if isinstance(check, (Choice, OptionName)) or check in (text, path_text) or f.type in ("str", "Optional[str]"):
        return "str"
    if check is matrix_rows:
        return "matrix"
    return {"int": "int", "Optional[int]": "int"}.get(f.type)


def leaves(cls, prefix=""):
    for f in fields(cls):
        if is_dataclass(f.default_factory):
            yield from leaves(f.default_factory, f"{prefix}{f.name}.")
        elif f.name not in GROUPS and f.name != "optimizer":
            yield prefix + f.name, kind(f)


def cases(entry: str):
    """(base overrides, key, wrong value) for every field of ``entry``'s schema, its fixed nodes,
    every option of every group (each field once per schema class) and every hyper-parameter."""
    out = [((), key, v) for key, k in leaves(ROOTS[entry]) for v in WRONG.get(k, ["[1,2]"])]
    seen = set()
    groups = [g for g in (*GROUPS, "optimizer") if g in {f.name for f in fields(ROOTS[entry])}]
    for group in groups:
        for option in group_choices(group if group != "optimizer" else "optimizer"):
            base = [f"{group}={option}", *BASE.get((group, option), [])]
            if group == "optimizer":
                for key in optimizer_spec(option).cls.HPARAMS:
                    if (group, key) not in seen:
                        seen.add((group, key))
                        out += [(base, f"optimizer.{key}", v) for v in WRONG["float"]]
                continue
            cls = OmegaConf.get_type(compose(entry, base)[group])
            for f in fields(cls):
                if (cls, f.name) not in seen:
                    seen.add((cls, f.name))
                    out += [(base, f"{group}.{f.name}", v) for v in WRONG.get(kind(f), ["[1,2]"])]
    return out


def refusal(entry: str, overrides: list[str]) -> str:
    """What the entry point says before it runs: the command-line check, Hydra's composition
    and the settings (a ConfigError's one line), or "" if all of them accept."""
    try:
        SETTINGS[entry](compose(entry, overrides))
    except ConfigError as e:
        return str(e)
    return ""


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["train", "synthetic"])
def test_every_field_refuses_a_wrong_type_with_one_line(entry):
    bad = []
    for base, key, value in cases(entry):
        try:
            said = refusal(entry, [*base, f"{key}={value}"])
        except Exception as e:           # a traceback at the command line
            bad.append(f"{key}={value}: {type(e).__name__}: {str(e)[:80]}")
            continue
        if not said or "\n" in said or not said.startswith(key.split(".")[0]):
            bad.append(f"{key}={value}: {'accepted' if not said else repr(said[:120])}")
    assert bad == [], "\n".join(bad)


def test_the_walk_covers_every_group_and_node():
    keys = {key.split(".")[0] for _, key, _ in cases("train")}
    assert {"dataset", "model", "optimizer", "topology", "logger", "loop", "metrics", "cuda", "distributed",
            "nodes", "seed", "threads"} <= keys
    synthetic_keys = {key.split(".")[0] for _, key, _ in cases("synthetic")}
    assert {"game", "optimizer", "topology", "nodes", "overwrite"} <= synthetic_keys
    assert {"topology.rows", "topology.matrix", "dataset.modes", "model.hidden", "logger.project"} <= \
        {key for _, key, _ in cases("train")}


@pytest.mark.parametrize("entry, args, says", [
    ("train", ["topology=torus", "topology.rows=abc"], "error: topology.rows=abc: must be an integer divisor of nodes"),
    ("train", ["dataset.name=[1,2]"], "error: dataset.name=[1, 2]: names the chosen option: choose it with dataset="),
    ("synthetic", ["optimizer.name=[1,2]"], "error: optimizer.name=[1, 2]: names the chosen option: choose it with "
                                            "optimizer=NAME"),
    ("synthetic", ["topology=explicit", "topology.matrix=[[a,b]]"], "error: topology.matrix=[['a', 'b']]: must be "),
])
def test_at_the_command_line(tmp_path, entry, args, says):
    r = subprocess.run([sys.executable, "-m", f"dadam3.{entry}", *args, f"hydra.run.dir={tmp_path / 'run'}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(says), r.stderr
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


@pytest.mark.parametrize("args, says", [
    (["metrics.fid=true"], "metrics.fid=true: means nothing for dataset=gaussians (2-D points"),
    (["metrics.inception_weights=w.pth"], "metrics.inception_weights=w.pth: means nothing for dataset=gaussians"),
    (["metrics.batch_size=10"], "metrics.batch_size=10: means nothing for dataset=gaussians"),
    (["model.data_dim=3"], "model.data_dim=3: must be 2: dataset=gaussians is 2-D points"),
    (["cuda.channels_last=true"], "cuda.channels_last=true: only used with a CUDA device (not device=cpu, nor"),
    (["cuda.autotune_layers=true"], "cuda.autotune_layers=true: only used with a CUDA device (not device=cpu, nor"),
    (["optimizer=adam3", "nodes=1", "topology=torus"], "topology=torus: means nothing for optimizer=adam3, the "
                                                       "single-node algorithm"),
])
def test_options_that_mean_nothing_for_the_chosen_run_are_refused(args, says):
    """Keys for images with 2-D points, CUDA keys on the CPU, a graph for the single-node algorithm."""
    with pytest.raises(ConfigError) as e:
        train_settings(compose("train", ["experiment=toy_gaussians", *args]))
    assert str(e.value).startswith(says)
    if args[0].startswith("optimizer="):
        with pytest.raises(ConfigError, match="^topology=torus: means nothing for optimizer=adam3"):
            synthetic_settings(compose("synthetic", args))


def test_the_same_keys_at_their_defaults_are_accepted():
    s = train_settings(compose("train", ["experiment=toy_gaussians", "metrics.fid=false", "model.data_dim=2"]))
    assert s.device == "cpu" and not s.metrics.fid
    with pytest.raises(ConfigError, match="cuda.channels_last=false: only used with a CUDA device"):
        compose("train", ["experiment=toy_gaussians", "cuda.channels_last=false"])   # given: it asks for nothing here


@pytest.mark.parametrize("args, start", [
    (["model.hidden=0"], "model.hidden=0: must be an integer >= 1"),
    (["model.hidden=-1"], "model.hidden=-1: must be an integer >= 1"),
    (["model.hidden=1.5"], "model.hidden=1.5: must be an integer >= 1"),
    (["topology=torus", "nodes=7"], "topology=torus: nodes=7 has no factorisation"),
    (["topology=torus", "nodes=6", "topology.rows=1.5"], "topology.rows=1.5: must be an integer divisor of nodes=6"),
    (["optimizer.lr=inf"], "optimizer.lr=inf: must be a finite number"),
])
def test_values_that_were_accepted_silently(tmp_path, args, start):
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(TOY + ["loop.iterations=2", *args])), tmp_path)
    assert str(e.value).startswith(start), str(e.value)


@pytest.mark.parametrize("args, start", [
    (["+topology.p=0.3"], "topology.p=0.3: means nothing for topology=ring (its keys: name, rounds)"),
    (["+topology.foo=1"], "topology.foo=1: means nothing for topology=ring"),
    (["+model.foo=1"], "model.foo=1: means nothing for model=mlp"),
    (["+dataset.alpha=0.1"], "dataset.alpha=0.1: means nothing for dataset=gaussians"),
    ([*FAKE, "dataset.alpha=0.1"], "dataset.alpha=0.1: only used with dataset.partition=dirichlet"),
    (["distributed.timeout_s=60"], "distributed.timeout_s=60: only used with placement=distributed"),
    (["+metrics.evry=5"], "metrics.evry=5: unknown key; did you mean every?"),
    (["+optimzer.lr=1"], "optimzer={'lr': 1}: unknown key; did you mean optimizer?"),
    (["+foo=1"], "foo=1: unknown key"),
    (["topology=explicit", "nodes=2", "topology.matrix=[[0.5,0.5],[0.5,0.5]]", "topology.require_symmetric=yes"],
     "topology.require_symmetric=yes: must be true or false"),
    ([*FAKE, "+model.bias_before_norm=yes"], "model.bias_before_norm=yes: must be true or false"),
    (["model.nz=true"], "model.nz=True: must be an integer >= 1"),
    (["optimizer.lr=true"], "optimizer.lr=True: must be a number"),
    (["seed=18446744073709551616"], "seed=18446744073709551616: must be an integer in [0, 4294967295]"),
    (["topology=erdos_renyi", "topology.seed=-1"], "topology.seed=-1: must be an integer in [0, 4294967295]"),
    (["topology=erdos_renyi", "topology.seed=1.5"], "topology.seed=1.5: must be an integer"),
    (["placement=distributed", "distributed.timeout_s=1e300"],
     "distributed.timeout_s=1e+300: must be in (0, 3.1536e+07]"),
    (["threads=100000"], "threads=100000: must be an integer in [1, 1024]"),
    ([*FAKE, "metrics.inception=true", "metrics.samples=5"],
     "metrics.samples=5: must be >= 10"),
    (["optimizer.eps=0"], "optimizer.eps=0: must be in (0, inf): the first step divides a zero gradient"),
])
def test_values_that_crashed_or_were_accepted(tmp_path, args, start):
    base = [] if args[:len(FAKE)] == FAKE else TOY
    with pytest.raises(ConfigError) as e:
        build_trainer(train_settings(config(base + ["loop.iterations=2", *args])), tmp_path / "run")
    assert str(e.value).startswith(start) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "run").exists()
