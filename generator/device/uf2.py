"""UF2 images from linked ELF files (the format the RP2040 boot ROM's USB drive accepts).

UF2 (Microsoft's USB Flashing Format, public specification) is a sequence of 512-byte
blocks, each carrying up to 476 payload bytes for one target address. The RP2040 boot ROM
wants 256-byte payloads on 256-byte boundaries and the RP2040 family id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from generator.errors import MtgError

UF2_MAGIC_START0 = 0x0A324655  # "UF2\n"
UF2_MAGIC_START1 = 0x9E5D5157
UF2_MAGIC_END = 0x0AB16F30
UF2_FLAG_FAMILY_ID = 0x00002000
UF2_BLOCK_BYTES = 512
UF2_DATA_BYTES = 476
UF2_HEADER = struct.Struct("<8I")
PAGE_BYTES = 256

PT_LOAD = 1
ELF_PHDR32 = struct.Struct("<8I")


class ImageError(MtgError):
    """The ELF cannot be turned into a flash image."""


@dataclass(frozen=True)
class Segment:
    address: int  # load (physical) address
    data: bytes


def load_segments(elf: Path) -> list[Segment]:
    """The bytes a 32-bit little-endian ELF stores in memory at load time (PT_LOAD, filesz)."""
    blob = elf.read_bytes()
    if blob[:4] != b"\x7fELF" or blob[4] != 1 or blob[5] != 1:
        raise ImageError(f"{elf}: not a 32-bit little-endian ELF file")
    phoff, = struct.unpack_from("<I", blob, 0x1C)
    phentsize, phnum = struct.unpack_from("<HH", blob, 0x2A)
    segments = []
    for i in range(phnum):
        p_type, offset, _vaddr, paddr, filesz, _memsz, _flags, _align = ELF_PHDR32.unpack_from(
            blob, phoff + i * phentsize)
        if p_type == PT_LOAD and filesz > 0:
            segments.append(Segment(paddr, blob[offset:offset + filesz]))
    return sorted(segments, key=lambda s: s.address)


def elf_to_uf2(elf: Path, family_id: int, flash_origin: int, flash_bytes: int) -> bytes:
    """A UF2 image of every loaded byte of `elf`; each must lie in the flash region."""
    pages: dict[int, bytearray] = {}
    for seg in load_segments(elf):
        end = seg.address + len(seg.data)
        if seg.address < flash_origin or end > flash_origin + flash_bytes:
            raise ImageError(f"{elf}: {len(seg.data)} bytes at {seg.address:#x} lie outside "
                             f"the flash ({flash_origin:#x}, {flash_bytes} bytes)")
        addr = seg.address
        while addr < end:  # the part of the segment in each 256-byte page it touches
            base, offset = addr - addr % PAGE_BYTES, addr % PAGE_BYTES
            count = min(PAGE_BYTES - offset, end - addr)
            page = pages.setdefault(base, bytearray(PAGE_BYTES))
            page[offset:offset + count] = seg.data[addr - seg.address:addr - seg.address + count]
            addr += count
    if not pages:
        raise ImageError(f"{elf}: nothing to flash (no loadable bytes)")
    blocks = []
    for number, address in enumerate(sorted(pages)):
        header = UF2_HEADER.pack(UF2_MAGIC_START0, UF2_MAGIC_START1, UF2_FLAG_FAMILY_ID,
                                 address, PAGE_BYTES, number, len(pages), family_id)
        payload = bytes(pages[address]).ljust(UF2_DATA_BYTES, b"\0")
        blocks.append(header + payload + struct.pack("<I", UF2_MAGIC_END))
    return b"".join(blocks)


def write_uf2(elf: Path, dest: Path, family_id: int, flash_origin: int,
              flash_bytes: int) -> Path:
    dest.write_bytes(elf_to_uf2(elf, family_id, flash_origin, flash_bytes))
    return dest
