"""Generate, build and run the TFLM yes/no model (an MLF archive from TVM 0.8) on a board.

Usage: python examples/yes_no/demo.py [--board qemu-mps2-an385] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from generator.build import build
from generator.errors import MtgError
from generator.project.generate import generate
from generator.run import run_project

HERE = Path(__file__).resolve().parent
LABELS = ["silence", "unknown", "yes", "no"]
SAMPLES = ["yes_0a2b400e_nohash_0.raw", "no_0a2b400e_nohash_0.raw"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", default="qemu-mps2-an385")
    parser.add_argument("--out", type=Path, help="project directory (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="yes_no-")) / "project"
    try:
        project = generate(HERE / "model.tar", args.board, out, force=True)
        print(f"generated {project.path} for {args.board}")
        built = build(out)
        print(f"built firmware: flash {built.size.flash} B, RAM {built.size.ram} B")
        samples = [{"Reshape_1": np.fromfile(HERE / name, dtype=np.int8).reshape(1, 1960)}
                   for name in SAMPLES]
        report = run_project(out, samples)
    except MtgError as exc:
        print(f"demo: error: {exc.one_line()}", file=sys.stderr)
        return 2
    for name, outs, time in zip(SAMPLES, report.outputs, report.timings, strict=True):
        scores = outs["output"].reshape(-1)
        label = LABELS[int(np.argmax(scores))]
        print(f"{name}: scores {scores.tolist()} -> \"{label}\" ({time.brief()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
