"""Every table in README.md and docs/ is one of three kinds (issue: no surprises), and this
module keeps it so:
- generated: between markers naming the benchmark that writes it from a fresh run
  (`--docs`) and says whether it is stale (`--check-docs`), benchmarks/docs_tables.py;
- checked: a test recomputes its numbers (CHECKED names the test);
- reference: facts (formats, protocols, options, sources), no measurement.
No number table is a dated record: a measurement is either rerun by its benchmark or
rechecked by a test. A new table fails `test_every_table_is_generated_checked_or_reference`
until it is one of them. The suite also rebuilds two rows of docs/boards.md (a change to the
runtime, a port or the exporter that moves a size fails here until the benchmark writes
the table again; the other generated tables take minutes to hours to measure: their
benchmarks' --check-docs) and checks that tables repeating each other's numbers agree."""

from __future__ import annotations

import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO, require_board_tools

sys.path.insert(0, str(REPO / "benchmarks"))
import docs_tables  # noqa: E402
import physical_boards  # noqa: E402

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# (document, first cells of the header row) -> the test that recomputes the numbers
CHECKED = {
    ("README.md", "model | kernels"): "tests/test_export.py::test_readme_export_table_is_what_"
                                      "export_gives",
    ("docs/quantization.md", "model | MACs | before"):
        "'after': tests/test_export.py::test_quantization_doc_kws_after_is_the_m3_median, "
        "tests/test_resnet_int8.py::test_resnet_int8_on_cortex_m3_is_bit_exact_within_budget;"
        " hello_world_int8's is the generated coverage table's; 'before' is history",
    ("docs/coverage.md", "source | license"):
        "test_coverage_sources_table_counts_the_corpus",
    ("docs/report.md", "firmware | bound"):
        "tests/test_report_stack.py::test_qemu_bound_covers_a_painted_run, "
        "test_host_bound_covers_a_painted_run",
}
REFERENCE = {
    ("README.md", "archive | executor"), ("README.md", "board | core (flags)"),
    ("README.md", "path | what"), ("docs/accelerators.md", "kind | `params`"),
    ("docs/boards.md", "board | chip, core"), ("docs/boards.md", "runner | tool"),
    ("docs/boards.md", "link | the firmware runs"), ("docs/boards.md", "layer | what it gives"),
    ("docs/boards.md", "item | what moves"),
    ("docs/fuzzing-archives.md", "kind | what"), ("docs/fuzzing-archives.md", "outcome | meaning"),
    ("docs/host-driven.md", "request | answer"), ("docs/link.md", "part | bytes"),
    ("docs/link.md", "direction | payload"), ("docs/link.md", "type | name"),
    ("docs/mlf.md", "fact | v7 (TVM ≥0.9)"), ("docs/mlf.md", "path | contents"),
    ("docs/mlf.md", "key | contents"), ("docs/operators.md", "operator | int8 / uint8 | int16"),
    ("docs/operators.md", "operator | int8 / uint8 activations"),
    ("docs/quantization.md", "pattern from the frontend | kernel"),
    ("docs/runtime.md", "code | name"), ("docs/runtime.md", "range | belongs to"),
    ("docs/runtime.md", "item | provided as"), ("docs/security.md", "input | trusted?"),
    ("docs/zephyr.md", "field | meaning"), ("docs/zephyr.md", "Zephyr board | core"),
    ("docs/report.md", "block | what it is"),
}


def _tables(path: Path) -> list[tuple[str, int]]:
    """(header, line number) of each table outside generated blocks."""
    text = path.read_text()
    for _, _, body in docs_tables.generated_tables(text):
        text = text.replace(body, "\n" * body.count("\n"))
    lines, found = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            found.append((" | ".join(docs_tables.cells(line)), i + 1))
    return found


def _listing(doc: str, header: str) -> tuple[str, tuple[str, str]] | None:
    """(kind, the listing's key) of a table, or None when it is not listed."""
    for kind, keys in (("checked", CHECKED), ("reference", REFERENCE)):
        for key in keys:
            if key[0] == doc and header.startswith(key[1]):
                return kind, key
    return None


def test_every_table_is_generated_checked_or_reference():
    unknown, used = [], set()
    for path in DOCUMENTS:
        doc = path.relative_to(REPO).as_posix()
        for header, line in _tables(path):
            listing = _listing(doc, header)
            if listing is None:
                unknown.append(f"{doc}:{line}: | {header} |")
                continue
            used.add(listing[1])
    assert not unknown, ("tables that no benchmark writes, no test checks and that are not "
                         "listed as reference here:\n" + "\n".join(unknown))
    assert used == {*CHECKED, *REFERENCE}, \
        f"listed here but not in the docs: {sorted({*CHECKED, *REFERENCE} - used)}"


