"""What the uint8 path costs: tests/tflite_models.py's `person_model` in uint8 and its int8
twin (same shapes and scales, zero points 128 lower, symmetric int8 weights).

For each size: MACs and weights + bias bytes (from the archive's layers; checked equal to the
.tflite file's own buffers), instructions per inference on the host (callgrind `Ir` inside
`tvmgen_default_run`, gcc -O2, x86-64) and on qemu-mps2-an385 (`-icount`), on one
deterministic input. QEMU's count is instructions, not cycles: it says nothing of wait
states, multiply or load latencies.

Needs valgrind (Debian's `valgrind`) for the host column.

Usage: python benchmarks/uint8_twin.py [--docs | --check-docs]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from docs_tables import DocsTable, add_docs_options, publish

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.export import export_model  # noqa: E402
from generator.mlf.reader import load_mlf  # noqa: E402
from generator.project.generate import (  # noqa: E402
    TVM_CODE_CFLAGS,
    generate,
    tvm_include_dirs,
)
from generator.run import run_project  # noqa: E402
from tests.tflite_models import person_model  # noqa: E402

MODEL_SEED = 19  # tests/test_quantize_uint8.py's
INPUT_SEED = 5
SIZES = {"20×20×1, widths 8/16 (the test's)": (20, (8, 16)),
         "96×96×1, widths 8/16/32/64": (96, (8, 16, 32, 64))}
BOARD = "qemu-mps2-an385"
TABLE = DocsTable(REPO / "docs" / "quantization.md", "uint8-twin",
                  "python benchmarks/uint8_twin.py --docs")
HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include "tvmgen_default.h"
static uint8_t input[TVMGEN_DEFAULT_%(IN)s_SIZE];
static uint8_t output[TVMGEN_DEFAULT_%(OUT)s_SIZE];
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb");
  if (f == NULL || fread(input, 1, sizeof(input), f) != sizeof(input)) return 2;
  fclose(f);
  struct tvmgen_default_inputs in = {input};
  struct tvmgen_default_outputs out = {output};
  return (int)tvmgen_default_run(&in, &out);
}
"""


@dataclass
class Row:
    model: str
    macs: int
    weights: int
    bias: int
    host_ir: int
    m3_instructions: int


def file_weights(model: bytes) -> tuple[int, int]:
    """(weights, bias) bytes in the .tflite file: the buffers of the filter and bias inputs
    of its convolutions and fully connected layers."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(bytearray(model), 0)
    weighted = {schema.BuiltinOperator.CONV_2D, schema.BuiltinOperator.DEPTHWISE_CONV_2D,
                schema.BuiltinOperator.FULLY_CONNECTED}
    weights = bias = 0
    for sg in m.subgraphs:
        for op in sg.operators:
            if m.operatorCodes[op.opcodeIndex].builtinCode not in weighted:
                continue
            for position, tensor in enumerate(op.inputs[1:3], start=1):
                data = m.buffers[sg.tensors[tensor].buffer].data if tensor >= 0 else None
                if data is not None:
                    if position == 1:
                        weights += len(data)
                    else:
                        bias += len(data)
    return weights, bias


def archive_weights(archive: Path) -> tuple[int, int, int]:
    """(MACs, weights, bias) from the archive's layers."""
    layers = json.loads(load_mlf(archive)[1].data["metadata.json"])["modules"]["default"][
        "layers"]
    macs = sum(la["macs"] for la in layers)
    weights = sum(a["bytes"] for la in layers for a in la["args"]
                  if a["kind"] == "constant" and a["dtype"] in ("int8", "uint8"))
    bias = sum(a["bytes"] for la in layers for a in la["args"]
               if a["kind"] == "constant" and a["dtype"] == "int32")
    return macs, weights, bias


def host_ir(archive: Path, sample: np.ndarray, work: Path) -> int:
    """callgrind's instructions inside tvmgen_default_run for one inference."""
    src = work / "src"
    with tarfile.open(archive) as tar:
        tar.extractall(src, filter="data")
    code = src / "codegen" / "host"
    header = (code / "include" / "tvmgen_default.h").read_text()
    sizes = re.findall(r"#define TVMGEN_DEFAULT_(\w+)_SIZE", header)
    (work / "main.c").write_text(HARNESS % {"IN": sizes[0], "OUT": sizes[-1]})
    kernels = code / "src" / "default_lib0.c"
    objects = []
    for source, flags in [(kernels, [*TVM_CODE_CFLAGS, *(f"-I{d}" for d in tvm_include_dirs())]),
                          (code / "src" / "default_lib1.c", ["-std=c99"]),
                          (code / "src" / "default_lib2.c", ["-std=c99"]),
                          (work / "main.c", ["-std=c99"])]:
        obj = work / f"{source.stem}.o"
        subprocess.run(["gcc", "-c", "-O2", *flags, f"-I{code / 'include'}", str(source), "-o",
                        str(obj)], check=True)
        objects.append(str(obj))
    program = work / "harness"
    subprocess.run(["gcc", *objects, "-o", str(program), "-lm"], check=True)
    (work / "input.bin").write_bytes(sample.tobytes())
    out = work / "callgrind.out"
    subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=tvmgen_default_run",
                    f"--callgrind-out-file={out}", str(program), str(work / "input.bin")],
                   check=True, capture_output=True)
    summary = re.search(r"^summary: (\d+)", out.read_text(), re.M)
    if summary is None:
        raise RuntimeError(f"{out}: no callgrind summary")
    return int(summary.group(1))


def measure(label: str, size: int, widths: tuple[int, ...], dtype: str, work: Path) -> Row:
    model, inp = person_model(np.random.default_rng(MODEL_SEED), size=size, widths=widths,
                              dtype=dtype)
    path = work / f"{dtype}.tflite"
    path.write_bytes(model)
    archive = export_model(path, work / f"{dtype}.tar").path
    macs, weights, bias = archive_weights(archive)
    if (weights, bias) != file_weights(model):
        raise RuntimeError(f"{label} {dtype}: the archive's weights and bias "
                           f"{(weights, bias)} differ from the file's {file_weights(model)}")
    info = np.iinfo(np.dtype(dtype))
    sample = np.random.default_rng(INPUT_SEED).integers(
        info.min, info.max + 1, inp.shape).astype(dtype)
    ir = host_ir(archive, sample, work / f"host-{dtype}")
    project = work / f"m3-{dtype}"
    generate(archive, BOARD, project)
    name = load_mlf(archive)[0].module().inputs[0].name
    report = run_project(project, [{name: sample}])
    name = label if dtype == "uint8" else "same, int8 twin"
    return Row(f"{name}, uint8" if dtype == "uint8" else name, macs, weights, bias, ir,
               report.timings[0].count)


def lines(rows: list[Row]) -> list[str]:
    out = ["| model | MACs | weights + bias (B), ours = file | host Ir | M3 instructions |",
           "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.model} | {r.macs:,} | {r.weights:,} + {r.bias:,} | {r.host_ir:,} | "
                   f"{r.m3_instructions:,} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_docs_options(parser, "docs/quantization.md's uint8 table")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mtvg-uint8-twin-") as tmp:
        for i, (label, (size, widths)) in enumerate(SIZES.items()):
            for dtype in ("uint8", "int8"):
                work = Path(tmp) / f"{i}-{dtype}"
                work.mkdir()
                rows.append(measure(label, size, widths, dtype, work))
    if args.docs or args.check_docs:
        return publish(TABLE, lines(rows), args.check_docs)
    print("\n".join(lines(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
