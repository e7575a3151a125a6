"""Configuring and building a generated project with CMake and Ninja."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from generator.boards import Board, load_board
from generator.elfsize import SizeReport, elf_size, symbol_sizes
from generator.errors import ToolchainError
from generator.project.record import load_project
from generator.toolchain import (
    BUILD_DIR,
    BUILD_INFO,
    FIRMWARE,
    MAP_FILE,
    SETTINGS,
    cmake_program,
    configured_elsewhere,
    ninja_program,
    ram_use_from_map,
    recorded_sanitize,
    require_compiler,
    run_logged,
)

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

    def to_json(self) -> dict:
        return {"elf": str(self.elf), "sanitize": self.sanitize,
                "size": {**asdict(self.size), "flash": self.size.flash, "ram": self.size.ram},
                "arena_bytes": self.arena_bytes,
                "workspace_size_bytes": self.workspace_size_bytes,
                "executor": self.executor,
                "storage_bytes_needed": self.storage_bytes_needed,
                "storage_bytes_reserved": self.storage_bytes_reserved}


def board_ram(board: Board) -> tuple[int, int] | None:
    if board.ram_origin is None or board.ram_bytes is None:
        return None
    return board.ram_origin, board.ram_bytes


def build(project_dir: Path, sanitize: bool | None = None, progress=None) -> BuildResult:
    """Configure (once) and build; `sanitize=None` keeps the setting of the last build."""
    project_dir = project_dir.resolve()
    project = load_project(project_dir)
    if "zephyr" in project:
        return _build_zephyr(project_dir, project, sanitize, progress)
    board = load_board(project["board"])
    require_compiler(board)
    build_dir = project_dir / BUILD_DIR
    previous = recorded_sanitize(project_dir)
    if sanitize is None:
        sanitize = bool(previous)
    if sanitize and not board.is_native:
        raise ToolchainError(f"--sanitize needs a host build; board '{board.name}' runs "
                             "cross-compiled firmware")
    if build_dir.exists() and (previous != sanitize or configured_elsewhere(project_dir)):
        shutil.rmtree(build_dir)  # configured otherwise, by an older version, or elsewhere
    build_dir.mkdir(exist_ok=True)
    (build_dir / SETTINGS).write_text(json.dumps({"sanitize": sanitize}) + "\n")
    log = build_dir / "build.log"
    log.write_text("")
    configure = [cmake_program(), "-S", str(project_dir), "-B", str(build_dir),
                 "-DCMAKE_BUILD_TYPE=", f"-DMTVG_SANITIZE={'ON' if sanitize else 'OFF'}"]
    ninja = ninja_program()
    if ninja:
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    # Cross boards: the project's CMakeLists picks up its cmake/toolchain.cmake by itself.
    if progress:
        progress("configuring")
    if not (build_dir / "CMakeCache.txt").exists():
        run_logged(configure, project_dir, "CMake configure", log)
    if progress:
        progress("compiling")
    try:
        run_logged([cmake_program(), "--build", str(build_dir), "--", "-j2"] if ninja is None
                   else [cmake_program(), "--build", str(build_dir)], project_dir, "build", log)
    except ToolchainError as exc:
        # A port's linker ASSERT on RAM names no numbers; the map file has them.
        used = ram_use_from_map(build_dir / MAP_FILE, board) if "RAM" in str(exc) else None
        if used is None:
            raise
        raise ToolchainError(f"{exc}; {used}") from None
    return _result(project_dir, project, board, build_dir / FIRMWARE, sanitize)


def _result(project_dir: Path, project: dict, board: Board, elf: Path,
            sanitize: bool) -> BuildResult:
    """Sizes and buffers of a built ELF, recorded in build/build.json."""
    info_path = project_dir / BUILD_DIR / BUILD_INFO
    size = elf_size(elf, board_ram(board))
    module = project["module"]
    symbols = symbol_sizes(elf, {ARENA_SYMBOL, STORAGE_SYMBOL})
    result = BuildResult(project_dir, elf, size, sanitize, symbols.get(ARENA_SYMBOL, 0),
                         module["workspace_size_bytes"], module["executor"],
                         module.get("storage_bytes", 0), symbols.get(STORAGE_SYMBOL, 0))
    info_path.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    return result


def _build_zephyr(project_dir: Path, project: dict, sanitize: bool | None,
                  progress) -> BuildResult:
    """A project from templates/zephyr: `west build`, or CMake + Ninja with ZEPHYR_BASE."""
    from generator.project.zephyr import build_zephyr, project_board

    if sanitize:
        raise ToolchainError("--sanitize needs a host build; Zephyr projects are firmware")
    board = project_board(project)
    build_dir = project_dir / BUILD_DIR
    if configured_elsewhere(project_dir):
        shutil.rmtree(build_dir)
    build_dir.mkdir(exist_ok=True)
    log = build_dir / "build.log"
    log.write_text("")
    elf = build_zephyr(project_dir, project, build_dir, log, progress=progress)
    return _result(project_dir, project, board, elf, False)
