"""Firmware size: the Zephyr project next to the CRT project of the same archive.

For each (model, Zephyr board): generate with the zephyr template and build; flash = text +
data, RAM = data + bss (`build`'s size report). On the QEMU boards, also the CRT project of
the same archive on its CRT board and the flash Zephyr adds. Needs a Zephyr 4.x tree:
ZEPHYR_BASE (outside a west workspace also ZEPHYR_MODULES, with hal_stm32 and hal_nordic
for the physical boards) and, for Zephyr's scripts, MICROTVM_GEN_ZEPHYR_PYTHON; see
docs/zephyr.md.

Usage: python benchmarks/zephyr_sizes.py [--json] [--docs | --check-docs]
(--docs rewrites docs/zephyr.md's two size tables from this run.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from docs_tables import DocsTable, add_docs_options, publish

from generator.build import build
from generator.project.generate import generate
from generator.resources import templates_dir

REPO = Path(__file__).resolve().parent.parent
SHARED_MLF = REPO.parent / "shared" / "fixtures" / "mlf"
# label in the table -> (archive, what the label says it is)
MODELS = {
    "sine": (SHARED_MLF / "gromero-sine-aot-c-v5" / "model.tar", "gromero-sine-aot-c-v5"),
    "kws": (SHARED_MLF / "etiss-kws-aot-usmp-tvm0.16" / "model.tar",
            "etiss-kws-aot-usmp-tvm0.16"),
    "yes/no": (REPO / "examples" / "yes_no" / "model.tar", "examples/yes_no"),
}
# (model, Zephyr board, CRT board beside it or None)
QEMU_ROWS = [("sine", "mps2/an385", "qemu-mps2-an385"),
             ("kws", "mps2/an385", "qemu-mps2-an385"),
             ("yes/no", "mps2/an385", "qemu-mps2-an385"),
             ("sine", "qemu_cortex_m3", None),
             ("kws", "mps2/an521/cpu0", None),
             ("sine", "qemu_riscv32", "qemu-riscv32")]
PHYSICAL_BOARDS = ["nucleo_f746zg", "nucleo_l4r5zi", "nrf5340dk/nrf5340/cpuapp"]
PHYSICAL_MODELS = ["kws", "yes/no"]
DOCS = REPO / "docs" / "zephyr.md"
COMMAND = "python benchmarks/zephyr_sizes.py --docs"
QEMU_TABLE = DocsTable(DOCS, "zephyr-qemu-sizes", COMMAND)
PHYSICAL_TABLE = DocsTable(DOCS, "zephyr-physical-sizes", COMMAND)


@dataclass
class Size:
    model: str
    board: str
    template: str
    flash: int
    ram: int


def measure(model: str, board: str, template: str, work: Path) -> Size:
    project = work / f"{template}-{model}-{board}".replace("/", "_")
    print(f"building {model} for {board} ({template})", file=sys.stderr, flush=True)
    generate(MODELS[model][0], board, project, template=templates_dir() / template)
    size = build(project).size
    return Size(model, board, template, size.flash, size.ram)


def measure_all(work: Path) -> list[Size]:
    sizes = []
    for model, zboard, crt_board in QEMU_ROWS:
        sizes.append(measure(model, zboard, "zephyr", work))
        if crt_board:
            sizes.append(measure(model, crt_board, "crt", work))
    for model in PHYSICAL_MODELS:
        for zboard in PHYSICAL_BOARDS:
            sizes.append(measure(model, zboard, "zephyr", work))
    return sizes


def qemu_lines(sizes: list[Size]) -> list[str]:
    find = {(s.model, s.board, s.template): s for s in sizes}
    lines = ["| model | Zephyr board | Zephyr flash | Zephyr RAM | CRT flash | CRT RAM | "
             "flash added |", "|---|---|---:|---:|---:|---:|---:|"]
    labelled = set()
    for model, zboard, crt_board in QEMU_ROWS:
        label = model if model in labelled else f"{model} ({MODELS[model][1]})"
        labelled.add(model)
        z = find[(model, zboard, "zephyr")]
        cells = [label, f"`{zboard}`", f"{z.flash:,}", f"{z.ram:,}", "", "", ""]
        if crt_board:
            c = find[(model, crt_board, "crt")]
            if crt_board != "qemu-mps2-an385":
                cells[1] += f" (CRT: {crt_board})"
            cells[4:] = [f"{c.flash:,}", f"{c.ram:,}", f"{z.flash - c.flash:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def physical_lines(sizes: list[Size]) -> list[str]:
    find = {(s.model, s.board): s for s in sizes if s.template == "zephyr"}
    lines = ["| model | " + " | ".join(f"`{b}` flash / RAM" for b in PHYSICAL_BOARDS) + " |",
             "|---|" + "---:|" * len(PHYSICAL_BOARDS)]
    for model in PHYSICAL_MODELS:
        cells = [f"{find[(model, b)].flash:,} / {find[(model, b)].ram:,}"
                 for b in PHYSICAL_BOARDS]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    add_docs_options(parser, "docs/zephyr.md's two size tables")
    args = parser.parse_args()
    if not os.environ.get("ZEPHYR_BASE"):
        parser.error("set ZEPHYR_BASE to a Zephyr 4.x tree (docs/zephyr.md)")
    with tempfile.TemporaryDirectory(prefix="mtvg-zephyr-sizes-") as tmp:
        sizes = measure_all(Path(tmp))
    if args.docs or args.check_docs:
        return max(publish(QEMU_TABLE, qemu_lines(sizes), args.check_docs),
                   publish(PHYSICAL_TABLE, physical_lines(sizes), args.check_docs))
    if args.json:
        print(json.dumps([asdict(s) for s in sizes], indent=1))
    else:
        print("\n".join(qemu_lines(sizes)) + "\n\n" + "\n".join(physical_lines(sizes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
