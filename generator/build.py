"""Building a generated project: its template's back-end builds the firmware (CMake and
Ninja for the CRT template, Zephyr's build for the Zephyr one); the sizes and buffers of the
ELF are measured and recorded in build/build.json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from generator.boards import Board
from generator.elfsize import SizeReport, elf_size, symbol_sizes
from generator.project.record import load_record
from generator.toolchain import BUILD_DIR, BUILD_INFO

# Static buffers of the generated glue (templates/crt/*_glue.c.j2), measured in the ELF.
ARENA_SYMBOL = "workspace_arena"
STORAGE_SYMBOL = "graph_storage"


@dataclass
class BuildResult:
    project_dir: Path
    elf: Path
    size: SizeReport
    sanitize: bool
    arena_bytes: int  # workspace arena in the firmware (its symbol's size)
    workspace_size_bytes: int  # what the archive says the model needs
    executor: str = "aot"
    storage_bytes_needed: int = 0  # graph executor: storage the graph needs
    storage_bytes_reserved: int = 0  # and what the firmware holds (its symbol's size)
    model_pool_bytes: int = 0  # activations in the model code's own static pools (MLF v8)

    def to_json(self) -> dict:
        return {"elf": str(self.elf), "sanitize": self.sanitize,
                "size": {**asdict(self.size), "flash": self.size.flash, "ram": self.size.ram},
                "arena_bytes": self.arena_bytes,
                "workspace_size_bytes": self.workspace_size_bytes,
                "executor": self.executor,
                "storage_bytes_needed": self.storage_bytes_needed,
                "storage_bytes_reserved": self.storage_bytes_reserved,
                "model_pool_bytes": self.model_pool_bytes}


def board_ram(board: Board) -> tuple[int, int] | None:
    if board.ram_origin is None or board.ram_bytes is None:
        return None
    return board.ram_origin, board.ram_bytes


def build(project_dir: Path, sanitize: bool | None = None, progress=None) -> BuildResult:
    """Configure (once) and build; `sanitize=None` keeps the setting of the last build."""
    project_dir = project_dir.resolve()
    record = load_record(project_dir)
    built = record.backend.build(project_dir, record.data, record.board, sanitize, progress)
    return _result(project_dir, record.data, record.board, built.elf, built.sanitize)


def _result(project_dir: Path, project: dict, board: Board, elf: Path,
            sanitize: bool) -> BuildResult:
    """Sizes and buffers of a built ELF, recorded in build/build.json."""
    info_path = project_dir / BUILD_DIR / BUILD_INFO
    size = elf_size(elf, board_ram(board))
    module = project["module"]
    symbols = symbol_sizes(elf, {ARENA_SYMBOL, STORAGE_SYMBOL})
    result = BuildResult(project_dir, elf, size, sanitize, symbols.get(ARENA_SYMBOL, 0),
                         module["workspace_size_bytes"], module["executor"],
                         module.get("storage_bytes", 0), symbols.get(STORAGE_SYMBOL, 0),
                         sum(p["size_bytes"] for p in module.get("pools", []) if p["internal"]))
    info_path.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    return result
