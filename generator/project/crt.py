"""The CRT template (templates/crt): a CMake project for a board file's board, built with
CMake, Ninja and the board's GNU toolchain."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from generator import cmake_seed
from generator.boards import Board, list_boards, load_board
from generator.errors import ToolchainError
from generator.project.backend import BuiltFirmware, TemplateBackend, TemplateBoard
from generator.toolchain import (
    BUILD_DIR,
    FIRMWARE,
    MAP_FILE,
    SETTINGS,
    cmake_program,
    compiler_cache,
    compiler_cache_env,
    configured_elsewhere,
    ninja_program,
    ram_use_from_map,
    recorded_sanitize,
    recorded_setting,
    require_compiler,
    run_logged,
)

if TYPE_CHECKING:
    import jinja2  # render_extras' type; the renderer imports it


class CrtBackend(TemplateBackend):
    """Boards from boards/*.toml; a cross toolchain file for boards that are not the host."""

    name = "crt"
    title = "CRT"
    platform_name = "crt"

    def board_names(self, template: Path) -> list[str]:
        return list_boards()

    def template_board(self, template: Path, name: str) -> TemplateBoard:
        return TemplateBoard(load_board(name))

    def project_board(self, project: dict) -> Board:
        return load_board(project["board"])

    def render_extras(self, env: jinja2.Environment, context: dict,
                      board: Board) -> dict[str, bytes]:
        if board.is_native:
            return {}
        return {"cmake/toolchain.cmake":
                env.get_template("toolchain.cmake.j2").render(context).encode()}

    def build(self, project_dir: Path, project: dict, board: Board, sanitize: bool | None,
              progress: Callable[[str], None] | None) -> BuiltFirmware:
        return cmake_build(project_dir, board, sanitize, progress)


def first_configure(cmake: str, options: list[str], project_dir: Path, build_dir: Path,
                    compiler: str, log: Path) -> None:
    """The build directory's first configure, from a seed of CMake's compiler checks when one
    matches (generator/cmake_seed.py); one that fails with a seed runs again without."""
    configure = [cmake, "-S", str(project_dir), "-B", str(build_dir), *options]
    seed = cmake_seed.seed_for(project_dir, [cmake, *options], compiler)
    extra = cmake_seed.plant(seed, project_dir, build_dir)
    if extra:
        try:
            run_logged(configure + extra, project_dir, "CMake configure", log)
            return
        except ToolchainError:
            cmake_seed.drop(seed)
            shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)
            (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
            log.write_text("")  # the error of a failing build is the plain configure's
    run_logged(configure, project_dir, "CMake configure", log)
    cmake_seed.harvest(seed, project_dir, build_dir)


def cmake_build(project_dir: Path, board: Board, sanitize: bool | None,
                progress: Callable[[str], None] | None) -> BuiltFirmware:
    """Configure (once) and build with CMake and Ninja; `sanitize=None` keeps the setting
    of the last build."""
    require_compiler(board)
    build_dir = project_dir / BUILD_DIR
    previous = recorded_sanitize(project_dir)
    if sanitize is None:
        sanitize = bool(previous)
    if sanitize and not board.is_native:
        raise ToolchainError(f"--sanitize needs a host build; board '{board.name}' runs "
                             "cross-compiled firmware")
    cache = compiler_cache()
    if build_dir.exists() and (previous != sanitize or configured_elsewhere(project_dir)
                               or recorded_setting(project_dir, "compiler_cache", cache) != cache):
        shutil.rmtree(build_dir)  # configured otherwise, by an older version, or elsewhere
    build_dir.mkdir(exist_ok=True)
    (build_dir / SETTINGS).write_text(json.dumps({"sanitize": sanitize,
                                                  "compiler_cache": cache}) + "\n")
    log = build_dir / "build.log"
    log.write_text("")
    options = ["-DCMAKE_BUILD_TYPE=", f"-DMTVG_SANITIZE={'ON' if sanitize else 'OFF'}"]
    ninja = ninja_program()
    if ninja:
        options += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    if cache:
        options.append(f"-DCMAKE_C_COMPILER_LAUNCHER={cache}")
    # Cross boards: the project's CMakeLists picks up its cmake/toolchain.cmake by itself.
    if progress:
        progress("configuring")
    if not (build_dir / "CMakeCache.txt").exists():
        first_configure(cmake_program(), options, project_dir, build_dir, board.tool("gcc"),
                        log)
    if progress:
        progress("compiling")
    try:
        run_logged([cmake_program(), "--build", str(build_dir), "--", "-j2"] if ninja is None
                   else [cmake_program(), "--build", str(build_dir)], project_dir, "build", log,
                   env=compiler_cache_env(project_dir) if cache else None)
    except ToolchainError as exc:
        # A port's linker ASSERT on RAM names no numbers; the map file has them.
        used = ram_use_from_map(build_dir / MAP_FILE, board) if "RAM" in str(exc) else None
        if used is None:
            raise
        raise ToolchainError(f"{exc}; {used}") from None
    return BuiltFirmware(build_dir / FIRMWARE, sanitize)
