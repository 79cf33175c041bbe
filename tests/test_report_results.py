"""The committed tree carries no machine's paths: no file git tracks names a home or working
directory (Hydra's runtime ``hydra.yaml`` holds ``cwd`` and ``output_dir``: git-ignored under
results/, a resume's copy included)."""
import json
import re
import shutil
import subprocess
import sys

import pytest

from trainer_runs import ROOT

MACHINE_PATH = r"(^|[^A-Za-z0-9_.~])/(home|work|root|Users)/"      # a home or working directory, absolute


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_no_committed_file_names_a_home_or_work_directory():
    found = subprocess.run(["git", "-C", str(ROOT), "grep", "-nIE", MACHINE_PATH], capture_output=True, text=True)
    assert found.returncode in (0, 1), found.stderr
    assert found.stdout == "", found.stdout[:2000]


def test_the_pattern_finds_what_it_is_for():
    pattern = re.compile(MACHINE_PATH)
    # built from pieces, so that this file does not hold what it looks for
    for text in ("cwd: " + "/work" + "/runs", "output_dir: " + "/home" + "/alice/x", "path: /root" + "/configs"):
        assert pattern.search(text), text
    for text in ("FMNIST_OUT=/tmp/x", "results/fmnist/work/x", "~/work/x"):
        assert not pattern.search(text), text


def _run(root, rel, method):
    d = root / rel
    (d / ".hydra").mkdir(parents=True)
    (d / "metrics.jsonl").write_text('{"iteration": 1}\n')
    text = f"nodes: 5\noptimizer:\n  name: {method}\n  lr: 0.0002\ntopology:\n  name: ring\n  rounds: 1\nseed: 0\n"
    for name in ("config_resolved.yaml", ".hydra/config.yaml"):
        (d / name).write_text(text)
    return d, text


def test_the_topology_migration_rewrites_exactly_the_centralized_runs_and_records_it(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    from migrate_centralized_topology import migrate
    cosg, before = _run(tmp_path, "fig3/cosg/seed0", "cosg")
    dosg, dosg_before = _run(tmp_path, "fig3/dosg/seed0", "dosg")
    changed = migrate(tmp_path)
    assert changed == [cosg / ".hydra/config.yaml", cosg / "config_resolved.yaml"]
    for name in ("config_resolved.yaml", ".hydra/config.yaml"):
        assert (cosg / name).read_text() == before.replace("  name: ring\n", "  name: complete\n")
        assert (dosg / name).read_text() == dosg_before
    log = json.loads((cosg / "migrations.json").read_text())
    assert [(e["file"], e["key"], e["was"], e["now"]) for e in log] == [
        (".hydra/config.yaml", "topology.name", "ring", "complete"),
        ("config_resolved.yaml", "topology.name", "ring", "complete")]
    assert not (dosg / "migrations.json").exists()
    assert migrate(tmp_path) == []                     # a second pass finds nothing
