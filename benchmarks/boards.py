"""Every QEMU board against the same models: flash, RAM, instructions per inference, build time.

One row per (model, board): flash (code, constants, .data image), static RAM (.data + .bss)
and the stack the board reserves, one inference's timer ticks and what they are in
instructions (QEMU -icount shift=0: one instruction per virtual ns), and the wall time of
generate + build. A model that cannot fit a board shows generate's refusal instead.

Usage: python benchmarks/boards.py [--boards qemu-mps2-an385,...] [--models yes_no,kws]
       [--json]
The exported models are exported once (TVM 0.27) into a temporary folder first.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from generator.boards import list_boards, load_board
from generator.build import build
from generator.errors import MtgError
from generator.export import export_model
from generator.project.generate import generate
from generator.run import run_project

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / "tests" / "fixtures" / "models"
YES_NO = REPO / "examples" / "yes_no"
MAGIC_WAND = MODELS_DIR / "magic_wand"


@dataclass(frozen=True)
class Model:
    label: str
    source: Path  # an MLF archive, or a model file to export first
    inputs: Callable[[dict], dict[str, np.ndarray]]  # one sample, from project.json
    export: bool = False


def zeros(project: dict) -> dict[str, np.ndarray]:
    return {t["name"]: np.zeros(t["shape"], dtype=t["dtype"])
            for t in project["module"]["inputs"]}


def yes_sample(project: dict) -> dict[str, np.ndarray]:
    raw = np.fromfile(YES_NO / "yes_0a2b400e_nohash_0.raw", dtype=np.int8)
    return {"Reshape_1": raw.reshape(1, 1960)}


def wand_sample(project: dict) -> dict[str, np.ndarray]:
    return {"conv2d_input": np.load(MAGIC_WAND / "input_0.npy")}


MODELS = {
    "yes_no": Model("yes/no (TVM 0.8 AOT, int8)", YES_NO / "model.tar", yes_sample),
    "hello_int8": Model("hello_world int8 (export)",
                        MODELS_DIR / "hello_world" / "hello_world_int8.tflite", zeros, True),
    "kws": Model("kws int8 (export)", MODELS_DIR / "mlperftiny_kws" / "kws_ref_model.tflite",
                 zeros, True),
    "mnist": Model("mnist-8 float (export)", REPO / "examples" / "mnist" / "mnist-8.onnx", zeros,
                   True),
    "magic_wand": Model("magic_wand (graph, TVM 0.11)", REPO / "tests" / "fixtures" / "mlf"
                        / "hannah-magicwand-graph-c-tvm0.11dev" / "model.tar", wand_sample),
}


@dataclass
class Row:
    model: str
    board: str
    flash_bytes: int | None = None
    ram_bytes: int | None = None
    stack_bytes: int | None = None
    ticks: int | None = None
    tick_hz: int | None = None
    instructions: int | None = None
    build_seconds: float | None = None
    refused: str | None = None


def measure(key: str, archive: Path, board: str, work: Path) -> Row:
    model = MODELS[key]
    row = Row(model.label, board, stack_bytes=load_board(board).stack_bytes)
    out = work / f"{key}-{board}"
    try:
        start = time.monotonic()
        generate(archive, board, out)
        build(out)
        row.build_seconds = time.monotonic() - start
        project = json.loads((out / "project.json").read_text())
        report = run_project(out, [model.inputs(project)])
    except MtgError as exc:
        row.refused = exc.one_line()
        return row
    result, timing = report.results[0], report.timings[0]
    row.flash_bytes, row.ram_bytes = report.flash_bytes, report.ram_bytes
    row.ticks, row.tick_hz = result.ticks, result.hz
    row.instructions = timing.count if timing.unit == "instructions" else None
    return row


def markdown(rows: list[Row]) -> str:
    lines = ["| model | board | flash B | RAM B (+ stack) | ticks | instructions | build s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.refused:
            need = re.search(r"needs at least [\d,]+ B of \w+", r.refused)
            lines.append(f"| {r.model} | {r.board} | refused at generate: "
                         f"{need.group(0) if need else r.refused} | | | | |")
            continue
        stack = f" (+ {r.stack_bytes:,})" if r.stack_bytes else ""
        instr = f"{r.instructions:,}" if r.instructions is not None else "—"
        lines.append(f"| {r.model} | {r.board} | {r.flash_bytes:,} | {r.ram_bytes:,}{stack} | "
                     f"{r.ticks:,} @ {r.tick_hz / 1e6:g} MHz | {instr} | "
                     f"{r.build_seconds:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    qemu = [b for b in list_boards() if load_board(b).qemu is not None]
    parser.add_argument("--boards", default=",".join(qemu), help="comma-separated board names")
    parser.add_argument("--models", default=",".join(MODELS), help=", ".join(MODELS))
    parser.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    args = parser.parse_args()
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    for board in args.boards.split(","):
        try:
            load_board(board)
        except MtgError as exc:
            parser.error(exc.one_line())
    work = Path(tempfile.mkdtemp(prefix="mtvg-boards-"))
    rows: list[Row] = []
    try:
        for key in args.models.split(","):
            model = MODELS[key]
            archive = model.source
            if model.export:
                archive = work / f"{key}.tar"
                export_model(model.source, archive)
            for board in args.boards.split(","):
                rows.append(measure(key, archive, board, work))
                if not args.json:
                    print(markdown(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({"rows": [asdict(r) for r in rows]}, indent=2))
    else:
        print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
