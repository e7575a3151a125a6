"""Footprint of models exported with TVM 0.27 (MLF v8), per model and board.

Prints one row per (model, board): flash split into the model's code and its weights, the
runtime's own share (found by baseline subtraction: the same firmware built around an
empty model), RAM split into the activation pool, other static data and the board's stack,
the planned pool next to the lower bound (largest set of simultaneously live tensors),
one inference's ticks, and the export and generate+build times.

Usage: python benchmarks/export.py [--boards host,qemu-mps2-an385]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from generator.boards import load_board
from generator.build import build
from generator.errors import MtgError
from generator.export import export_model, export_relax
from generator.project.generate import generate
from generator.run import run_project

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "tests" / "fixtures" / "models"
MODEL_FILES = {
    "mnist-8 (ONNX, f32)": REPO / "examples" / "mnist" / "mnist-8.onnx",
    "hello_world (f32)": MODELS / "hello_world" / "hello_world_float.tflite",
    "hello_world (int8)": MODELS / "hello_world" / "hello_world_int8.tflite",
    "mlperftiny_kws (int8)": MODELS / "mlperftiny_kws" / "kws_ref_model.tflite",
    "magic_wand (f32)": MODELS / "magic_wand" / "magic_wand.tflite",
}
# ../shared/docs/tflm-baseline.md: TFLite Micro's smallest arena on a 32-bit ARM build.
TFLM_ARENA = {"hello_world (f32)": 1068, "hello_world (int8)": 1068,
              "mlperftiny_kws (int8)": 22772, "magic_wand (f32)": 15156}


def empty_model():
    """The smallest model: y = x + x on one float (the baseline firmware)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(x, x))
        bb.emit_func_output(y)
    return bb.get()


def zeros(project_inputs) -> dict[str, np.ndarray]:
    return {t.name: np.zeros(t.shape, dtype=t.dtype) for t in project_inputs}


def measure(archive: Path, board: str, work: Path, inputs) -> tuple:
    project = work / f"{archive.stem}-{board}"
    start = time.monotonic()
    generate(archive, board, project, force=True)
    built = build(project)
    seconds = time.monotonic() - start
    report = run_project(project, [zeros(inputs)])
    return built.size, report.results[0].ticks, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", default="host,qemu-mps2-an385")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mtvg-export-bench-"))
    header = (f"{'model':22s} {'board':16s} {'flash':>7s} {'code':>7s} {'weights':>7s} "
              f"{'runtime':>7s} {'RAM':>7s} {'pool':>6s} {'static':>6s} {'stack':>6s} "
              f"{'LB':>6s} {'pool/LB':>7s} {'TFLM':>6s} {'ticks':>9s} {'export s':>8s} "
              f"{'build s':>7s}")
    print(header)
    print("-" * len(header))
    try:
        base = export_relax(empty_model(), work / "empty.tar")
        baselines = {}
        for board in args.boards.split(","):
            size, _, _ = measure(base.path, board, work, base.inputs)
            baselines[board] = size
            print(f"{'(empty model)':22s} {board:16s} {size.flash:7d} {'':>7s} {'':>7s} "
                  f"{size.flash:7d} {size.ram:7d}")
        for label, path in MODEL_FILES.items():
            exported = export_model(path, work / f"{path.stem}.tar")
            plan = exported.plan
            for board in args.boards.split(","):
                size, ticks, seconds = measure(exported.path, board, work, exported.inputs)
                runtime = baselines[board].flash
                weights = exported.constants_bytes
                code = size.flash - runtime - weights
                stack = load_board(board).stack_bytes
                static = size.ram - plan.pool_bytes
                tflm = TFLM_ARENA.get(label)
                print(f"{label:22s} {board:16s} {size.flash:7d} {code:7d} {weights:7d} "
                      f"{runtime:7d} {size.ram:7d} {plan.pool_bytes:6d} {static:6d} "
                      f"{stack if stack else '-':>6} {plan.lower_bound:6d} "
                      f"{plan.ratio:7.2f} {tflm if tflm else '-':>6} {ticks:9d} "
                      f"{exported.seconds:8.1f} {seconds:7.1f}")
    except MtgError as exc:
        print(f"export benchmark: error: {exc.one_line()}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("flash = code + weights + runtime; 'runtime' is the whole firmware built around the "
          "empty model (runtime, app, board port, libc). RAM = pool + static (I/O buffers, "
          "runtime state); the stack is reserved apart. LB: largest live set of activations "
          "(caller-owned inputs and outputs excluded). TFLM: TFLite Micro's smallest arena, "
          "32-bit ARM (tflm-baseline.md); it also holds inputs and outputs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
