"""Where every byte of a linked firmware goes: each region of the board, the ELF sections in
it, and the blocks (weights, each kernel's code, runtime, libc, activations, I/O, stack) the
linker map attributes those sections' bytes to.

The blocks of a region add up to exactly the bytes of the ELF's sections in it (a section
stored in one region and run from another, like .data, counts in both: its image in the
first, its bytes in the second); the stack reservation is added as its own block."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import PurePosixPath

from generator.boards import Board
from generator.elfsize import ElfSection, ElfSymbol
from generator.report.linkmap import FILL, OutputSection
from generator.report.model import Block, RegionUse

# Where the project's own objects come from (CMake object paths keep the source's path).
_MODEL_DIR = "/model/src/"
_SOURCE_DIRS = (("/runtime/src/", "runtime", "runtime"), ("/app/", "app", "application"),
                ("/platform/", "app", "platform"), ("/accel/", "accelerator", "accelerator"))
_IO_SYMBOL = re.compile(r"^(input|output)_\d+$")
# The generated application's buffers and tables that belong to the model
# (templates/crt/*_glue.c.j2): symbol → (category, label).
_APP_SYMBOLS = {
    "workspace_arena": ("activations", "workspace arena"),
    "graph_storage": ("activations", "graph storage"),
    "graph_params": ("weights", "graph parameters"),
    "graph_json": ("model-code", "graph JSON"),
}
STACK_TOP, STACK_LIMIT = "__stack_top__", "__stack_limit__"
PADDING = "alignment padding"


@dataclass(frozen=True)
class _Span:
    """Bytes of one section attributed to one origin."""

    addr: int
    size: int
    category: str
    label: str
    source: str  # file (or symbol) it came from, for the block's detail


def regions_of(board: Board) -> list[RegionUse]:
    """The board's memories: FLASH and RAM from its board file, then its [[regions]]; a host
    program gets one region of no fixed size."""
    if board.is_native or board.ram_origin is None:
        return [RegionUse("memory", "host", 0, None)]
    out = []
    if board.flash_origin is not None or board.flash_bytes is not None:
        out.append(RegionUse("FLASH", "flash", board.flash_origin or 0, board.flash_bytes))
    out.append(RegionUse("RAM", "ram", board.ram_origin, board.ram_bytes))
    windows = [(r.origin, r.origin + r.size) for r in out if r.size is not None]
    # A memory the board file lists that FLASH or RAM already is (the AN547's ITCM) once.
    out += [RegionUse(r.name, r.kind, r.origin, r.size) for r in board.regions
            if not any(lo <= r.origin and r.origin + r.size <= hi for lo, hi in windows)]
    return out


def flash_and_ram(regions: list[RegionUse]) -> tuple[RegionUse, RegionUse]:
    """The board's FLASH and RAM among `regions_of` (a host program's one region: both)."""
    return (next(r for r in regions if r.kind in ("flash", "host")),
            next(r for r in regions if r.kind in ("ram", "host")))


def memory_use(board: Board, sections: list[ElfSection], link_map: list[OutputSection],
               symbols: list[ElfSymbol], module: str) -> list[RegionUse]:
    """The regions of `board` with the blocks that fill them."""
    regions = regions_of(board)
    by_name = {s.name: s for s in link_map}
    kernels = _kernel_symbols(symbols, module)
    spans: dict[str, list[_Span]] = defaultdict(list)
    for section in sections:
        if not section.allocated or section.size == 0:
            continue
        mapped = by_name.get(section.name)
        pieces = _attribute(section, mapped, kernels, symbols)
        places = [section.addr]
        if mapped is not None and mapped.load_addr not in (None, section.addr):
            places.append(mapped.load_addr)  # stored in one region, runs from another
        for n, place in enumerate(places):
            region = _region_at(regions, place)
            suffix = "" if n == 0 else " (load image)"
            region.sections[section.name + suffix] = section.size
            spans[region.name] += [_Span(s.addr - section.addr + place, s.size, s.category,
                                         s.label + suffix, s.source) for s in pieces]
    for region in regions:
        region.blocks = _blocks(spans[region.name])
    _add_stack(regions, symbols)
    return regions


def _region_at(regions: list[RegionUse], addr: int) -> RegionUse:
    for region in regions:
        if region.size is None or region.origin <= addr < region.origin + region.size:
            return region
    # Outside every region the board declares: shown as its own region.
    stray = RegionUse(f"0x{addr:08x}", "other", addr, None)
    regions.append(stray)
    return stray


def _kernel_symbols(symbols: list[ElfSymbol], module: str) -> dict[str, str]:
    """Function symbol → kernel name, for the model's functions other than its run function."""
    prefix = f"tvmgen_{module}_"
    return {s.name: s.name[len(prefix):] for s in symbols
            if s.kind == "func" and s.name.startswith(prefix) and s.name != f"{prefix}run"}


def _attribute(section: ElfSection, mapped: OutputSection | None, kernels: dict[str, str],
               symbols: list[ElfSymbol]) -> list[_Span]:
    """The section's bytes split by origin; what no input section covers is padding."""
    end = section.addr + section.size
    out: list[_Span] = []
    cursor = section.addr
    pieces = sorted(mapped.pieces, key=lambda p: p.addr) if mapped is not None else []
    for piece in pieces:
        start, stop = max(piece.addr, cursor), min(piece.addr + piece.size, end)
        if stop <= start:
            continue
        if start > cursor:
            out.append(_Span(cursor, start - cursor, "other", PADDING, "linker"))
        out += _classify(section, piece.name, piece.source, start, stop - start, kernels,
                         symbols)
        cursor = stop
    if cursor < end:
        label = PADDING if mapped is not None else section.name
        out.append(_Span(cursor, end - cursor, "other", label, "linker"))
    return out


