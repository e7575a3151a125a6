"""GNU ld's map file (`-Wl,-Map=`): which input section of which object went where.

Only the "Linker script and memory map" part is read: output sections (name, address, size,
load address), the input sections placed in each (name, address, size, the object or
`archive.a(member.o)` it came from) and the fill between them. Symbol lines, assignments and
the linker script's own patterns are skipped."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import InputError

MAP_START = "Linker script and memory map"
FILL = "*fill*"
_HEX = r"0x([0-9a-fA-F]+)"
# ".text           0x000000c0     0x2854" (+ " load address 0x..."), at the line's start.
_OUTPUT = re.compile(rf"^(\S+)\s+{_HEX}\s+{_HEX}(?:\s+load address\s+{_HEX})?\s*$")
_OUTPUT_NAME_ONLY = re.compile(r"^(\.\S*|COMMON)\s*$")
_OUTPUT_REST = re.compile(rf"^\s+{_HEX}\s+{_HEX}(?:\s+load address\s+{_HEX})?\s*$")
# " .text.foo      0x00001000       0x20 CMakeFiles/x.dir/a.c.obj" (one leading space).
_INPUT = re.compile(rf"^ (\S+)\s+{_HEX}\s+{_HEX}\s+(\S.*?)\s*$")
_INPUT_NAME_ONLY = re.compile(r"^ (\S+)\s*$")
_INPUT_REST = re.compile(rf"^\s+{_HEX}\s+{_HEX}\s+(\S.*?)\s*$")
_FILL_LINE = re.compile(rf"^ \*fill\*\s+{_HEX}\s+{_HEX}")


@dataclass(frozen=True)
class Piece:
    """An input section placed in an output section (or fill, `source` = "*fill*")."""

    name: str
    addr: int
    size: int
    source: str  # the object file, "archive.a(member.o)", or "*fill*"


@dataclass
class OutputSection:
    name: str
    addr: int
    size: int
    load_addr: int | None = None  # when it is stored elsewhere than it runs (.data)
    pieces: list[Piece] = field(default_factory=list)


def read_map(path: Path) -> list[OutputSection]:
    """The output sections of a GNU ld map file, with the pieces placed in them."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the linker map ({exc.strerror})") from None
    try:
        start = lines.index(MAP_START)
    except ValueError:
        raise InputError(f"{path}: not a GNU ld map file (no '{MAP_START}')") from None
    return _parse(lines[start + 1:])


def _parse(lines: list[str]) -> list[OutputSection]:
    sections: list[OutputSection] = []
    current: OutputSection | None = None
    pending_output: str | None = None  # a long output section name; numbers on the next line
    pending_input: str | None = None
    for line in lines:
        if pending_output is not None:
            rest = _OUTPUT_REST.match(line)
            name, pending_output = pending_output, None
            if rest:
                current = _output(name, *rest.groups())
                sections.append(current)
                continue
        if pending_input is not None:
            rest = _INPUT_REST.match(line)
            name, pending_input = pending_input, None
            if rest and current is not None:
                addr, size, source = rest.groups()
                current.pieces.append(Piece(name, int(addr, 16), int(size, 16), source))
                continue
        if line.startswith("OUTPUT("):
            break
        if line and not line[0].isspace():
            out = _OUTPUT.match(line)
            if out:
                current = _output(*out.groups())
                sections.append(current)
            elif _OUTPUT_NAME_ONLY.match(line):
                pending_output = line.strip()
            else:
                current = None  # LOAD lines, script assignments at the top level
            continue
        if current is None:
            continue
        fill = _FILL_LINE.match(line)
        if fill:
            current.pieces.append(Piece(FILL, int(fill.group(1), 16), int(fill.group(2), 16),
                                        FILL))
            continue
        piece = _INPUT.match(line)
        if piece and not piece.group(1).startswith("*"):
            name, addr, size, source = piece.groups()
            current.pieces.append(Piece(name, int(addr, 16), int(size, 16), source))
        elif _INPUT_NAME_ONLY.match(line) and not line.strip().startswith(("*", "0x")):
            pending_input = line.strip()
    return sections


def _output(name: str, addr: str, size: str, load: str | None) -> OutputSection:
    return OutputSection(name, int(addr, 16), int(size, 16),
                         int(load, 16) if load is not None else None)
