"""records.jsonl (generator/tune/records.py): what `tune` appends is what export reads back;
a line that is not a valid record is skipped and counted, whatever it holds."""

from __future__ import annotations

import json

import pytest

from generator.errors import ExportError
from generator.tune.records import RECORDS_NAME, Record, append_record, read_records

WORKLOAD, CANDIDATE = "0123456789abcdef", "fedcba9876543210"


def _record(**changes) -> Record:
    fields = {"task": "q_dense", "workload": WORKLOAD, "candidate": CANDIDATE,
              "run_secs": [3e-6, 2e-6], "trace": [["GetSBlock", [], [], []]],
              "reference_secs": 4e-6, **changes}
    return Record(**fields)


def test_what_tune_appends_is_what_is_read(tmp_path):
    written = [_record(), _record(candidate="00000000000000ff", reference_secs=None)]
    for record in written:
        append_record(tmp_path, record)
    file = read_records(tmp_path)
    assert (file.records, file.skipped_lines, file.path) == (written, 0,
                                                             tmp_path / RECORDS_NAME)
    assert file.records[0].secs == 2e-6 and len(file.sha256) == 64
    assert read_records(tmp_path / RECORDS_NAME).records == written  # the file itself


def test_lines_that_are_no_record_are_skipped(tmp_path):
    good = json.dumps(_record().to_json())
    bad = ["not json", "[1, 2]", "5", "null",
           json.dumps({**_record().to_json(), "workload": "../../etc/passwd"}),
           json.dumps({**_record().to_json(), "candidate": "0123456789ABCDEF"}),
           json.dumps({**_record().to_json(), "run_secs": []}),
           json.dumps({**_record().to_json(), "run_secs": [0.0]}),
           json.dumps({**_record().to_json(), "trace": "not a list"}),
           json.dumps({k: v for k, v in _record().to_json().items() if k != "task"})]
    (tmp_path / RECORDS_NAME).write_text("\n".join([good, *bad, "", good]) + "\n")
    file = read_records(tmp_path)
    assert file.records == [_record(), _record()] and file.skipped_lines == len(bad)


def test_unusable_files_are_named_in_the_error(tmp_path):
    with pytest.raises(ExportError, match=rf"^--flag {tmp_path}: no {RECORDS_NAME} there"):
        read_records(tmp_path, "--flag")
    (tmp_path / RECORDS_NAME).write_text("garbage\n")
    with pytest.raises(ExportError, match="no valid record"):
        read_records(tmp_path)
