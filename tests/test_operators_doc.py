"""docs/operators.md cannot fall behind the importer: every operator a converter is
registered for has a row, and every row names an operator the importer knows or lists as
refused."""

from __future__ import annotations

import re

from generator.export.tflite import supported_operators
from tests.conftest import REPO

DOC = REPO / "docs" / "operators.md"


def _rows() -> set[str]:
    names: set[str] = set()
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| ([A-Za-z0-9_, ]+?)(?: \(custom\))? \|", line)
        if m and not line.startswith("| operator") and not line.startswith("|---"):
            names.update(n.strip() for n in m.group(1).split(","))
    return names


def test_every_converted_operator_has_a_row():
    missing = sorted(set(supported_operators()) - _rows())
    assert missing == [], f"docs/operators.md has no row for {missing}"


def test_every_tflite_row_is_an_operator_we_convert():
    onnx_part = DOC.read_text().split("## ONNX")[0]
    rows = set()
    for line in onnx_part.splitlines():
        m = re.match(r"\| ([A-Z0-9_, ]+?)(?: \(custom\))? \|", line)
        if m:
            rows.update(n.strip() for n in m.group(1).split(","))
    unknown = sorted(rows - set(supported_operators()))
    assert unknown == [], f"docs/operators.md lists {unknown}, which no converter takes"
