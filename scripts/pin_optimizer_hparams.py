"""The hyper-parameters every preset resolves to, per optimizer: ``tests/data/optimizer_hparams_by_preset.json``.

    python scripts/pin_optimizer_hparams.py [--check] [--out FILE]

Composes every ``experiment=X optimizer=Y`` of ``python -m dadam3.train`` (and no experiment) and
every ``optimizer=Y game.c=C`` (C = 10, 3) of ``python -m dadam3.synthetic`` and writes what each
resolves to. ``tests/test_schema_optimizer.py`` checks that every entry still resolves the same:
a change to a default or a preset that moves a committed experiment's numbers shows there. Run
it after adding an optimizer (its entries join the table) or after a deliberate change of a
preset (say why in the commit); ``--check`` prints the differences and exits 1 if there are any.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dadam3.run.schema.presets import group_choices
from dadam3.optim import OPTIMIZERS
from dadam3.run.schema import compose, synthetic_settings, train_settings
from dadam3.errors.files import write_text_whole

TABLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "optimizer_hparams_by_preset.json"
GAME_C = (10, 3)


def settings_of(key: str):
    """The validated settings that ``key`` (``train/<experiment or None>/<optimizer>`` or
    ``synthetic/game.c=C/<optimizer>``) composes to (``tests/test_schema_optimizer.py`` reads them too)."""
    entry, preset, name = key.split("/")
    if entry == "train":
        extra = [] if preset == "None" else [f"experiment={preset}"]
        return train_settings(compose("train", ["device=cpu", f"optimizer={name}", *extra]))
    return synthetic_settings(compose("synthetic", [f"optimizer={name}", preset]))


def table_entry(s) -> dict:
    """The table's entry of settings ``s``: the optimizer's name and every hyper-parameter."""
    return {"name": s.optimizer.name, **dict(s.optimizer.hparams)}


def resolved(key: str) -> dict:
    """What ``key`` resolves to (see :func:`settings_of`), as the table holds it."""
    return table_entry(settings_of(key))


def keys() -> list[str]:
    presets = ["None", *group_choices("experiment")]
    return sorted([f"train/{p}/{n}" for p in presets for n in OPTIMIZERS]
                  + [f"synthetic/game.c={c}/{n}" for c in GAME_C for n in OPTIMIZERS])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare with the committed table, write nothing")
    p.add_argument("--out", type=Path, default=TABLE)
    a = p.parse_args()
    table = {key: resolved(key) for key in keys()}
    if a.check:
        pinned = json.loads(TABLE.read_text())
        moved = [k for k in sorted(set(table) | set(pinned)) if table.get(k) != pinned.get(k)]
        for k in moved:
            print(f"{k}: pinned {pinned.get(k)}, now {table.get(k)}")
        sys.exit(1 if moved else 0)
    write_text_whole(a.out, json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{len(table)} entries -> {a.out}")


if __name__ == "__main__":
    main()
