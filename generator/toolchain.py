"""The toolchain side of a build: where builds go, finding CMake, Ninja and the compiler,
running them with a log, and reading what went wrong from that log or the linker's map.

A leaf of the package: the build (build.py) and every template back-end's build use it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from generator.boards import Board
from generator.errors import ToolchainError

BUILD_DIR = "build"
BUILD_INFO = "build.json"
# The configuration a build directory was made with; `run` and `serve` keep it.
SETTINGS = "settings.json"
FIRMWARE = "firmware.elf"
MAP_FILE = "firmware.map"  # -Wl,-Map in templates/crt/CMakeLists.txt.j2
# "0" (or off, no, false) builds without ccache even where it is installed.
COMPILER_CACHE_ENV = "MICROTVM_GEN_CCACHE"


def _from_wheel(package: str, bin_dir: str, tool: str) -> str | None:
    """A tool from its PyPI package (pinned) when that is installed."""
    try:
        module = importlib.import_module(package)
    except ImportError:
        return None
    candidate = Path(getattr(module, bin_dir)) / tool
    return str(candidate) if candidate.is_file() else None


def cmake_program() -> str:
    """CMake from the PyPI package when installed (pinned), else from PATH."""
    found = _from_wheel("cmake", "CMAKE_BIN_DIR", "cmake") or shutil.which("cmake")
    if not found:
        raise ToolchainError("cmake not found", hint="pip install cmake")
    return found


def ninja_program() -> str | None:
    return _from_wheel("ninja", "BIN_DIR", "ninja") or shutil.which("ninja")


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
        # From the build directory (ccache's relative paths): ../runtime/... → runtime/...
        line = re.sub(rf"(^|[\s'\"(]){re.escape('../')}(?=[\w.-]+/)", r"\1", line)
    line = re.sub(r"(^|\s)/\S*/([\w.-]*\bld(\.\w+)?):", r"\1\2:", line)
    return line[:ERROR_LINE_MAX]


def compiler_cache() -> str | None:
    """ccache, when it is on PATH and MICROTVM_GEN_CCACHE does not turn it off: a file
    compiled before with the same flags (the runtime of another project for the same board,
    a CMSIS-NN tree, a rebuild after `generate` wrote the project again) comes from its
    cache."""
    if os.environ.get(COMPILER_CACHE_ENV, "").strip().lower() in ("0", "off", "no", "false"):
        return None
    return shutil.which("ccache")


def compiler_cache_env(project_dir: Path) -> dict[str, str]:
    """ccache's settings for a project's build: paths under the project are hashed relative
    to it and the build directory is not hashed, so the same file of two projects is one
    cache entry (the compiler then sees and reports project paths from the build directory:
    `../runtime/src/...`, which first_error shortens as it does absolute ones)."""
    return {"CCACHE_BASEDIR": str(project_dir), "CCACHE_NOHASHDIR": "1"}


def run_logged(cmd: list[str], cwd: Path, what: str, log: Path,
               env: dict[str, str] | None = None) -> None:
    """Run one build step (with `env` added to the environment), its output appended to
    `log`; a failure raises with the line of the log that says what went wrong."""
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        # LC_ALL=C: plain ASCII quotes and English diagnostics for the one-line error.
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, **(env or {}), "CLICOLOR": "0",
                                   "LC_ALL": "C"})
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


def recorded_setting(project_dir: Path, name: str, default: object = None) -> object:
    """A setting our last configure recorded in the build directory; `default` where none
    is recorded (a build directory configured by hand, or by an older version)."""
    try:
        settings = json.loads((project_dir / BUILD_DIR / SETTINGS).read_text())
    except (OSError, ValueError):
        return default
    return settings.get(name, default) if isinstance(settings, dict) else default


def recorded_sanitize(project_dir: Path) -> bool | None:
    """The sanitizer setting the build directory was configured with, if it has one: ours,
    else the CMake cache's (a build directory configured by hand with plain CMake)."""
    recorded = recorded_setting(project_dir, "sanitize")
    if recorded is not None:
        return bool(recorded)
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
