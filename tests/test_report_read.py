"""The readers' checks of the report and the plots (:mod:`dadam3.report.read`): every damaged or
hand-edited run file is one line naming the file and line; ``python -m dadam3.report`` says it
(the entry point's boundary) instead of a traceback."""
import json
import subprocess
import sys

import pytest

from dadam3.errors.boundary import failure_of
from dadam3.errors.files import DataFileError
from dadam3.report import read

from trainer_runs import ROOT


def said(call, *args):
    with pytest.raises(DataFileError) as e:
        call(*args)
    code, line, _ = failure_of(e.value)
    assert code == 1 and "Traceback" not in line
    return line


def test_a_truncated_or_wrong_json_file_is_named(tmp_path):
    p = tmp_path / "provenance.json"
    p.write_text('[{"from_iteration": 0, "code_co')
    assert said(read.json_file, p, list).startswith(f"error: unreadable file: {p}, line 1: not JSON (")
    p.write_text('{"a": 1}')
    assert "holds an object where a list belongs" in said(read.json_file, p, list)
    assert read.json_file(tmp_path / "absent.json", list, []) == []


def test_a_byte_that_is_not_utf8_names_its_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_bytes(b'{"iteration": 1, "loss_d": 1.0}\n{"iteration": 2, "status": "fin\xffished"}\n')
    assert said(read.records, p).startswith(f"error: unreadable file: {p}, line 2: byte 63 is not UTF-8")


@pytest.mark.parametrize("line, says", [
    ('{"iteration": 2, "loss_d": [1.0, 2.0]}', 'loss_d=[1.0, 2.0] where a number belongs'),
    ('{"iteration": 2, "fid_mean": "12"}', 'fid_mean="12" where a number belongs'),
    ('{"iteration": 2, "loss_d_nodes": [1.0, "x"]}', 'loss_d_nodes=[1.0, "x"] where a number belongs'),
    ('{"iteration": "2"}', "not a record"),
    ('[1, 2]', "not a record"),
])
def test_a_record_that_the_writer_never_writes_is_named_with_its_line(tmp_path, line, says):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"iteration": 1, "loss_d": 1.0, "status": "running"}\n' + line + "\n")
    assert said(read.records, p).startswith(f"error: unreadable file: {p}, line 2: {says}")


def test_records_keep_the_writers_spellings_and_drop_only_a_torn_last_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"iteration": 1, "loss_d": "NaN", "loss_d_nodes": ["-Infinity", 2.0]}\n{"iteration": 2, "lo')
    (rec,) = read.records(p)
    assert rec["loss_d"] != rec["loss_d"] and rec["loss_d_nodes"] == [float("-inf"), 2.0]


def test_a_text_cell_in_metrics_csv_names_line_and_column(tmp_path):
    p = tmp_path / "metrics.csv"
    p.write_text("iteration,error,avg_grad_sq_norm\n1,0.5,0.25\n2,oops,0.125\n")
    assert said(read.csv_columns, p).startswith(f"error: unreadable file: {p}, line 3: column error: 'oops' is not")
    p.write_text("iteration,error\n1,0.5,7\n")
    assert said(read.csv_columns, p).startswith(f"error: unreadable file: {p}, line 2: 3 cells where the header has 2")


def test_the_report_command_says_a_damaged_file_in_one_line(tmp_path):
    root = tmp_path / "results"
    run = root / "fmnist" / "fig3" / "dadam3" / "seed0"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 25, "status": "running", "loss_d": 1.0}) + "\n")
    (run / "provenance.json").write_text('[{"from_iteration": 0, "code_co')
    r = subprocess.run([sys.executable, "-m", "dadam3.report", "--results", str(root)], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 1 and r.stderr.startswith(f"error: unreadable file: {run / 'provenance.json'}, line 1: "
                                                     "not JSON"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (root / "REPORT.md").exists()
