"""Archives with a cmsis-nn BYOC partition build against a CMSIS-NN tree and run.

No fixture carries one, so the test writes an MLF v7 archive as TVM 0.18's CMSIS-NN
target laid one out: `default_lib0.c` the run wrapper, `default_lib1.c` TVM's main
(`// tvm target: c`) holding the weights, `default_lib2.c` the partition
(`// tvm target: cmsis-nn`) calling `arm_fully_connected_s8`. The output is checked
against TFLite's fixed-point arithmetic computed here.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from generator.cli import main
from generator.export.fixedpoint import (
    PyArith,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
)
from generator.project.generate import generate
from generator.run import run_project
from tests.conftest import BOARDS, SHARED, require_board_tools

N_IN, N_OUT = 16, 4
IN_OFFSET, OUT_OFFSET = 5, -3  # CMSIS-NN offsets: the negated zero points
SCALE = 0.0123


def cmsis_nn_tree() -> Path:
    path = SHARED / "third_party" / "CMSIS-NN"
    if not (path / "Include" / "arm_nnfunctions.h").is_file():
        pytest.skip(f"needs a CMSIS-NN tree at {path} (../shared is absent; set MTVG_SHARED)")
    return path


def _weights():
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, size=(N_OUT, N_IN), dtype=np.int8)
    b = rng.integers(-2000, 2000, size=N_OUT, dtype=np.int32)
    return w, b


def _reference(x: np.ndarray) -> list[int]:
    w, b = _weights()
    mult, shift = quantize_multiplier(SCALE)
    out = []
    for o in range(N_OUT):
        acc = int(b[o]) + sum((int(x[i]) + IN_OFFSET) * int(w[o, i]) for i in range(N_IN))
        y = multiply_by_quantized_multiplier(PyArith(), acc, mult, shift) + OUT_OFFSET
        out.append(max(-128, min(127, y)))
    return out


def _c_array(values) -> str:
    return ", ".join(str(int(v)) for v in values)


def write_cmsis_nn_archive(dest: Path) -> Path:
    w, b = _weights()
    mult, shift = quantize_multiplier(SCALE)
    header = f"""#ifndef TVMGEN_DEFAULT_H_
#define TVMGEN_DEFAULT_H_
#include <stdint.h>
struct tvmgen_default_inputs {{ void* x; }};
struct tvmgen_default_outputs {{ void* y; }};
int32_t tvmgen_default_run(struct tvmgen_default_inputs* inputs,
                           struct tvmgen_default_outputs* outputs);
#define TVMGEN_DEFAULT_X_SIZE {N_IN}
#define TVMGEN_DEFAULT_Y_SIZE {N_OUT}
#endif
"""
    lib0 = """#include "tvm/runtime/c_runtime_api.h"
#include <tvmgen_default.h>
int32_t tvmgen_default___tvm_main__(int8_t* x, int8_t* y);
int32_t tvmgen_default_run(struct tvmgen_default_inputs* inputs,
                           struct tvmgen_default_outputs* outputs) {
  return tvmgen_default___tvm_main__(inputs->x, outputs->y);
}
"""
    lib1 = f"""// tvm target: c -keys=cpu
#define TVM_EXPORTS
#include "tvm/runtime/c_runtime_api.h"
#include "tvm/runtime/c_backend_api.h"
#include <math.h>
static const int8_t weights[{N_OUT * N_IN}] = {{{_c_array(w.reshape(-1))}}};
static const int32_t bias[{N_OUT}] = {{{_c_array(b)}}};
int32_t tvmgen_default_cmsis_nn_main_0(int8_t* input_, int8_t* filter_, int32_t* bias_,
                                       int8_t* output_);
TVM_DLL int32_t tvmgen_default___tvm_main__(int8_t* x, int8_t* y) {{
  return tvmgen_default_cmsis_nn_main_0(x, (int8_t*)weights, (int32_t*)bias, y);
}}
"""
    lib2 = f"""// tvm target: cmsis-nn
