"""Quantized (int8) models: what stays in flash, what the activations need, and how many
instructions one inference takes, next to the tflite file and TensorFlow Lite Micro.

For each int8 model:
- flash: the archive's int8 weights + int32 biases against the tflite file's (the
  constant buffers of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED), and our
  requantization parameters (per-channel int32 multiplier + int8 shift) against the file's
  quantization parameters of those tensors (float32 scales + int64 zero points);
- RAM: the planned activation pool, the graph's largest live set (lower bound), the largest
  per-kernel scratch (stack arrays in the kernels' C), the input and output buffers, and
  TFLite Micro's smallest arena on a 32-bit ARM build (../shared/docs/tflm-baseline.md);
- instructions per inference: callgrind `Ir` inside `tvmgen_default_run` of the archive's C
  built for this machine with gcc -O2, against callgrind inside TFLite Micro's
  `MicroInterpreter::Invoke()` (the PyPI tflite-micro wheel, reference kernels), both on the
  same deterministic input (numpy default_rng(0), uniform over int8), averaged over 10 runs.

Usage: python benchmarks/quantized.py [MODEL.tflite ...] [--board B ...] [--target T]
       [--no-tflm-callgrind]
(without valgrind, or with --no-tflm-callgrind, TFLM's count comes from tflm-baseline.md).
MODEL: any int8 .tflite (default: the repository's int8 models and a generated ResNet-8).
--board B: also run the exported model on board B (any board in boards/; QEMU boards count
instructions with -icount, the host board wall-clock ns), median of 3 runs on the
deterministic input; repeatable. --target: export through accelerators (e.g. cmsis-nn,c).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
from docs_tables import DocsTable, add_docs_options, publish, refuse_subset

from generator.boards import load_board
from generator.export import export_model
from generator.export.lower import kernel_scratch_bytes
from generator.project.generate import TVM_CODE_CFLAGS, tvm_include_dirs

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "tests" / "fixtures" / "models"
MODEL_FILES = {
    "hello_world_int8": MODELS / "hello_world" / "hello_world_int8.tflite",
    "mlperftiny_kws": MODELS / "mlperftiny_kws" / "kws_ref_model.tflite",
}
GENERATED = "resnet_int8"  # tests/tflite_models.py's resnet_model(), seed 8 (as the test)
# ../shared/docs/tflm-baseline.md: smallest arena, 32-bit ARM build; Ir per Invoke (x86-64).
TFLM_ARENA_ARM32 = {"hello_world_int8": 1068, "mlperftiny_kws": 22772}
TFLM_IR_BASELINE = {"hello_world_int8": 6854, "mlperftiny_kws": 51016635}
RUNS = 10
WEIGHTED_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
DOCS_TABLE = DocsTable(REPO / "docs" / "quantization.md", "int8-flash-ram-instructions",
                       "python benchmarks/quantized.py --docs")


def tflite_weight_bytes(path: Path) -> tuple[int, int, int]:
    """(int8 weight bytes, int32 bias bytes, quantization parameter bytes) of the tflite
    file's weighted operators."""
    import tflite

    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    graph = model.Subgraphs(0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    weights = biases = quant = 0
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()))
        if kind not in WEIGHTED_OPS:
            continue
        for slot in (1, 2):
            if slot >= op.InputsLength() or op.Inputs(slot) < 0:
                continue
            tensor = graph.Tensors(op.Inputs(slot))
            size = model.Buffers(tensor.Buffer()).DataLength()
            if slot == 1:
                weights += size
            else:
                biases += size
            q = tensor.Quantization()
            if q is not None:
                quant += 4 * q.ScaleLength() + 8 * q.ZeroPointLength()
    return weights, biases, quant


