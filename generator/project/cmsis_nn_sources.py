"""Which of a CMSIS-NN tree's source files a caller needs: the files that define the
`arm_*` functions it names, and the files those name in turn.

A CMSIS-NN tree has about a hundred C files (v7.0.0: 113); our driver reaches about thirty.
Building only those makes a project's first build (and every test that builds the library)
three times quicker. The search reads C text, not objects: a name counts as used wherever it
appears (both sides of every `#if`, so the list holds for every core), a function is defined
where its parameter list is followed by a body, and the headers' inline functions pass the
names they use on to their callers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

NAME_RE = re.compile(r"\barm_\w+")
COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
SOURCE_GLOB = "Source/*/*.c"
HEADER_GLOB = "Include/*.h"


def _code(text: str) -> str:
    return COMMENT_RE.sub(" ", text)


def _closing(text: str, start: int, open_: str, close: str) -> int:
    """The index after the `close` that matches the `open_` at `start` (or len(text))."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def definitions(code: str) -> dict[str, str]:
    """`arm_*` functions defined in `code` (a parameter list, then a body): name → body."""
    found = {}
    for match in NAME_RE.finditer(code):
        after = match.end()
        while after < len(code) and code[after] in " \t\r\n":
            after += 1
        if after >= len(code) or code[after] != "(":
            continue
        end = _closing(code, after, "(", ")")
        rest = code[end:end + 64]
        if rest.lstrip().startswith("{"):
            body_start = end + len(rest) - len(rest.lstrip())
            found[match.group()] = code[body_start:_closing(code, body_start, "{", "}")]
    return found


def needed_sources(root: Path, callers: Iterable[str]) -> list[str]:
    """The source files (relative to `root`, sorted) that the C texts `callers` need."""
    defines: dict[str, list[str]] = {}  # function → the source files defining it
    uses: dict[str, set[str]] = {}  # a source file, or a header's inline function → names
    for path in sorted(root.glob(SOURCE_GLOB)):
        rel = path.relative_to(root).as_posix()
        code = _code(path.read_text(errors="replace"))
        uses[rel] = set(NAME_RE.findall(code))  # all of it is compiled, all of it links
        for name in definitions(code):
            defines.setdefault(name, []).append(rel)
    inline: dict[str, set[str]] = {}  # a header's function → the names its body uses
    for path in sorted(root.glob(HEADER_GLOB)):
        for name, body in definitions(_code(path.read_text(errors="replace"))).items():
            inline.setdefault(name, set()).update(NAME_RE.findall(body))
    wanted = {n for text in callers for n in NAME_RE.findall(_code(text))}
    files: set[str] = set()
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        wanted |= inline.get(name, set()) - seen
        for rel in defines.get(name, ()):
            if rel not in files:
                files.add(rel)
                wanted |= uses[rel] - seen
    return sorted(files)
