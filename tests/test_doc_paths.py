"""What the configs and docs name exists, and the front door reads in short lines (issue 47)."""
import re

from trainer_runs import ROOT

MODULE_PATH = re.compile(r"dadam3/[A-Za-z0-9_/]+\.py")
README_MAX_LINE, README_MAX_LINES = 300, 250


def _texts():
    files = [*(ROOT / "dadam3" / "configs").rglob("*.yaml"), *(ROOT / "docs").rglob("*.md"),
             *(ROOT / "docs").rglob("*.yaml"), ROOT / "README.md"]
    return {f.relative_to(ROOT).as_posix(): f.read_text(encoding="utf-8") for f in files}


def test_every_module_path_named_in_configs_and_docs_exists():
    named = {(where, path) for where, text in _texts().items() for path in MODULE_PATH.findall(text)}
    assert len(named) > 30, "the search found too few paths to mean anything"
    missing = sorted(f"{where} names {path}" for where, path in named if not (ROOT / path).is_file())
    assert missing == []


def test_the_pattern_finds_a_stale_name():
    assert MODULE_PATH.findall("# (dadam3/optim/oadam.py): Table 6") == ["dadam3/optim/oadam.py"]


def test_the_readme_is_short_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES
    assert [(i + 1, len(x)) for i, x in enumerate(lines) if len(x) > README_MAX_LINE] == []
