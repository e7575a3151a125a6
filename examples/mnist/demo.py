"""From a model to a Cortex-M3: export mnist-8.onnx with TVM 0.27, generate, build, run.

Usage: python examples/mnist/demo.py [--board qemu-mps2-an385] [--out DIR]

Each step is one `microtvm-gen` command as well:
  microtvm-gen export examples/mnist/mnist-8.onnx -o mnist.tar
  microtvm-gen generate mnist.tar --board qemu-mps2-an385 -o proj
  microtvm-gen build proj
  microtvm-gen run proj --input Input3=digit.npy
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from generator.build import build
from generator.errors import MtgError
from generator.export import export_model
from generator.project.generate import generate
from generator.run import run_project

HERE = Path(__file__).resolve().parent
IMAGES = ["digit-2.jpg", "digit-9.jpg"]


def load_digit(path: Path) -> np.ndarray:
    """What TVM's own mnist tests fed the model: 28x28 grey pixels 0..255 as float32."""
    from PIL import Image

    img = Image.open(path).convert("L").resize((28, 28))
    return np.asarray(img).astype("float32").reshape(1, 1, 28, 28)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", default="qemu-mps2-an385")
    parser.add_argument("--out", type=Path, help="working directory (default: a temp dir)")
    args = parser.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="mnist-"))
    try:
        exported = export_model(HERE / "mnist-8.onnx", work / "mnist-8.tar")
        plan = exported.plan
        print(f"exported {exported.path}: {exported.calls} kernel calls, activations "
              f"{plan.pool_bytes} B (lower bound {plan.lower_bound} B), weights "
              f"{exported.constants_bytes} B")
        project = generate(exported.path, args.board, work / "project", force=True)
        print(f"generated {project.path} for {args.board}")
        built = build(project.path)
        print(f"built firmware: flash {built.size.flash} B, RAM {built.size.ram} B")
        report = run_project(project.path, [{"Input3": load_digit(HERE / n)} for n in IMAGES])
    except MtgError as exc:
        print(f"demo: error: {exc.one_line()}", file=sys.stderr)
        return 2
    for name, outs, time in zip(IMAGES, report.outputs, report.timings, strict=True):
        scores = outs["Plus214_Output_0"].reshape(-1)
        logits = ", ".join(f"{v:.0f}" for v in scores)
        # As `microtvm-gen run` says it: instructions under QEMU -icount, else time.
        print(f"{name}: {int(np.argmax(scores))}   (logits [{logits}]; {time.brief()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
