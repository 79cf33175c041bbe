"""dadam3.run.schema: every preset and group option composes and checks; unknown and meaningless
keys are one line; each field's resume flag; each default in one place."""
import pickle
from dataclasses import MISSING, FrozenInstanceError, fields, is_dataclass

import pytest
import torch
from omegaconf import OmegaConf

from dadam3.run.config import CONFIG_DIR
from dadam3.run.schema.presets import group_choices
from dadam3.errors.config import ConfigError
from dadam3.optim import OPTIMIZERS, optimizer_spec
from dadam3.run.checkpoint import atomic_save
from dadam3.run.checkpoint.contents import CHECKPOINT_KIND
from dadam3.run.directory import check_run_dir
from dadam3.run.schema import (TrainConfig, compose, may_change_on_resume, synthetic_settings,
                               train_settings)
from dadam3.run.schema.groups import GROUPS, option_schema

from names import plausible_name
from trainer_runs import cli

MODEL_FOR = {"gaussians": "mlp", "celeba": "dcgan64", "imagenette": "dcgan64"}


def settings(*overrides):
    return train_settings(compose("train", ["device=cpu", *overrides]))


@pytest.mark.parametrize("preset", group_choices("experiment"))
def test_every_experiment_preset_composes_and_checks(preset):
    s = settings(f"experiment={preset}", "device=cpu")
    assert s.loop.iterations >= 1 and s.optimizer.name == "dadam3"


@pytest.mark.parametrize("group, option", [(g, o) for g in ("dataset", "model", "topology", "logger", "optimizer",
                                                            "loop") for o in group_choices(g)])
def test_every_group_option_composes_and_checks(group, option):
    custom = ["model.generator._target_=mypkg.nets.Generator", "model.critic._target_=mypkg.nets.Critic"]
    extra = {"dataset": [f"model={MODEL_FOR.get(option, 'dcgan32')}"],
             "model": ["dataset=gaussians"] * (option == "mlp") + custom * (option == "custom"),
             "optimizer": ["nodes=1"] * (option == "adam3")}.get(group, [])
    s = settings(f"{group}={option}", *extra)
    node = getattr(s, group)
    if group in GROUPS:
        assert type(node) in GROUPS[group][1].values() and getattr(node, GROUPS[group][0]) == option


@pytest.mark.parametrize("option", group_choices("optimizer"))
def test_every_optimizer_composes_for_the_synthetic_game(option):
    s = synthetic_settings(compose("synthetic", [f"optimizer={option}", "game.c=10"]))
    assert s.optimizer.name == option and s.game.c == 10.0
    preset = optimizer_spec(option).synthetic       # the class's SYNTHETIC; none: its defaults at the game's lr
    if "beta2" in preset:
        assert s.optimizer.hparams["beta2"] == pytest.approx(1 / 101)      # Section 5.1: 1/(1+c^2)
    defaults = optimizer_spec(option).check_hparams({})
    for key, value in s.optimizer.hparams.items():
        if key not in preset and key != "lr":
            assert value == defaults[key], key