#define TVM_EXPORTS
#include "tvm/runtime/c_runtime_api.h"
#include "tvm/runtime/c_backend_api.h"
#include <math.h>
#include <stdbool.h>
#include <dlpack/dlpack.h>
#include <arm_nnfunctions.h>
#include <arm_nn_types.h>
#include <arm_nn_math_types.h>
TVM_DLL int32_t tvmgen_default_cmsis_nn_main_0(int8_t* input_, int8_t* filter_, int32_t* bias_,
                                               int8_t* output_) {{
  cmsis_nn_context context = {{NULL, 0}};
  cmsis_nn_fc_params fc_params = {{{IN_OFFSET}, 0, {OUT_OFFSET}, {{-128, 127}}}};
  cmsis_nn_per_tensor_quant_params quant_params = {{{mult}, {shift}}};
  cmsis_nn_dims input_dims = {{1, 1, 1, {N_IN}}};
  cmsis_nn_dims filter_dims = {{{N_IN}, 1, 1, {N_OUT}}};
  cmsis_nn_dims bias_dims = {{1, 1, 1, {N_OUT}}};
  cmsis_nn_dims output_dims = {{1, 1, 1, {N_OUT}}};
  arm_cmsis_nn_status status = arm_fully_connected_s8(&context, &fc_params, &quant_params,
      &input_dims, input_, &filter_dims, filter_, &bias_dims, bias_, &output_dims, output_);
  return status == ARM_CMSIS_NN_SUCCESS ? 0 : -1;
}}
"""
    meta = {"version": 7, "modules": {"default": {
        "executors": ["aot"], "style": "full-model", "model_name": "default",
        "export_datetime": "2026-11-24 00:00:00Z", "target": ["c -keys=cpu"],
        "memory": {"functions": {"main": [{
            "device": 1, "workspace_size_bytes": 0, "constants_size_bytes": 0,
            "io_size_bytes": N_IN + N_OUT,
            "inputs": {"x": {"dtype": "int8", "size": N_IN}},
            "outputs": {"y": {"dtype": "int8", "size": N_OUT}}}]}}}}}
    members = {"metadata.json": json.dumps(meta).encode(),
               "codegen/host/include/tvmgen_default.h": header.encode(),
               "codegen/host/src/default_lib0.c": lib0.encode(),
               "codegen/host/src/default_lib1.c": lib1.encode(),
               "codegen/host/src/default_lib2.c": lib2.encode()}
    with tarfile.open(dest, "w") as tar:
        for name, blob in members.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("board", BOARDS)
def test_cmsis_nn_partition_builds_and_runs(tmp_path, board):
    require_board_tools(board)
    archive = write_cmsis_nn_archive(tmp_path / "fc.tar")
    project = tmp_path / "p"
    generate(archive, board, project, cmsis_nn=cmsis_nn_tree())
    rng = np.random.default_rng(1)
    samples = [rng.integers(-128, 128, size=(1, N_IN), dtype=np.int8) for _ in range(4)]
    report = run_project(project, [{"x": s} for s in samples])
    for sample, out in zip(samples, report.outputs, strict=True):
        assert out["y"].reshape(-1).tolist() == _reference(sample.reshape(-1))


def test_cmsis_nn_partition_without_a_tree_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CMSIS_NN_PATH", raising=False)
    archive = write_cmsis_nn_archive(tmp_path / "fc.tar")
    assert main(["generate", str(archive), "--board", "host", "-o", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "--cmsis-nn" in err and "CMSIS_NN_PATH" in err and len(err.splitlines()) == 1
    assert main(["generate", str(archive), "--board", "host", "-o", str(tmp_path / "p"),
                 "--cmsis-nn", str(tmp_path)]) == 2
    assert "not a CMSIS-NN source tree" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_cmsis_nn_path_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CMSIS_NN_PATH", str(cmsis_nn_tree()))
    archive = write_cmsis_nn_archive(tmp_path / "fc.tar")
    generate(archive, "host", tmp_path / "p")
    cmake = (tmp_path / "p" / "CMakeLists.txt").read_text()
    assert str(cmsis_nn_tree().resolve()) in cmake
    # Only what the partition reaches is built: its fully connected layer, not convolutions.
    assert '"${CMSIS_NN_PATH}/Source/FullyConnectedFunctions/arm_fully_connected_s8.c"' in cmake
    assert "ConvolutionFunctions" not in cmake


def test_unknown_partition_is_refused_naming_its_header(tmp_path, capsys):
    archive = write_cmsis_nn_archive(tmp_path / "fc.tar")
    with tarfile.open(archive) as src, tarfile.open(tmp_path / "npu.tar", "w") as out:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name.endswith("default_lib2.c"):
                data = data.replace(b"// tvm target: cmsis-nn",
                                    b"// tvm target: ethos-u -accelerator_config=ethos-u55-256")
                data = data.replace(b"#include <arm_nnfunctions.h>",
                                    b"#include <ethosu_driver.h>")
                member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    assert main(["generate", str(tmp_path / "npu.tar"), "--board", "host",
                 "-o", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "'ethos-u' BYOC partition (default_lib2.c)" in err and "<ethosu_driver.h>" in err
