"""Configuring and building a generated project with CMake and Ninja."""

from __future__ import annotations

import json
import os
import re
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
# The configuration a build directory was made with; `run` and `serve` keep it.
SETTINGS = "settings.json"
FIRMWARE = "firmware.elf"
MAP_FILE = "firmware.map"  # -Wl,-Map in templates/crt/CMakeLists.txt.j2
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


# Debian packages of each cross toolchain (compiler and C library).
TOOLCHAIN_PACKAGES = {"arm-none-eabi": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
                      "riscv64-unknown-elf": "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf"}


def require_compiler(board: Board) -> None:
    gcc = board.tool("gcc")
    if shutil.which(gcc) is None:
        packages = TOOLCHAIN_PACKAGES.get(board.toolchain)
        hint = f"apt-get install {packages}" if packages else "install a C compiler"
        raise ToolchainError(f"board '{board.name}' needs {gcc}, which is not on PATH", hint=hint)


# Lines of a failed build that say what went wrong, most specific first: the linker's
# region overflow, a compiler diagnostic, the linker's own errors, then CMake's and Ninja's.
ERROR_PATTERNS = (
    re.compile(r"region [`'\"]?\S+?['\"]? overflowed by \d+ bytes"),
    re.compile(r":\d+(:\d+)?: (fatal )?error: "),
    re.compile(r"^(fatal )?error: |: fatal error: "),
    re.compile(r"undefined reference to|multiple definition of|cannot find -l|"
               r"relocation truncated to fit"),
    re.compile(r"\bld(\.\w+)?: .*(error|overflow|cannot|not fit)", re.I),
    re.compile(r"^CMake Error"),
    re.compile(r"^ninja: error: "),
)
# Summary lines that follow the real error and never explain it.
NOISE = re.compile(r"collect2: error: ld returned|ninja: build stopped|^FAILED: |"
                   r"all warnings being treated as errors|^compilation terminated")
ERROR_LINE_MAX = 300


def first_error(lines: list[str], project_dir: Path | None = None) -> str:
    """The line of a build log that says what failed (shortened), else its last line."""
    candidates = [ln.strip() for ln in lines if ln.strip() and not NOISE.search(ln)]
    for pattern in ERROR_PATTERNS:
        for index, line in enumerate(candidates):
            if pattern.search(line):
                if line.startswith("CMake Error") and index + 1 < len(candidates):
                    line = f"{line} {candidates[index + 1]}"
                return _shorten(line, project_dir)
    fallback = next((ln for ln in candidates if "error" in ln.lower()),
                    lines[-1].strip() if lines else "")
    return _shorten(fallback, project_dir)


def _shorten(line: str, project_dir: Path | None) -> str:
    """Paths relative to the project, the linker named without its directory."""
    if project_dir is not None:
        line = line.replace(f"{project_dir}/", "")
    line = re.sub(r"(^|\s)/\S*/([\w.-]*\bld(\.\w+)?):", r"\1\2:", line)
    return line[:ERROR_LINE_MAX]


def _run(cmd: list[str], cwd: Path, what: str, log: Path) -> None:
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        # LC_ALL=C: plain ASCII quotes and English diagnostics for the one-line error.
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "CLICOLOR": "0", "LC_ALL": "C"})
    if proc.returncode != 0:
        lines = log.read_text(errors="replace").splitlines()
        raise ToolchainError(f"{what} failed (exit {proc.returncode}): "
                             f"{first_error(lines, cwd)}; full log in {log}")


# Top-level output sections of a GNU ld map file: name, address, size.
MAP_SECTION_RE = re.compile(r"^(\.[\w.]+)\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)", re.M)


def ram_use_from_map(map_path: Path, board: Board) -> str | None:
    """What a failed link placed in the board's RAM, from its map file (ld writes one even
    when an ASSERT fails): the sections, the stack the board reserves, and the RAM size."""
    if board.ram_origin is None or not board.ram_bytes or not map_path.is_file():
        return None
    end = board.ram_origin + board.ram_bytes
    sections = {m[1]: int(m[3], 16) for m in MAP_SECTION_RE.finditer(
        map_path.read_text(errors="replace"))
        if int(m[3], 16) and board.ram_origin <= int(m[2], 16) < end}
    if not sections:
        return None
    stack = 0 if any("stack" in name for name in sections) else (board.stack_bytes or 0)
    parts = ", ".join(f"{name} {size:,} B" for name, size in sections.items())
    return (f"the firmware needs {sum(sections.values()) + stack:,} B of RAM ({parts}"
            + (f" + {stack:,} B stack" if stack else "")
            + f"); {board.name} has {board.ram_bytes:,} B")


def recorded_sanitize(project_dir: Path) -> bool | None:
    """The sanitizer setting the build directory was configured with, if it has one: ours,
    else the CMake cache's (a build directory configured by hand with plain CMake)."""
    path = project_dir / BUILD_DIR / SETTINGS
    try:
        return bool(json.loads(path.read_text())["sanitize"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = _cache_entry(project_dir / BUILD_DIR, "MTVG_SANITIZE")
    return None if value is None else value.upper() in ("ON", "TRUE", "1", "YES", "Y")


def _cache_entry(build_dir: Path, name: str) -> str | None:
    """A value from build_dir's CMakeCache.txt (`NAME:TYPE=value`), if present."""
    try:
        text = (build_dir / "CMakeCache.txt").read_text(errors="replace")
    except OSError:
        return None
    match = re.search(rf"^{re.escape(name)}:\w+=(.*)$", text, re.M)
    return match[1] if match else None


def configured_elsewhere(project_dir: Path) -> bool:
    """True when the build directory was configured for the project at another place (the
    project was moved or copied after a build): CMake refuses such a cache."""
    home = _cache_entry(project_dir / BUILD_DIR, "CMAKE_HOME_DIRECTORY")
    if home is None:
        return False
    try:
        return not Path(home).exists() or not Path(home).samefile(project_dir)
    except OSError:
        return True


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
        _run(configure, project_dir, "CMake configure", log)
    if progress:
        progress("compiling")
    try:
        _run([cmake_program(), "--build", str(build_dir), "--", "-j2"] if ninja is None else
             [cmake_program(), "--build", str(build_dir)], project_dir, "build", log)
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
