"""One source for every default (issue 27 point 4): the optimizer classes' ``HPARAMS`` are the
defaults, ``optimizer=NAME`` is made from the registry (no YAML file), and every committed preset
resolves to exactly the hyper-parameters it trained with before the defaults moved.

``data/optimizer_hparams_by_preset.json`` was written from main at commit 72aa843 (before the
change) by composing every ``experiment=X optimizer=Y`` of ``python -m dadam3.train`` (and no
experiment) and every ``optimizer=Y game.c=C`` of ``python -m dadam3.synthetic``;
``scripts/pin_optimizer_hparams.py`` writes it again (byte for byte the same today) and
``--check`` lists what moved.
"""
import importlib.util
import json
from pathlib import Path

import pytest

from dadam3.run.schema import presets
from dadam3.run.config import CONFIG_DIR
from dadam3.run.schema.presets import group_choices
from dadam3.optim import OPTIMIZERS, optimizer_spec

PINNED = json.loads((Path(__file__).parent / "data" / "optimizer_hparams_by_preset.json").read_text())


def _pin_script():
    """scripts/pin_optimizer_hparams.py, the one place that composes a table key."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "pin_optimizer_hparams.py"
    spec = importlib.util.spec_from_file_location("pin_optimizer_hparams", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PIN = _pin_script()


def resolved(key: str) -> dict:
    """The script's ``resolved(key)``; the run's record of the optimizer says the same."""
    s = PIN.settings_of(key)
    assert dict(s.config["optimizer"]) == {"name": s.optimizer.name, "engine": "auto",
                                           **dict(s.optimizer.hparams)}   # the record
    return PIN.table_entry(s)


PINNED_NAMES = sorted({key.rpartition("/")[2] for key in PINNED})


def test_the_pinned_table_covers_every_preset_of_its_optimizers():
    """Every preset of every optimizer the table holds. An optimizer added since joins it when
    ``python scripts/pin_optimizer_hparams.py`` is run again (until then the test below checks it)."""
    presets = ["None", *group_choices("experiment")]
    assert {f"train/{p}/{n}" for p in presets for n in PINNED_NAMES} <= set(PINNED)
    assert {f"synthetic/game.c={c}/{n}" for c in (10, 3) for n in PINNED_NAMES} <= set(PINNED)


@pytest.mark.parametrize("name", [n for n in OPTIMIZERS if n not in PINNED_NAMES])
def test_an_optimizer_not_yet_pinned_resolves_to_its_defaults(name):
    """Without a preset: the class's defaults for the GANs; on the synthetic game, the game's stated
    step size (configs/synthetic.yaml: Section 5.1's 1e-2 for every optimizer) unless
    the class's SYNTHETIC sets more."""
    defaults = optimizer_spec(name).check_hparams({})
    assert resolved(f"train/None/{name}") == {"name": name, **defaults}
    if not optimizer_spec(name).synthetic:
        assert resolved(f"synthetic/game.c=10/{name}") == {"name": name, **defaults, "lr": 1e-2}


@pytest.mark.parametrize("key", sorted(PINNED))
def test_every_preset_trains_with_the_hyper_parameters_it_trained_with(key):
    assert resolved(key) == PINNED[key]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_an_optimizer_config_is_made_from_the_registry_and_repeats_no_default(name):
    """optimizer/NAME comes from the registry (no YAML file); a value in it would be a second source."""
    assert not (CONFIG_DIR / "optimizer").exists() and name in group_choices("optimizer")
    conf, _, _ = presets.preset("optimizer", name)
    assert conf == {"name": name}
