"""A bare-metal test firmware for a QEMU board: C sources (ours, with -Werror) and library
sources (warnings off) built with the board's flags and port, linked with its script, run
in its QEMU; what the firmware prints on semihosting comes back. For driver tests that check
many cases in one run (tests/test_cmsis_nn_glue.py, tests/test_arm_dsp.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror"]


def build_and_run(board_name: str, work: Path, sources: Sequence[Path],
                  flags: Sequence[str], library: Sequence[Path] = (),
                  timeout: int = 900) -> subprocess.CompletedProcess:
    """Build `sources` (strict) and `library` (-w) with the board's cflags plus `flags`, the
    board's port and linker script; run the ELF in the board's QEMU."""
    from generator.boards import load_board
    from generator.device.links import qemu_argv
    from tests.conftest import port_folder

    board = load_board(board_name)
    platform = port_folder(board.platform, work)
    cc = board.tool("gcc")
    common = [*board.cflags, "-O2", "-g", *flags]
    objs = []
    for src in [*sources, *sorted(platform.glob("*.c"))]:
        obj = work / f"{src.stem}.o"
        subprocess.run([cc, *STRICT, *common, "-c", str(src), "-o", str(obj)], check=True)
        objs.append(str(obj))
    for src in library:
        obj = work / f"lib_{src.stem}.o"
        subprocess.run([cc, "-std=c99", "-w", *common, "-c", str(src), "-o", str(obj)],
                       check=True)
        objs.append(str(obj))
    memory = [("MTVG_FLASH_ORIGIN", board.flash_origin), ("MTVG_FLASH_SIZE", board.flash_bytes),
              ("MTVG_RAM_ORIGIN", board.ram_origin), ("MTVG_RAM_SIZE", board.ram_bytes)]
    elf = work / "cases.elf"
    subprocess.run([cc, *board.ldflags, "-T", str(platform / board.linker_script),
                    f"-L{platform}",
                    *(f"-Wl,--defsym={n}={v:#x}" for n, v in memory if v is not None),
                    *objs, *(f"-l{lib}" for lib in board.libs), "-o", str(elf)], check=True)
    return subprocess.run(qemu_argv(board, elf), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)