def _classify(section: ElfSection, name: str, source: str, addr: int, size: int,
              kernels: dict[str, str], symbols: list[ElfSymbol]) -> list[_Span]:
    if source == FILL:
        return [_Span(addr, size, "other", PADDING, "linker")]
    path = "/" + source.replace("\\", "/")
    short = PurePosixPath(source.split("(")[-1].rstrip(")")).name.replace(".obj", "")
    if _MODEL_DIR in path:
        return _model_spans(section, name, addr, size, short, kernels, symbols)
    if "/app/" in path and not name.startswith(".text"):
        return _app_data_spans(addr, size, short, symbols)
    for marker, category, label in _SOURCE_DIRS:
        if marker in path:
            return [_Span(addr, size, category, label, short)]
    if "libcmsis_nn.a" in path or "/cmsis_nn.dir/" in path:
        return [_Span(addr, size, "accelerator", "CMSIS-NN", short)]
    return [_Span(addr, size, "startup-libc", "C library and start-up", short)]


def _model_spans(section: ElfSection, name: str, addr: int, size: int, short: str,
                 kernels: dict[str, str], symbols: list[ElfSymbol]) -> list[_Span]:
    """The archive's code: kernels by their function symbols; constants; its pool."""
    if section.nobits or (section.writable and not name.startswith(".rodata")):
        return [_Span(addr, size, "activations", "activations", short)]
    if not name.startswith(".text"):
        return [_Span(addr, size, "weights", "weights", short)]
    named = [(sym, max(sym.size, 1), "kernel-code", kernels[sym.name]) for sym in symbols
             if sym.name in kernels and addr <= sym.value < addr + size]
    return _split_by_symbols(addr, size, named, ("model-code", "model code"), short)


def _app_data_spans(addr: int, size: int, short: str,
                    symbols: list[ElfSymbol]) -> list[_Span]:
    """The application's data: the model's buffers and tables in it (input and output
    buffers, the runtime's workspace arena, a graph's storage, parameters and JSON) by their
    symbols, apart from the rest."""
    named = [(sym, sym.size, *_app_symbol(sym.name)) for sym in symbols
             if sym.kind == "object" and addr <= sym.value < addr + size
             and _app_symbol(sym.name) is not None]
    return _split_by_symbols(addr, size, named, ("app", "application"), short)


def _split_by_symbols(addr: int, size: int, named: list[tuple[ElfSymbol, int, str, str]],
                      rest: tuple[str, str], short: str) -> list[_Span]:
    """The range [addr, addr+size) cut at the `named` symbols (symbol, its bytes, category,
    label); the bytes between them are `rest` (category, label) of the object `short`."""
    out, cursor, end = [], addr, addr + size
    for sym, nbytes, category, label in sorted(named, key=lambda n: n[0].value):
        if sym.value > cursor:
            out.append(_Span(cursor, sym.value - cursor, *rest, short))
        stop = min(end, sym.value + nbytes)
        if stop > sym.value:
            out.append(_Span(sym.value, stop - sym.value, category, label, sym.name))
        cursor = max(cursor, stop)
    if cursor < end:
        out.append(_Span(cursor, end - cursor, *rest, short))
    return out


def _app_symbol(name: str) -> tuple[str, str] | None:
    if _IO_SYMBOL.match(name):
        return "io", "I/O buffers"
    return _APP_SYMBOLS.get(name)


def _blocks(spans: list[_Span]) -> list[Block]:
    """Spans merged by (category, label): one block per kind of bytes in the region."""
    grouped: dict[tuple[str, str], list[_Span]] = defaultdict(list)
    for span in spans:
        grouped[(span.category, span.label)].append(span)
    out = []
    for (category, label), group in grouped.items():
        by_source: dict[str, int] = defaultdict(int)
        for span in group:
            by_source[span.source] += span.size
        top = sorted(by_source.items(), key=lambda kv: -kv[1])
        detail = ", ".join(f"{src} {n:,} B" for src, n in top[:6])
        if len(top) > 6:
            detail += f", {len(top) - 6} more"
        out.append(Block(label, category, sum(s.size for s in group),
                         min(s.addr for s in group), detail))
    return sorted(out, key=lambda b: (b.address if b.address is not None else 0, b.label))


def _add_stack(regions: list[RegionUse], symbols: list[ElfSymbol]) -> None:
    """The stack the linker script reserves (between its limit and top symbols)."""
    values = {s.name: s.value for s in symbols if s.name in (STACK_TOP, STACK_LIMIT)}
    if len(values) != 2 or values[STACK_TOP] <= values[STACK_LIMIT]:
        return
    limit = values[STACK_LIMIT]
    for region in regions:
        if region.size is not None and region.origin <= limit < region.origin + region.size:
            region.blocks.append(Block("stack", "stack", values[STACK_TOP] - limit, limit,
                                       "reserved by the linker script (MTVG_STACK_SIZE)"))
            return


def stack_reservation(symbols: list[ElfSymbol]) -> int | None:
    values = {s.name: s.value for s in symbols if s.name in (STACK_TOP, STACK_LIMIT)}
    if len(values) != 2:
        return None
    return values[STACK_TOP] - values[STACK_LIMIT]


