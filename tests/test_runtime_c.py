"""The C runtime's unit tests, built with -Werror and run under ASan/UBSan on the host."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from generator.boards import list_boards, load_board
from tests.conftest import REPO, port_folder

COMMON = REPO / "templates" / "common"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer"]


def test_runtime_unit_tests_under_sanitizers(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp_path / "test_runtime"
    sources = [REPO / "tests" / "c" / "test_runtime.c", COMMON / "src" / "workspace.c",
               COMMON / "src" / "framing.c"]
    subprocess.run(["gcc", *STRICT, *SANITIZE, "-I", str(COMMON / "include"),
                    *map(str, sources), "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("passed, 0 failed")


@pytest.mark.parametrize("board", list_boards())
def test_runtime_and_platform_compile_warning_free(tmp_path, board):
    """Every runtime and platform file compiles with -Wall -Wextra -Werror for every board,
    with the board's own compiler flags (CPU, FPU, ABI, image)."""
    spec = load_board(board)
    cc, flags = spec.tool("gcc"), list(spec.cflags)
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed")
    files = [*sorted((COMMON / "src").glob("*.c")),
             *sorted(port_folder(spec.platform, tmp_path).glob("*.c")),
             REPO / "templates" / "crt" / "src" / "app.c"]
    for src in files:
        subprocess.run([cc, *STRICT, *flags, "-I", str(COMMON / "include"), "-c", str(src),
                        "-o", str(tmp_path / (src.stem + ".o"))], check=True)
