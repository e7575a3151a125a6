"""Memory placement: which of a board's memories holds the model's activations, kernel
scratch, weights and kernel code (`generate --place`, DESIGN D16).

A board file lists its memories ([[regions]]: name, origin, size, speed class). The
request names a region per item (`activations=DTCM,weights=DDR`) or asks for `auto`:
hot and small first, each into the fastest region that fits. The result is linker text
the port's linker script includes (`mtvg_regions.ld` inside MEMORY, `mtvg_placement.ld`
right after the vector table): one output section per placed item, matched by the input
section names the model's code has under -ffunction-sections -fdata-sections, and a copy
and a zero table the Cortex-M reset code walks. Items left where they are (the board's
flash and RAM windows) add nothing. Every number reaches the linker script from the board
file or the archive, never from the request's text.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from generator.boards import REGION_KINDS, Board, MemoryRegion
from generator.errors import ProjectError
from generator.mlf.model import ModuleInfo
from generator.project.sizing import arena_bytes_for

# What can be placed, hot first (the order `auto` fills regions in).
ITEMS = ("activations", "scratch", "weights", "code")
# The input sections of each item (GNU ld wildcards), from the names the generated code uses.
PATTERNS = {
    # our exporter's planned pool, and the USMP pools the model glue declares
    "activations": ["*(.bss.tvmgen_*_workspace_pool)", "*(.bss.pool_*)"],
    # the runtime's workspace arena, and the accelerator drivers' buffers
    "scratch": ["*(.bss.workspace_arena)", "*/accel/*(.bss .bss.*)"],
    "weights": ["*(.rodata.tvmgen_*_const_*)"],
    "code": ["*(.text.tvmgen_*)"],
}
LOADED = ("weights", "code")  # their bytes are in the image; the others are zeroed at reset
SECTION_ALIGN = 16
# Files the port's linker script includes (each project has both, empty without --place).
REGIONS_FILE = "mtvg_regions.ld"
PLACEMENT_FILE = "mtvg_placement.ld"
AUTO = "auto"


@dataclass(frozen=True)
class Placement:
    """Each placed item's region (absent: where the port's script puts it), the board as the
    project sees it (its RAM window without regions taken from either end), and sizes."""

    regions: dict[str, MemoryRegion]
    board: Board
    sizes: dict[str, int | None]  # bytes per item; None: known only after the link

    def record(self) -> dict:
        return {item: {"region": r.name, "origin": r.origin, "size": r.size,
                       "bytes": self.sizes[item]} for item, r in self.regions.items()}


def parse_request(text: str | None) -> dict[str, str] | str | None:
    """'activations=DTCM,weights=DDR' → {item: region name}; 'auto' → AUTO; None: none."""
    if text is None or text == "":
        return None
    if text.strip() == AUTO:
        return AUTO
    request: dict[str, str] = {}
    for part in text.split(","):
        item, sep, region = (p.strip() for p in part.partition("="))
        if not sep or item not in ITEMS or not region:
            raise ProjectError(f"--place {text!r}: give ITEM=REGION pairs separated by ',' "
                               f"(items: {', '.join(ITEMS)}) or 'auto'")
        if item in request:
            raise ProjectError(f"--place {text!r}: {item} is named twice")
        request[item] = region.upper()
    return request


def item_sizes(module: ModuleInfo, accelerator_scratch: int) -> dict[str, int | None]:
    """What each item needs, from the archive (code: only the link knows)."""
    planned = module.plan.pool_bytes if module.plan is not None else 0
    return {"activations": planned + sum(p.size_bytes for p in module.pools if not p.internal),
            "scratch": arena_bytes_for(module) + accelerator_scratch,
            "weights": module.constants_size_bytes,
            "code": None}


def place(request: dict[str, str] | str | None, board: Board, module: ModuleInfo,
          accelerator_scratch: int = 0) -> Placement | None:
    """Check the request against the board and the sizes; None when nothing is placed."""
    if request is None:
        return None
    if not board.regions:
        raise ProjectError(f"board '{board.name}' lists no memory regions; --place needs a "
                           "board file with [[regions]] (e.g. qemu-mps3-an547, nucleo-f746zg)")
    if module.plan is None:
        raise ProjectError("--place needs an archive microtvm-gen exported (MLF v8): the "
                           "sections it places are named by our exporter's code")
    sizes = item_sizes(module, accelerator_scratch)
    chosen = _auto(board, sizes) if request == AUTO else _named(request, board)
    moved = {item: r for item, r in chosen.items() if not _is_window(r, board)}
    _check_fit(moved, sizes)
    return Placement(moved, _carved(board, moved), sizes)


def _named(request: dict[str, str], board: Board) -> dict[str, MemoryRegion]:
    by_name = {r.name: r for r in board.regions}
    chosen = {}
    for item, name in request.items():
        region = by_name.get(name)
        if region is None:
            raise ProjectError(f"board '{board.name}' has no memory region {name} (it has "
                               f"{', '.join(by_name)})")
        if item not in LOADED and not region.writable:
            raise ProjectError(f"{item} cannot go in {name}: it is {region.kind}, read-only")
        if item == "code" and not region.executable:
            raise ProjectError(f"code cannot go in {name}: the board file does not mark it "
                               "executable")
        chosen[item] = region
    return chosen


def _auto(board: Board, sizes: dict[str, int | None]) -> dict[str, MemoryRegion]:
    """Hot and small first: each item into the fastest region that is faster than where the
    port puts it (the flash window for weights and code, the RAM window for the others) and
    has room left; else it stays."""
    free = {r.name: r.size for r in board.regions}
    speed = {r.name: REGION_KINDS.index(r.kind) for r in board.regions}
    others = sorted((r for r in board.regions if not _is_window(r, board)),
                    key=lambda r: speed[r.name])
    chosen = {}
    for item in ITEMS:
        need = sizes[item]
        if not need:  # nothing to place, or (code) only the link can tell
            continue
        home = _window_speed(board, item in LOADED)
        for region in others:
            if speed[region.name] >= home or free[region.name] < need \
                    or (item not in LOADED and not region.writable):
                continue
            chosen[item] = region
            free[region.name] -= -(-need // SECTION_ALIGN) * SECTION_ALIGN
            break
    return chosen


def _window_speed(board: Board, flash: bool) -> int:
    """The speed class of the board's flash (or RAM) window: its region's, else flash's (or
    SRAM's)."""
    origin, size = ((board.flash_origin, board.flash_bytes) if flash
                    else (board.ram_origin, board.ram_bytes))
    same = next((r for r in board.regions if (r.origin, r.size) == (origin, size)), None)
    return REGION_KINDS.index(same.kind if same else ("flash" if flash else "sram"))


