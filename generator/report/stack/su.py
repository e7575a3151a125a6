"""GCC's -fstack-usage files: each function's frame as the compiler wrote it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SuFrame:
    """One function's line of a GCC .su file."""

    bytes: int
    bounded: bool  # "static" or "dynamic,bounded"; False: "dynamic" (alloca, VLA)


SU_LINE = re.compile(r"^(?P<where>.*):\d+:\d+:(?P<name>[^\t]+)\t(?P<bytes>\d+)\t"
                     r"(?P<kind>static|dynamic|dynamic,bounded)\s*$")


def parse_su(text: str) -> dict[str, SuFrame]:
    """Frames by function name from one .su file (a name seen twice keeps the larger)."""
    frames: dict[str, SuFrame] = {}
    for line in text.splitlines():
        match = SU_LINE.match(line)
        if match is None:
            continue
        frame = SuFrame(int(match["bytes"]), match["kind"] != "dynamic")
        frames[match["name"]] = _larger(frames.get(match["name"]), frame)
    return frames


def _larger(old: SuFrame | None, new: SuFrame) -> SuFrame:
    """Two frames of one name (static functions of two files): the worse of the two."""
    if old is None:
        return new
    return SuFrame(max(old.bytes, new.bytes), old.bounded and new.bounded)


def read_su_files(paths: Iterable[Path]) -> dict[str, SuFrame]:
    """Frames by function name from all the .su files (unreadable files are skipped)."""
    frames: dict[str, SuFrame] = {}
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for name, frame in parse_su(text).items():
            frames[name] = _larger(frames.get(name), frame)
    return frames


def su_frame_of(name: str, frames: dict[str, SuFrame]) -> SuFrame | None:
    """A function's .su frame; GCC's clones (`f.isra.0`) are written without the number."""
    if name in frames:
        return frames[name]
    return frames.get(re.sub(r"\.\d+$", "", name))