def test_each_generated_table_names_a_benchmark_that_writes_and_checks_it():
    names = Counter()
    for path in DOCUMENTS:
        for name, command, body in docs_tables.generated_tables(path.read_text()):
            names[name] += 1
            script = REPO / command.split()[1]
            assert command.startswith("python benchmarks/") and script.is_file(), command
            source = script.read_text()
            assert "add_docs_options" in source and "publish(" in source, script
            assert f'"{name}"' in source, f"{script} does not write {name}"
            assert body.strip(), f"{path.name}: table {name} is empty: {command}"
    assert names and max(names.values()) == 1, names


def test_coverage_sources_table_counts_the_corpus():
    entries = tomllib.loads((REPO / "benchmarks" / "corpus.toml").read_text())["model"]
    per_repo = Counter(e["repo"] for e in entries)
    committed = Counter(e["repo"] for e in entries if e.get("committed"))
    rows = {}
    for line in (REPO / "docs" / "coverage.md").read_text().splitlines():
        cells = docs_tables.cells(line)
        if line.startswith("|") and len(cells) == 4 and "/" in cells[0]:
            rows[cells[0].split()[0]] = (int(cells[2]), int(cells[3]))
    assert rows == {repo: (n, committed[repo]) for repo, n in per_repo.items()}
    assert f"{len(entries)} entries in `benchmarks/corpus.toml`" in \
        (REPO / "docs" / "coverage.md").read_text()


def test_zephyr_and_boards_docs_agree_on_the_crt_build():
    """docs/zephyr.md's CRT columns and docs/boards.md's qemu-mps2-an385 row of the same
    archive (examples/yes_no) are the same build."""
    zephyr = docs_tables.DocsTable(REPO / "docs" / "zephyr.md", "zephyr-qemu-sizes", "")
    (row,) = [docs_tables.cells(x) for x in zephyr.lines() if x.startswith("| yes/no")]
    (board,) = [docs_tables.cells(x) for x in physical_boards.docs_rows()
                if x.startswith("| yes_no | qemu-mps2-an385 |")]
    assert physical_boards.ARCHIVES["yes_no"] == REPO / "examples" / "yes_no" / "model.tar"
    assert (row[4], row[5]) == (board[2].removesuffix(" B"), board[4].removesuffix(" B"))


# One exported model on a physical board, one TVM 0.8 archive on the reference QEMU board.
SAMPLE = [("hello_world_int8", "nucleo-f746zg"), ("yes_no", "qemu-mps2-an385")]


@pytest.mark.parametrize("model,board", SAMPLE)
def test_boards_md_rows_are_what_a_build_gives(model, board, tmp_path):
    require_board_tools(board)
    archive = physical_boards.archive_for(model, tmp_path)
    row = physical_boards.doc_row(physical_boards.measure(model, archive, board, tmp_path, 1))
    documented = [r for r in physical_boards.docs_rows() if r.startswith(f"| {model} | {board} |")]
    assert documented == [row], "docs/boards.md is stale: python " \
                                "benchmarks/physical_boards.py --docs"


def test_the_table_covers_every_physical_board_and_model():
    rows = physical_boards.docs_rows()
    pairs = {tuple(cell.strip() for cell in r.strip("|").split("|")[:2]) for r in rows}
    models = [*physical_boards.ARCHIVES, *physical_boards.EXPORTED]
    boards = [*physical_boards.PHYSICAL_BOARDS, physical_boards.REFERENCE_BOARD]
    assert pairs == {(m, b) for m in models for b in boards}


def test_publish_writes_the_block_and_the_check_finds_a_change(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(docs_tables, "REPO", tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- table t: python benchmarks/x.py --docs -->\n| old |\n"
                   "<!-- end of table t -->\noutro\n")
    table = docs_tables.DocsTable(doc, "t", "python benchmarks/x.py --docs")
    assert docs_tables.publish(table, ["| a | 1,000 |", "| b | 2.0 ms |"], check=False) == 0
    assert doc.read_text().startswith("intro\n<!-- table t:") and doc.read_text().endswith(
        "| b | 2.0 ms |\n<!-- end of table t -->\noutro\n")
    assert docs_tables.publish(table, ["| a | 1,000 |", "| b | 2.0 ms |"], check=True) == 0
    assert docs_tables.publish(table, ["| a | 1,001 |", "| b | 2.0 ms |"], check=True) == 1
    assert "+| a | 1,001 |" in capsys.readouterr().out
    loose = docs_tables.within_factor(2.0, columns={1})
    assert loose("| b | 2.0 ms |", "| b | 3.9 ms |")
    assert not loose("| b | 2.0 ms |", "| b | 4.1 ms |")
    assert not loose("| b | 2.0 ms |", "| c | 2.0 ms |")
    with pytest.raises(docs_tables.DocsTableError, match="has no table 'u'"):
        docs_tables.DocsTable(doc, "u", "x").lines()
