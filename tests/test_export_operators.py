"""Operator-style export: TIR kernels → MLF v8 operator archive → packed entries called by name.

The archive's C is compiled natively with gcc (our generated lib1.c strictly, TVM's lib0.c
against TVM's headers) into a harness that looks each operator up in the system library and
calls it with DLTensors written from Python; results are compared with numpy and TVM's own
llvm build.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import te, tirx
from tvm.script import tirx as T

from generator.cli import main
from generator.errors import ExportError, MlfError, UnsupportedModelError
from generator.export.operators import export_model_operators, export_operators
from generator.mlf import read_mlf
from generator.mlf.sources import system_library_functions
from generator.project.generate import generate, tvm_include_dirs
from tests.conftest import REPO, shared_path

COMMON = REPO / "templates" / "common"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
K_DLTENSOR, K_NDARRAY, K_OPAQUE = 7, 13, 3

HARNESS_C = r"""
/* Reads calls from argv[1], runs each through the system library, writes argv[2]. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtvg/runtime.h"
#include "tvm/runtime/c_runtime_api.h"
#include "tvm/runtime/crt/module.h"

#define MAX_TENSORS 32

static uint8_t arena[1 << 20];
static FILE* in;
static FILE* out;

static void get(void* p, size_t n) {
  if (n > 0 && fread(p, 1, n, in) != n) {
    fprintf(stderr, "harness: short input\n");
    exit(3);
  }
}

static void put(const void* p, size_t n) {
  if (n > 0 && fwrite(p, 1, n, out) != n) {
    exit(4);
  }
}

static TVMBackendPackedCFunc lookup(const char* name) {
  const TVMFuncRegistry* reg = TVMSystemLibEntryPoint()->registry;
  const char* p = reg->names;
  uint16_t count = (uint16_t)((uint8_t)p[0] | ((uint8_t)p[1] << 8));
  uint16_t i;
  p += 2;
  for (i = 0; i < count; i++) {
    if (strcmp(p, name) == 0) {
      return reg->funcs[i];
    }
    p += strlen(p) + 1;
  }
  return NULL;
}

int main(int argc, char** argv) {
  uint32_t calls, c;
  if (argc != 3 || (in = fopen(argv[1], "rb")) == NULL || (out = fopen(argv[2], "wb")) == NULL) {
    return 2;
  }
  mtvg_workspace_init(arena, sizeof(arena));
  get(&calls, 4);
  for (c = 0; c < calls; c++) {
    char name[256];
    uint32_t name_len, count, i;
    int32_t num_args, found, ret = -100, type_codes[MAX_TENSORS];
    int codes[MAX_TENSORS];
    TVMValue args[MAX_TENSORS], ret_value;
    int ret_code = -1;
    DLTensor tensors[MAX_TENSORS];
    int64_t shapes[MAX_TENSORS][8], strides[MAX_TENSORS][8];
    uint64_t sizes[MAX_TENSORS];
    uint8_t* blocks[MAX_TENSORS];
    TVMBackendPackedCFunc f;
    const char* msg;
    uint32_t msg_len;

    get(&name_len, 4);
    if (name_len >= sizeof(name)) return 5;
    get(name, name_len);
    name[name_len] = '\0';
    get(&num_args, 4);
    get(&count, 4);
    if (count > MAX_TENSORS) return 6;
    memset(tensors, 0, sizeof(tensors));
    for (i = 0; i < count; i++) {
      DLTensor* t = &tensors[i];
      uint8_t has_strides;
      get(&type_codes[i], 4);
      get(&t->dtype.code, 1);
      get(&t->dtype.bits, 1);
      get(&t->dtype.lanes, 2);
      get(&t->ndim, 4);
      if (t->ndim < 0 || t->ndim > 8) return 7;
      get(shapes[i], 8 * (size_t)t->ndim);
      t->shape = shapes[i];
      get(&has_strides, 1);
      if (has_strides) {
        get(strides[i], 8 * (size_t)t->ndim);
        t->strides = strides[i];
      }
      get(&t->byte_offset, 8);
      get(&sizes[i], 8);
      blocks[i] = (uint8_t*)malloc((size_t)(t->byte_offset + sizes[i] + 1));
      memset(blocks[i], 0xA5, (size_t)t->byte_offset);
      get(blocks[i] + t->byte_offset, (size_t)sizes[i]);
      t->data = blocks[i];
      t->device.device_type = kDLCPU;
      t->device.device_id = 0;
      args[i].v_handle = t;
      codes[i] = (int)type_codes[i];
    }
    f = lookup(name);
    found = f != NULL;
    TVMAPISetLastError("");
    if (f != NULL) {
      ret = f(args, codes, num_args, &ret_value, &ret_code, NULL);
    }
    msg = TVMGetLastError();
    msg_len = (uint32_t)strlen(msg);
    put(&found, 4);
    put(&ret, 4);
    put(&msg_len, 4);
    put(msg, msg_len);
    for (i = 0; i < count; i++) {
      put(&sizes[i], 8);
      put(blocks[i] + tensors[i].byte_offset, (size_t)sizes[i]);
      free(blocks[i]);
    }
    if (mtvg_workspace_used() != 0) {
      fprintf(stderr, "harness: workspace not freed after '%s'\n", name);
      return 8;
    }
  }
  fclose(out);
  fclose(in);
  return 0;
}
"""


@dataclass
class Arg:
    """One tensor argument as the harness passes it."""

    data: np.ndarray
    type_code: int = K_DLTENSOR
    byte_offset: int = 0
    strides: tuple[int, ...] | None = None
    dtype: tuple[int, int, int] | None = None  # (code, bits, lanes) override


@dataclass
class Call:
    name: str
    args: list[Arg]
    num_args: int | None = None


@dataclass
class Result:
    found: bool
    ret: int
    message: str
    outputs: list[np.ndarray] = field(default_factory=list)


def _dl_dtype(a: np.ndarray) -> tuple[int, int, int]:
    return DL_CODES[a.dtype.kind], a.dtype.itemsize * 8, 1


def _pack(calls: list[Call]) -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack("<I", len(calls)))
    for call in calls:
        name = call.name.encode()
        num_args = len(call.args) if call.num_args is None else call.num_args
        buf.write(struct.pack("<I", len(name)) + name)
        buf.write(struct.pack("<iI", num_args, len(call.args)))
        for arg in call.args:
            data = np.array(arg.data, order="C")  # ascontiguousarray makes 0-d arrays 1-d
            code, bits, lanes = arg.dtype or _dl_dtype(data)
            buf.write(struct.pack("<iBBHi", arg.type_code, code, bits, lanes, data.ndim))
            buf.write(struct.pack(f"<{data.ndim}q", *data.shape))
            if arg.strides is None:
                buf.write(b"\0")
            else:
                buf.write(b"\1" + struct.pack(f"<{data.ndim}q", *arg.strides))
            raw = data.tobytes()
            buf.write(struct.pack("<QQ", arg.byte_offset, len(raw)) + raw)
    return buf.getvalue()


def run_calls(exe: Path, calls: list[Call]) -> list[Result]:
    req, resp = exe.with_suffix(".in"), exe.with_suffix(".out")
    req.write_bytes(_pack(calls))
    proc = subprocess.run([str(exe), str(req), str(resp)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    blob, pos, results = resp.read_bytes(), 0, []
    for call in calls:
        found, ret, n = struct.unpack_from("<iiI", blob, pos)
        pos += 12
        message = blob[pos:pos + n].decode()
        pos += n
        outs = []
        for arg in call.args:
            (size,) = struct.unpack_from("<Q", blob, pos)
            pos += 8
            outs.append(np.frombuffer(blob[pos:pos + size], dtype=arg.data.dtype)
                        .reshape(arg.data.shape))
            pos += size
        results.append(Result(bool(found), ret, message, outs))
    assert pos == len(blob)
    return results


def build_harness(archive: Path, workdir: Path) -> Path:
    """Extract the archive and link lib0.c, lib1.c, the runtime's workspace.c and the harness."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    workdir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(workdir / "mlf", filter="data")
    src = workdir / "mlf" / "codegen" / "host" / "src"
    lib0, lib1 = sorted(src.glob("*_lib0.c")), sorted(src.glob("*_lib1.c"))
    assert len(lib0) == len(lib1) == 1
    (workdir / "harness.c").write_text(HARNESS_C)
    ours = ["-I", str(COMMON / "include")]
    tvm_inc = [f"-I{d}" for d in tvm_include_dirs()]
    objs = []
    # TVM's kernels: against TVM's own headers only (ours have the same names).
    subprocess.run(["gcc", "-std=gnu99", "-w", "-O1", "-g", *SANITIZE, *tvm_inc, "-c",
                    str(lib0[0]), "-o", str(workdir / "lib0.o")], check=True)
    objs.append(workdir / "lib0.o")
    for c in (lib1[0], workdir / "harness.c", COMMON / "src" / "workspace.c"):
        obj = workdir / (c.stem + ".o")
        subprocess.run(["gcc", *STRICT, "-O1", "-g", *SANITIZE, *ours, "-c", str(c), "-o",
                        str(obj)], check=True)
        objs.append(obj)
    if shutil.which("arm-none-eabi-gcc"):  # where int32_t is long: the entries must still fit
        subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m3", "-mthumb", *STRICT, *ours,
                        "-c", str(lib1[0]), "-o", str(workdir / "lib1-arm.o")], check=True)
    exe = workdir / "harness"
    subprocess.run(["gcc", *SANITIZE, *map(str, objs), "-lm", "-o", str(exe)], check=True)
    return exe


def llvm_run(func, arrays: list[np.ndarray], outputs: int) -> list[np.ndarray]:
    """The PrimFunc built by TVM for llvm, run on the same arguments; the outputs."""
    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                         target="llvm")
    tensors = [tvm.runtime.tensor(a.copy()) for a in arrays]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors[len(tensors) - outputs:]]


# ---- the operators ---------------------------------------------------------------------------

@T.prim_func
def add_bias(x: T.Buffer((4, 5), "int8"), bias: T.Buffer((5,), "int32"),
             y: T.Buffer((4, 5), "int32")):
    for i, j in T.grid(4, 5):
        y[i, j] = T.Cast("int32", x[i, j]) * 3 + bias[j]


def te_operators() -> dict:
    a = te.placeholder((4, 8), name="A")
    b = te.placeholder((8, 3), name="B")
    k = te.reduce_axis((0, 8), name="k")
    c = te.compute((4, 3), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    d = te.compute((4, 3), lambda i, j: te.max(c[i, j], tirx.const(0, "float32")), name="D")
    # An intermediate the schedule cannot shrink: 16 KiB of workspace.
    x = te.placeholder((64, 64), name="X")
    k2 = te.reduce_axis((0, 64), name="k2")
    g = te.compute((64, 64), lambda i, j: te.sum(x[i, k2] * x[k2, j], axis=k2), name="G")
    s = te.compute((64, 64), lambda i, j: g[j, i] + g[i, j], name="S")
    v = te.placeholder((16,), name="V")
    k3 = te.reduce_axis((0, 16), name="k3")
    total = te.compute((), lambda: te.sum(v[k3], axis=k3), name="total")
    return {"matmul_relu": [a, b, d], "gram_sym": [x, s], "add_bias": add_bias,
            "total": [v, total]}


def _reference(name: str, args: list[np.ndarray]) -> list[np.ndarray]:
    if name == "matmul_relu":
        return [np.maximum(args[0] @ args[1], 0)]
    if name == "gram_sym":
        g = args[0].astype("float64") @ args[0].astype("float64")
        return [(g + g.T).astype("float32")]
    if name == "add_bias":
        return [args[0].astype("int32") * 3 + args[1]]
    if name == "total":
        return [np.array(args[0].sum(dtype="float64"), dtype="float32")]
    raise KeyError(name)


def _random(shape, dtype: str, rng) -> np.ndarray:
    if dtype.startswith("float"):
        return rng.uniform(-1, 1, size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, dtype=dtype)


@pytest.fixture(scope="module")
def te_archive(tmp_path_factory):
    dest = tmp_path_factory.mktemp("ops") / "ops.tar"
    result = export_operators(te_operators(), dest, module="ops")
    exe = build_harness(dest, dest.parent / "build")
    return result, exe


def _args_for(op, rng) -> list[np.ndarray]:
    return [_random(a.shape, a.dtype, rng) for a in op.args]


# ---- tests -----------------------------------------------------------------------------------

def test_operators_match_numpy_and_tvm_llvm(te_archive):
    result, exe = te_archive
    assert [op.name for op in result.operators] == ["matmul_relu", "gram_sym", "add_bias",
                                                    "total"]
    assert [op.outputs for op in result.operators] == [1, 1, None, 1]
    assert result.operators[1].workspace_bytes == 64 * 64 * 4
    rng = np.random.default_rng(0)
    calls, inputs = [], []
    for op in result.operators:
        arrays = _args_for(op, rng)
        for out in range(len(arrays) - 1, len(arrays)):
            arrays[out] = np.zeros_like(arrays[out])
        inputs.append(arrays)
        # The first input sits 16 bytes into its block: byte_offset must be honoured.
        calls.append(Call(op.name, [Arg(arrays[0], byte_offset=16),
                                    *[Arg(a) for a in arrays[1:]]]))
    results = run_calls(exe, calls)
    funcs = te_operators()
    for op, arrays, res in zip(result.operators, inputs, results, strict=True):
        assert res.found and res.ret == 0, (op.name, res.message)
        got = res.outputs[-1]
        want = _reference(op.name, arrays)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=op.name)
        func = funcs[op.name]
        func = func if isinstance(func, tirx.PrimFunc) else te.create_prim_func(func)
        (llvm_out,) = llvm_run(func, arrays, 1)
        np.testing.assert_allclose(got, llvm_out, rtol=1e-5, atol=1e-5, err_msg=op.name)
        np.testing.assert_array_equal(res.outputs[0], arrays[0])  # inputs untouched


def test_packed_entry_refuses_bad_arguments(te_archive):
    result, exe = te_archive
    rng = np.random.default_rng(1)
    a, b = _random((4, 8), "float32", rng), _random((8, 3), "float32", rng)
    d = np.full((4, 3), 7.0, dtype="float32")
    ok = [Arg(a), Arg(b), Arg(d)]
    bad = {
        "wrong shape": Call("matmul_relu", [Arg(a), Arg(b.reshape(3, 8)), Arg(d)]),
        "wrong dtype": Call("matmul_relu", [Arg(a.astype("float64")), Arg(b), Arg(d)]),
        "wrong lanes": Call("matmul_relu", [Arg(a, dtype=(2, 32, 4)), Arg(b), Arg(d)]),
        "wrong ndim": Call("matmul_relu", [Arg(a.reshape(32)), Arg(b), Arg(d)]),
        "too few": Call("matmul_relu", ok[:2]),
        "too many": Call("matmul_relu", ok, num_args=4),
        "not a tensor": Call("matmul_relu", [Arg(a, type_code=K_OPAQUE), Arg(b), Arg(d)]),
        "strided": Call("matmul_relu", [Arg(a), Arg(b), Arg(d, strides=(1, 4))]),
        "int for float": Call("add_bias", [Arg(np.zeros((4, 5), "int8")),
                                           Arg(np.zeros(5, "float32")),
                                           Arg(np.zeros((4, 5), "int32"))]),
    }
    good = {
        "ndarray handle": Call("matmul_relu", [Arg(a, type_code=K_NDARRAY), Arg(b), Arg(d)]),
        "explicit compact strides": Call("matmul_relu", [Arg(a, strides=(8, 1)), Arg(b),
                                                         Arg(d, strides=(3, 1))]),
    }
    missing = Call("no_such_operator", ok)
    results = run_calls(exe, [*bad.values(), *good.values(), missing])
    expected = {
        "wrong shape": "matmul_relu: argument 1 (B, float32[8, 3]): has the wrong shape",
        "wrong dtype": "matmul_relu: argument 0 (A, float32[4, 8]): has the wrong dtype",
        "wrong lanes": "matmul_relu: argument 0 (A, float32[4, 8]): has the wrong dtype",
        "wrong ndim": "matmul_relu: argument 0 (A, float32[4, 8]): has the wrong number of "
                      "dimensions",
        "too few": "matmul_relu: expects 3 tensor arguments",
        "too many": "matmul_relu: expects 3 tensor arguments",
        "not a tensor": "matmul_relu: argument 0 (A, float32[4, 8]): is not a tensor",
        "strided": "matmul_relu: argument 2 (D, float32[4, 3]): is not compact",
        "int for float": "add_bias: argument 1 (bias, int32[5]): has the wrong dtype",
    }
    for (case, call), res in zip(bad.items(), results, strict=False):
        assert res.found, case
        assert res.ret != 0, case
        assert res.message.startswith(expected[case]), (case, res.message)
        if call.name == "matmul_relu" and len(res.outputs) == 3:
            np.testing.assert_array_equal(res.outputs[2], d)  # the kernel never ran
    want = np.maximum(a @ b, 0)
    for case, res in zip(good, results[len(bad):len(bad) + len(good)], strict=True):
        assert res.ret == 0 and res.message == "", (case, res.message)
        np.testing.assert_allclose(res.outputs[2], want, rtol=1e-5, atol=1e-5, err_msg=case)
    assert not results[-1].found


def test_archive_layout_reader_and_determinism(te_archive, tmp_path, capsys):
    result, _ = te_archive
    again = tmp_path / "again.tar"
    export_operators(te_operators(), again, module="ops")
    assert again.read_bytes() == result.path.read_bytes()

    with tarfile.open(again) as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
        meta = json.load(tar.extractfile("./metadata.json"))
        tir = tar.extractfile("./src/ops.tir").read().decode()
        lib1 = tar.extractfile("./codegen/host/src/ops_lib1.c").read().decode()
    assert names == ["./codegen/host/src/ops_lib0.c", "./codegen/host/src/ops_lib1.c",
                     "./metadata.json", "./src/ops.tir"]
    mod = meta["modules"]["ops"]
    assert meta["version"] == 8 and mod["style"] == "operator" and mod["executors"] == []
    assert mod["abi"]["name"] == "mtvg-operators-packed"
    assert mod["operators"][0] == {
        "name": "matmul_relu", "symbol": "tvmgen_ops_matmul_relu", "outputs": 1,
        "args": [{"name": "A", "shape": [4, 8], "dtype": "float32", "size": 128},
                 {"name": "B", "shape": [8, 3], "dtype": "float32", "size": 96},
                 {"name": "D", "shape": [4, 3], "dtype": "float32", "size": 48}]}
    assert "def tvmgen_ops_gram_sym" in tir
    assert system_library_functions(lib1) == ["matmul_relu", "gram_sym", "add_bias", "total"]

    archive = read_mlf(again)
    m = archive.module()
    assert (archive.style, m.executor, m.interface, m.entry, m.abi) == \
        ("operator", "operator", "packed", "system-lib", "mtvg-operators-packed")
    assert m.registry == [op.name for op in m.operators] == [op.name for op in result.operators]
    assert m.operators[3].args[1].shape == () and m.inputs == m.outputs == []
    assert m.workspace_size_bytes == 64 * 64 * 4

    assert main(["info", str(again)]) == 0
    out = capsys.readouterr().out
    assert "MLF version 8, operator" in out and "entry: system-lib" in out
    assert main(["info", "--json", str(again)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [op["name"] for op in info["modules"][0]["operators"]] == m.registry

    with pytest.raises(UnsupportedModelError, match="operator-style archives are for "
                                                    "host-driven mode"):
        generate(again, "host", tmp_path / "project", project_type="standalone")
    # Without a project type, an operator archive becomes a host-driven project.
    assert generate(again, "host", tmp_path / "hd").project_type == "host-driven"
    assert not (tmp_path / "project").exists()


def test_reader_refuses_registry_that_disagrees_with_metadata(te_archive, tmp_path):
    result, _ = te_archive
    with tarfile.open(result.path) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    meta = json.loads(files["./metadata.json"])
    meta["modules"]["ops"]["operators"].pop()
    files["./metadata.json"] = json.dumps(meta).encode()
    bad = tmp_path / "bad"
    for name, data in files.items():
        (bad / name).parent.mkdir(parents=True, exist_ok=True)
        (bad / name).write_bytes(data)
    with pytest.raises(MlfError, match="registry holds matmul_relu, gram_sym, add_bias, total"):
        read_mlf(bad)


@pytest.mark.parametrize("funcs, message", [
    ({"exp": add_bias}, "C keyword or a C library function"),
    ({"TVMFoo": add_bias}, "reserved for the runtime"),
    ({"two words": add_bias}, "C identifier"),
    ({}, "no TIR PrimFunc"),
    ("matmul", "takes an IRModule"),
])
def test_bad_operator_inputs_are_one_line_errors(funcs, message, tmp_path):
    with pytest.raises(ExportError, match=message) as info:
        export_operators(funcs, tmp_path / "x.tar")
    assert "\n" not in info.value.one_line()
    assert not (tmp_path / "x.tar").exists()


def test_model_kernels_are_operators_and_match_tvm_llvm(tmp_path, capsys):
    model = shared_path("models", "mnist-8", "mnist-8.onnx")
    dest = tmp_path / "mnist-ops.tar"
    result = export_model_operators(model, dest)

    from generator.export.frontend import import_model
    from generator.export.lower import relax_pipeline

    mod, _ = import_model(model, {})
    with tvm.transform.PassContext(opt_level=3):
        fused = relax_pipeline()(mod)
    kernels = {gv.name_hint for gv, f in fused.functions.items()
               if isinstance(f, tirx.PrimFunc)}
    archive = read_mlf(dest)
    m = archive.module()
    assert sorted(m.registry) == sorted(kernels) == sorted(op.name for op in result.operators)
    assert all(op.outputs == 1 for op in m.operators)
    assert main(["info", str(dest)]) == 0
    assert "operator executor" in capsys.readouterr().out

    exe = build_harness(dest, tmp_path / "build")
    rng = np.random.default_rng(2)
    calls, inputs = [], []
    for op in result.operators:
        arrays = _args_for(op, rng)
        arrays[-1] = np.zeros_like(arrays[-1])
        inputs.append(arrays)
        calls.append(Call(op.name, [Arg(a) for a in arrays]))
    for op, arrays, res in zip(result.operators, inputs, run_calls(exe, calls), strict=True):
        assert res.found and res.ret == 0, (op.name, res.message)
        (want,) = llvm_run(fused[op.name], arrays, 1)
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(res.outputs[-1], want, rtol=1e-5, atol=1e-5 * scale,
                                   err_msg=op.name)
