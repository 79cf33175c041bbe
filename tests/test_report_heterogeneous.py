"""The report's section "Beyond the paper: heterogeneous nodes" on crafted tiny runs: the per-arm
table (x̄ and node-mean FID, worst node, consensus distance, bytes to FID ≤ 150/100 with k of n seeds),
the arms awaiting runs with their command, deterministic small figures, and the heterogeneous game's table."""
import json
from pathlib import Path

import pytest
import yaml

from dadam3.errors.files import DataFileError
from dadam3.report import sections_heterogeneous as het
from dadam3.report.output import Output

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / het.PLAN
COMMIT = "40da47f553b2870b61acdb38416b290a667980ab"        # a commit of this repository (the report checks)


def _run(root: Path, arm: str, seed: int, fids: list[float], consensus: list[float], finished: bool = True):
    data, setting, method, lr = het.load_plan(PLAN)["arms"][arm]
    d = root / "fmnist/round3/heterogeneous" / data / setting / het.lr_folder(lr) / method / f"seed{seed}"
    d.mkdir(parents=True)
    recs = []
    for i, (f, c) in enumerate(zip(fids, consensus), 1):
        recs.append({"iteration": 500 * i, "status": "running", "fid_mean": f, "fid_avg_model": f - 5.0,
                     "fid_nodes": [f - 1.0, f + 2.0 + seed], "consensus_distance": c, "bytes_sent": 1000.0 * i,
                     "fid_mean_fmnist_mlp": f / 2})
    if finished:
        recs.append({"iteration": 500 * len(fids), "status": "finished"})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "config_resolved.yaml").write_text(yaml.safe_dump({"optimizer": {"name": method, "lr": lr},
                                                            "nodes": 5, "seed": seed, "topology": {"name": "ring"}}))
    (d / "provenance.json").write_text(json.dumps([{"code_commit": COMMIT, "device": "cpu"}]))


def test_lr_folder_is_the_scripts_spelling():
    assert [het.lr_folder(x) for x in (8e-4, 1.6e-3, 2.56e-2, 1.0)] == ["lr8e-4", "lr1.6e-3", "lr2.56e-2", "lr1e0"]


def test_no_runs_names_every_arm_awaiting_and_the_command(tmp_path):
    lines = het.section(tmp_path, Output(tmp_path), PLAN)
    text = "\n".join(lines)
    arms = list(het.load_plan(PLAN)["arms"])
    assert f"Awaiting runs ({len(arms)} of {len(arms)} arms have fewer than 5 finished fresh seeds)" in text
    assert ". Command: `bash experiments/evidence_round3.sh heterogeneous next` (with `CODE=DIR`" in text
    assert "No committed cells under `results/gossip_heterogeneous/`" in text
    assert not (tmp_path / "report").exists()


