"""The graph executor's C unit tests (tests/c/test_graph.c), built with -Werror and run
under ASan/UBSan on the host."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO
from tests.test_runtime_c import COMMON, SANITIZE, STRICT

# Small enough that the node-limit test stays small, large enough for the hannah graph (18).
LIMITS = ["-DMTVG_GRAPH_MAX_NODES=24"]


def test_graph_unit_tests_under_sanitizers(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    exe = tmp_path / "test_graph"
    sources = [REPO / "tests" / "c" / "test_graph.c", COMMON / "src" / "graph.c",
               COMMON / "src" / "graph_params.c", COMMON / "src" / "workspace.c"]
    subprocess.run(["gcc", *STRICT, *SANITIZE, *LIMITS, "-I", str(COMMON / "include"),
                    "-I", str(REPO / "tests" / "fuzz"), *map(str, sources), "-o", str(exe)],
                   check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("passed, 0 failed")
