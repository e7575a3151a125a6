"""The QEMU board ports on their own: a program's exit status reaches the host, and a crash is
reported on the semihosting console and ends QEMU with 128 + the exception's number.

Each program is the port's C files and a small main(), built with the board file's flags,
linker script and memory map, and run with the runner's QEMU command line.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from generator.boards import load_board
from generator.device.links import qemu_argv
from tests.conftest import QEMU_BOARDS, REPO, port_folder, require_board_tools

COMMON = REPO / "templates" / "common"
RUN_TIMEOUT = 30

# An undefined instruction: UDF on Arm (HardFault, 128 + 3), an all-zero word on RISC-V
# (illegal instruction, 128 + 2).
CRASH = {"arm": '__asm__ volatile("udf #0");', "riscv": '__asm__ volatile(".word 0");'}
CRASH_STATUS = {"arm": 131, "riscv": 130}
PROGRAM = """#include "mtvg/platform.h"
int main(void) {
  mtvg_platform_init();
  uint64_t before = mtvg_timer_ticks();
  volatile uint32_t spin = 0u;
  for (uint32_t i = 0u; i < 100000u; ++i) {
    spin += i;
  }
  if (mtvg_timer_ticks() <= before || mtvg_timer_hz() == 0u) {
    return 3;
  }
  CRASH
  return 42;
}
"""


def _build(board: str, crash: bool, out: Path) -> Path:
    spec = load_board(board)
    src = out / "main.c"
    src.write_text(PROGRAM.replace("CRASH", CRASH[spec.arch] if crash else ""))
    port = port_folder(spec.platform, out)
    memory = {"MTVG_FLASH_ORIGIN": spec.flash_origin, "MTVG_FLASH_SIZE": spec.flash_bytes,
              "MTVG_RAM_ORIGIN": spec.ram_origin, "MTVG_RAM_SIZE": spec.ram_bytes,
              "MTVG_STACK_SIZE": spec.stack_bytes}
    objects = []
    for c_file in [src, *sorted(port.glob("*.c"))]:  # compiled and linked apart, as CMake does
        objects.append(out / f"{c_file.stem}.o")
        subprocess.run([spec.tool("gcc"), *spec.cflags, "-O2", "-std=c99", "-Wall", "-Wextra",
                        "-Werror", "-I", str(COMMON / "include"), "-c", str(c_file), "-o",
                        str(objects[-1])], check=True)
    elf = out / "program.elf"
    subprocess.run([spec.tool("gcc"), *map(str, objects), "-T", str(port / spec.linker_script),
                    f"-L{port}",
                    *(f"-Wl,--defsym={k}={v}" for k, v in memory.items() if v is not None),
                    *spec.ldflags, *(f"-l{lib}" for lib in spec.libs), "-o", str(elf)],
                   check=True)
    return elf


@pytest.mark.qemu
@pytest.mark.parametrize("board", QEMU_BOARDS)
def test_exit_status_and_crash_report(board, tmp_path):
    require_board_tools(board)
    spec = load_board(board)
    for crash in (False, True):
        out = tmp_path / ("crash" if crash else "exit")
        out.mkdir()
        proc = subprocess.run(qemu_argv(spec, _build(board, crash, out)), capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT)
        err = proc.stderr.decode(errors="replace")
        if not crash:
            assert proc.returncode == 42, err  # main's value: the timer advanced
            assert "mtvg: fatal" not in err
        else:
            assert proc.returncode == CRASH_STATUS[spec.arch], err
            report = [line for line in err.splitlines() if line.startswith("mtvg: fatal")]
            assert len(report) == 1, err
            assert ("HardFault" in report[0] and "pc=0x" in report[0]) if spec.arch == "arm" \
                else ("illegal instruction" in report[0] and "mepc=0x" in report[0])
