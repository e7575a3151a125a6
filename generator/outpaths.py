"""Paths the user names for a command's output, checked before any work starts.

An export, a run on the board or a tuning session can take minutes; a path that cannot be
written must be refused before that, in one line, with nothing written. Each command that
writes checks its output path with `check_output` first (issue: no surprises).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from generator.errors import ProjectError

FILE = "file"
DIRECTORY = "directory"


def check_output(path: Path, option: str, kind: str, inputs: Sequence[Path] = ()) -> None:
    """Refuse `path` (given as `option`) unless a `kind` (FILE or DIRECTORY) can be written
    there: not a file where a directory goes or the other way round, no file on the way,
    a writable directory to create it in, and not one of `inputs` or inside one."""
    if kind not in (FILE, DIRECTORY):
        raise ValueError(f"kind must be {FILE!r} or {DIRECTORY!r}")
    path = Path(path)
    where = f"{option} {path}"
    target = path.resolve()
    for given in inputs:
        source = Path(given).resolve()
        if target == source:
            raise ProjectError(f"{where}: that is the input {given}; choose another path")
        if source.is_dir() and target.is_relative_to(source):
            raise ProjectError(f"{where}: inside the input {given}; choose a path outside it")
    if path.exists():
        if kind == DIRECTORY and not path.is_dir():
            raise ProjectError(f"{where}: a file is there, not a directory")
        if kind == FILE and path.is_dir():
            raise ProjectError(f"{where}: a directory is there; name the file to write")
        folder = path if kind == DIRECTORY else target.parent
        _require_writable(folder, where)
        return
    ancestor = _nearest_existing(target.parent)
    if not ancestor.is_dir():
        raise ProjectError(f"{where}: {ancestor} is a file, not a directory")
    _require_writable(ancestor, where)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or "/")


def _require_writable(folder: Path, where: str) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ProjectError(f"{where}: {folder} is not writable")
