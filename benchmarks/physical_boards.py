"""Build time and firmware size on the physical boards (nothing is flashed or run).

One row per (model, board): the time of a clean generate + build (CMake configure, compile,
link; for the Pico also its boot2 step; the median of --repeat runs), flash use (code,
constants and the .data image; the Pico's includes its 256-byte boot2), static RAM (.data +
.bss), the stack the board file reserves, the shares of the board's regions, and what the
board port's own objects take. Models: the
TVM 0.8 yes/no archive, and models exported with TVM 0.27 (hello_world int8, mlperftiny kws
int8, mnist-8 float). qemu-mps2-an385 is a reference row.

Usage: python benchmarks/physical_boards.py [--boards a,b] [--models yes_no,kws] [--json]
       python benchmarks/physical_boards.py --docs        # rewrite docs/boards.md's table
       python benchmarks/physical_boards.py --check-docs  # exit 1 if it is stale

docs/boards.md holds the size columns (not the times, which depend on the machine) in its
table `physical-board-sizes` (benchmarks/docs_tables.py); tests/test_docs_tables.py
rebuilds two of its rows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from docs_tables import DocsTable, add_docs_options, publish, refuse_subset

from generator.boards import list_boards, load_board
from generator.build import build
from generator.device.links import link_of
from generator.project.generate import generate

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "tests" / "fixtures" / "models"
# The boards that are flashed (their link needs it), from the board files.
PHYSICAL_BOARDS = [b for b in list_boards() if link_of(load_board(b)).needs_flash]
REFERENCE_BOARD = "qemu-mps2-an385"
ARCHIVES = {"yes_no": REPO / "examples" / "yes_no" / "model.tar"}
EXPORTED = {
    "hello_world_int8": MODELS / "hello_world" / "hello_world_int8.tflite",
    "kws_int8": MODELS / "mlperftiny_kws" / "kws_ref_model.tflite",
    "mnist-8": REPO / "examples" / "mnist" / "mnist-8.onnx",
}


@dataclass
class Row:
    model: str
    board: str
    build_seconds: float
    flash_bytes: int
    flash_region: int
    ram_static_bytes: int
    stack_bytes: int
    ram_region: int
    port_flash_bytes: int  # the board port's objects: code, constants, vectors (and boot2)
    port_ram_bytes: int  # their .data + .bss (mostly the receive ring)

    @property
    def flash_pct(self) -> float:
        return 100.0 * self.flash_bytes / self.flash_region

    @property
    def ram_pct(self) -> float:
        return 100.0 * (self.ram_static_bytes + self.stack_bytes) / self.ram_region


def port_footprint(project: Path, board) -> tuple[int, int]:
    """Flash and RAM of the port's object files, by the board's `size` tool (before the
    linker drops unused sections, so an upper bound)."""
    objects = sorted((project / "build" / "CMakeFiles" / "firmware.elf.dir").rglob("*.o*"))
    ours = [o for o in objects if "platform" in o.parts or o.name.startswith("boot2_image")]
    out = subprocess.run([board.tool("size"), *map(str, ours)], capture_output=True, text=True,
                         check=True).stdout.splitlines()[1:]
    flash = ram = 0
    for line in out:
        text, data, bss = (int(v) for v in line.split()[:3])
        flash += text + data
        ram += data + bss
    return flash, ram


def archive_for(model: str, work: Path) -> Path:
    if model in ARCHIVES:
        return ARCHIVES[model]
    from generator.export import export_model

    dest = work / f"{model}.tar"
    if not dest.exists():
        export_model(EXPORTED[model], dest)
    return dest


def measure(model: str, archive: Path, board_name: str, work: Path, repeat: int) -> Row:
    board = load_board(board_name)
    project = work / f"{model}-{board_name}"
    times = []
    for _ in range(repeat):
        shutil.rmtree(project, ignore_errors=True)
        start = time.perf_counter()
        generate(archive, board_name, project)
        result = build(project)
        times.append(time.perf_counter() - start)
    return Row(model, board_name, statistics.median(times), result.size.flash,
               board.flash_bytes or 0, result.size.ram, board.stack_bytes or 0,
               board.ram_bytes or 0, *port_footprint(project, board))


def physical_board_rows(models: list[str], boards: list[str], work: Path,
                        repeat: int = 3) -> list[Row]:
    """The rows of this benchmark (callable from other benchmark scripts)."""
    rows = []
    for model in models:
        archive = archive_for(model, work)
        for board in boards:
            rows.append(measure(model, archive, board, work, repeat))
            print(f"  {model} on {board}: {rows[-1].build_seconds:.1f} s", file=sys.stderr)
    return rows


def table(rows: list[Row]) -> str:
    out = ["| model | board | generate + build | flash | of flash | RAM static | "
           "+ stack | of RAM | port flash | port RAM |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r.model} | {r.board} | {r.build_seconds:.1f} s | {r.flash_bytes:,} B | "
                   f"{r.flash_pct:.1f} % | {r.ram_static_bytes:,} B | {r.stack_bytes:,} B | "
                   f"{r.ram_pct:.1f} % | {r.port_flash_bytes:,} B | {r.port_ram_bytes:,} B |")
    return "\n".join(out)


DOCS_TABLE = DocsTable(REPO / "docs" / "boards.md", "physical-board-sizes",
                       "python benchmarks/physical_boards.py --docs")
DOCS_HEADER = ["| model | board | flash | of flash | RAM static | + stack | of RAM | port flash "
               "| port RAM |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]


def doc_row(r: Row) -> str:
    """A row of docs/boards.md's table: the sizes, no time."""
    return (f"| {r.model} | {r.board} | {r.flash_bytes:,} B | {r.flash_pct:.1f} % | "
            f"{r.ram_static_bytes:,} B | {r.stack_bytes:,} B | {r.ram_pct:.1f} % | "
            f"{r.port_flash_bytes:,} B | {r.port_ram_bytes:,} B |")


def docs_rows() -> list[str]:
    """The table rows docs/boards.md holds."""
    return [line for line in DOCS_TABLE.lines() if line not in DOCS_HEADER]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", default=",".join([*PHYSICAL_BOARDS, REFERENCE_BOARD]))
    parser.add_argument("--models", default=",".join([*ARCHIVES, *EXPORTED]))
    parser.add_argument("--repeat", type=int, default=3, help="clean builds per row (median)")
    parser.add_argument("--json", action="store_true")
    add_docs_options(parser, "docs/boards.md's size table (every model and board)")
    args = parser.parse_args()
    refuse_subset(parser, args, "boards", "models")
    if args.docs or args.check_docs:
        args.repeat = 1  # sizes do not vary between builds
    with tempfile.TemporaryDirectory(prefix="mtvg-physical-") as tmp:
        rows = physical_board_rows(args.models.split(","), args.boards.split(","), Path(tmp),
                                   args.repeat)
    if args.docs or args.check_docs:
        return publish(DOCS_TABLE, [*DOCS_HEADER, *map(doc_row, rows)], args.check_docs)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
