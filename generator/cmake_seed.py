"""CMake's compiler checks once per toolchain, not once per build directory.

The first `cmake` of a build directory spends most of its time (about 0.3 of 0.45 CPU s
here) finding out what the compiler is: it builds probe programs and writes the answers to
`CMakeFiles/<cmake version>/CMakeSystem.cmake` and `CMake<LANG>Compiler.cmake`. When those
files are there and the cache entry CMAKE_PLATFORM_INFO_INITIALIZED is set, CMake reads
them instead of probing (it is how a build directory configures again without probing).

The answers depend on CMake, the generator, the compiler, the project's toolchain file and
the environment CMake reads, and on nothing else of the project. A *seed* is those files
from a first configure, stored under a key made of exactly these inputs in
`$XDG_CACHE_HOME/microtvm-gen/cmake-seeds` (`~/.cache/...`); the next first configure with
the same key starts from it. The seed's one project path (CMakeSystem.cmake includes the
project's toolchain file) is written back for the new project. A configure that fails with a
seed is run again without it and the seed is dropped, so a seed can cost time, never a build.
`MICROTVM_GEN_CMAKE_SEEDS=0` turns seeds off.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

SEEDS_ENV = "MICROTVM_GEN_CMAKE_SEEDS"
SEED_DIR = "cmake-seeds"
INITIALIZED = "-DCMAKE_PLATFORM_INFO_INITIALIZED:INTERNAL=1"
PROJECT_PLACEHOLDER = "@MTVG_SEED_PROJECT_DIR@"
TOOLCHAIN_FILE = "cmake/toolchain.cmake"  # the CRT template's, for cross boards
# What a first configure leaves in CMakeFiles/<version>/ that CMake reads back.
SEED_FILE_RE = re.compile(r"^CMake(System|\w+Compiler)\.cmake$")
VERSION_DIR_RE = re.compile(r"^\d+\.\d+(\.\d+)?\S*$")
# Environment CMake reads while it finds and checks the compiler.
COMPILER_ENV = ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "ASM", "ASMFLAGS", "PATH",
                "SDKROOT", "CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX")
# A project path goes into a quoted CMake string: only characters that need no escaping.
PLAIN_PATH_RE = re.compile(r"^[\w./+@%,:=~-]+$")


@dataclass(frozen=True)
class Seed:
    """Where the seed for one configure lives, and whether seeds can be used at all."""
    folder: Path | None  # None: seeds are off for this configure

    def usable(self) -> bool:
        return self.folder is not None and (self.folder / "version").is_file()


def seeds_enabled() -> bool:
    return os.environ.get(SEEDS_ENV, "").strip().lower() not in ("0", "off", "no", "false")


def seed_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "microtvm-gen" / SEED_DIR


def _identity(program: str | None) -> list:
    """A program as found on PATH: its real path, size and modification time."""
    found = shutil.which(program) if program else None
    if found is None:
        return [program, None]
    real = os.path.realpath(found)
    st = os.stat(real)
    return [real, st.st_size, st.st_mtime_ns]


def seed_for(project_dir: Path, configure: list[str], compiler: str) -> Seed:
    """The seed a first configure of `project_dir` with `configure` (the cmake command line,
    without the source and build directories) and `compiler` (C compiler name) may use."""
    if not seeds_enabled() or not PLAIN_PATH_RE.match(str(project_dir)):
        return Seed(None)
    toolchain = project_dir / TOOLCHAIN_FILE
    key = {
        "cmake": _identity(configure[0]),
        "arguments": configure[1:],
        "compiler": [_identity(os.environ.get("CC") or compiler), _identity("cc")],
        "toolchain": (toolchain.read_text(errors="replace").replace(str(project_dir),
                                                                    PROJECT_PLACEHOLDER)
                      if toolchain.is_file() else None),
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k in COMPILER_ENV or k.startswith("CMAKE_")},
        "programs": [_identity(a.split("=", 1)[1]) for a in configure
                     if a.startswith(("-DCMAKE_MAKE_PROGRAM=", "-DCMAKE_C_COMPILER_LAUNCHER="))],
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return Seed(seed_root() / digest)


def plant(seed: Seed, project_dir: Path, build_dir: Path) -> list[str]:
    """Put the seed's files into a fresh build directory; the extra cmake arguments that make
    CMake read them ([] when there is no seed to plant)."""
    if not seed.usable():
        return []
    assert seed.folder is not None
    try:
        version = (seed.folder / "version").read_text().strip()
        if not VERSION_DIR_RE.match(version):
            return []
        files = {p.name: p.read_text() for p in seed.folder.iterdir()
                 if SEED_FILE_RE.match(p.name)}
    except OSError:
        return []
    if "CMakeSystem.cmake" not in files:
        return []
    target = build_dir / "CMakeFiles" / version
    target.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (target / name).write_text(text.replace(PROJECT_PLACEHOLDER, str(project_dir)))
    return [INITIALIZED]


def harvest(seed: Seed, project_dir: Path, build_dir: Path) -> None:
    """Keep what a first configure (made without a seed) found, for the next one."""
    if seed.folder is None or seed.usable():
        return
    versions = [d for d in (build_dir / "CMakeFiles").glob("*")
                if d.is_dir() and VERSION_DIR_RE.match(d.name)]
    if len(versions) != 1:
        return
    files = {p.name: p.read_text(errors="replace") for p in versions[0].iterdir()
             if SEED_FILE_RE.match(p.name)}
    if "CMakeSystem.cmake" not in files or "CMakeCCompiler.cmake" not in files:
        return
    try:
        seed.folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".new-", dir=seed.folder.parent))
        for name, text in files.items():
            (staging / name).write_text(text.replace(str(project_dir), PROJECT_PLACEHOLDER))
        (staging / "version").write_text(versions[0].name + "\n")
        try:
            staging.rename(seed.folder)  # another build made the same seed meanwhile: keep it
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError:
        return  # no cache folder to write: the next build probes again


def drop(seed: Seed) -> None:
    if seed.folder is not None:
        shutil.rmtree(seed.folder, ignore_errors=True)
