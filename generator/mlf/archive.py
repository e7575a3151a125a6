"""Reading an MLF archive's members safely, into memory.

An archive is untrusted input. Nothing is extracted to disk here: members are checked and
the ones the tool needs are read into a dict. A member whose name is absolute or climbs out
with `..`, a link, a device or fifo, or a member larger than the limits below makes the whole
archive invalid (one bad member is enough to distrust the rest).
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import MlfError

MAX_MEMBER_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024
MAX_MEMBERS = 20000

# Top-level folders whose files the reader uses. Others (runtime/, templates/) are listed
# and checked but not read: the tool never uses TVM's own runtime copy.
READ_PREFIXES = ("metadata.json", "codegen/", "parameters/", "src/", "executor-config/",
                 "runtime-config/", "relay.txt")


@dataclass
class ArchiveFiles:
    """The members of an archive: every member's name, and the bytes of the ones we read."""

    origin: Path
    names: list[str] = field(default_factory=list)
    data: dict[str, bytes] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.data

    def text(self, name: str) -> str:
        try:
            return self.data[name].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MlfError(f"{name} in {self.origin} is not UTF-8 text") from exc

    def under(self, prefix: str) -> list[str]:
        """Names of read members below a folder, sorted."""
        return sorted(n for n in self.data if n.startswith(prefix))


def normalize_member_name(raw: str, origin: Path) -> str | None:
    """Return the member's path relative to the archive root, or None for the root itself.

    Refuses absolute names and names that leave the root.
    """
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise MlfError(f"{origin}: member '{raw}' has an absolute path; refusing the archive")
    parts = [p for p in raw.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise MlfError(f"{origin}: member '{raw}' climbs out of the archive with '..'; "
                       "refusing the archive")
    if not parts:
        return None
    return posixpath.join(*parts)


def _wanted(name: str) -> bool:
    return name.startswith(READ_PREFIXES)


def read_archive(path: Path) -> ArchiveFiles:
    """Read an MLF from a tar file (plain, gzip, bz2 or xz) or an extracted directory."""
    if not path.exists():
        raise MlfError(f"{path}: no such file or directory")
    if path.is_dir():
        return _read_directory(path)
    return _read_tar(path)


def _read_tar(path: Path) -> ArchiveFiles:
    files = ArchiveFiles(origin=path)
    try:
        tar = tarfile.open(path, mode="r:*")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise MlfError(f"{path}: not a tar archive ({_short(exc)})") from exc
    total = 0
    with tar:
        try:
            members = _iter_members(tar, path)
            for member in members:
                name = normalize_member_name(member.name, path)
                if name is None:
                    if not member.isdir():
                        raise MlfError(f"{path}: the archive root is not a directory")
                    continue
                if member.issym() or member.islnk():
                    raise MlfError(f"{path}: member '{member.name}' is a link "
                                   f"(to '{member.linkname}'); refusing the archive")
                if member.isdir():
                    continue
                if not member.isfile():
                    raise MlfError(f"{path}: member '{member.name}' is not a regular file "
                                   "(device, fifo or other special file); refusing the archive")
                if member.size > MAX_MEMBER_BYTES:
                    raise MlfError(f"{path}: member '{member.name}' claims {member.size} bytes, "
                                   f"over the limit of {MAX_MEMBER_BYTES}; refusing the archive")
                files.names.append(name)
                if not _wanted(name):
                    continue
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise MlfError(f"{path}: members add up to more than {MAX_TOTAL_BYTES} bytes")
                handle = tar.extractfile(member)
                if handle is None:
                    raise MlfError(f"{path}: cannot read member '{member.name}'")
                blob = handle.read(member.size + 1)
                if len(blob) != member.size:
                    raise MlfError(f"{path}: member '{member.name}' claims {member.size} bytes "
                                   f"but holds {len(blob)}; the archive is truncated or forged")
                files.data[name] = blob
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise MlfError(f"{path}: damaged tar archive ({_short(exc)})") from exc
    return files


def _iter_members(tar: tarfile.TarFile, path: Path):
    count = 0
    while True:
        member = tar.next()
        if member is None:
            return
        count += 1
        if count > MAX_MEMBERS:
            raise MlfError(f"{path}: more than {MAX_MEMBERS} members; refusing the archive")
        yield member


def _read_directory(root: Path) -> ArchiveFiles:
    files = ArchiveFiles(origin=root)
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for entry in sorted(dirnames + filenames):
            full = Path(dirpath) / entry
            rel = full.relative_to(root).as_posix()
            mode = full.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise MlfError(f"{root}: '{rel}' is a symbolic link; refusing the directory")
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise MlfError(f"{root}: '{rel}' is not a regular file")
            size = full.stat().st_size
            if size > MAX_MEMBER_BYTES:
                raise MlfError(f"{root}: '{rel}' has {size} bytes, over the limit of "
                               f"{MAX_MEMBER_BYTES}")
            files.names.append(rel)
            if _wanted(rel):
                total += size
                if total > MAX_TOTAL_BYTES:
                    raise MlfError(f"{root}: files add up to more than {MAX_TOTAL_BYTES} bytes")
                files.data[rel] = full.read_bytes()
    files.names.sort()
    return files


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