@pytest.mark.parametrize("overrides, line", [
    (["+batchsize=2"], "batchsize=2: unknown key; did you mean loop.batch_size?"),
    (["iterations=5"], "iterations=5: unknown key; did you mean loop.iterations?"),
    (["loop.iteratons=5"], "loop.iteratons=5: unknown key; did you mean iterations?"),
    (["+cuda.tf33=true"], "cuda.tf33=True: unknown key; did you mean tf32?"),
    (["+nodes.x=1"], "nodes.x=1: unknown key (nodes is a value)"),
    (["dataset.workers=2"], "dataset.workers=2: means nothing for dataset=cifar10 (its keys: name, root, download, "
                            "image_size, partition, alpha)"),
    (["dataset=celeba,cifar10", "dataset.workers=2"], "dataset.workers=2: means nothing for dataset=cifar10"),
    (["+logger.project=x"], "logger.project=x: means nothing for logger=jsonl (its keys: kind)"),
    (["+optimizer.beta3=0.1", "optimizer=dosg"], "optimizer.beta3=0.1: means nothing for optimizer=dosg (its keys: "
                                                 "name, engine, lr)"),
    (["loop.log_every=0"], "loop.log_every=0: must be an integer >= 1"),
    (["loop.autocast=fp8"], "loop.autocast=fp8: unknown value; allowed: null, bf16"),
    (["optimizer.lr=1e-3,-1"], "optimizer.lr=-1: must be in"),
])
def test_a_key_the_schema_refuses_is_one_line(overrides, line):
    with pytest.raises(ConfigError) as e:
        compose("train", overrides)
    assert str(e.value).startswith(line) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("overrides, line", [
    (["metrics.per_node=true", "metrics.every=0"], "metrics.per_node=true: only used with metrics.every > 0"),
    (["metrics.every=0", "metrics.fid=false"], "metrics.fid=false: only used with metrics.every > 0"),
    (["distributed.timeout_s=1800"], "distributed.timeout_s=1800: only used with placement=distributed"),
    (["device=cpu", "cuda.graphs=false"], "cuda.graphs=false: only used with a CUDA device"),
    (["dataset.alpha=0.5"], "dataset.alpha=0.5: only used with dataset.partition=dirichlet"),
])
def test_a_key_given_where_it_means_nothing_is_refused_even_at_its_default(overrides, line):
    """Issue 33: contradictory keys (schema.runs.ONLY_WITH) given on the command line, at any value."""
    with pytest.raises(ConfigError) as e:
        compose("train", overrides)
    assert str(e.value).startswith(line) and "\n" not in str(e.value), str(e.value)
    compose("train", [o for o in overrides if o.startswith(("metrics.every", "device"))])     # alone: fine


def test_a_preset_value_where_it_means_nothing_is_refused():
    cfg = compose("train", ["metrics.every=0"])
    cfg.metrics.per_node = False                      # as a YAML preset could set it
    with pytest.raises(ConfigError, match=r"^metrics.per_node=false: only used with metrics.every > 0"):
        train_settings(cfg)


