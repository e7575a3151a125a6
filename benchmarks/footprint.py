"""Footprint and speed of real MLF archives on each board.

Prints one table row per (archive, board): flash (code+rodata, data), static RAM (data+bss),
the workspace arena reserved vs the archive's stated need vs the peak measured on the
device, one inference's time in board ticks, and the generate+build wall time.

Usage: python benchmarks/footprint.py [--boards host,qemu-mps2-an385]
Archives without a permissive license are read from ../shared (skipped when absent).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from generator.build import build
from generator.elfsize import symbol_sizes
from generator.errors import MtgError
from generator.project.generate import generate
from generator.run import run_project

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "fixtures" / "mlf"
ARCHIVES = {
    "sine (v5, C, TVM 0.8)": SHARED / "gromero-sine-aot-c-v5" / "model.tar",
    "yes/no (v5, packed, int8)": REPO / "examples" / "yes_no" / "model.tar",
    "kws (v7, USMP, TVM 0.16)": SHARED / "etiss-kws-aot-usmp-tvm0.16" / "model.tar",
    "magic_wand (v7, graph)": REPO / "tests" / "fixtures" / "mlf"
    / "hannah-magicwand-graph-c-tvm0.11dev" / "model.tar",
}
# TensorFlow Lite Micro's smallest working arena for the same model on a 32-bit ARM build
# (../shared/docs/tflm-baseline.md, "plain MicroAllocator"): the number to compare the
# graph executor's RAM with.
TFLM_ARENA = {"magic_wand (v7, graph)": 15156}


def zeros_sample(project_json: dict) -> dict[str, np.ndarray]:
    return {t["name"]: np.zeros(t["shape"], dtype=t["dtype"])
            for t in project_json["module"]["inputs"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", default="host,qemu-mps2-an385")
    args = parser.parse_args()
    boards = args.boards.split(",")
    header = (f"{'archive':28s} {'board':16s} {'flash B':>8s} {'code+ro':>8s} {'data':>6s} "
              f"{'RAM B':>7s} {'arena':>6s} {'needs':>6s} {'peak':>6s} {'ticks':>9s} "
              f"{'tick Hz':>10s} {'storage':>7s} {'gen+build s':>11s}")
    print(header)
    print("-" * len(header))
    work = Path(tempfile.mkdtemp(prefix="mtvg-bench-"))
    model_ram: list[str] = []
    try:
        for label, path in ARCHIVES.items():
            if not path.exists():
                print(f"{label:28s} (skipped: {path} is absent)")
                continue
            for board in boards:
                out = work / f"{path.parent.name}-{board}"
                try:
                    start = time.monotonic()
                    project = generate(path, board, out)
                    built = build(out)
                    elapsed = time.monotonic() - start
                    pj = json.loads((out / "project.json").read_text())
                    report = run_project(out, [zeros_sample(pj)])
                except MtgError as exc:
                    print(f"{label:28s} {board:16s} error: {exc.one_line()}")
                    continue
                s, r, m = built.size, report.results[0], project.module
                needs = (m.operator_workspace_bytes if m.executor == "graph"
                         and m.operator_workspace_bytes is not None else m.workspace_size_bytes)
                print(f"{label:28s} {board:16s} {s.flash:8d} {s.text:8d} {s.data:6d} "
                      f"{s.ram:7d} {built.arena_bytes:6d} {needs:6d} {r.workspace_peak:6d} "
                      f"{r.ticks:9d} {r.hz:10d} {built.storage_bytes_reserved:7d} "
                      f"{elapsed:11.1f}")
                if label in TFLM_ARENA and not board == "host":
                    graph = symbol_sizes(built.elf, {"graph"}).get("graph", 0)
                    total = built.storage_bytes_reserved + r.workspace_peak + graph
                    model_ram.append(
                        f"{label} on {board}: graph storage {built.storage_bytes_reserved} + "
                        f"workspace peak {r.workspace_peak} + executor state {graph} = "
                        f"{total} B; TFLM arena (ARM32, docs) {TFLM_ARENA[label]} B")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nflash/RAM: ELF section sizes (host rows include libc glue, not comparable to MCU"
          " rows); arena: reserved for TVMBackendAllocWorkspace; needs: metadata"
          " workspace_size_bytes (USMP archives keep their pool inside the model's own"
          " code); peak: measured on the device. QEMU runs with -icount shift=0, so its"
          " ticks repeat to within 1 (SysTick phase). storage: graph executor buffers"
          " reserved (= what the graph needs).")
    for line in model_ram:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
