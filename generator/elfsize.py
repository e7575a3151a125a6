"""Flash and RAM use of a linked ELF, from its section headers."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

SHF_WRITE = 0x1
SHF_ALLOC = 0x2
SHT_NOBITS = 8
SHT_SYMTAB = 2


@dataclass(frozen=True)
class SizeReport:
    text: int  # code and read-only data (flash only)
    data: int  # initialised data (flash copy + RAM)
    bss: int  # zero-initialised data (RAM only)

    @property
    def flash(self) -> int:
        return self.text + self.data

    @property
    def ram(self) -> int:
        return self.data + self.bss


@dataclass(frozen=True)
class _Section:
    sh_type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


def _read_elf(path: Path) -> tuple[bytes, bool, str]:
    blob = path.read_bytes()
    if blob[:4] != b"\x7fELF":
        raise ValueError(f"{path} is not an ELF file")
    return blob, blob[4] == 2, "<" if blob[5] == 1 else ">"


def _sections(blob: bytes, is64: bool, endian: str) -> list[_Section]:
    if is64:
        shoff, = struct.unpack_from(endian + "Q", blob, 0x28)
        shentsize, shnum = struct.unpack_from(endian + "HH", blob, 0x3A)
        fmt = endian + "IIQQQQIIQQ"
    else:
        shoff, = struct.unpack_from(endian + "I", blob, 0x20)
        shentsize, shnum = struct.unpack_from(endian + "HH", blob, 0x2E)
        fmt = endian + "IIIIIIIIII"
    out = []
    for i in range(shnum):
        (_name, sh_type, flags, addr, offset, size, link, _info, _align,
         entsize) = struct.unpack_from(fmt, blob, shoff + i * shentsize)
        out.append(_Section(sh_type, flags, addr, offset, size, link, entsize))
    return out


def elf_size(path: Path, ram: tuple[int, int] | None = None) -> SizeReport:
    """Section sizes by where they live.

    With `ram` = (origin, size), a loaded section is RAM when its address is in that range
    and flash otherwise (what the linker script decided). Without it (host programs),
    writable sections count as data.
    """
    blob, is64, endian = _read_elf(path)
    text = data = bss = 0
    for sec in _sections(blob, is64, endian):
        if not sec.flags & SHF_ALLOC or sec.size == 0:
            continue
        in_ram = (ram[0] <= sec.addr < ram[0] + ram[1]) if ram else bool(sec.flags & SHF_WRITE)
        if sec.sh_type == SHT_NOBITS:
            bss += sec.size
        elif in_ram:
            data += sec.size
        else:
            text += sec.size
    return SizeReport(text, data, bss)


def symbol_sizes(path: Path, names: set[str]) -> dict[str, int]:
    """Sizes of the named data symbols (local or global) in the ELF's symbol table."""
    blob, is64, endian = _read_elf(path)
    sections = _sections(blob, is64, endian)
    found: dict[str, int] = {}
    for sec in sections:
        if sec.sh_type != SHT_SYMTAB or sec.entsize == 0 or sec.link >= len(sections):
            continue
        strtab = sections[sec.link]
        for off in range(sec.offset, sec.offset + sec.size, sec.entsize):
            if is64:
                st_name, _info, _other, _shndx, _value, size = struct.unpack_from(
                    endian + "IBBHQQ", blob, off)
            else:
                st_name, _value, size = struct.unpack_from(endian + "III", blob, off)
            start = strtab.offset + st_name
            end = blob.find(b"\0", start, strtab.offset + strtab.size)
            name = blob[start:end].decode(errors="replace") if end >= 0 else ""
            if name in names:
                found[name] = size
    return found


SHT_DYNAMIC = 6
DT_NULL = 0
DT_NEEDED = 1


def needed_libraries(path: Path) -> list[str]:
    """Shared libraries a dynamically linked ELF names (DT_NEEDED), in order."""
    blob, is64, endian = _read_elf(path)
    sections = _sections(blob, is64, endian)
    fmt = endian + ("qQ" if is64 else "iI")
    step = struct.calcsize(fmt)
    needed: list[str] = []
    for sec in sections:
        if sec.sh_type != SHT_DYNAMIC or sec.link >= len(sections):
            continue
        strtab = sections[sec.link]
        for off in range(sec.offset, sec.offset + sec.size - step + 1, step):
            tag, value = struct.unpack_from(fmt, blob, off)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                start = strtab.offset + value
                end = blob.find(b"\0", start, strtab.offset + strtab.size)
                needed.append(blob[start:end].decode(errors="replace") if end >= 0 else "")
    return needed