def _is_window(region: MemoryRegion, board: Board) -> bool:
    """Whether the region is the board's own flash or RAM window (nothing to move)."""
    return ((region.origin, region.size) in
            ((board.flash_origin, board.flash_bytes), (board.ram_origin, board.ram_bytes)))


def _check_fit(moved: dict[str, MemoryRegion], sizes: dict[str, int | None]) -> None:
    used: dict[str, int] = {}
    for item, region in moved.items():
        need = sizes[item] or 0
        used[region.name] = used.get(region.name, 0) + -(-need // SECTION_ALIGN) * SECTION_ALIGN
        if used[region.name] > region.size:
            what = ", ".join(f"{i} {sizes[i] or 0:,} B" for i, r in moved.items()
                             if r.name == region.name)
            raise ProjectError(f"--place: {what} do not fit {region.name} ({region.size:,} B at "
                               f"0x{region.origin:08x})")


def _carved(board: Board, moved: dict[str, MemoryRegion]) -> Board:
    """The board with its RAM window less the regions placed at either end of it; a region
    in the middle would split the window, and is refused."""
    if board.ram_origin is None or board.ram_bytes is None:
        return board
    start, end = board.ram_origin, board.ram_origin + board.ram_bytes
    for region in sorted(set(moved.values()), key=lambda r: r.origin):
        if region.end <= start or region.origin >= end:
            continue
        if region.origin <= start:
            start = max(start, region.end)
        elif region.end >= end:
            end = min(end, region.origin)
        else:
            raise ProjectError(f"{region.name} lies inside the RAM window of board "
                               f"'{board.name}' (0x{board.ram_origin:08x}, {board.ram_bytes:,} "
                               "B) but at neither end; place into a region at one end of it")
    if end <= start:
        raise ProjectError(f"--place leaves no RAM window on board '{board.name}'")
    return dataclasses.replace(board, ram_origin=start, ram_bytes=end - start)


def linker_files(placement: Placement | None) -> dict[str, bytes]:
    """The two files the port's linker script includes."""
    head = "/* Generated by microtvm-gen: {} (generate --place). */\n"
    if placement is None:
        return {REGIONS_FILE: head.format("no memory placed").encode(),
                PLACEMENT_FILE: head.format("no memory placed").encode()}
    regions = sorted(set(placement.regions.values()), key=lambda r: r.origin)
    memory = [head.format("the regions placed items go to")]
    for r in regions:
        access = "rwx" if r.executable and r.writable else ("rx" if r.executable else
                                                            ("rw" if r.writable else "r"))
        memory.append(f"MTVG_{r.name} ({access}) : ORIGIN = 0x{r.origin:08x}, "
                      f"LENGTH = 0x{r.size:x}\n")
    sections = [head.format(", ".join(f"{i} in {r.name}" for i, r in
                                      placement.regions.items()))]
    copies, zeros = [], []
    for item, region in placement.regions.items():
        name = f".mtvg_{item}"
        body = " ".join(PATTERNS[item])
        if item in LOADED and region.writable:  # stored in flash, copied at reset
            sections.append(f"{name} : ALIGN({SECTION_ALIGN}) {{ {body} }} > MTVG_{region.name}"
                            " AT> FLASH\n")
            copies.append(name)
        elif item in LOADED:  # in a flash region of its own: loaded where it runs
            sections.append(f"{name} : ALIGN({SECTION_ALIGN}) {{ {body} }} > MTVG_{region.name}\n")
        else:
            sections.append(f"{name} (NOLOAD) : ALIGN({SECTION_ALIGN}) {{ {body} }} > "
                            f"MTVG_{region.name}\n")
            zeros.append(name)
    table = ["/* Walked by the Cortex-M reset code: {load, start, bytes} and {start, bytes}. */\n",
             ".mtvg_tables : ALIGN(4)\n{\n  __mtvg_copy_table_start__ = .;\n"]
    table += [f"  LONG(LOADADDR({n})) LONG(ADDR({n})) LONG(SIZEOF({n}))\n" for n in copies]
    table += ["  __mtvg_copy_table_end__ = .;\n  __mtvg_zero_table_start__ = .;\n"]
    table += [f"  LONG(ADDR({n})) LONG(SIZEOF({n}))\n" for n in zeros]
    table += ["  __mtvg_zero_table_end__ = .;\n} > FLASH\n"]
    return {REGIONS_FILE: "".join(memory).encode(),
            PLACEMENT_FILE: "".join(sections + table).encode()}
