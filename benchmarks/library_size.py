"""Flash a model library adds to a firmware that is not ours, beyond its kernels and weights.

For each model: export it (its own --module), generate the library, link it into the
foreign application of tests/foreign_app.py on qemu-mps2-an385 (its own startup, linker
script, UART; built with arm-none-eabi-gcc -O2 and --gc-sections), and link the same
application with a one-line stub in place of `<module>_run` as the baseline. The flash the
library adds is the difference (text + data); kernels and weights are the sizes of the
archive's kernel functions (every `tvmgen_<module>_*` function but the run function) and constants
(`tvmgen_<module>_const_*`) in the linked ELF; the rest (`beyond`) is the run function, the
wrapper, the runtime when there is one, and the C library functions the model pulls in.
The run is checked to print the model's outputs. TFLite Micro's framework on the same
board is 46.6 KB (docs/tflm-baseline.md).

Usage: python benchmarks/library_size.py [--json] [--docs | --check-docs]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from docs_tables import DocsTable, add_docs_options, publish

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.export import export_model  # noqa: E402
from generator.project.library import generate_library  # noqa: E402
from tests.foreign_app import (  # noqa: E402
    AN385_CFLAGS,
    LinkedModel,
    build_an385,
    parse_outputs,
    run_an385,
)

MODELS_DIR = REPO / "tests" / "fixtures" / "models"
MODELS = {"kws": MODELS_DIR / "mlperftiny_kws" / "kws_ref_model.tflite",
          "hello": MODELS_DIR / "hello_world" / "hello_world_int8.tflite"}
FLASH_SECTIONS = (".isr_vector", ".text", ".ARM.exidx", ".data")
TABLE = DocsTable(REPO / "docs" / "integration.md", "library-flash",
                  "python benchmarks/library_size.py --docs")


@dataclass
class LibrarySize:
    model: str
    flash_added: int  # bytes of flash the library adds to the application
    kernels: int
    weights: int
    beyond: int  # flash_added - kernels - weights
    static_ram: int  # the .bss the library adds: its workspace for <name>_run


def section_sizes(elf: Path) -> dict[str, int]:
    done = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], check=True,
                          capture_output=True, text=True)
    sizes = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    return sizes


def symbol_sizes(elf: Path) -> dict[tuple[str, str], int]:
    """(symbol, nm type letter) → size in bytes."""
    done = subprocess.run(["arm-none-eabi-nm", "-S", str(elf)], check=True,
                          capture_output=True, text=True)
    return {(p[3], p[2]): int(p[1], 16)
            for p in (line.split() for line in done.stdout.splitlines()) if len(p) == 4}


def flash(elf: Path) -> int:
    sizes = section_sizes(elf)
    return sum(sizes.get(s, 0) for s in FLASH_SECTIONS)


def measure(name: str, work: Path) -> LibrarySize:
    print(f"{name}: export, library, link", file=sys.stderr, flush=True)
    archive = export_model(MODELS[name], work / f"{name}.tar", module=name).path
    lib = generate_library(archive, work / f"lib-{name}")
    model = LinkedModel.of(lib)
    elf = build_an385([model], work / f"app-{name}")
    outputs = parse_outputs(run_an385(elf), [model])[name]
    assert [len(o) for o in outputs] == model.output_bytes
    stub = work / f"stub-{name}.c"
    stub.write_text(f'#include "{name}.h"\nint32_t {name}_run(const struct {name}_inputs* i, '
                    f"const struct {name}_outputs* o) {{ (void)i; (void)o; return 0; }}\n")
    subprocess.run(["arm-none-eabi-gcc", *AN385_CFLAGS, f"-I{lib.path / 'include'}", "-c",
                    str(stub), "-o", str(work / f"stub-{name}.o")], check=True)
    baseline = build_an385([model], work / f"base-{name}", objects=[work / f"stub-{name}.o"])
    symbols = symbol_sizes(elf)
    kernels = sum(size for (sym, kind), size in symbols.items()
                  if kind in "Tt" and sym.startswith(f"tvmgen_{name}_")
                  and sym != f"tvmgen_{name}_run" and not sym.startswith(f"tvmgen_{name}_const_"))
    weights = sum(size for (sym, _), size in symbols.items()
                  if sym.startswith(f"tvmgen_{name}_const_"))
    added = flash(elf) - flash(baseline)
    bss = section_sizes(elf).get(".bss", 0) - section_sizes(baseline).get(".bss", 0)
    return LibrarySize(name, added, kernels, weights, added - kernels - weights, bss)


def lines(sizes: list[LibrarySize]) -> list[str]:
    out = ["| model | flash added | kernels | weights | beyond kernels and weights | "
           "RAM (.bss) |", "|---|---:|---:|---:|---:|---:|"]
    for s in sizes:
        out.append(f"| {s.model} | {s.flash_added:,} | {s.kernels:,} | {s.weights:,} | "
                   f"{s.beyond:,} | {s.static_ram:,} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    add_docs_options(parser, "docs/integration.md's library table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mtvg-library-size-") as tmp:
        sizes = [measure(name, Path(tmp)) for name in MODELS]
    if args.docs or args.check_docs:
        return publish(TABLE, lines(sizes), args.check_docs)
    if args.json:
        print(json.dumps([asdict(s) for s in sizes], indent=1))
    else:
        print("\n".join(lines(sizes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
