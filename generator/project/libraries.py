"""Libraries an archive's code needs from outside: what its BYOC partitions call.

TVM ≤0.18 wrote each BYOC partition as its own C file whose first line is
`// tvm target: <codegen>`. A `cmsis-nn` partition calls CMSIS-NN's kernels, which the
project builds from a CMSIS-NN source tree the user names (`--cmsis-nn PATH`, the
`CMSIS_NN_PATH` environment variable, or the Project API option `cmsis_path`). A partition
of any other code generator calls a library this tool cannot supply: it is refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from generator.errors import ProjectError, UnsupportedModelError
from generator.mlf.model import ModuleInfo
from generator.project.cmsis_nn_sources import needed_sources

CMSIS_NN = "cmsis-nn"
CMSIS_NN_ENV = "CMSIS_NN_PATH"
CMSIS_NN_MARKER = Path("Include") / "arm_nnfunctions.h"
# Headers a project provides to any archive's code: the C library, our runtime's headers,
# the model's own interface header, and the compiler's Arm intrinsics.
PROVIDED_HEADERS = re.compile(
    r"(std\w*|math|float|limits|string|inttypes|stddef|assert|arm_acle|arm_mve)\.h"
    r"|dlpack/dlpack\.h|tvm/runtime/.+\.h|tvmgen_\w+\.h")
CMSIS_NN_HEADERS = re.compile(r"arm_nn\w*\.h")
# A path that reaches CMake text: no quotes, semicolons, '$', newlines or spaces.
SAFE_PATH_RE = re.compile(r"/[A-Za-z0-9_./+-]*")


@dataclass(frozen=True)
class Libraries:
    """What a project links besides our runtime."""

    cmsis_nn: Path | None = None


def needed_libraries(module: ModuleInfo, origin: str,
                     cmsis_nn: Path | None = None) -> Libraries:
    """Check the archive's partitions and return the libraries the project builds."""
    needs_cmsis = False
    for src in module.sources:
        name = src.path.rsplit("/", 1)[-1]
        if src.target == CMSIS_NN:
            needs_cmsis = True
            continue
        missing = [h for h in src.includes if not PROVIDED_HEADERS.fullmatch(h)
                   and not CMSIS_NN_HEADERS.fullmatch(h)]
        if src.is_partition or missing:
            what = (f"a '{src.target}' BYOC partition ({name})" if src.is_partition
                    else f"code ({name})")
            needs = f"<{missing[0]}>" if missing else "its vendor's library"
            raise UnsupportedModelError(
                f"{origin}: the archive has {what} that needs {needs}, which microtvm-gen "
                "cannot supply; only cmsis-nn partitions can be built")
    if not needs_cmsis:
        return Libraries()
    return Libraries(cmsis_nn=_cmsis_nn_tree(origin, cmsis_nn))


def cmsis_nn_files(libraries: Libraries | None, partitions: list[str]) -> list[str]:
    """The files of the CMSIS-NN tree (relative to it) that the partitions' C texts reach;
    their names come from the user's tree and reach CMake, so they are checked."""
    if libraries is None or libraries.cmsis_nn is None:
        return []
    needed = needed_sources(libraries.cmsis_nn, partitions)
    for rel in needed:
        if ".." in rel or not SAFE_PATH_RE.fullmatch("/" + rel):
            raise ProjectError(f"CMSIS-NN file {rel!r} has characters other than letters, "
                               "digits, '_', '.', '+', '-' and '/'")
    return needed


def _cmsis_nn_tree(origin: str, given: Path | None) -> Path:
    raw = given if given is not None else os.environ.get(CMSIS_NN_ENV)
    if not raw:
        raise ProjectError(
            f"{origin}: the archive has cmsis-nn partitions, which call CMSIS-NN; say where "
            f"its source tree is with --cmsis-nn PATH or {CMSIS_NN_ENV}")
    return cmsis_nn_root(raw)


def cmsis_nn_root(raw: str | Path) -> Path:
    """`raw` resolved, checked to be a CMSIS-NN source tree whose path CMake can take."""
    path = Path(raw).expanduser().resolve()
    if not (path / CMSIS_NN_MARKER).is_file() or not (path / "Source").is_dir():
        raise ProjectError(f"{path} is not a CMSIS-NN source tree (no {CMSIS_NN_MARKER} and "
                           "Source/)")
    if not SAFE_PATH_RE.fullmatch(path.as_posix()):
        raise ProjectError(f"the CMSIS-NN path {path.as_posix()!r} has characters other than "
                           "letters, digits, '_', '.', '+', '-' and '/'; move or link it")
    return path
