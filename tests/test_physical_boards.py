"""Physical boards: each generates and builds warning-free (-Werror) with arm-none-eabi-gcc,
and its ELF has what the chip's boot needs: the vector table at the start of flash (RP2040:
after boot2, whose CRC32 the boot ROM checks), an initial SP in RAM, a Thumb reset vector
in flash, and every section inside the board's memory regions."""

from __future__ import annotations

import binascii
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from generator.boards import load_board
from generator.build import build
from generator.device.uf2 import load_segments
from generator.project.generate import generate
from tests.conftest import PHYSICAL_BOARDS, REPO, YES_NO

SHF_ALLOC = 0x2
SHT_NOBITS = 8
RP2040_BOOT2_BYTES = 256
RP2040_BOOT2_CODE_BYTES = 252


def _require_arm_gcc() -> None:
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed (scripts/bootstrap.sh installs it)")


@pytest.fixture(scope="module", params=PHYSICAL_BOARDS)
def built(request, tmp_path_factory):
    _require_arm_gcc()
    board = request.param
    project = tmp_path_factory.mktemp(board) / "p"
    generate(YES_NO / "model.tar", board, project)
    result = build(project)
    return load_board(board), project, result


def _sections(elf: Path) -> list[tuple[str, int, int, int, int]]:
    """(name, type, flags, address, size) of every section of a 32-bit little-endian ELF."""
    blob = elf.read_bytes()
    shoff, = struct.unpack_from("<I", blob, 0x20)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x2E)
    raw = [struct.unpack_from("<10I", blob, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = raw[shstrndx][4]
    out = []
    for name, sh_type, flags, addr, _off, size, *_ in raw:
        end = blob.index(b"\0", strtab_off + name)
        out.append((blob[strtab_off + name:end].decode(), sh_type, flags, addr, size))
    return out


def _symbol(elf: Path, name: str) -> int:
    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True,
                        check=True).stdout
    for line in nm.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise AssertionError(f"{name} not in {elf}")


def _flash_image(elf: Path, origin: int, size: int) -> bytes:
    """The flash contents the ELF loads (gaps as zeros), from its program headers."""
    image = bytearray(size)
    top = 0
    for seg in load_segments(elf):
        assert origin <= seg.address and seg.address + len(seg.data) <= origin + size, \
            f"a load segment at {seg.address:#x} lies outside the flash"
        start = seg.address - origin
        image[start:start + len(seg.data)] = seg.data
        top = max(top, start + len(seg.data))
    return bytes(image[:top])


def _crc32_mpeg2(data: bytes) -> int:
    """The boot ROM's CRC (poly 0x04C11DB7, init ~0, MSB first, no final XOR), computed from
    zlib's reflected CRC-32 on bit-reversed bytes: a formulation independent of the CMake
    step's bit loop."""
    def rev8(b: int) -> int:
        return int(f"{b:08b}"[::-1], 2)

    reflected = binascii.crc32(bytes(rev8(b) for b in data)) ^ 0xFFFFFFFF
    return int(f"{reflected:032b}"[::-1], 2)


def test_crc_formulation_check_value():
    assert _crc32_mpeg2(b"123456789") == 0x0376E6E7  # CRC-32/MPEG-2 check value


def test_builds_warning_free(built):
    board, project, result = built
    log = (project / "build" / "build.log").read_text()
    assert "warning" not in log.lower(), log
    assert "-Werror" in (project / "CMakeLists.txt").read_text()
    assert result.size.text > 0 and result.size.bss >= result.arena_bytes


def test_vector_table_and_regions(built):
    board, project, result = built
    elf = result.elf
    flash0, flash_size = board.flash_origin, board.flash_bytes
    ram0, ram_size = board.ram_origin, board.ram_bytes
    image = _flash_image(elf, flash0, flash_size)
    vectors = flash0 + (RP2040_BOOT2_BYTES if board.platform == "rp2040" else 0)
    assert _symbol(elf, "mtvg_vectors") == vectors

    sp, reset = struct.unpack_from("<II", image, vectors - flash0)
    assert ram0 < sp <= ram0 + ram_size and sp % 8 == 0, hex(sp)
    assert reset & 1, "the reset vector must be a Thumb address"
    assert flash0 <= reset < flash0 + len(image)
    assert reset & ~1 == _symbol(elf, "Reset_Handler")
    # Every other system slot points into flash too (Thumb handlers).
    for slot in range(2, 16):
        handler, = struct.unpack_from("<I", image, vectors - flash0 + 4 * slot)
        assert handler & 1 and flash0 <= handler < flash0 + len(image), (slot, hex(handler))

    ram_top = 0
    for name, sh_type, flags, addr, size in _sections(elf):
        if not flags & SHF_ALLOC or size == 0:
            continue
        if ram0 <= addr < ram0 + ram_size:
            ram_top = max(ram_top, addr + size)
        else:
            assert flash0 <= addr and addr + size <= flash0 + flash_size, name
            assert sh_type != SHT_NOBITS, f"{name}: zero-initialised data placed in flash"
    assert ram_top + board.stack_bytes <= ram0 + ram_size, "data + bss + stack overflow RAM"
    # What build reports as flash is what the ELF loads there, up to alignment padding: the
    # gaps between the sections in flash (.text after the vector table starts at its own
    # alignment) and 8 bytes at the end.
    in_flash = sorted((addr, size) for _, sh_type, flags, addr, size in _sections(elf)
                      if flags & SHF_ALLOC and size and sh_type != SHT_NOBITS
                      and flash0 <= addr < flash0 + flash_size)
    gaps = sum(b[0] - (a[0] + a[1]) for a, b in zip(in_flash, in_flash[1:], strict=False))
    assert result.size.flash <= len(image) <= result.size.flash + gaps + 8


@pytest.mark.parametrize("built", ["rpi-pico"], indirect=True)
def test_rp2040_boot2_block(built):
    board, project, result = built
    image = _flash_image(result.elf, board.flash_origin, board.flash_bytes)
    boot2 = image[:RP2040_BOOT2_BYTES]
    crc, = struct.unpack_from("<I", boot2, RP2040_BOOT2_CODE_BYTES)
    assert crc == _crc32_mpeg2(boot2[:RP2040_BOOT2_CODE_BYTES])
    # The block is the separately built boot2 code, zero-padded.
    code = (project / "build" / "boot2.bin").read_bytes()
    assert 0 < len(code) <= RP2040_BOOT2_CODE_BYTES
    assert boot2[:len(code)] == code
    assert set(boot2[len(code):RP2040_BOOT2_CODE_BYTES]) <= {0}
    # boot2 runs from SRAM at 0x20041F00 and never touches the firmware's symbols.
    boot2_elf = project / "build" / "boot2.elf"
    assert _symbol(boot2_elf, "boot2_entry") == 0x20041F00
    sections = {s[0]: s for s in _sections(result.elf)}
    assert sections[".boot2"][3] == board.flash_origin
    assert sections[".boot2"][4] == RP2040_BOOT2_BYTES
    assert sections[".text"][3] == board.flash_origin + RP2040_BOOT2_BYTES


@pytest.fixture(scope="module")
def operator_archive(tmp_path_factory):
    """hello_world int8 exported with every kernel callable by name (host-driven projects)."""
    from generator.export.operators import export_model_operators

    dest = tmp_path_factory.mktemp("ops") / "ops.tar"
    model = REPO / "tests" / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
    export_model_operators(model, dest)
    return dest


@pytest.mark.parametrize("board", PHYSICAL_BOARDS)
def test_host_driven_project_builds(board, operator_archive, tmp_path):
    """The RPC server firmware, which `serve --serial` talks to, builds warning-free too."""
    _require_arm_gcc()
    project = tmp_path / "p"
    generated = generate(operator_archive, board, project)
    assert generated.project_type == "host-driven"
    result = build(project)
    assert "warning" not in (project / "build" / "build.log").read_text().lower()
    spec = load_board(board)
    assert result.size.ram + spec.stack_bytes <= spec.ram_bytes
    boot2 = RP2040_BOOT2_BYTES if spec.platform == "rp2040" else 0
    assert _symbol(result.elf, "mtvg_vectors") == spec.flash_origin + boot2


def test_rp2040_boot2_crc_changes_with_code(tmp_path):
    """The CMake step computes the CRC of whatever code it is given (no fixed constant)."""
    _require_arm_gcc()
    script = (Path(__file__).resolve().parent.parent / "templates" / "common" / "platform"
              / "rp2040" / "boot2_crc.cmake")
    from generator.toolchain import cmake_program

    for payload in (b"\x01\x02\x03", bytes(range(200)), b"\xa5" * 252):
        src = tmp_path / "in.bin"
        src.write_bytes(payload)
        out = tmp_path / "out.c"
        subprocess.run([cmake_program(), f"-DBOOT2_BIN={src}", f"-DOUTPUT={out}", "-P",
                        str(script)], check=True, capture_output=True)
        text = out.read_text()
        body = text[text.index("= {") + 3:text.rindex("}")]
        data = bytes(int(x, 16) for x in body.replace("\n", "").split(","))
        padded = payload.ljust(RP2040_BOOT2_CODE_BYTES, b"\0")
        assert data[:RP2040_BOOT2_CODE_BYTES] == padded
        assert int.from_bytes(data[RP2040_BOOT2_CODE_BYTES:], "little") == _crc32_mpeg2(padded)
    src.write_bytes(b"\0" * 253)
    proc = subprocess.run([cmake_program(), f"-DBOOT2_BIN={src}", f"-DOUTPUT={out}", "-P",
                           str(script)], capture_output=True, text=True)
    assert proc.returncode != 0 and "must be 1 to 252" in proc.stderr


RATED_HZ = {"nucleo-f746zg": 216_000_000, "nucleo-l4r5zi": 120_000_000}


@pytest.mark.parametrize("built", sorted(RATED_HZ), indirect=True)
def test_stm32_boards_run_at_their_rated_clock_or_the_reset_clock(built, tmp_path):
    """The board file's clock_hz is the rated speed the port sets up (PLL, wait states; the
    M7's caches); MTVG_RESET_CLOCK=1 builds the same project on the 16 MHz HSI instead. Both
    warning-free; the PLL set-up is in the one and not in the other."""
    board_spec, _, result = built
    board = board_spec.name
    assert board_spec.clock_hz == RATED_HZ[board]
    reset = tmp_path / "reset"
    generate(YES_NO / "model.tar", board, reset, extra_definitions={"MTVG_RESET_CLOCK": "1"})
    elves = {"rated": result.elf, "reset": build(reset).elf}
    text = {k: subprocess.run(["arm-none-eabi-objdump", "-d", str(v)], check=True,
                              capture_output=True, text=True).stdout for k, v in elves.items()}
    # RCC_CR's PLLON (bit 24) is set on the rated clock only: look for the literal of the
    # PLL configuration word (f746: M 8, N 216, Q 9; l4r5: HSI16, N 15, R enabled).
    pllcfgr = {"nucleo-f746zg": 8 | 216 << 6 | 9 << 24, "nucleo-l4r5zi": 2 | 15 << 8 | 1 << 24}
    word = f"{pllcfgr[board]:08x}"
    assert word in text["rated"] and word not in text["reset"]
