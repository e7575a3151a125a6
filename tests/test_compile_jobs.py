"""Kernels compiled by several processes (the tuner's batches) and the fork helper under it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from generator.errors import ExportError, MtgError
from generator.export.compile_jobs import FIRST_KERNEL, compile_kernels, join_c_sources
from generator.export.lower import compile_plain_kernels
from generator.forked import Forked

PREFIX = "tvmgen_jobs_"


def _kernels(count: int) -> dict:
    from tvm import te

    def kernel(i: int):
        a = te.placeholder((8 + i,), "int32", name="a")
        b = te.compute((8 + i,), lambda j: a[j] * (i + 2) + j, name="b")
        return te.create_prim_func([a, b])

    return {f"k{i}": kernel(i) for i in range(count)}


def _definitions(source: str) -> dict[str, str]:
    return dict(re.findall(r"TVM_DLL void (\w+)\(([^)]*\) \{.*?\n\})\n", source, re.S))


def test_two_processes_give_the_kernels_one_process_gives():
    funcs = _kernels(5)
    alone, _ = compile_plain_kernels(funcs, PREFIX, shrink=False)
    shared, tir = compile_kernels(funcs, PREFIX, False, jobs=2)
    assert _definitions(shared) == _definitions(alone)
    assert len(_definitions(shared)) == 5
    assert shared.count("__tvm_ffi__library_ctx = NULL") == 1  # one preamble
    assert shared[:shared.index(FIRST_KERNEL)] == alone[:alone.index(FIRST_KERNEL)]
    assert tir.count("def tvmgen_jobs_k") == 5


def test_a_kernel_tvm_refuses_is_an_export_error_from_either_process():
    from tvm import tirx

    funcs = _kernels(4)
    free = tirx.Var("n", "int32")  # a variable no parameter binds
    funcs["k3"] = tirx.PrimFunc([], tirx.Evaluate(tirx.call_extern("int32", "x", free)))
    # k3 is in the child's share (round-robin: k1, k3)
    with pytest.raises(ExportError, match="could not compile"):
        compile_kernels(funcs, PREFIX, False, jobs=2)


def test_sources_with_more_than_kernels_are_not_joined():
    alone, _ = compile_plain_kernels(_kernels(2), PREFIX, shrink=False)
    assert join_c_sources([alone, alone]) is not None
    helper = alone + "static int helper(int x) {\n  return x;\n}\n"
    assert join_c_sources([alone, helper]) is None
    other_preamble = "#include <arm_acle.h>\n" + alone
    assert join_c_sources([alone, other_preamble]) is None
    assert join_c_sources([alone, "int x;\n"]) is None


def test_forked_work_returns_raises_and_stops_its_group(tmp_path):
    assert Forked(lambda: {"a": [1, 2]}).result() == {"a": [1, 2]}

    def refuse():
        raise ExportError("no such kernel")

    with pytest.raises(ExportError, match="^no such kernel$"):
        Forked(refuse).result()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        Forked(lambda: 1 // 0).result()
    with pytest.raises(MtgError, match="died before it finished"):
        Forked(lambda: os.kill(os.getpid(), signal.SIGKILL)).result()

    # stop(): the child and what it started (its process group) are gone at once
    marker = tmp_path / "started"

    def sleeper():  # a process it starts, and a worker of its own in its group
        proc = subprocess.Popen(["sleep", "300"])
        inner = Forked(lambda: time.sleep(300), own_group=False)
        marker.write_text(f"{proc.pid} {inner.pid}")
        proc.wait()

    child = Forked(sleeper)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and \
            len(marker.read_text().split() if marker.exists() else []) < 2:
        time.sleep(0.05)
    grandchildren = [int(pid) for pid in marker.read_text().split()]
    assert len(grandchildren) == 2
    child.stop()
    time.sleep(0.2)
    assert not any(_running(pid) for pid in grandchildren)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