def test_per_arm_table_and_figures(tmp_path):
    _run(tmp_path, "iid_dadam3", 3, [200.0, 140.0, 90.0], [0.5, 0.2, 0.1])
    _run(tmp_path, "iid_dadam3", 4, [210.0, 160.0, 120.0], [0.7, 0.3, 0.3])
    _run(tmp_path, "iid_cadam3", 3, [180.0, 150.0, 101.0], [0.0, 0.0, 0.0])
    _run(tmp_path, "a01_dadam3", 3, [300.0, 250.0], [1.0, 2.0], finished=False)
    out = Output(tmp_path)
    text = "\n".join(het.section(tmp_path, out, PLAN))
    rows, second = {}, {}
    for line in text.splitlines():
        if line.startswith("| "):
            (second if line.split(" | ")[0][2:] in rows else rows)[line.split(" | ")[0][2:]] = line.split(" | ")
    d = rows["iid_dadam3"]
    assert d[5] == "2 of 2"
    assert d[6] == "100 ± 21.2" and d[7] == "105 ± 21.2"            # node mean 90 and 120; x̄ = node mean - 5
    assert d[8] == "110.5 ± 21.9"                                     # worst node: 90 + 2 + 3 and 120 + 2 + 4
    assert d[9] == "0.2 ± 0.141"                                     # final consensus distance
    assert d[10] == "0.35 ± 0.118"                                   # mean over the run: 0.2667 and 0.4333
    assert d[11] == "1250 ± 354 (2 of 2)" and d[12] == "2500 ± 707"   # FID <= 150 at iterations 1000 and 1500
    assert d[13] == "1500 (1 of 2)" and d[14].rstrip(" |") == "3000"  # FID <= 100: seed 3 only
    c = rows["iid_cadam3"]
    # 150 <= 150 at iteration 1000; Cadam3's exact average charged as a ring all-reduce: 2000 x 2/M, M = 5
    assert c[11] == "1000 (1 of 1)" and c[12] == "800"
    assert c[13] == "never (0 of 1)" and c[14].rstrip(" |") == "–"     # 101 > 100
    assert rows["a01_dadam3"][5] == "0 of 1 (1 unfinished)"
    awaiting = text.split("Awaiting runs")[1].split("\n")[0]
    assert awaiting.startswith(" (9 of 9 arms") and "`iid_dadam3`" in awaiting      # 2 of 5 fresh seeds only
    assert "The second scorer (fmnist_mlp)" in text
    assert second["iid_dadam3"][7] == "52.5 ± 10.6" and second["iid_dadam3"][6] == "–"   # node mean / 2; no x̄ key
    figs = sorted(p.name for p in (tmp_path / "report").glob("*.png"))
    assert figs == ["heterogeneous_consensus.png", "heterogeneous_fid_alpha0.1.png", "heterogeneous_fid_iid.png"]
    first = {p: p.read_bytes() for p in (tmp_path / "report").glob("*.png")}
    assert all(len(b) < 100_000 for b in first.values())
    het.section(tmp_path, Output(tmp_path), PLAN)
    assert {p: p.read_bytes() for p in (tmp_path / "report").glob("*.png")} == first      # deterministic


def test_a_damaged_plan_is_one_error_naming_it(tmp_path):
    bad = tmp_path / "plan.yaml"
    bad.write_text("runs: x\narms: {a: [iid, plain, dadam3]}\nfresh_seeds: [3]\nbytes_to_fid: [150]\n")
    with pytest.raises(DataFileError, match="arms.a="):
        het.load_plan(bad)


def test_game_table_and_reading(tmp_path):
    base = tmp_path / het.GAME_DIR
    hits = {("ring", 1, 0): 100, ("ring", 2, 0): 101, ("complete", 1, 0): 100, ("ring", 1, 1): 110,
            ("ring", 1, 2): None}
    for (topo, t, seed), hit in hits.items():
        s = {"optimizer": "dadam3", "nodes": 5, "topology": topo, "rounds": t, "seed": seed, "spread": 1.0,
             "iterations": 300, "first_hit": hit, "final_error": 0.004 + 0.001 * t,
             "final_consensus_distance": 0.0 if topo == "complete" else 0.4 / t}
        d = base / het._cell_path(s)
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(s))
        (d / "provenance.json").write_text(json.dumps([{"code_commit": "eda9b562c32f8f2a575d1ebb4118539c7672361c"}]))
    (base / "study.json").write_text(json.dumps({"target_error": 0.01, "iterations": 300}))
    text = "\n".join(het.game_part(tmp_path))
    assert "| 1 | 5 | ring | 100 | 101 | 110, never | 0.005 (0.005–0.006) | 0.4 → 0.2 | 1 |" in text
    assert "| 1 | 5 | complete | 100 | – | –, – | 0.005 (0.005–0.005) | 0 → – | 1 |" in text
    assert "3 of 3 seed-0 cells reach e_k ≤ 0.01" in text
    assert "moves by at most 1 iterations (1 % of it) on one graph" in text
    assert "shrinks the final consensus distance 2–2× against t = 1" in text and "eda9b562c32f" in text


def test_an_arm_with_its_fresh_seeds_is_no_longer_awaited(tmp_path):
    for seed in (3, 4, 5, 6, 7):
        _run(tmp_path, "a01_dosg_stab", seed, [200.0, 120.0], [0.1, 0.1])
    _run(tmp_path, "a01_cadam3", 0, [200.0, 120.0], [0.0, 0.0])          # a finished seed, but not a fresh one
    text = "\n".join(het.section(tmp_path, Output(tmp_path), PLAN))
    awaiting = text.split("Awaiting runs")[1].split("\n")[0]
    assert awaiting.startswith(" (8 of 9 arms") and "a01_dosg_stab" not in awaiting and "`a01_cadam3`" in awaiting
