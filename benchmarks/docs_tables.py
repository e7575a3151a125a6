"""Number tables in README.md and docs/ that a benchmark writes, and the check that they are
current (issue: no surprises).

A generated table sits between two markers that name it and the command that writes it:

    <!-- table NAME: python benchmarks/X.py --docs -->
    | ... |
    <!-- end of table NAME -->

The benchmark builds the block's lines from a fresh run and hands them to `publish()`:
with `--docs` it rewrites the block, with `--check-docs` it prints what differs and exits 1
if anything does. Columns that measure time vary from run to run; a benchmark either leaves
them out of its documented table or gives `publish` a comparison that tolerates them.
`tests/test_docs_tables.py` keeps every number table in the docs either generated this way
or listed there as reference facts.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- table (?P<name>[\w.-]+): (?P<command>[^>]*?) -->\n"
                    r"(?P<body>.*?)"
                    r"<!-- end of table (?P=name) -->", re.S)


class DocsTableError(Exception):
    """A document lacks the markers of the table a benchmark writes."""


@dataclass(frozen=True)
class DocsTable:
    """One generated block: which document, its name, and the command that writes it."""

    doc: Path
    name: str
    command: str

    def _match(self, text: str) -> re.Match[str]:
        for match in MARKER.finditer(text):
            if match.group("name") == self.name:
                return match
        raise DocsTableError(f"{self.doc.relative_to(REPO)} has no table {self.name!r} "
                             f"(markers: <!-- table {self.name}: {self.command} --> ... "
                             f"<!-- end of table {self.name} -->)")

    def lines(self) -> list[str]:
        """The block's lines as the document holds them."""
        return self._match(self.doc.read_text()).group("body").splitlines()

    def write(self, lines: list[str]) -> None:
        text = self.doc.read_text()
        match = self._match(text)
        head = f"<!-- table {self.name}: {self.command} -->\n"
        body = "".join(line + "\n" for line in lines)
        tail = f"<!-- end of table {self.name} -->"
        self.doc.write_text(text[:match.start()] + head + body + tail + text[match.end():])


def add_docs_options(parser: argparse.ArgumentParser, tables: str) -> None:
    """--docs and --check-docs, for a benchmark that writes `tables`."""
    parser.add_argument("--docs", action="store_true", help=f"rewrite {tables} from this run")
    parser.add_argument("--check-docs", action="store_true",
                        help=f"exit 1, printing the differences, if this run's numbers "
                             f"differ from {tables}")


def refuse_subset(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  *dests: str) -> None:
    """With --docs or --check-docs, every option in `dests` must keep its default: the
    documented table covers everything the benchmark measures by default."""
    if not (args.docs or args.check_docs):
        return
    changed = [d for d in dests if getattr(args, d) != parser.get_default(d)]
    if changed:
        options = ", ".join("--" + d.replace("_", "-") for d in changed)
        parser.error(f"--docs and --check-docs measure what the benchmark measures by "
                     f"default; leave out {options}")


def publish(table: DocsTable, fresh: list[str], check: bool,
            same: Callable[[str, str], bool] = str.__eq__) -> int:
    """Write `fresh` into the document, or (check) compare it line by line with what the
    document holds; `same` may tolerate columns that vary between runs. Returns the exit
    code: 1 when the check finds differences."""
    where = f"{table.doc.relative_to(REPO)} (table {table.name})"
    if not check:
        table.write(fresh)
        print(f"wrote {len(fresh)} lines into {where}")
        return 0
    documented = table.lines()
    if len(documented) == len(fresh) and all(map(same, documented, fresh)):
        print(f"{where}: current")
        return 0
    print("\n".join(difflib.unified_diff(documented, fresh, "docs", "fresh run", lineterm="")))
    print(f"{where} is stale: {table.command}")
    return 1


def cells(line: str) -> list[str]:
    """A Markdown table row's cells, stripped."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def within_factor(factor: float, columns: set[int] | None = None
                  ) -> Callable[[str, str], bool]:
    """A comparison for `publish`: numeric cells of `columns` (default: every column) may
    differ by up to `factor` either way (wall-clock times on a shared machine); all other
    cells must be equal."""
    return within_factors(factor if columns is None else {c: factor for c in columns})


def within_factors(factors: float | dict[int, float]) -> Callable[[str, str], bool]:
    """`within_factor` with a factor per column (a float: every column the same)."""
    def number(text: str) -> float | None:
        try:
            return float(text.replace(",", "").replace("*", "").replace("×", "").split()[0])
        except (ValueError, IndexError):
            return None

    def same(documented: str, fresh: str) -> bool:
        old, new = cells(documented), cells(fresh)
        if len(old) != len(new):
            return False
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            x, y = number(a), number(b)
            factor = factors if isinstance(factors, float) else factors.get(i)
            if factor is not None and x is not None and y is not None and x > 0 and y > 0:
                if not 1 / factor <= x / y <= factor:
                    return False
            elif a != b:
                return False
        return True

    return same


def generated_tables(text: str) -> list[tuple[str, str, str]]:
    """(name, command, body) of every generated block in a document."""
    return [(m.group("name"), m.group("command"), m.group("body")) for m in MARKER.finditer(text)]