def test_the_command_line_refuses_an_unknown_key_before_anything_is_written(tmp_path):
    r = cli("+batchsize=2", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: batchsize=2: unknown key; did you mean loop.batch_size?"], r.stderr
    assert not (tmp_path / "run").exists()


def test_values_from_yaml_are_checked_too_and_settings_are_frozen():
    cfg = compose("train", ["experiment=toy_gaussians"])
    bad = cfg.copy()
    OmegaConf.update(bad, "loop.log_every", 0)
    with pytest.raises(ConfigError, match=r"^loop.log_every=0: must be an integer >= 1$"):
        train_settings(bad)
    s = train_settings(cfg)
    with pytest.raises(FrozenInstanceError):
        s.loop.iterations = 5
    assert s.torch_dtype == torch.float32 and s.config["loop"]["iterations"] == s.loop.iterations


def _leaves(cls, prefix=""):
    for f in fields(cls):
        if is_dataclass(f.default_factory):
            yield from _leaves(f.default_factory, f"{prefix}{f.name}.")
        elif f.default != "???":                # not a group (OmegaConf's MISSING: chosen in the defaults list)
            yield f"{prefix}{f.name}", f.metadata["resume"]


def test_each_fields_resume_flag_is_what_may_change_on_resume_reads():
    for key, flag in _leaves(TrainConfig):
        assert may_change_on_resume(key) is flag, key
    for group, (_, options) in GROUPS.items():
        for cls in options.values():
            for f in fields(cls):
                assert may_change_on_resume(f"{group}.{f.name}") is f.metadata["resume"], (group, f.name)
    assert [may_change_on_resume(k) for k in ("loop.iterations", "loop.batch_size", "optimizer.lr", "optimizer.name",
                                             "dataset.root", "model.width", "nodes", "iterations", "loop.nope")] == \
        [True, False, True, False, True, False, False, False, False]


def test_the_optimizer_group_is_an_ordinary_group():
    """Each optimizer's schema is made from its registry entry (name, engine, then its class's
    HPARAMS with their defaults and checks), found as every group's is: by the chosen option's name."""
    for name, spec in OPTIMIZERS.items():
        cls = GROUPS["optimizer"][1][f"schema_{name}"]
        assert cls is option_schema("optimizer", name)
        assert {f.name: f.default for f in fields(cls)} == {"name": MISSING, "engine": "auto",
                                                            **{k: hp.default for k, hp in spec.cls.HPARAMS.items()}}
        assert {f.name: f.metadata["check"] for f in fields(cls)}["lr"] == spec.cls.HPARAMS["lr"].check
    cfg = compose("train", ["device=cpu", "optimizer=adam3", "nodes=1"])      # adam3.yaml builds on dadam3.yaml
    s = train_settings(cfg)
    assert type(s.optimizer) is option_schema("optimizer", "adam3") and s.optimizer.name == "adam3"
    assert dict(s.optimizer.hparams) == {k: hp.default for k, hp in OPTIMIZERS["adam3"].cls.HPARAMS.items()}
    # what a launcher (submitit) pickles: the composed config, and the settings' classes
    assert pickle.loads(pickle.dumps(cfg)) == cfg and pickle.loads(pickle.dumps(s.optimizer)) == s.optimizer


def test_a_schema_made_for_a_registered_topology_pickles(monkeypatch):
    """A topology added to the registry with options of its own has a schema made from its builder;
    a launcher (submitit) pickles it (the composed config is typed by it, and the settings) as it
    does an optimizer's."""
    from dadam3.topologies import TOPOLOGIES, Builder
    name = plausible_name(TOPOLOGIES, "pickled_ring")
    monkeypatch.setitem(TOPOLOGIES, name, Builder(lambda nodes, weight=0.5: None))
    cls = option_schema("topology", name)
    node = OmegaConf.structured(cls(name=name))
    assert pickle.loads(pickle.dumps(cls)) is cls and pickle.loads(pickle.dumps(node)) == node


def test_a_checkpoint_from_before_the_loop_group_is_refused_on_resume(tmp_path):
    config = OmegaConf.to_container(compose("train", ["experiment=toy_gaussians"]), resolve=True)
    old = {k: v for k, v in config.items() if k != "loop"} | config["loop"]
    atomic_save({"kind": CHECKPOINT_KIND, "config": old, "iteration": 3, "run_id": "0" * 32, "record_on_grid": True},
                tmp_path / "checkpoints" / "last.pt")
    with pytest.raises(ConfigError, match=r"a checkpoint of an earlier format \(before the loop group: top-level "
                                          r"iterations"):
        check_run_dir(tmp_path / "x", str(tmp_path), config)


def test_no_yaml_repeats_a_default_of_its_schema():
    for group, (key, options) in GROUPS.items():
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            yaml = OmegaConf.to_container(OmegaConf.load(path))
            first = [d for d in yaml.pop("defaults") if d != "_self_"][0]   # a schema, or an option it builds on
            assert first in options or (CONFIG_DIR / group / f"{first}.yaml").is_file(), path
            defaults = {f.name: f.default for f in fields(option_schema(group, yaml[key]))}
            assert set(yaml) <= set(defaults), path
            assert not [k for k, v in yaml.items() if v == defaults[k]], path
    assert set(OmegaConf.load(CONFIG_DIR / "train.yaml")) == {"defaults", "hydra"}
    synthetic = OmegaConf.load(CONFIG_DIR / "synthetic.yaml")       # and the game's step size, for every optimizer
    assert set(synthetic) == {"defaults", "hydra", "optimizer"} and synthetic.optimizer == {"lr": 1e-2}
    assert set(OmegaConf.load(CONFIG_DIR / "loop" / "default.yaml")) == {"defaults"}


# (library function, its argument, the entry point and overrides composing a config, the config key
# that feeds the argument): every default a library function shares with a config (issue 27 point 4)
def _library_defaults():
    from dadam3.data import datasets, fake, gaussians, image_files, node_sampler
    from dadam3.distributed import mixer, startup
    from dadam3.run.divergence import first_breach
    from dadam3.games import synthetic as game, synthetic_run
    from dadam3.gan import cuda_graph, nets, samples, wgan_gp
    from dadam3.metrics import evaluation
    from dadam3.metrics.spec import FidelitySpec
    from dadam3.topologies import build_topology
    from dadam3.topologies.erdos_renyi import erdos_renyi
    from dadam3.topologies.explicit import explicit
    from dadam3.topologies.torus import torus
    train, synthetic = "train", "synthetic"
    pts, fk = ["dataset=gaussians", "model=mlp"], ["dataset=fake"]
    return [
        (build_topology, "rounds", train, [], "topology.rounds"),
        (torus, "rows", train, ["topology=torus"], "topology.rows"),
        (erdos_renyi, "p", train, ["topology=erdos_renyi"], "topology.p"),
        (erdos_renyi, "seed", train, ["topology=erdos_renyi"], "topology.seed"),
        (explicit, "matrix", train, ["topology=explicit"], "topology.matrix"),
        (explicit, "file", train, ["topology=explicit"], "topology.file"),
        (explicit, "require_symmetric", train, ["topology=explicit"], "topology.require_symmetric"),
        (nets.build_nets, "width", train, [], "model.width"),
        (nets.build_nets, "init", train, [], "model.init"),
        (nets.build_nets, "bias_before_norm", train, [], "model.bias_before_norm"),
        (nets.build_nets, "instance_norm_affine", train, [], "model.instance_norm_affine"),
        (lambda nz=nets.DEFAULT_NZ["dcgan32"]: 0, "nz", train, [], "model.nz"),
        (lambda nz=nets.DEFAULT_NZ["dcgan64"]: 0, "nz", train, ["model=dcgan64", "dataset=celeba"], "model.nz"),
        (lambda nz=nets.DEFAULT_NZ["mlp"]: 0, "nz", train, pts, "model.nz"),
        (nets.build_nets, "hidden", train, pts, "model.hidden"),
        (nets.build_nets, "width", train, pts, "model.width"),
        (nets.build_nets, "data_dim", train, pts, "model.data_dim"),
        (nets.build_nets, "init", train, pts, "model.init"),
        (node_sampler.NodeSampler, "partition", train, [], "dataset.partition"),
        (node_sampler.NodeSampler, "alpha", train, [], "dataset.alpha"),
        (node_sampler.NodeSampler, "alpha", train, fk, "dataset.alpha"),
        (node_sampler.NodeSampler, "seed", train, [], "seed"),
        (node_sampler.NodeSampler, "prefetch", train, [], "prefetch"),
        (datasets.build_dataset, "image_size", train, [], "dataset.image_size"),
        (datasets.build_dataset, "download", train, [], "dataset.download"),
        (image_files._load_celeba, "workers", train, ["dataset=celeba", "model=dcgan64"], "dataset.workers"),
        (image_files._load_imagenette, "workers", train, ["dataset=imagenette", "model=dcgan64"], "dataset.workers"),
        (fake.FakeImages, "image_size", train, fk, "dataset.image_size"),
        (fake.FakeImages, "channels", train, fk, "dataset.channels"),
        (fake.FakeImages, "length", train, fk, "dataset.length"),
        (gaussians.GaussianRing, "modes", train, pts, "dataset.modes"),
        (gaussians.GaussianRing, "radius", train, pts, "dataset.radius"),
        (gaussians.GaussianRing, "std", train, pts, "dataset.std"),
        (wgan_gp.wgan_gp_step, "gp_lambda", train, [], "loop.gp_lambda"),
        (wgan_gp.critic_step, "gp_lambda", train, [], "loop.gp_lambda"),
        (cuda_graph.GraphedGradients, "gp_lambda", train, [], "loop.gp_lambda"),
        (evaluation.image_scores, "per_node", train, [], "metrics.per_node"),
        (samples.GeneratorDraws.samplers, "per_node", train, [], "metrics.per_node"),
        (first_breach, "bound", train, [], "loop.diverge_above"),
        (FidelitySpec, "download", train, [], "metrics.download_weights"),
        (startup.init_from_env, "backend", train, [], "distributed.backend"),
        (startup.init_from_env, "timeout_s", train, [], "distributed.timeout_s"),
        (mixer.DistributedMixer, "timeout_s", train, [], "distributed.timeout_s"),
        (game.SyntheticGame, "c", synthetic, [], "game.c"),
        (game.SyntheticGame, "k", synthetic, [], "game.k"),
        (synthetic_run.run_synthetic, "seed", synthetic, [], "seed"),
        (synthetic_run.run_synthetic, "engine", synthetic, [], "engine"),
        (synthetic_run.run_synthetic, "topology", synthetic, [], "topology.name"),
    ]


@pytest.mark.parametrize("fn, arg, entry, overrides, key", _library_defaults(),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_a_library_default_is_the_configs(fn, arg, entry, overrides, key):
    """``build_x(...)`` without the argument does what the config's default does: one value."""
    import inspect
    settings = (train_settings if entry == "train" else synthetic_settings)(compose(entry, ["device=cpu", *overrides]
                                                                                    if entry == "train" else overrides))
    value = settings
    for part in key.split("."):
        value = getattr(value, part)
    assert inspect.signature(fn).parameters[arg].default == value, (fn, arg, key)


def test_the_metrics_defaults_are_the_fidelity_libraries():
    """The IS splits the samples check asks for, and the default feature extractor (the config
    names it by its key). ``FidelitySpec.isc`` is True where ``metrics.inception`` is false: a spec
    computes at least one score, a run evaluates nothing unless asked."""
    import inspect
    from dadam3.metrics.fidelity import resolve_feature_extractor_weights
    from dadam3.metrics.spec import FEATURE_EXTRACTORS, FidelitySpec
    from dadam3.run.schema import runs
    assert runs.IS_SPLITS == FidelitySpec(batch_size=1).splits
    extractor = FEATURE_EXTRACTORS[runs.Metrics().feature_extractor]
    assert extractor == FidelitySpec(batch_size=1).feature_extractor
    assert extractor == inspect.signature(resolve_feature_extractor_weights).parameters["feature_extractor"].default
    line = f"metrics.samples=9: must be >= {runs.IS_SPLITS} for IS/FID/KID"
    with pytest.raises(ConfigError, match=line):
        train_settings(compose("train", ["device=cpu", "metrics.inception=true", "metrics.samples=9"]))


def test_dataset_workers_takes_what_the_loaders_take():
    """0 decodes in the loading thread (the loaders allow it): the schema allows it too."""
    s = train_settings(compose("train", ["device=cpu", "dataset=celeba", "model=dcgan64", "dataset.workers=0"]))
    assert s.dataset.options["workers"] == 0
    with pytest.raises(ConfigError, match=r"^dataset.workers=-1: must be an integer >= 0"):
        train_settings(compose("train", ["device=cpu", "dataset=celeba", "model=dcgan64", "dataset.workers=-1"]))


def test_a_range_the_library_declares_is_the_schemas():
    """The fake images' channel and length bounds and the distributed back ends are the library's."""
    from dadam3.data.fake import MAX_CHANNELS, FakeImages
    from dadam3.distributed.startup import BACKENDS
    with pytest.raises(ConfigError, match=rf"^dataset.channels=17: must be an integer in \[1, {MAX_CHANNELS}\]$"):
        train_settings(compose("train", ["device=cpu", "dataset=fake", f"dataset.channels={MAX_CHANNELS + 1}"]))
    with pytest.raises(ConfigError, match=rf"^channels=17: must be an integer in \[1, {MAX_CHANNELS}\]$"):
        FakeImages(channels=MAX_CHANNELS + 1)
    s = train_settings(compose("train", ["device=cpu", "placement=distributed", "distributed.backend=gloo"]))
    assert s.distributed.backend in BACKENDS
    with pytest.raises(ConfigError, match=rf"^distributed.backend=mpi: unknown value; allowed: {', '.join(BACKENDS)}$"):
        train_settings(compose("train", ["device=cpu", "placement=distributed", "distributed.backend=mpi"]))


@pytest.mark.parametrize("base, key, value, said", [
    (["experiment=toy_gaussians", "device=cpu"], "cuda.graphs", True,
     "cuda.graphs=true: only used with a CUDA device (not device=cpu, nor device=auto without CUDA)"),
    (["dataset=fake", "metrics.every=0"], "metrics.fid", True,
     "metrics.fid=true: only used with metrics.every > 0"),
    (["experiment=toy_gaussians"], "distributed.timeout_s", 60.0,
     "distributed.timeout_s=60.0: only used with placement=distributed"),
    (["dataset=fake"], "dataset.alpha", 0.1, "dataset.alpha=0.1: only used with dataset.partition=dirichlet"),
])
def test_a_preset_value_that_means_nothing_is_refused_as_a_given_one_is(base, key, value, said):
    """A value that reaches the settings without the command line's check (a preset's, a user's
    YAML) is held against the same rules (``ONLY_WITH``); at its default it passes."""
    cfg = compose("train", base)
    default = OmegaConf.select(cfg, key)
    train_settings(cfg)
    OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(ConfigError, match="^" + said.replace("(", r"\(").replace(")", r"\)")):
        train_settings(cfg)
    OmegaConf.update(cfg, key, default, force_add=True)
    train_settings(cfg)