def deterministic_input(shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(-128, 128, size=shape, endpoint=False).astype(np.int8)


def build_driver(archive: Path, work: Path, x: np.ndarray, out_bytes: int) -> Path:
    """The archive's C and a main() that runs the model RUNS times, built with gcc -O2."""
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    code = work / "codegen" / "host"
    values = ", ".join(str(int(v)) for v in x.reshape(-1))
    (work / "driver.c").write_text(f"""#include <stdint.h>
#include <stdio.h>
#include "tvmgen_default.h"
static int8_t input[{x.size}] __attribute__((aligned(16))) = {{{values}}};
static int8_t output[{out_bytes}] __attribute__((aligned(16)));
int main(void) {{
  struct tvmgen_default_inputs in = {{input}};
  struct tvmgen_default_outputs out = {{output}};
  for (int i = 0; i < {RUNS}; ++i) tvmgen_default_run(&in, &out);
  printf("%d\\n", output[0]);
  return 0;
}}
""")
    exe = work / "driver"
    tvm = [f"-I{d}" for d in tvm_include_dirs()]
    subprocess.run(["gcc", "-O2", "-g", *TVM_CODE_CFLAGS, *tvm,
                    f"-I{code / 'include'}", *map(str, sorted((code / "src").glob("*.c"))),
                    str(work / "driver.c"), "-o", str(exe), "-lm"], check=True)
    return exe


def callgrind_ir(command: list[str], toggle: str, work: Path) -> int:
    out = work / "callgrind.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--toggle-collect={toggle}",
                    f"--callgrind-out-file={out}", *command], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    match = re.search(r"^totals:\s+(\d+)", out.read_text(), re.M)
    return int(match.group(1)) if match else 0


