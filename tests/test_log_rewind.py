"""Lines of a JSONL log that parse as JSON but are no record (an array, a number, a string
iteration, a negative one, a non-string status) are handled alike by every reader: the rewind of
a resume, the sweep's status reader, the report (issue 26 item 16)."""
import json
import logging

import pytest

from dadam3.log_rewind import as_record, parse_record, rewind
from dadam3.report.runs import read_jsonl
from dadam3.sweep import _last_record

NOT_RECORDS = ["[1, 2]", "3", '"text"', "null", '{"iteration": "5"}', '{"iteration": -1}',
               '{"iteration": true}', '{"iteration": 2.5}', '{"iteration": 5, "status": 7}']


@pytest.mark.parametrize("line", NOT_RECORDS)
def test_json_that_is_no_record_is_none(line):
    assert parse_record(line) is None
    assert as_record(json.loads(line)) is None


def test_records_pass():
    assert parse_record('{"iteration": 0, "status": "running", "loss_d": 1.5}') == {
        "iteration": 0, "status": "running", "loss_d": 1.5}
    assert parse_record('{"status": "resumed"}') == {"status": "resumed"}
    assert parse_record("{torn") is None


def _log(path, middle):
    lines = ['{"iteration": 1, "status": "running"}', *middle, '{"iteration": 2, "status": "running"}',
             '{"iteration": 3, "status": "running"}', '{"iteration": 3, "status": "interrupted"}']
    path.write_text("\n".join(lines) + "\n")


def test_rewind_drops_lines_that_are_no_record_with_one_warning(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    _log(path, NOT_RECORDS)
    with caplog.at_level(logging.WARNING):
        rewind(path, 2, drop_at_k=False)
    kept = [json.loads(x) for x in path.read_text().splitlines()]
    assert kept == [{"iteration": 1, "status": "running"}, {"iteration": 2, "status": "running"}]
    assert sum("unreadable" in r.message for r in caplog.records) == 1


def test_sweep_and_report_readers_skip_lines_that_are_no_record(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _log(path, NOT_RECORDS)
    assert [r["iteration"] for r in read_jsonl(path)] == [1, 2, 3, 3]
    for line in NOT_RECORDS:
        path.write_text('{"iteration": 1, "status": "running"}\n' + line + "\n")
        assert _last_record(path) is None
