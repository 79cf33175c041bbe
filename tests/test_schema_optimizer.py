"""One source for every default (issue 27 point 4): the optimizer classes' ``HPARAMS`` are the
defaults, ``configs/optimizer/*.yaml`` name the algorithm only, and every committed preset
resolves to exactly the hyper-parameters it trained with before the defaults moved.

``data/optimizer_hparams_by_preset.json`` was written from main at commit 72aa843 (before the
change) by composing every ``experiment=X optimizer=Y`` of ``python -m dadam3.train`` (and no
experiment) and every ``optimizer=Y game.c=C`` of ``python -m dadam3.synthetic``.
"""
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dadam3.config import CONFIG_DIR, group_choices
from dadam3.optim import OPTIMIZERS
from dadam3.schema import compose, synthetic_settings, train_settings

PINNED = json.loads((Path(__file__).parent / "data" / "optimizer_hparams_by_preset.json").read_text())


def resolved(key: str) -> dict:
    entry, preset, name = key.split("/")
    if entry == "train":
        extra = [] if preset == "None" else [f"experiment={preset}"]
        s = train_settings(compose("train", ["device=cpu", f"optimizer={name}", *extra]))
    else:
        s = synthetic_settings(compose("synthetic", [f"optimizer={name}", preset]))
    assert dict(s.config["optimizer"]) == {"name": s.optimizer.name, "engine": "auto",
                                           **dict(s.optimizer.hparams)}   # the record
    return {"name": s.optimizer.name, **dict(s.optimizer.hparams)}


def test_the_pinned_table_covers_every_preset_and_optimizer():
    presets = ["None", *group_choices("experiment")]
    assert {f"train/{p}/{n}" for p in presets for n in OPTIMIZERS} <= set(PINNED)
    assert {f"synthetic/game.c={c}/{n}" for c in (10, 3) for n in OPTIMIZERS} <= set(PINNED)


@pytest.mark.parametrize("key", sorted(PINNED))
def test_every_preset_trains_with_the_hyper_parameters_it_trained_with(key):
    assert resolved(key) == PINNED[key]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_an_optimizer_yaml_repeats_no_default_of_its_class(name):
    """A value in configs/optimizer/NAME.yaml would be a second source for it."""
    yaml = OmegaConf.load(CONFIG_DIR / "optimizer" / f"{name}.yaml")
    assert set(yaml) - {"defaults", "name"} == set(), name