def tflm_ir(model: Path, x: np.ndarray, work: Path) -> int:
    script = work / "tflm_run.py"
    np.save(work / "input.npy", x)
    script.write_text(f"""import numpy as np
from tflite_micro.python.tflite_micro import runtime
interp = runtime.Interpreter.from_file({str(model)!r})
x = np.load({str(work / 'input.npy')!r})
for _ in range({RUNS}):
    interp.set_input(x, 0)
    interp.invoke()
""")
    return callgrind_ir([sys.executable, str(script)],
                        "tflite::micro::MicroInterpreter::Invoke()", work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, metavar="MODEL.tflite", default=[],
                        help="int8 models (default: the repository's and a generated one)")
    parser.add_argument("--board", action="append", default=[],
                        help="also run on this board (repeatable)")
    parser.add_argument("--target", help="accelerators, e.g. cmsis-nn,c")
    parser.add_argument("--no-tflm-callgrind", action="store_true",
                        help="take TFLite Micro's instruction counts from tflm-baseline.md")
    add_docs_options(parser, "the tables in docs/quantization.md (default models only)")
    args = parser.parse_args()
    refuse_subset(parser, args, "models", "board", "target")
    from generator.accel import registry
    from generator.errors import MtgError

    try:
        selected = registry.select(args.target, [], []) if args.target else []
        for board in args.board:
            load_board(board)
    except MtgError as exc:
        parser.error(exc.one_line())
    missing = [m for m in args.models if not m.is_file()]
    if missing:
        parser.error(f"{missing[0]}: no such file")
    have_valgrind = shutil.which("valgrind") is not None
    rows = []
    models = tempfile.TemporaryDirectory()
    if args.models:
        files = {m.stem: m.resolve() for m in args.models}
    else:
        files = dict(MODEL_FILES)
        files[GENERATED] = Path(models.name) / f"{GENERATED}.tflite"
        files[GENERATED].write_bytes(generated_resnet())
    for name, path in files.items():
        if name == GENERATED and not (have_valgrind and not args.no_tflm_callgrind):
            continue  # no TFLM baseline on record for it
        print(f"{name}: exporting, building, counting instructions ...", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            result = export_model(path, work / "model.tar", accelerators=selected)
            w_file, b_file, q_file = tflite_weight_bytes(path)
            roles = result.quant.constant_bytes
            ours_wb = roles["weights"] + roles["bias"]
            with tarfile.open(result.path) as tar:
                kernels = tar.extractfile("./codegen/host/src/default_lib0.c").read().decode()
            scratch = kernel_scratch_bytes(kernels)
            x = deterministic_input(result.inputs[0].shape)
            ir = tflm = None
            tflm_source = "baseline doc"
            if have_valgrind:
                exe = build_driver(result.path, work / "c", x, result.outputs[0].size_bytes)
                ir = callgrind_ir([str(exe)], "tvmgen_default_run", work) // RUNS
                if not args.no_tflm_callgrind:
                    tflm = tflm_ir(path, x, work) // RUNS
                    tflm_source = "measured"
            if tflm is None:
                tflm = TFLM_IR_BASELINE.get(name)
            on_boards = {board: board_count(result, board, x, work) for board in args.board}
            rows.append({
                "model": name,
                "ops": result.quant.summary(),
                "weights+bias": ours_wb, "file weights+bias": w_file + b_file,
                "requant": roles["requant"], "file quant params": q_file,
                "flash consts": result.constants_bytes,
                "pool": result.plan.pool_bytes, "lower bound": result.plan.lower_bound,
                "scratch": scratch, "tflm arena": TFLM_ARENA_ARM32.get(name),
                "io": sum(t.size_bytes for t in result.inputs + result.outputs),
                "ir": ir, "tflm ir": tflm, "tflm source": tflm_source,
                "boards": on_boards,
            })
    models.cleanup()
    if args.docs or args.check_docs:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            print_table(rows)
        return publish(DOCS_TABLE, ["```", *printed.getvalue().rstrip("\n").splitlines(), "```"],
                       args.check_docs)
    print_table(rows)
    return 0


def board_count(result, board: str, x: np.ndarray, work: Path) -> tuple[int, str]:
    """Median count of 3 runs of the exported model on `board`, and its unit."""
    import statistics

    from generator.project.generate import generate
    from generator.run import run_project

    print(f"  running on {board} ...", file=sys.stderr)
    project = work / f"proj-{board}"
    generate(result.path, board, project)
    report = run_project(project, [{result.inputs[0].name: x}] * 3)
    return int(statistics.median(t.count for t in report.timings)), report.timings[0].unit


def generated_resnet() -> bytes:
    sys.path.insert(0, str(REPO))
    from tests.tflite_models import resnet_model

    return resnet_model(np.random.default_rng(8))[0]


def print_table(rows: list[dict]) -> None:
    print("flash (bytes)")
    head = (f"{'model':18} {'int8 w + i32 b':>14} {'tflite file':>11} {'diff':>6} "
            f"{'requant':>8} {'file qparams':>12} {'all consts':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        diff = 100.0 * (r["weights+bias"] - r["file weights+bias"]) / r["file weights+bias"]
        print(f"{r['model']:18} {r['weights+bias']:>14,} {r['file weights+bias']:>11,} "
              f"{diff:>5.1f}% {r['requant']:>8,} {r['file quant params']:>12,} "
              f"{r['flash consts']:>10,}")
    print("\nRAM (bytes; the caller owns the input and output buffers, TFLM's arena holds "
          "them)")
    head = (f"{'model':18} {'planned pool':>12} {'lower bound':>11} {'kernel scratch':>14} "
            f"{'in+out':>6} {'all':>7} {'TFLM arena ARM32':>16} {'ratio':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        total = r["pool"] + r["scratch"] + r["io"]
        arena = f"{r['tflm arena']:,}" if r["tflm arena"] else "-"
        ratio = f"{total / r['tflm arena']:>5.2f}x" if r["tflm arena"] else "-"
        print(f"{r['model']:18} {r['pool']:>12,} {r['lower bound']:>11,} {r['scratch']:>14,} "
              f"{r['io']:>6,} {total:>7,} {arena:>16} {ratio:>6}")
    print("\ninstructions per inference (callgrind Ir, x86-64)")
    head = f"{'model':18} {'ours (run fn)':>14} {'TFLM Invoke':>12} {'ratio':>6}  TFLM count"
    print(head)
    print("-" * len(head))
    for r in rows:
        ours = f"{r['ir']:,}" if r["ir"] else "no valgrind"
        ratio = f"{r['ir'] / r['tflm ir']:.3f}x" if r["ir"] and r["tflm ir"] else "-"
        tflm = f"{r['tflm ir']:,}" if r["tflm ir"] else "-"
        print(f"{r['model']:18} {ours:>14} {tflm:>12} {ratio:>6}  {r['tflm source']}")
    boards = sorted({b for r in rows for b in r["boards"]})
    if boards:
        print("\non boards (median of 3 runs; QEMU -icount counts instructions)")
        head = f"{'model':18} {'board':18} {'count':>14} unit"
        print(head)
        print("-" * len(head))
        for r in rows:
            for b, (count, unit) in r["boards"].items():
                print(f"{r['model']:18} {b:18} {count:>14,} {unit}")
    print("\noperators")
    for r in rows:
        print(f"{r['model']:18} {r['ops']}")


if __name__ == "__main__":
    sys.exit(main())
