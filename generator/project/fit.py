"""Will the firmware fit the board? A conservative check made before anything is built.

It counts only memory the generated firmware certainly reserves: the static buffers the glue
declares (I/O, workspace arena, external pools, graph storage), the pools the archive's own
code declares, the graph executor's tables at their smallest possible size, the constants
compiled into flash, and the stack the board's linker script keeps. The runtime's own data,
code and alignment are left out, so a firmware this check lets through may still fail to
link; the linker then says by how much.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator import abi, hints
from generator.boards import Board
from generator.errors import MtgError, UnsupportedModelError
from generator.mlf.model import ModuleInfo
from generator.project.checks import OtherBoards, board_files, check_buildable
from generator.project.sizing import HOST_DRIVEN, arena_bytes_for, rpc_pool_bytes

# Native boards have no [memory] table. With gcc's default (small) code model a program's
# static data must lie within 2 GiB on x86-64 (4 GiB on AArch64: ADRP's +-4 GiB range).
NATIVE_STATIC_LIMIT = {"x86_64": 2 << 30, "aarch64": 4 << 30}
NATIVE_STATIC_LIMIT_DEFAULT = 2 << 30

# Smallest sizes of the graph executor's table entries with 32-bit pointers (64-bit hosts
# use more), as mtvg/graph.h defines and asserts them.
GRAPH_STORAGE_SLOT_MIN = abi.constant("MTVG_GRAPH_STORAGE_MIN_SIZE")  # mtvg_graph_storage_t
# mtvg_graph_entry_t without its shape array and DLTensor
GRAPH_ENTRY_MIN = abi.constant("MTVG_GRAPH_ENTRY_HEAD_SIZE")
GRAPH_DIM_BYTES = abi.constant("MTVG_GRAPH_DIM_SIZE")  # one int64_t of an entry's shape array
# mtvg_graph_node_t + its row_ptr, arg_nodes and inputs slots
GRAPH_NODE_MIN = (abi.constant("MTVG_GRAPH_NODE_SIZE")
                  + 3 * abi.constant("MTVG_GRAPH_NODE_INDEX_SIZE"))
GRAPH_REF_BYTES = abi.constant("MTVG_GRAPH_REF_SIZE")  # mtvg_graph_ref_t


@dataclass(frozen=True)
class MemoryNeed:
    """What the firmware certainly reserves, item by item (bytes)."""

    ram: dict[str, int]  # static RAM
    flash: dict[str, int]  # read-only data in flash
    stack: int = 0  # the stack the linker script reserves in RAM

    @property
    def ram_bytes(self) -> int:
        return sum(self.ram.values())

    @property
    def flash_bytes(self) -> int:
        return sum(self.flash.values())


def _graph_tables_min(limits: dict[str, int]) -> int:
    """Smallest size of mtvg_graph_t for these MTVG_GRAPH_MAX_* values."""
    entry = GRAPH_ENTRY_MIN + GRAPH_DIM_BYTES * limits["MTVG_GRAPH_MAX_NDIM"]
    return (limits["MTVG_GRAPH_MAX_STORAGE"] * GRAPH_STORAGE_SLOT_MIN
            + limits["MTVG_GRAPH_MAX_ENTRIES"] * entry
            + limits["MTVG_GRAPH_MAX_NODES"] * GRAPH_NODE_MIN
            + (limits["MTVG_GRAPH_MAX_INPUT_REFS"] + limits["MTVG_GRAPH_MAX_HEADS"])
            * GRAPH_REF_BYTES)


def estimate(module: ModuleInfo, board: Board, project_type: str = "standalone") -> MemoryNeed:
    """Memory a project of this module for this board certainly needs."""
    ram: dict[str, int] = {"workspace arena": arena_bytes_for(module)}
    flash: dict[str, int] = {}
    internal = sum(p.size_bytes for p in module.pools if p.internal)
    if module.plan is not None:
        internal = max(internal, module.plan.pool_bytes)
    ram["model pools"] = internal
    if project_type == HOST_DRIVEN:
        ram["RPC tensor pool"] = rpc_pool_bytes(board)
    elif module.executor == "graph" and module.graph is not None:
        ram["graph storage"] = module.graph.storage_bytes
        if module.graph_model is not None:
            ram["graph executor tables"] = _graph_tables_min(module.graph_model.limits())
        flash["parameters"] = sum(p.size_bytes for p in module.params)
    else:
        ram["inputs/outputs"] = sum(t.size_bytes for t in module.inputs + module.outputs)
        ram["external pools"] = sum(p.size_bytes for p in module.pools if not p.internal)
        flash["constants"] = module.constants_size_bytes
    return MemoryNeed({k: v for k, v in ram.items() if v},
                      {k: v for k, v in flash.items() if v},
                      board.stack_bytes or 0)


def _items(items: dict[str, int]) -> str:
    return ", ".join(f"{name} {size:,} B" for name, size in items.items())


def check_fits(module: ModuleInfo, board: Board, project_type: str = "standalone",
               origin: str = "", others: OtherBoards = board_files) -> MemoryNeed:
    """Refuse a firmware that certainly cannot fit the board's RAM or flash (the hint names
    the `others` it fits)."""
    need = estimate(module, board, project_type)
    shortfall = _shortfall(need, board)
    if shortfall is None:
        return need
    where = f"{origin}: " if origin else ""
    raise UnsupportedModelError(f"{where}{shortfall}", hint=hints.bigger_board(
        boards_it_fits(module, project_type, others(), but=board.name)))


def _shortfall(need: MemoryNeed, board: Board) -> str | None:
    """Why the estimate does not fit the board (its RAM, its flash, or a native program's
    static data limit), or None when it fits."""
    if board.ram_bytes is not None and need.ram_bytes + need.stack > board.ram_bytes:
        stack = f" + {need.stack:,} B stack" if need.stack else ""
        return (f"the firmware cannot fit board '{board.name}': it needs at least "
                f"{need.ram_bytes:,} B of RAM ({_items(need.ram)}){stack}; {board.name} has "
                f"{board.ram_bytes:,} B")
    if board.flash_bytes is not None and need.flash_bytes > board.flash_bytes:
        return (f"the firmware cannot fit board '{board.name}': it needs at least "
                f"{need.flash_bytes:,} B of flash ({_items(need.flash)}); {board.name} has "
                f"{board.flash_bytes:,} B")
    if board.is_native and board.ram_bytes is None:
        limit = NATIVE_STATIC_LIMIT.get(board.arch, NATIVE_STATIC_LIMIT_DEFAULT)
        total = need.ram_bytes + need.flash_bytes
        if total > limit:
            return (f"the firmware cannot be built for board '{board.name}': it needs at "
                    f"least {total:,} B of static data ({_items({**need.ram, **need.flash})}); "
                    f"a program built with gcc's default code model holds at most {limit:,} B")
    return None


def boards_it_fits(module: ModuleInfo, project_type: str, boards: list[tuple[str, Board]],
                   but: str = "") -> list[str]:
    """The `boards` (other than `but`) that can build the module and have the memory."""
    found = []
    for name, board in boards:
        if but in (name, board.name):
            continue
        try:
            check_buildable(module, board, "", project_type)
        except MtgError:
            continue
        if _shortfall(estimate(module, board, project_type), board) is None:
            found.append(name)
    return found
