"""Lines of a JSONL log that parse as JSON but are no record (an array, a number, a string
iteration, a negative one, a non-string status) are handled alike by every reader: the rewind of
a resume, the sweep's status reader, the report (issue 26 item 16)."""
import json
import logging

import pytest

from dadam3.errors.files import DataFileError
from dadam3.run.rewind import as_record, parse_record, read_records, rewind
from dadam3.report.read import records as read_jsonl
from dadam3.run.loggers import JsonlLogger

from trainer_runs import TOY, train, without_time

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
        kept = [json.loads(x) for x in rewind(path, 2, drop_at_k=False).decode().splitlines()]
    assert kept == [{"iteration": 1, "status": "running"}, {"iteration": 2, "status": "running"}]
    assert sum("unreadable" in r.message for r in caplog.records) == 1


def test_the_sweep_skips_lines_that_are_no_record_and_the_report_names_them(tmp_path):
    """The sweep's reader skips them; the report's (dadam3.report.read) stops with one line naming
    the file and the line: a table built from a damaged log would be wrong."""
    path = tmp_path / "metrics.jsonl"
    _log(path, NOT_RECORDS)
    with pytest.raises(DataFileError, match=r"metrics.jsonl, line \d+: not a record"):
        read_jsonl(path)
    for line in NOT_RECORDS:
        path.write_text('{"iteration": 1, "status": "running"}\n' + line + "\n")
        assert read_records(path) == [{"iteration": 1, "status": "running"}]     # the sweep's reader


@pytest.mark.parametrize("bad", [b'{"iteration": 1, "status": "running", "note": "\xff\xfe"}', b"\xc3(\x80garbage"])
def test_a_line_that_is_not_utf8_is_dropped_with_the_same_warning(tmp_path, caplog, bad):
    """Issue 33: a non-UTF-8 byte was rewritten on resume (as U+FFFD) without a word: now the line
    is an unreadable one, dropped whole and named in the one warning line."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"iteration": 1, "status": "running"}\n' + bad + b'\n{"iteration": 2, "status": "running"}\n'
                     b'{"iteration": 2, "status": "interrupted"}\n')
    with caplog.at_level(logging.WARNING):
        kept = rewind(path, 2, drop_at_k=False)
    assert kept == b'{"iteration": 1, "status": "running"}\n{"iteration": 2, "status": "running"}\n'
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"{path}: dropped 1 unreadable line(s) (line 2) while rewinding to iteration 2"], said


def test_resumed_log_reads_as_if_the_run_never_stopped(tmp_path):
    full = tmp_path / "full"
    train(TOY + ["loop.iterations=9"], full)
    cut = tmp_path / "cut"
    train(TOY + ["loop.iterations=5"], cut)                     # finished at 5, off the logging grid
    train(TOY + ["loop.iterations=9", f"resume={cut}"], tmp_path / "x")
    resumed = read_jsonl(cut / "metrics.jsonl")
    assert [r["status"] for r in resumed].count("finished") == 1 and resumed[-1]["status"] == "finished"
    kept = [r for r in resumed if r["status"] != "resumed"]
    assert without_time(kept) == without_time(read_jsonl(full / "metrics.jsonl"))


def test_resumed_log_with_an_evaluation_period_but_no_metric_on(tmp_path):
    """metrics.every=4 with every image metric off: the trainer logs nothing at 4, so the
    record a run ending at 4 wrote there must go when it is resumed (it stayed: the rewind
    judged the grid from the config)."""
    images = ["dataset=fake", "dataset.length=64", "model=dcgan32", "model.width=0.03125", "nodes=2",
              "loop.batch_size=2", "device=cpu", "loop.progress=false", "loop.log_every=3", "loop.sample_every=100",
              "loop.checkpoint_every=100", "metrics.every=4", "metrics.inception=false", "metrics.fid=false",
              "metrics.kid=false"]
    train(images + ["loop.iterations=8"], tmp_path / "full")
    cut = tmp_path / "cut"
    train(images + ["loop.iterations=4"], cut)
    train(images + ["loop.iterations=8", f"resume={cut}"], tmp_path / "x")
    resumed = [r for r in read_jsonl(cut / "metrics.jsonl") if r["status"] != "resumed"]
    assert [r["iteration"] for r in resumed] == [3, 6, 8, 8]
    assert without_time(resumed) == without_time(read_jsonl(tmp_path / "full" / "metrics.jsonl"))


def test_resume_warns_about_dropped_garbage_lines(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1}\ngarbage\n{"iteration": 2}\n[1, 2\n{"iteration": 3}\n')
    with caplog.at_level("WARNING"):
        JsonlLogger(path, resume_from_iteration=2).finish()
    assert [r["iteration"] for r in read_jsonl(path)] == [1, 2]
    (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert msg == f"{path}: dropped 2 unreadable line(s) (line 2, 4) while rewinding to iteration 2"
