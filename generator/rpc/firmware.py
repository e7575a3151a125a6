"""`serve --accept-firmware`: a stock client uploads a firmware and loads it as a module.

A stock TVM client puts a file on a server with `remote.upload(path, name)` (global
`tvm.rpc.server.upload(name, bytes)`) and loads it with `remote.load_module(name)` (global
`tvm.rpc.server.load_module(name)`, which returns a Module). The device cannot do either,
so the bridge answers these two functions itself, with handles of its own (`LOCAL_HANDLES`).

Where the firmware lives: serve works on a private copy of the project (`FirmwareSlot`, in
a temporary directory only serve's user can read): the project's files without its build
directory, plus the built firmware file in `build/`, where the project's own Project API
server starts QEMU or the firmware process from. Loading a firmware replaces that file
(rename, so the transport never sees half a file) while the device is stopped; the user's
project is never modified. The previous file is kept until the new one has started a
device session, and put back when it does not.

Uploaded files are checked only when loaded: an ELF of the class, byte order and machine of
the project's own firmware. Any client that reaches the port can therefore run code of its
choice on the device, and for the `host` board (whose firmware is a host process) on the
machine that runs serve (docs/host-driven.md).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from generator.errors import MtgError
from generator.rpc import packets
from generator.toolchain import BUILD_DIR, FIRMWARE

UPLOAD = "tvm.rpc.server.upload"
LOAD_MODULE = "tvm.rpc.server.load_module"
# Bridge-local function handles. Handles the bridge gives out for the device always carry an
# epoch in bits 48..63 (generator/rpc/handles.py), so these (epoch bits 0) never equal one;
# their low 48 bits lie above any 47-bit user-space address and any 32-bit device handle.
LOCAL_HANDLES = {UPLOAD: 0xFFFF_FFFF_FF01, LOAD_MODULE: 0xFFFF_FFFF_FF02}
MAX_FIRMWARE_BYTES = 64 << 20  # one uploaded file
MAX_UPLOADED_BYTES = 256 << 20  # all files kept in the upload directory together
MAX_NAME_BYTES = 255  # a target name (one file name)
MAX_UPLOAD_PACKET = MAX_FIRMWARE_BYTES + MAX_NAME_BYTES + 64  # the call's packet, all fields
CALL_HEAD = 12  # i32 code + u64 function handle: enough to tell an upload call
ELF_MAGIC = b"\x7fELF"
ELF_HEADER_BYTES = 20  # e_ident (16) + e_type (2) + e_machine (2)
ELF_TYPES = (2, 3)  # ET_EXEC, ET_DYN (a position-independent host executable)
MACHINES = {3: "x86", 8: "MIPS", 40: "ARM", 62: "x86-64", 183: "AArch64", 243: "RISC-V"}
T_SMALL_STR, T_SMALL_BYTES, T_STR = 11, 12, 65


class FirmwareRefused(MtgError):
    """An upload or load_module the bridge does not carry out (the client gets the text)."""


@dataclass(frozen=True)
class ElfIdent:
    """What must match between two firmware files of one board."""

    bits: int  # 32 or 64
    little_endian: bool
    machine: int

    def describe(self) -> str:
        name = MACHINES.get(self.machine, f"machine {self.machine}")
        order = "little" if self.little_endian else "big"
        return f"a {self.bits}-bit {order}-endian {name} ELF"


def elf_ident(head: bytes, what: str) -> ElfIdent:
    """The class, byte order and machine of an ELF header; FirmwareRefused if it is none."""
    if len(head) < ELF_HEADER_BYTES or head[:4] != ELF_MAGIC:
        raise FirmwareRefused(f"{what} is not an ELF file (it starts with {head[:4].hex()})")
    if head[4] not in (1, 2) or head[5] not in (1, 2):
        raise FirmwareRefused(f"{what} has an ELF header of unknown class or byte order")
    order = "<" if head[5] == 1 else ">"
    e_type, machine = struct.unpack_from(order + "HH", head, 16)
    if e_type not in ELF_TYPES:
        raise FirmwareRefused(f"{what} is an ELF of type {e_type}, not an executable")
    return ElfIdent(32 if head[4] == 1 else 64, head[5] == 1, machine)


def read_elf_ident(path: Path, what: str) -> ElfIdent:
    with open(path, "rb") as f:
        return elf_ident(f.read(ELF_HEADER_BYTES), what)


def check_target_name(name: str) -> str:
    """A target name must be one plain file name: no directory part, no '..'."""
    raw = name.encode(errors="surrogateescape")
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name \
            or ".." in name or len(raw) > MAX_NAME_BYTES:
        raise FirmwareRefused(f"target name {name!r}: must be a plain file name (no '/', "
                              f"'\\' or '..', at most {MAX_NAME_BYTES} bytes)")
    return name


def global_name(packet: bytes) -> str | None:
    """The function a GetGlobalFunc asks for, when it is one the bridge answers itself."""
    try:
        args = call_args(packet, packets.PREFIX.size + 4)
    except (ValueError, struct.error):
        return None
    if len(args) == 1 and args[0] in LOCAL_HANDLES:
        return str(args[0])
    return None


def call_target(packet: bytes) -> int:
    """The function handle of a CallFunc packet."""
    return struct.unpack_from("<Q", packet, packets.PREFIX.size + 4)[0]


def call_args(packet: bytes, pos: int) -> list[str | bytes | int]:
    """The arguments of a packet from `pos`: strings, bytes and handles only (ValueError
    for anything else, or for a packet that does not end where its arguments do)."""
    (count,) = struct.unpack_from("<i", packet, pos)
    pos += 4
    if not 0 <= count <= 4:
        raise ValueError("argument count")
    values: list[str | bytes | int] = []
    for _ in range(count):
        (kind,) = struct.unpack_from("<i", packet, pos)
        pos += 4
        if kind in (T_SMALL_STR, T_SMALL_BYTES, T_STR, packets.T_BYTES):
            (kind,) = struct.unpack_from("<i", packet, pos)  # the object form's inner type
            pos += 4
            if kind not in (T_STR, packets.T_BYTES):
                raise ValueError("object argument")
        if kind in (packets.T_PTR, packets.T_FUNCTION, packets.T_MODULE):
            values.append(struct.unpack_from("<Q", packet, pos)[0])
            pos += 8
            continue
        if kind not in (packets.T_RAW_STR, T_STR, packets.T_BYTE_ARRAY, packets.T_BYTES):
            raise ValueError("argument type")
        (n,) = struct.unpack_from("<Q", packet, pos)
        raw = packet[pos + 8:pos + 8 + n]
        if len(raw) != n:
            raise ValueError("truncated")
        pos += 8 + n
        values.append(raw.decode(errors="surrogateescape")
                      if kind in (packets.T_RAW_STR, T_STR) else raw)
    if pos != len(packet):
        raise ValueError("trailing bytes")
    return values


def is_upload_call(nbytes: int, head: bytes) -> bool:
    """Whether a packet of `nbytes` whose body starts with `head` calls upload."""
    if len(head) < CALL_HEAD:
        return False
    code, handle = struct.unpack_from("<iQ", head)
    return code == packets.CALL_FUNC and handle == LOCAL_HANDLES[UPLOAD]


@dataclass(frozen=True)
class Loaded:
    name: str
    size: int
    sha256: str


class FirmwareSlot:
    """serve's private directory: uploaded files, and the project copy the device runs."""

    def __init__(self, project_dir: Path, work_dir: Path) -> None:
        """Copy `project_dir` (built) into `work_dir` (empty, private) and use the copy."""
        self.work_dir = work_dir
        self.uploads = work_dir / "uploads"
        self.uploads.mkdir(mode=0o700)
        self.project = work_dir / "project"
        top = str(project_dir)
        shutil.copytree(project_dir, self.project, symlinks=True,
                        ignore=lambda d, names: [BUILD_DIR] if d == top else [])
        (self.project / BUILD_DIR).mkdir()
        self.firmware = self.project / BUILD_DIR / FIRMWARE
        shutil.copy2(project_dir / BUILD_DIR / FIRMWARE, self.firmware)
        self.ident = read_elf_ident(self.firmware, "the project's firmware")
        self._previous = work_dir / "previous.elf"

    @classmethod
    def create(cls, project_dir: Path) -> FirmwareSlot:
        """A slot in a new temporary directory (the caller removes `work_dir`)."""
        work = Path(tempfile.mkdtemp(prefix="mtvg-serve-"))
        try:
            return cls(project_dir.resolve(), work)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise

    def remove(self) -> None:
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def upload(self, name: str, data: bytes) -> None:
        check_target_name(name)
        if len(data) > MAX_FIRMWARE_BYTES:
            raise FirmwareRefused(f"upload {name}: {len(data)} bytes; at most "
                                  f"{MAX_FIRMWARE_BYTES} bytes are accepted")
        target = self.uploads / name
        kept = sum(p.stat().st_size for p in self.uploads.iterdir() if p != target)
        if kept + len(data) > MAX_UPLOADED_BYTES:
            raise FirmwareRefused(f"upload {name}: the uploaded files would take more than "
                                  f"{MAX_UPLOADED_BYTES} bytes")
        part = self.work_dir / "upload.part"
        part.write_bytes(data)
        os.replace(part, target)

    def check(self, name: str) -> Path:
        """The uploaded file `name`, if it is a firmware for this device."""
        path = self.uploads / check_target_name(name)
        if not path.is_file():
            raise FirmwareRefused(f"load_module {name}: no such uploaded file (upload it first "
                                  "with remote.upload)")
        ident = read_elf_ident(path, name)
        if ident != self.ident:
            raise FirmwareRefused(f"{name} is {ident.describe()}; this device runs "
                                  f"{self.ident.describe()}")
        return path

    def install(self, path: Path) -> Loaded:
        """Make `path` the firmware the device starts from (the device is stopped)."""
        data = path.read_bytes()
        staged = self.firmware.with_name(FIRMWARE + ".new")
        try:
            staged.write_bytes(data)
            staged.chmod(0o700)
            os.replace(self.firmware, self._previous)
        except OSError:
            staged.unlink(missing_ok=True)
            raise
        try:
            os.replace(staged, self.firmware)
        except OSError:
            os.replace(self._previous, self.firmware)
            raise
        return Loaded(path.name, len(data), hashlib.sha256(data).hexdigest())

    def restore(self) -> None:
        """Put back the firmware `install` replaced (the device is stopped)."""
        if self._previous.is_file():
            os.replace(self._previous, self.firmware)
