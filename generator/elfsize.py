"""Flash and RAM use of a linked ELF, from its section headers."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

SHF_WRITE = 0x1
SHF_ALLOC = 0x2
SHT_NOBITS = 8


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


def elf_size(path: Path, ram: tuple[int, int] | None = None) -> SizeReport:
    """Section sizes by where they live.

    With `ram` = (origin, size), a loaded section is RAM when its address is in that range
    and flash otherwise (what the linker script decided). Without it (host programs),
    writable sections count as data.
    """
    blob = path.read_bytes()
    if blob[:4] != b"\x7fELF":
        raise ValueError(f"{path} is not an ELF file")
    is64 = blob[4] == 2
    endian = "<" if blob[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(endian + "Q", blob, 0x28)
        shentsize, shnum = struct.unpack_from(endian + "HH", blob, 0x3A)
    else:
        shoff, = struct.unpack_from(endian + "I", blob, 0x20)
        shentsize, shnum = struct.unpack_from(endian + "HH", blob, 0x2E)
    text = data = bss = 0
    for i in range(shnum):
        off = shoff + i * shentsize
        if is64:
            _name, sh_type, flags, addr = struct.unpack_from(endian + "IIQQ", blob, off)
            size, = struct.unpack_from(endian + "Q", blob, off + 0x20)
        else:
            _name, sh_type, flags, addr = struct.unpack_from(endian + "IIII", blob, off)
            size, = struct.unpack_from(endian + "I", blob, off + 0x14)
        if not flags & SHF_ALLOC or size == 0:
            continue
        in_ram = (ram[0] <= addr < ram[0] + ram[1]) if ram else bool(flags & SHF_WRITE)
        if sh_type == SHT_NOBITS:
            bss += size
        elif in_ram:
            data += size
        else:
            text += size
    return SizeReport(text, data, bss)
