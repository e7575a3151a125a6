"""Reading an MLF archive's members safely, into memory.

An archive is untrusted input. Nothing is extracted to disk here: members are checked and
the ones the tool needs are read into a dict. A member whose name is absolute or climbs out
with `..`, a link, a device or fifo, or a member larger than the limits below makes the whole
archive invalid (one bad member is enough to distrust the rest).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import posixpath
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from generator.errors import MlfError

MAX_MEMBER_BYTES = 128 * 1024 * 1024
# What a tar may unpack to in all (every member, read or skipped): a bound on time and on
# decompression bombs. Real archives unpack to at most a few tens of MB.
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
# A compressed archive past RATIO_FLOOR_BYTES unpacked may not have grown more than
# MAX_RATIO times: real archives (C text, weights) compress 3-20 times, bombs 1,000 times.
# Setting LIMIT_ENV (the user accepts big archives) lifts this check.
MAX_RATIO = 200
RATIO_FLOOR_BYTES = 32 * 1024 * 1024
LIMIT_ENV = "MICROTVM_GEN_MAX_ARCHIVE_BYTES"
# The members the tool keeps in memory, in all.
MAX_READ_BYTES = 192 * 1024 * 1024
MAX_TOTAL_BYTES = MAX_READ_BYTES  # directories
MAX_MEMBERS = 20000
MAX_HEADER_BYTES = 64 * 1024  # a pax or GNU long-name header
READ_CHUNK = 1024 * 1024

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
    seen: set[str] = field(default_factory=set, repr=False)

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
        raise MlfError(f"{origin}: member '{_shown(raw)}' has an absolute path; refusing the "
                       "archive")
    parts = [p for p in raw.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise MlfError(f"{origin}: member '{_shown(raw)}' climbs out of the archive with '..'; "
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


class _Budget:
    """A readable stream that refuses to give more than `limit` bytes in total."""

    def __init__(self, stream: BinaryIO, limit: int, origin: Path,
                 compressed_bytes: int | None = None) -> None:
        self.stream, self.limit, self.origin, self.count = stream, limit, origin, 0
        self.compressed_bytes = compressed_bytes

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > READ_CHUNK:
            size = READ_CHUNK
        blob = self.stream.read(size)
        self.count += len(blob)
        if self.compressed_bytes and self.count > RATIO_FLOOR_BYTES \
                and self.count > MAX_RATIO * self.compressed_bytes:
            raise MlfError(f"{self.origin}: the archive unpacks to more than {MAX_RATIO} times "
                           f"its {self.compressed_bytes} compressed bytes (a decompression "
                           f"bomb?); set {LIMIT_ENV} to accept it if it is real")
        if self.count > self.limit:
            raise MlfError(f"{self.origin}: the archive unpacks to more than {self.limit} bytes "
                           f"(set {LIMIT_ENV} to allow more)")
        return blob


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses extended headers (pax, GNU long names) that claim more than a few KiB before
    tarfile reads them whole into memory."""

    def _proc_member(self, tarfile_obj):  # noqa: ANN001 (tarfile's private hook)
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise tarfile.HeaderError(f"an extended header claims {self.size} bytes")
        return super()._proc_member(tarfile_obj)


_HEADER_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                 tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_MAGIC = ((b"\x1f\x8b", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
          (b"BZh", lambda raw: bz2.BZ2File(raw, mode="rb")),
          (b"\xfd7zXZ\x00", lambda raw: lzma.LZMAFile(raw, mode="rb")))


def unpacked_limit() -> int:
    """The most bytes an archive may unpack to: MAX_UNPACKED_BYTES, or the environment's."""
    raw = os.environ.get(LIMIT_ENV)
    if raw is None:
        return MAX_UNPACKED_BYTES
    if not raw.isdigit() or int(raw) <= 0:
        raise MlfError(f"{LIMIT_ENV}={raw!r} is not a positive number of bytes")
    return int(raw)


def _read_tar(path: Path) -> ArchiveFiles:
    """Read a tar as one forward stream: what it unpacks to is counted and bounded, and a
    compressed stream is read to its end so that its checksum is verified."""
    files = ArchiveFiles(origin=path)
    limit = unpacked_limit()
    try:
        with path.open("rb") as raw:
            head = raw.read(8)
            raw.seek(0)
            opener = next((o for magic, o in _MAGIC if head.startswith(magic)), None)
            with (opener(raw) if opener else raw) as stream:
                ratio_checked = opener is not None and LIMIT_ENV not in os.environ
                budget = _Budget(stream, limit, path,
                                 path.stat().st_size if ratio_checked else None)
                _read_members(path, budget, files)
                while budget.read(READ_CHUNK):  # to the end: checksums, trailing garbage
                    pass
    except MlfError:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError, OverflowError, MemoryError,
            lzma.LZMAError, zlib.error, UnicodeError) as exc:
        raise MlfError(f"{path}: not a tar archive, or a damaged one ({_short(exc)})") from exc
    if not files.names:
        raise MlfError(f"{path}: not a tar archive, or an empty one")
    return files


def _read_members(path: Path, budget: _Budget, files: ArchiveFiles) -> None:
    read_total = 0
    tar = tarfile.open(fileobj=budget, mode="r|", tarinfo=_BoundedTarInfo)  # type: ignore
    with tar:
        for member in _iter_members(tar, path):
            name = normalize_member_name(member.name, path)
            if name is None:
                if not member.isdir():
                    raise MlfError(f"{path}: the archive root is not a directory")
                continue
            if member.issym() or member.islnk():
                raise MlfError(f"{path}: member '{_shown(member.name)}' is a link (to "
                               f"'{_shown(member.linkname)}'); refusing the archive")
            if member.isdir():
                continue
            if not member.isfile():
                raise MlfError(f"{path}: member '{_shown(member.name)}' is not a regular file "
                               "(device, fifo or other special file); refusing the archive")
            if member.size > MAX_MEMBER_BYTES:
                raise MlfError(f"{path}: member '{_shown(member.name)}' claims {member.size} "
                               f"bytes, over the limit of {MAX_MEMBER_BYTES}; refusing the "
                               "archive")
            if name in files.seen:
                raise MlfError(f"{path}: member '{_shown(name)}' appears twice; refusing the "
                               "archive")
            files.seen.add(name)
            files.names.append(name)
            if not _wanted(name):
                continue
            read_total += member.size
            if read_total > MAX_READ_BYTES:
                raise MlfError(f"{path}: the members the tool reads add up to more than "
                               f"{MAX_READ_BYTES} bytes")
            handle = tar.extractfile(member)
            if handle is None:
                raise MlfError(f"{path}: cannot read member '{_shown(member.name)}'")
            blob = handle.read(member.size + 1)
            if len(blob) != member.size:
                raise MlfError(f"{path}: member '{_shown(member.name)}' claims {member.size} "
                               f"bytes but holds {len(blob)}; the archive is truncated or forged")
            files.data[name] = blob


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


def _shown(name: str) -> str:
    """A member name as it can be shown on one line (control characters escaped)."""
    text = name.encode("unicode_escape").decode("ascii")
    return text if len(text) <= 120 else text[:117] + "..."


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
