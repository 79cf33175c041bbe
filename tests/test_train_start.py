"""A resume's config (:mod:`dadam3.run.resume_config`, issue 33 point 3): the run's own config from its
checkpoint, only the keys the command line gives applied; and a run's identity
(:func:`dadam3.run.checkpoint.resume.run_identity`)."""
from omegaconf import OmegaConf

from dadam3.run.checkpoint.resume import NOT_IDENTITY, identity_diff, run_identity
from dadam3.run.config import flatten
from dadam3.run.schema import compose, may_change_on_resume, train_settings
from dadam3.run.resume_config import given_keys, group_choices, with_stored

from trainer_runs import SMALL


def stored_run(*changes):
    """A run's stored config (flattened, as a checkpoint holds it), made with ``changes``."""
    return flatten(dict(train_settings(compose("train", [*SMALL, *changes])).config))


def test_only_the_given_keys_change_and_the_rest_is_the_run_s_own():
    stored = stored_run("seed=3", "optimizer.lr=5e-3", "dataset.radius=3")
    assert sorted(group_choices(stored)) == ["dataset=gaussians", "logger=jsonl", "model=mlp", "optimizer=dadam3",
                                             "topology=ring"]
    given = ["loop.iterations=9", "optimizer.lr=1e-4"]
    composed = compose("train", [*group_choices(stored), *given])      # defaults for all the rest
    cfg = with_stored(composed, stored, given_keys(given, stored))
    assert (cfg.seed, cfg.optimizer.lr, cfg.dataset.radius, cfg.loop.iterations) == (3, 1e-4, 3.0, 9)
    now = flatten(OmegaConf.to_container(cfg))
    assert {k for k in stored if stored[k] != now[k]} == {"loop.iterations", "optimizer.lr"}


def test_what_a_choice_or_a_preset_gives():
    stored = stored_run()
    keys = given_keys(["optimizer=dadam3", "logger=wandb", "experiment=toy_gaussians", "hydra.run.dir=x",
                       "+model.x=1"], stored)
    assert "optimizer.name" in keys and "optimizer" not in keys           # the run's own option: its name only
    assert "logger" in keys                                                # another option: the whole group
    assert {"nodes", "loop.iterations", "optimizer.lr", "dataset.name", "model.arch", "model.x"} <= set(keys)
    assert not [k for k in keys if k.startswith("hydra")]


def test_a_key_made_meaningless_by_a_given_one_keeps_its_default():
    """A 2-rank run with distributed.timeout_s=30 resumed with placement=local (issue 33)."""
    stored = {**stored_run(), "placement": "distributed", "distributed.timeout_s": 30.0}
    cfg = with_stored(compose("train", [*group_choices(stored), "placement=local"]), stored,
                      given_keys(["placement=local"], stored))
    assert cfg.placement == "local" and cfg.distributed.timeout_s == compose("train", []).distributed.timeout_s
    train_settings(cfg)                                                    # accepted


def test_the_identity_leaves_out_what_does_not_change_what_is_computed():
    stored = stored_run()
    same = stored_run("loop.iterations=50", "loop.log_every=1", "device=cpu", "threads=1", "logger=wandb",
                      "logger.mode=offline")
    assert run_identity(stored) == run_identity(same) and identity_diff(stored, same) == {}
    other = stored_run("optimizer.lr=7e-3")
    assert run_identity(other) != run_identity(stored)
    assert identity_diff(stored, other) == {"optimizer.lr": [1e-3, 7e-3]}


def test_every_key_left_out_of_the_identity_may_change_on_resume():
    """A key that fixes what is trained (cannot change on resume) is always part of the identity."""
    keys = set(stored_run()) | set(stored_run("logger=wandb"))
    for name in NOT_IDENTITY:
        if name == "engine":                   # the synthetic game's (no resume)
            continue
        under = [k for k in keys if k == name or k.startswith(name + ".")] or [name]   # or another data set's key
        assert all(may_change_on_resume(k) for k in under), name
