"""Extra files a user adds to a generated project (the Project API's `extra_files_tar`).

The tar is read as data: regular files only, every path component a plain name (letters,
digits, '_', '.', '+', '-'), bounded in count and size. A file may not replace one the
generator wrote.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from generator.errors import ProjectError
from generator.mlf.archive import normalize_member_name
from generator.mlf.sources import SAFE_FILE_NAME_RE

MAX_FILES = 1000
MAX_BYTES = 64 * 1024 * 1024


def read_extra_files(path: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(path, mode="r|*") as tar:
            for member in tar:
                name = normalize_member_name(member.name, path)
                if name is None or member.isdir():
                    continue
                if not member.isfile():
                    raise ProjectError(f"{path}: '{name}' is not a regular file")
                if not all(SAFE_FILE_NAME_RE.fullmatch(part) for part in name.split("/")):
                    raise ProjectError(f"{path}: '{name!r}' is not a plain file name")
                total += member.size
                if len(out) >= MAX_FILES or total > MAX_BYTES:
                    raise ProjectError(f"{path}: more than {MAX_FILES} files or {MAX_BYTES} "
                                       "bytes")
                handle = tar.extractfile(member)
                out[name] = handle.read() if handle else b""
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise ProjectError(f"{path}: not a readable tar ({exc})") from exc
    return out
