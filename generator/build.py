"""Configuring and building a generated project with CMake and Ninja."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from generator.boards import Board, load_board
from generator.elfsize import SizeReport, elf_size, symbol_sizes
from generator.errors import ToolchainError
from generator.project.generate import load_project

BUILD_DIR = "build"
BUILD_INFO = "build.json"
FIRMWARE = "firmware.elf"
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


def cmake_program() -> str:
    """CMake from the PyPI package when installed (pinned), else from PATH."""
    try:
        import cmake  # type: ignore[import-untyped]

        candidate = Path(cmake.CMAKE_BIN_DIR) / "cmake"
        if candidate.is_file():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("cmake")
    if not found:
        raise ToolchainError("cmake not found", hint="pip install cmake")
    return found


def ninja_program() -> str | None:
    try:
        import ninja  # type: ignore[import-untyped]

        candidate = Path(ninja.BIN_DIR) / "ninja"
        if candidate.is_file():
            return str(candidate)
    except ImportError:
        pass
    return shutil.which("ninja")


def board_ram(board: Board) -> tuple[int, int] | None:
    if board.ram_origin is None or board.ram_bytes is None:
        return None
    return board.ram_origin, board.ram_bytes


def require_compiler(board: Board) -> None:
    gcc = board.tool("gcc")
    if shutil.which(gcc) is None:
        hint = ("apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi"
                if board.toolchain == "arm-none-eabi" else "install a C compiler")
        raise ToolchainError(f"board '{board.name}' needs {gcc}, which is not on PATH", hint=hint)


def _run(cmd: list[str], cwd: Path, what: str, log: Path) -> None:
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "CLICOLOR": "0"})
    if proc.returncode != 0:
        lines = log.read_text(errors="replace").strip().splitlines()
        first_error = next((ln.strip() for ln in lines if "error" in ln.lower()),
                           lines[-1] if lines else "")
        raise ToolchainError(f"{what} failed (exit {proc.returncode}): {first_error[:300]}; "
                             f"full log in {log}")


def build(project_dir: Path, sanitize: bool = False, progress=None) -> BuildResult:
    project_dir = project_dir.resolve()
    project = load_project(project_dir)
    board = load_board(project["board"])
    require_compiler(board)
    build_dir = project_dir / BUILD_DIR
    info_path = build_dir / BUILD_INFO
    if build_dir.exists() and info_path.exists():
        previous = json.loads(info_path.read_text())
        if previous.get("sanitize") != sanitize:
            shutil.rmtree(build_dir)
    build_dir.mkdir(exist_ok=True)
    log = build_dir / "build.log"
    log.write_text("")
    configure = [cmake_program(), "-S", str(project_dir), "-B", str(build_dir),
                 "-DCMAKE_BUILD_TYPE=", f"-DMTVG_SANITIZE={'ON' if sanitize else 'OFF'}"]
    ninja = ninja_program()
    if ninja:
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    if not board.is_native:
        configure.append(f"-DCMAKE_TOOLCHAIN_FILE={project_dir / 'cmake' / 'toolchain.cmake'}")
    if progress:
        progress("configuring")
    if not (build_dir / "CMakeCache.txt").exists():
        _run(configure, project_dir, "CMake configure", log)
    if progress:
        progress("compiling")
    _run([cmake_program(), "--build", str(build_dir), "--", "-j2"] if ninja is None else
         [cmake_program(), "--build", str(build_dir)], project_dir, "build", log)
    elf = build_dir / FIRMWARE
    size = elf_size(elf, board_ram(board))
    module = project["module"]
    symbols = symbol_sizes(elf, {ARENA_SYMBOL, STORAGE_SYMBOL})
    result = BuildResult(project_dir, elf, size, sanitize, symbols.get(ARENA_SYMBOL, 0),
                         module["workspace_size_bytes"], module["executor"],
                         module.get("storage_bytes", 0), symbols.get(STORAGE_SYMBOL, 0))
    info_path.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    return result
