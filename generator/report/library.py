"""`report LIBDIR --board B`: what a `--format library` output adds to a firmware, before the
firmware's own link. Its sources are compiled as its CMakeLists.txt compiles them, with the
board's compiler and flags, each function and buffer in a section of its own; the sections of
the objects are the blocks (the firmware's --gc-sections may still drop what it never calls,
and its link adds alignment)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

from generator.boards import Board, load_board
from generator.elfsize import ElfSection, elf_sections, elf_symbols
from generator.errors import InputError, ProjectError
from generator.report.layers import METADATA, layers_of, module_metadata
from generator.report.memory import flash_and_ram, regions_of
from generator.report.model import Block, StackBound
from generator.report.report import Report

LIBRARY_RECORD = "library.json"
OPTIMIZE = ("-O2", "-ffunction-sections", "-fdata-sections")
MODEL_FLAGS = ("-std=gnu99", "-w", "-fno-strict-aliasing")  # as its CMakeLists.txt says
OUR_FLAGS = ("-std=c99",)
COMPILE_SECONDS = 300


def is_library(path: Path) -> bool:
    return (path / LIBRARY_RECORD).is_file()


def library_report(lib_dir: Path, board_name: str | None):
    """The report of a library output compiled for `board_name`'s core."""
    if board_name is None:
        raise InputError(f"{lib_dir} is a library: name the board whose compiler and flags "
                         "your firmware uses (report LIBDIR --board B)")
    board = load_board(board_name)
    record = _record(lib_dir)
    module = record["module"]["name"]
    with tempfile.TemporaryDirectory(prefix="mtvg-library-report-") as tmp:
        objects = _compile(lib_dir, record, board, Path(tmp))
        sections = [(obj, section) for obj in objects for section in elf_sections(obj)]
        # a function's own bytes, as a firmware's symbols give them (its section may end in
        # padding to the next function's alignment)
        functions = {s.name: s.size for obj in objects for s in elf_symbols(obj)
                     if s.kind == "func"}
    regions = regions_of(board)
    flash, ram = flash_and_ram(regions)
    code: dict[str, int] = {}
    for obj, section in sections:
        if not section.allocated or not section.size:
            continue
        block = _block(section, obj, module, functions)
        target = ram if section.writable else flash
        target.blocks.append(block)
        if block.category == "kernel-code":
            code[block.label] = block.bytes
        if section.writable and not section.nobits:
            flash.blocks.append(Block(block.label + " (load image)", block.category,
                                      block.bytes, None, block.detail))
    for region in (flash, ram):
        region.blocks = _merged(region.blocks)
        region.sections = {"object sections": sum(b.bytes for b in region.blocks)}
    layers = layers_of(module_metadata(lib_dir / METADATA, module), module, None,
                       str(lib_dir / METADATA))
    for layer in layers:
        layer.code_bytes = code.get(layer.kernel)
    notes = [f"compiled here with {board.tool('gcc')} for {board.name}, before your "
             "firmware's link: its --gc-sections drops what it never calls, its link adds "
             "alignment; the stack is your firmware's"]
    return Report(lib_dir, board.name, module, [flash, ram] if flash is not ram else [flash],
                  layers, StackBound(None, None, [], "the firmware's own (not the library's)"),
                  notes, estimate=True,
                  flash_bytes=sum(b.bytes for b in flash.blocks),
                  ram_bytes=sum(b.bytes for b in ram.blocks) if ram is not flash else 0)


def _record(lib_dir: Path) -> dict:
    try:
        record = json.loads((lib_dir / LIBRARY_RECORD).read_text())
        sources, includes = record["sources"], record["include_dirs"]
        record["module"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ProjectError(f"{lib_dir}: {LIBRARY_RECORD} is not a library record of "
                           "microtvm-gen; generate the library again") from None
    paths = [*sources, *record.get("runtime_sources", []), *includes]
    if not all(isinstance(p, str) and _inside(lib_dir, p) for p in paths):
        raise ProjectError(f"{lib_dir}: {LIBRARY_RECORD} names files outside the library")
    return record


def _inside(root: Path, relative: str) -> bool:
    path = (root / relative).resolve()
    return path.is_relative_to(root.resolve()) and not Path(relative).is_absolute()


def _compile(lib_dir: Path, record: dict, board: Board, out: Path) -> list[Path]:
    """Each source compiled to an object in `out`."""
    includes = [f"-I{lib_dir / d}" for d in record["include_dirs"]]
    runtime = record.get("runtime_sources", [])
    if runtime:
        includes.append(f"-I{lib_dir / 'runtime' / 'include'}")
    objects = []
    for i, source in enumerate([*record["sources"], *runtime]):
        flags = MODEL_FLAGS if source.startswith("model/") else OUR_FLAGS
        obj = out / f"{i}-{Path(source).stem}.o"
        argv = [board.tool("gcc"), *board.cflags, *OPTIMIZE, *flags, *includes, "-c",
                str(lib_dir / source), "-o", str(obj)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_SECONDS)
        except FileNotFoundError:
            raise InputError(f"{board.tool('gcc')} is not installed (the compiler of board "
                             f"'{board.name}')") from None
        if done.returncode != 0:
            first = next((ln for ln in done.stderr.splitlines() if "error" in ln), "")
            raise ProjectError(f"{source} does not compile for {board.name}: {first.strip()}")
        objects.append(obj)
    return objects


def _block(section: ElfSection, obj: Path, module: str, functions: dict[str, int]) -> Block:
    """What one section of an object is, by its name (-ffunction-sections/-fdata-sections)."""
    name, source = section.name, obj.name.split("-", 1)[1]
    prefix = f"tvmgen_{module}_"
    symbol = name.split(".", 2)[-1] if name.count(".") >= 2 else ""
    if name.startswith(".text"):
        if symbol.startswith(prefix) and symbol != f"{prefix}run":
            return Block(symbol[len(prefix):], "kernel-code",
                         functions.get(symbol, section.size), None, symbol)
        category = "runtime" if source.startswith(("workspace", "framing")) else "model-code"
        return Block("model code" if category == "model-code" else "runtime", category,
                     section.size, None, f"{source} {name}")
    if section.writable:
        return Block("activations" if "workspace" in symbol else "library data",
                     "activations" if "workspace" in symbol else "other", section.size, None,
                     f"{source} {name}")
    return Block("weights", "weights", section.size, None, f"{source} {name}")


def _merged(blocks: list[Block]) -> list[Block]:
    groups: dict[tuple[str, str], list[Block]] = defaultdict(list)
    for block in blocks:
        groups[(block.category, block.label)].append(block)
    return [Block(label, category, sum(b.bytes for b in group), None,
                  ", ".join(sorted({b.detail for b in group}))[:400])
            for (category, label), group in groups.items()]


