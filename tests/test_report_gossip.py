"""The report's gossip-rounds section (dadam3/report/sections_gossip.py) on hand-made run directories
in the format of dadam3/gossip_study.py: the table, the smallest sufficient t, the verdict's numbers
(computed here by hand) and a byte-for-byte identical rebuild."""
import json
import math

import pytest

from dadam3.report import sections_gossip as sg
from dadam3.report.build import write
from dadam3.report.output import Output

PER_ROUND = {"ring": 0.9, "complete": 0.0, "torus": 0.6}


def cell(root, optimizer, topology, rounds, hit, bytes_to_hit=None, seed=0, final=0.005):
    """One run directory; its ``summary.json`` holds only what the section reads."""
    d = root / "gossip" / optimizer / "M16" / topology / (f"t{rounds}" + (f"_seed{seed}" if seed else ""))
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "config.yaml").write_text(f"nodes: 16\niterations: 1000000\nseed: {seed}\ngame:\n  c: 1010.0\n"
                                              f"  k: 0.01\noptimizer:\n  name: {optimizer}\n  lr: 0.01\n"
                                              f"topology:\n  name: {topology}\n  rounds: {rounds}\n")
    (d / "provenance.json").write_text(json.dumps([{"code_commit": "abcdef0123456789", "torch": "2.x",
                                                    "device_model": "cpu model"}]))
    summary = {"optimizer": optimizer, "nodes": 16, "topology": topology, "rounds": rounds, "iterations": 10 ** 6,
               "seed": seed, "graph_seed": None, "p": None, "status": "finished", "final_error": final,
               "first_hit": hit, "rho": PER_ROUND[topology], "bytes_to_hit_mean": bytes_to_hit}
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "metrics.csv").write_text("iteration,error,avg_grad_sq_norm\n1,1.0,1.0\n")     # a run's log


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "gossip").mkdir()
    (tmp_path / "gossip" / "study.json").write_text(json.dumps({
        "target_error": 0.01, "er_p": {"16": 0.35},
        "not_built": [{"topology": "torus", "nodes": 5, "reason": "nodes=5 has no factorisation"}]}))
    cell(tmp_path, "dadam3", "ring", 1, 1000, 64000.0)
    cell(tmp_path, "dadam3", "ring", 1, 1100, 70400.0, seed=1)
    cell(tmp_path, "dadam3", "ring", 1, 1000, 64000.0, seed=2)
    cell(tmp_path, "dadam3", "ring", 2, 900, 115200.0)
    cell(tmp_path, "dadam3", "complete", 1, None, final=0.02)
    cell(tmp_path, "dadam3", "complete", 2, 800, 96000.0)
    cell(tmp_path, "dadam3", "torus", 1, None, final=0.5)
    cell(tmp_path, "dadam3", "torus", 2, None, final=0.4)
    cell(tmp_path, "dp_oadam", "ring", 1, None, final=0.99)
    return tmp_path


def test_spearman_by_hand():
    assert sg.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(1 - 6 * 2 / (4 * 15))
    # ties take average ranks: x ranks 1, 2.5, 2.5, 4 against 1, 2, 3, 4
    assert sg.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert sg.spearman([1, 2, 3], [1, 1, 1]) is None and sg.spearman([1, 2], [1, 2]) is None
    assert sg.inverse_log(0.0) == sg.inverse_log(5.6e-17) == 0.0 and sg.inverse_log(math.exp(-0.5)) == 2.0


