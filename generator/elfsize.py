"""Flash and RAM use of a linked ELF, from its section headers."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

SHF_WRITE = 0x1
SHF_ALLOC = 0x2
SHT_NOBITS = 8
SHT_SYMTAB = 2
EM_ARM = 40


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
    name: int = 0  # offset of its name in the section-name string table


def read_elf(path: Path) -> tuple[bytes, bool, str]:
    blob = path.read_bytes()
    if blob[:4] != b"\x7fELF":
        raise ValueError(f"{path} is not an ELF file")
    return blob, blob[4] == 2, "<" if blob[5] == 1 else ">"


def section_headers(blob: bytes, is64: bool, endian: str) -> list[_Section]:
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
        (name, sh_type, flags, addr, offset, size, link, _info, _align,
         entsize) = struct.unpack_from(fmt, blob, shoff + i * shentsize)
        out.append(_Section(sh_type, flags, addr, offset, size, link, entsize, name))
    return out


def elf_size(path: Path, ram: tuple[int, int] | None = None) -> SizeReport:
    """Section sizes by where they live.

    With `ram` = (origin, size), a loaded section is RAM when its address is in that range
    and flash otherwise (what the linker script decided). Without it (host programs),
    writable sections count as data.
    """
    blob, is64, endian = read_elf(path)
    text = data = bss = 0
    for sec in section_headers(blob, is64, endian):
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
    """Sizes of the named symbols (local or global) in the ELF's symbol table."""
    return {s.name: s.size for s in elf_symbols(path) if s.name in names}


SHT_DYNAMIC = 6
DT_NULL = 0
DT_NEEDED = 1


def needed_libraries(path: Path) -> list[str]:
    """Shared libraries a dynamically linked ELF names (DT_NEEDED), in order."""
    blob, is64, endian = read_elf(path)
    sections = section_headers(blob, is64, endian)
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


STT_OBJECT = 1
STT_FUNC = 2


@dataclass(frozen=True)
class ElfSection:
    name: str
    addr: int
    size: int
    allocated: bool  # occupies memory when the program runs
    nobits: bool  # .bss-like: no bytes in the file (zeroed)
    writable: bool


@dataclass(frozen=True)
class ElfSymbol:
    name: str
    value: int  # address (Thumb functions: with the low bit cleared)
    size: int
    kind: str  # "func" | "object" | "other"


def _string(blob: bytes, table: _Section, index: int) -> str:
    start = table.offset + index
    end = blob.find(b"\0", start, table.offset + table.size)
    return blob[start:end].decode(errors="replace") if end >= 0 else ""


def elf_sections(path: Path) -> list[ElfSection]:
    """The ELF's sections with their names, in header order."""
    blob, is64, endian = read_elf(path)
    sections = section_headers(blob, is64, endian)
    shstrndx, = struct.unpack_from(endian + "H", blob, 0x3E if is64 else 0x32)
    names = sections[shstrndx] if shstrndx < len(sections) else None
    out = []
    for i, sec in enumerate(sections):
        if i == 0:
            continue
        out.append(ElfSection(_string(blob, names, sec.name) if names else "", sec.addr,
                              sec.size, bool(sec.flags & SHF_ALLOC), sec.sh_type == SHT_NOBITS,
                              bool(sec.flags & SHF_WRITE)))
    return out


def elf_symbols(path: Path) -> list[ElfSymbol]:
    """Every named symbol of the ELF's symbol table."""
    blob, is64, endian = read_elf(path)
    sections = section_headers(blob, is64, endian)
    thumb = not is64 and struct.unpack_from(endian + "H", blob, 0x12)[0] == EM_ARM
    out = []
    for sec in sections:
        if sec.sh_type != SHT_SYMTAB or sec.entsize == 0 or sec.link >= len(sections):
            continue
        strtab = sections[sec.link]
        for off in range(sec.offset, sec.offset + sec.size, sec.entsize):
            if is64:
                st_name, info, _other, _shndx, value, size = struct.unpack_from(
                    endian + "IBBHQQ", blob, off)
            else:
                st_name, value, size, info, _other, _shndx = struct.unpack_from(
                    endian + "IIIBBH", blob, off)
            name = _string(blob, strtab, st_name)
            if not name:
                continue
            kind = {STT_FUNC: "func", STT_OBJECT: "object"}.get(info & 0xF, "other")
            if thumb and kind == "func":
                value &= ~1
            out.append(ElfSymbol(name, value, size, kind))
    return out
