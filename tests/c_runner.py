"""Run an exported archive's C on this machine without a firmware project: the archive's
sources compiled by gcc into a shared object, its `tvmgen_<mod>_run` called through ctypes.
Fast enough to check many small models bit by bit; the firmware tests cover the rest."""

from __future__ import annotations

import ctypes
import subprocess
import tarfile
from pathlib import Path

import numpy as np

from generator.export.api import ExportResult
from generator.mlf.reader import read_mlf
from generator.project.generate import TVM_CODE_CFLAGS, tvm_include_dirs
from generator.project.sizing import arena_bytes_for

RUNTIME = Path(__file__).resolve().parent.parent / "templates" / "common"


class CModel:
    """An exported model's C, compiled and loaded."""

    def __init__(self, result: ExportResult, workdir: Path) -> None:
        src = workdir / "src"
        with tarfile.open(result.path) as tar:
            tar.extractall(src, filter="data")
        code = src / "codegen" / "host"
        kernels = code / "src" / f"{result.module}_lib0.c"
        ours = sorted(set((code / "src").glob("*.c")) - {kernels})
        # Kernels with local buffers take them from our runtime's workspace arena.
        arena = _arena_bytes(result.path, result.module)
        runtime = [RUNTIME / "src" / "workspace.c"] if arena else []
        lib = workdir / f"lib{result.module}.so"
        objects = []
        # As in the firmware: TVM's kernels quietly with TVM's headers, our C strictly.
        for source, flags in [(kernels, [*TVM_CODE_CFLAGS,
                                         *(f"-I{d}" for d in tvm_include_dirs())]),
                              *((s, ["-std=c99", "-Wall", "-Wextra", "-Werror",
                                     f"-I{code / 'include'}", f"-I{RUNTIME / 'include'}"])
                                for s in [*ours, *runtime])]:
            obj = workdir / (source.stem + ".o")
            subprocess.run(["gcc", "-c", "-fPIC", "-O2", *flags, str(source), "-o", str(obj)],
                           check=True)
            objects.append(str(obj))
        # -Bsymbolic: the runtime's own allocator, not TVM's (the Python process has both).
        subprocess.run(["gcc", "-shared", "-Wl,-Bsymbolic", *objects, "-o", str(lib), "-lm"],
                       check=True)
        self.dll = ctypes.CDLL(str(lib))
        if arena:
            self.arena = np.zeros(arena + 16, np.uint8)  # kept alive with the model
            self.dll.mtvg_workspace_init(ctypes.c_void_p(self.arena.ctypes.data),
                                         ctypes.c_size_t(self.arena.size))
        self.run_fn = getattr(self.dll, f"tvmgen_{result.module}_run")
        self.result = result

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        ins = [np.ascontiguousarray(x, dtype=t.dtype).reshape(t.shape)
               for x, t in zip(inputs, self.result.inputs, strict=True)]
        outs = [np.zeros(t.shape, t.dtype) for t in self.result.outputs]
        in_ptrs = (ctypes.c_void_p * max(len(ins), 1))(*[x.ctypes.data for x in ins])
        out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[y.ctypes.data for y in outs])
        assert self.run_fn(in_ptrs, out_ptrs) == 0
        return outs


def _arena_bytes(archive: Path, module: str) -> int:
    """The arena a project reserves for the archive: generate's own figure."""
    return arena_bytes_for(read_mlf(archive).module(module))