def test_section_on_hand_made_cells(tree):
    text = "\n".join(sg.section(tree, Output(tree)))
    # the table: ring reaches at t = 1, the complete graph first at t = 2, the torus never
    assert "| 16 | ring | 0.9 | 9.49 | 1 000 | 900 | 1 100, 1 000 | 1 | 6.4e+04 | 0.005 | none (0.99) |" in text
    assert "| 16 | complete | 0 | 0 | never | 800 | –, – | 2 | 9.6e+04 | 0.005 | – |" in text
    assert "| 16 | torus 4×4 | 0.6 | 1.96 | never | never | –, – | none | – | – | – |" in text
    assert "p = 0.35 at M = 16" in text and "not built at M = 5: nodes=5 has no factorisation" in text
    # ts = [1 (ring, x = 1/ln(1/0.9) = 9.491), 2 (complete, x = 0)]: slope (1 - 2) / 9.491 = -0.105
    assert ("smallest sufficient t ranges over [1, 2] on 2 graphs, 1/ln(1/ρ) from 0 to 9.49 (the most slowly "
            "mixing: ring, M = 16, ρ = 0.9); least-squares slope -0.105 per unit of 1/ln(1/ρ), Spearman undefined: "
            "it does not grow with 1/ln(1/ρ) as the theorem predicts") in text
    assert "reaches e_k ≤ 0.01 at no t on: torus 4×4 (M = 16)" in text
    # at t = 1 only the ring hits (one graph: 0 %); its seeds 1000, 1100, 1000: (1100 - 1000) / 1000
    assert "differs between the graphs of one M by at most 0.0%, against up to 10.0% between game seeds" in text
    assert "its Spearman correlation with 1/ln(1/ρ) among the graphs of one M: undefined at M = 16" in text
    # ring: t = 2 hits at 900, 10 % before t = 1's 1000; t = 1 is cheapest on the ring, not on the complete graph
    assert "move the first hit by at most 10.0% of its t = 1 value" in text and "cheapest on 1 of 2 graphs" in text
    assert "M = 16: the fewest bytes per node to the target: ring at t = 1 (6.4e+04 bytes); the complete graph " \
           "needs 9.6e+04 (1.5×)" in text
    assert "DP-OAdam reaches the target in 0 of its 1 cells (final e_N from 0.99 to 0.99)" in text
    assert (tree / "report" / "gossip_rounds.png").is_file() and (tree / "report" / "gossip_bytes.png").is_file()


def test_torus_rows_is_the_layout_topology_builds():
    import numpy as np
    from dadam3.topologies.torus import torus
    for M in (16, 64, 12):
        rows = sg.torus_rows(M)
        np.testing.assert_array_equal(torus(M), torus(M, rows=rows))
    assert (sg.torus_rows(16), sg.torus_rows(64), sg.torus_rows(12)) == (4, 8, 3)


def test_no_cells_names_the_command(tmp_path):
    text = "\n".join(sg.section(tmp_path, Output(tmp_path)))
    assert "No committed runs under `results/gossip/`. Command: `bash experiments/gossip_rounds.sh`." in text


def test_the_report_with_the_section_rebuilds_byte_for_byte(tree):
    write(tree)
    first = {p: p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}
    write(tree)
    assert first == {p: p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}
    assert "## Beyond the paper: gossip rounds and topology" in (tree / "REPORT.md").read_text()
    assert "| `gossip/dadam3/M16/*/t*` (8 runs) | 8 finished | abcdef012345 |" in (tree / "REPORT.md").read_text()
    assert "| `gossip/dp_oadam/M16/*/t*` (1 run) | 1 finished | abcdef012345 |" in (tree / "REPORT.md").read_text()


def test_bytes_per_round_is_the_mixers_count_over_t():
    """The gossip section's only advice: bytes per node per iteration per round, the cells' own count / t."""
    from dadam3.report.sections_gossip import bytes_per_round
    cell = dict(optimizer="dadam3", seed=0, graph_seed=None, p=None)
    cells = [dict(cell, topology="ring", nodes=5, rounds=1, bytes_per_iteration_mean=64.0),
             dict(cell, topology="ring", nodes=5, rounds=3, bytes_per_iteration_mean=192.0),
             dict(cell, topology="complete", nodes=16, rounds=1, bytes_per_iteration_mean=480.0),
             dict(cell, topology="erdos_renyi", nodes=16, rounds=2, graph_seed=1, bytes_per_iteration_mean=336.0)]
    lines = bytes_per_round(cells)
    assert "at most 0.0%" in lines[0]
    assert lines[2:] == ["| graph | M = 5 | M = 16 |", "| --- | --- | --- |", "| ring | 64 | – |",
                         "| Erdős–Rényi (p = 2 ln M / M), seed 1 | – | 168 |", "| complete | – | 480 |", ""]
    assert bytes_per_round([]) == []
