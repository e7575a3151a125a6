"""The ELF's data: tables of function pointers, the vector table."""

from __future__ import annotations

import struct
from pathlib import Path

from generator.elfsize import ElfSection, elf_sections, elf_symbols, read_elf, section_headers
from generator.errors import InputError

EM_ARM, EM_X86_64, EM_RISCV = 40, 62, 243
ARCH_OF_MACHINE = {EM_ARM: "arm", EM_X86_64: "x86_64", EM_RISCV: "riscv"}
SHT_NOBITS, SHF_ALLOC = 8, 0x2

# Function-pointer tables a firmware declares: (start symbol, end symbol) of the linker's
# constructor and destructor tables. A function that reads a table's start may call any entry.
BOUNDED_TABLES = (("__preinit_array_start", "__preinit_array_end"),
                  ("__init_array_start", "__init_array_end"),
                  ("__fini_array_start", "__fini_array_end"))
# The generated application's accelerator counters: a constant pointer to an array of
# functions (app/model_glue.c) and the array's length.
COUNTED_TABLES = (("mtvg_model_accel_counters", "mtvg_model_num_accel_counters"),)
TABLE_ANCHORS = {anchor for anchor, _ in BOUNDED_TABLES + COUNTED_TABLES}
VECTOR_TABLE = "mtvg_vectors"  # templates/common/platform/cortex_m/startup.c


class ElfImage:
    """An ELF's symbols and the bytes of its loaded sections."""

    def __init__(self, path: Path) -> None:
        try:
            self.blob, self.is64, self.endian = read_elf(path)
            self.sections = section_headers(self.blob, self.is64, self.endian)
            machine, = struct.unpack_from(self.endian + "H", self.blob, 0x12)
            self.named_sections = elf_sections(path)
            symbols = elf_symbols(path)
        except (OSError, ValueError, struct.error) as exc:
            raise InputError(f"cannot read {path} as an ELF file: {exc}") from exc
        self.arch = ARCH_OF_MACHINE.get(machine, "")
        if not self.arch:
            raise InputError(f"{path}: the stack bound knows Arm, RISC-V and x86-64 code, not "
                             f"ELF machine {machine}")
        self.path = path
        self.word_bytes = 8 if self.is64 else 4
        self.symbols: dict[str, int] = {}  # the first symbol of each name
        self.sizes: dict[str, int] = {}
        self.functions_at: dict[int, str] = {}
        for symbol in symbols:
            self.symbols.setdefault(symbol.name, symbol.value)
            self.sizes.setdefault(symbol.name, symbol.size)
            if symbol.kind == "func":
                self.functions_at.setdefault(symbol.value, symbol.name)

    def word(self, address: int) -> int | None:
        """The pointer-sized word the file holds at `address` (None: not in a section)."""
        for sec in self.sections:
            if sec.sh_type != SHT_NOBITS and sec.flags & SHF_ALLOC and sec.addr <= address and \
                    address + self.word_bytes <= sec.addr + sec.size:
                fmt = self.endian + ("Q" if self.is64 else "I")
                return struct.unpack_from(fmt, self.blob, sec.offset + address - sec.addr)[0]
        return None

    def words(self, start: int, count: int) -> list[int]:
        """`count` words from `start` (fewer when the file ends)."""
        out = []
        for i in range(count):
            value = self.word(start + i * self.word_bytes)
            if value is None:
                break
            out.append(value)
        return out

    def code_address(self, value: int) -> int:
        """A function pointer's code address (Thumb: without the low bit)."""
        return value & ~1 if self.arch == "arm" else value

    def pointer_tables(self) -> dict[int, list[int]]:
        """The firmware's function-pointer tables: their address -> the code they point to."""
        tables: dict[int, list[int]] = {}
        for start_name, end_name in BOUNDED_TABLES:
            start, end = self.symbols.get(start_name), self.symbols.get(end_name)
            if start is not None and end is not None and end >= start:
                entries = self.words(start, (end - start) // self.word_bytes)
                tables.setdefault(start, []).extend(self.code_address(v) for v in entries if v)
        for pointer_name, count_name in COUNTED_TABLES:
            anchor, counter = self.symbols.get(pointer_name), self.symbols.get(count_name)
            if anchor is None or counter is None:
                continue
            array, count = self.word(anchor), self.word(counter)
            if array is None or count is None:
                continue
            count &= 0xFFFFFFFF
            entries = self.words(array, count) if array and count else []
            tables.setdefault(anchor, []).extend(self.code_address(v) for v in entries if v)
        return tables

    def section_words(self, name: str) -> list[int]:
        """The words of a named section (empty when there is none)."""
        for sec in self.named_sections:
            if sec.name == name and not sec.nobits:
                return self.words(sec.addr, sec.size // self.word_bytes)
        return []

    def section_at(self, address: int) -> ElfSection | None:
        """The loaded section holding `address`."""
        return next((sec for sec in self.named_sections if sec.allocated and
                     sec.addr <= address < sec.addr + sec.size), None)

    def vector_handlers(self) -> list[str]:
        """Cortex-M: the distinct handlers the vector table names (the templates' startup.c
        `mtvg_vectors`, else the `.vectors` section), but the reset handler (its first word
        is the initial sp, its second the reset handler)."""
        start, size = self.symbols.get(VECTOR_TABLE), self.sizes.get(VECTOR_TABLE, 0)
        words = self.words(start, size // self.word_bytes) if start is not None and size \
            else self.section_words(".vectors")
        table = [self.functions_at.get(self.code_address(v)) if v else None for v in words]
        reset = table[1] if len(table) > 1 else None
        return list(dict.fromkeys(name for name in table[2:] if name and name != reset))


def cortex_m_handlers(elf: Path) -> list[str]:
    """The interrupt and exception handlers a Cortex-M firmware's vector table names."""
    return ElfImage(elf).vector_handlers()
