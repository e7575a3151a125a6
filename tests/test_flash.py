"""`flash` and serial discovery without boards attached.

The flash tools are small scripts this test writes first on PATH; each records the argv it
was given. pyserial's port list is replaced by fixed entries (several boards, none, an
unknown VID). Projects are really generated and built with arm-none-eabi-gcc.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from serial.tools import list_ports
from serial.tools.list_ports_common import ListPortInfo

from generator.boards import load_board
from generator.build import build
from generator.cli import main
from generator.device.serial_ports import connected_ports, find_board_port
from generator.device.uf2 import (
    UF2_BLOCK_BYTES,
    UF2_DATA_BYTES,
    UF2_MAGIC_END,
    UF2_MAGIC_START0,
    UF2_MAGIC_START1,
    load_segments,
)
from generator.errors import DeviceError
from generator.project.generate import generate
from tests.conftest import REPO, YES_NO

ST_LINK = (0x0483, 0x374B)
J_LINK = (0x1366, 0x1015)
FTDI = (0x0403, 0x6001)  # a USB-serial cable no board file names
RP2040_FAMILY = 0xE48BFF56
FAKE_TOOLS = ("openocd", "pyocd", "picotool")


def _port(device: str, usb: tuple[int, int] | None, serial: str | None,
          description: str = "probe") -> ListPortInfo:
    info = ListPortInfo(device, skip_link_detection=True)
    if usb is not None:
        info.vid, info.pid = usb
    info.serial_number = serial
    info.description = description
    return info


@pytest.fixture
def ports(monkeypatch):
    """Set the machine's serial ports: ports.set([...])."""
    entries: list[ListPortInfo] = []

    class Ports:
        @staticmethod
        def set(new):
            entries[:] = new

    monkeypatch.setattr(list_ports, "comports", lambda *a, **k: list(entries))
    return Ports


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """openocd, pyocd and picotool scripts first on PATH; returns a reader of their argv."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.jsonl"
    for tool in FAKE_TOOLS:
        script = bin_dir / tool
        script.write_text(
            f"#!{sys.executable}\n"
            "import json, os, sys\n"
            f"with open({str(log)!r}, 'a') as f:\n"
            "    f.write(json.dumps(sys.argv) + '\\n')\n"
            "code = int(os.environ.get('FAKE_TOOL_EXIT', '0'))\n"
            "if code:\n"
            "    print('Error: no device found', file=sys.stderr)\n"
            "sys.exit(code)\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def calls() -> list[list[str]]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    calls.bin_dir = bin_dir
    return calls


def _project(tmp_path_factory, board: str) -> Path:
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed")
    project = tmp_path_factory.mktemp(board) / "p"
    generate(YES_NO / "model.tar", board, project)
    build(project)
    return project


@pytest.fixture(scope="module")
def nucleo(tmp_path_factory):
    return _project(tmp_path_factory, "nucleo-f746zg")


@pytest.fixture(scope="module")
def pico(tmp_path_factory):
    return _project(tmp_path_factory, "rpi-pico")


def _dry_run(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["flash", *map(str, args), "--dry-run", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _one_line_error(capsys) -> str:
    """The error: one line after any progress lines ('microtvm-gen: compiling')."""
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines()
             if not ln.startswith("microtvm-gen: ")]
    assert len(lines) == 1 and lines[0].startswith("microtvm-gen flash: error: "), lines
    return lines[0]


# ---- flash ----------------------------------------------------------------------------------

def test_openocd_gets_the_connected_boards_serial_number(nucleo, fake_tools, ports, capsys):
    ports.set([_port("/dev/ttyACM0", ST_LINK, "066DFF485550755187121723", "STM32 STLink"),
               _port("/dev/ttyUSB0", FTDI, "A50285BI")])
    planned = _dry_run(capsys, nucleo)
    assert fake_tools() == []  # a dry run runs nothing
    assert main(["flash", str(nucleo)]) == 0
    assert "flashed nucleo-f746zg (/dev/ttyACM0) with openocd" in capsys.readouterr().out
    [argv] = fake_tools()
    elf = nucleo.resolve() / "build" / "firmware.elf"
    assert Path(argv[0]) == fake_tools.bin_dir / "openocd"
    assert argv[1:] == ["-f", "board/st_nucleo_f7.cfg",
                        "-c", "adapter serial 066DFF485550755187121723",
                        "-c", f"program {elf} verify reset exit"]
    assert planned["command"][1:] == argv[1:] and planned["command"][0] == "openocd"
    assert planned["port"] == "/dev/ttyACM0"
    log = (nucleo / "build" / "flash.log").read_text()
    assert log.startswith("$ openocd -f board/st_nucleo_f7.cfg")


def test_dry_run_prints_the_command(nucleo, fake_tools, ports, capsys):
    ports.set([_port("/dev/ttyACM3", ST_LINK, "0670FF")])
    assert main(["flash", str(nucleo), "--runner", "pyocd", "--dry-run"]) == 0
    printed = capsys.readouterr().out.strip()
    elf = nucleo.resolve() / "build" / "firmware.elf"
    assert printed == f"pyocd flash --no-wait --target stm32f746zgtx --uid 0670FF {elf}"
    assert main(["flash", str(nucleo), "--runner", "pyocd"]) == 0
    [argv] = fake_tools()
    assert argv[1:] == printed.split()[1:]


def test_serial_number_picks_one_of_two_boards(nucleo, fake_tools, ports, capsys):
    ports.set([_port("/dev/ttyACM0", ST_LINK, "AAA111"), _port("/dev/ttyACM1", ST_LINK, "BBB222")])
    assert main(["flash", str(nucleo)]) == 2
    err = _one_line_error(capsys)
    assert "2 nucleo-f746zg boards are connected" in err and "--serial-number" in err
    assert "AAA111" in err and "BBB222" in err
    assert main(["flash", str(nucleo), "--dry-run"]) == 2  # ambiguity is an error either way
    capsys.readouterr()
    assert fake_tools() == []
    assert main(["flash", str(nucleo), "--serial-number", "BBB222", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["port"] == "/dev/ttyACM1" and result["flashed"] is True
    [argv] = fake_tools()
    assert argv[argv.index("-c") + 1] == "adapter serial BBB222"


def test_no_board_connected(nucleo, fake_tools, ports, capsys):
    ports.set([_port("/dev/ttyUSB0", FTDI, "A50285BI"), _port("/dev/ttyS0", None, None)])
    assert main(["flash", str(nucleo)]) == 2
    err = _one_line_error(capsys)
    assert "no nucleo-f746zg is connected" in err and "0483:374b" in err
    assert fake_tools() == []
    # A dry run still shows the command (without a serial number).
    planned = _dry_run(capsys, nucleo)
    assert not any(a.startswith("adapter serial") for a in planned["command"])
    assert "no nucleo-f746zg is connected" in planned["note"]


def test_picotool_loads_a_uf2_written_from_the_elf(pico, fake_tools, ports, capsys):
    ports.set([])
    assert main(["flash", str(pico)]) == 0
    [argv] = fake_tools()
    uf2 = pico.resolve() / "build" / "firmware.uf2"
    assert argv[1:] == ["load", "--verify", "--execute", str(uf2)]
    planned = _dry_run(capsys, pico)
    assert planned["command"][1:] == argv[1:]
    _check_uf2(uf2.read_bytes(), pico / "build" / "firmware.elf")


def _check_uf2(blob: bytes, elf: Path) -> None:
    """Every block well formed, payloads cover exactly the ELF's loaded bytes."""
    assert len(blob) % UF2_BLOCK_BYTES == 0
    count = len(blob) // UF2_BLOCK_BYTES
    memory = {}
    for n in range(count):
        block = blob[n * UF2_BLOCK_BYTES:(n + 1) * UF2_BLOCK_BYTES]
        m0, m1, flags, addr, size, number, total, family = struct.unpack_from("<8I", block)
        assert (m0, m1) == (UF2_MAGIC_START0, UF2_MAGIC_START1)
        assert struct.unpack_from("<I", block, UF2_BLOCK_BYTES - 4)[0] == UF2_MAGIC_END
        assert flags & 0x2000 and family == RP2040_FAMILY
        assert (number, total, size) == (n, count, 256) and addr % 256 == 0
        assert set(block[32 + size:32 + UF2_DATA_BYTES]) <= {0}
        for i in range(size):
            memory[addr + i] = block[32 + i]
    for seg in load_segments(elf):
        assert bytes(memory[seg.address + i] for i in range(len(seg.data))) == seg.data
    assert min(memory) == 0x10000000  # boot2 first


def test_uf2_refuses_bytes_outside_the_flash(nucleo):
    from generator.device.uf2 import ImageError, elf_to_uf2

    elf = nucleo / "build" / "firmware.elf"
    with pytest.raises(ImageError, match="outside the flash"):
        elf_to_uf2(elf, RP2040_FAMILY, 0x10000000, 2 * 1024 * 1024)
    blob = elf_to_uf2(elf, 0x53B80F00, 0x08000000, 1024 * 1024)  # STM32F7 family id
    assert struct.unpack_from("<I", blob, 12)[0] == 0x08000000


def test_uf2_copy_to_a_mounted_drive(pico, fake_tools, ports, tmp_path, capsys):
    drive = tmp_path / "RPI-RP2"
    drive.mkdir()
    (drive / "INFO_UF2.TXT").write_text("UF2 Bootloader v3.0\nModel: Raspberry Pi RP2\n"
                                        "Board-ID: RPI-RP2\n")
    assert main(["flash", str(pico), "--runner", "uf2", "--mount", str(drive)]) == 0
    assert (drive / "firmware.uf2").read_bytes() == \
        (pico / "build" / "firmware.uf2").read_bytes()
    assert fake_tools() == []
    capsys.readouterr()
    assert main(["flash", str(pico), "--runner", "uf2", "--serial-number", "X"]) == 2
    assert "cannot pick a board by serial number" in _one_line_error(capsys)


def test_tool_failure_and_missing_tool(nucleo, fake_tools, ports, monkeypatch, capsys):
    ports.set([_port("/dev/ttyACM0", ST_LINK, "S1")])
    monkeypatch.setenv("FAKE_TOOL_EXIT", "1")
    assert main(["flash", str(nucleo)]) == 2
    err = _one_line_error(capsys)
    assert "openocd failed (exit 1): Error: no device found" in err and "flash.log" in err
    monkeypatch.setenv("PATH", str(fake_tools.bin_dir.parent / "empty"))
    assert main(["flash", str(nucleo), "--runner", "openocd"]) == 2
    assert "needs openocd, which is not on PATH" in _one_line_error(capsys)


def test_runner_choice_errors(nucleo, fake_tools, ports, capsys):
    assert main(["flash", str(nucleo), "--runner", "picotool", "--dry-run"]) == 2
    err = _one_line_error(capsys)
    assert "cannot be flashed with 'picotool'" in err and "openocd, pyocd" in err
    assert main(["flash", str(nucleo), "--runner", "jtag-magic", "--dry-run"]) == 2
    assert "unknown runner 'jtag-magic'" in _one_line_error(capsys)


def test_nothing_to_flash_on_qemu_and_host(tmp_path, fake_tools, capsys):
    for board in ("qemu-mps2-an385", "host"):
        project = tmp_path / board
        generate(YES_NO / "model.tar", board, project)
        assert main(["flash", str(project)]) == 0
        assert "nothing to flash" in capsys.readouterr().out
        assert main(["flash", str(project), "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["flashed"] is False and result["dry_run"] is False  # as asked
        assert main(["flash", str(project), "--json", "--dry-run"]) == 0
        assert json.loads(capsys.readouterr().out)["dry_run"] is True
    assert fake_tools() == []


def test_flash_as_a_separate_process(nucleo, fake_tools):
    """The real program: the fake tool is found through the child's PATH."""
    proc = subprocess.run([sys.executable, "-m", "generator", "flash", str(nucleo),
                           "--runner", "pyocd", "--serial-number", "0670FF"],
                          capture_output=True, text=True, cwd=REPO, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    [argv] = fake_tools()
    assert argv[1:] == ["flash", "--no-wait", "--target", "stm32f746zgtx", "--uid", "0670FF",
                        str(nucleo.resolve() / "build" / "firmware.elf")]


def test_jlink_serial_number_without_zero_padding(tmp_path_factory, fake_tools, ports, capsys):
    nrf = _project(tmp_path_factory, "nrf52840dk")
    ports.set([_port("/dev/ttyACM0", J_LINK, "000683123456", "J-Link - CDC")])
    planned = _dry_run(capsys, nrf)
    assert "adapter serial 683123456" in planned["command"]
    assert planned["serial_number"] == "000683123456" and planned["port"] == "/dev/ttyACM0"
    assert main(["flash", str(nrf), "--runner", "pyocd", "--serial-number", "000683123456"]) == 0
    [argv] = fake_tools()
    assert argv[argv.index("--uid") + 1] == "683123456"


# ---- serial discovery ----------------------------------------------------------------------

def test_connected_ports_match_by_usb_ids(ports):
    boards = [load_board(n) for n in ("nucleo-f746zg", "nucleo-l4r5zi", "nrf52840dk",
                                      "rpi-pico", "qemu-mps2-an385")]
    ports.set([_port("/dev/ttyACM1", J_LINK, "000683123456", "J-Link - CDC"),
               _port("/dev/ttyACM0", ST_LINK, "0670FF", "STM32 STLink"),
               _port("/dev/ttyUSB0", FTDI, "A50285BI"),
               _port("/dev/ttyS0", None, None)])
    found = connected_ports(boards)
    assert [p.device for p in found] == ["/dev/ttyACM0", "/dev/ttyACM1"]
    # Both Nucleo boards use the same ST-LINK: the port matches both.
    assert found[0].boards == ("nucleo-f746zg", "nucleo-l4r5zi")
    assert found[1].boards == ("nrf52840dk",) and found[1].serial_number == "000683123456"
    assert find_board_port(boards[2]).device == "/dev/ttyACM1"
    with pytest.raises(DeviceError, match="no rpi-pico is connected"):
        find_board_port(boards[3])
    with pytest.raises(DeviceError, match="serial number 999"):
        find_board_port(boards[2], "999")


def test_boards_connected_cli(ports, capsys):
    ports.set([_port("/dev/ttyACM0", ST_LINK, "0670FF", "STM32 STLink"),
               _port("/dev/ttyACM1", (0x2E8A, 0x000C), "E6614C", "Debug Probe"),
               _port("/dev/ttyUSB0", FTDI, "A50285BI")])
    assert main(["boards", "--connected", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["connected"]
    assert [(p["device"], p["boards"], p["serial_number"], p["usb_id"]) for p in listed] == [
        ("/dev/ttyACM0", ["nucleo-f746zg", "nucleo-l4r5zi"], "0670FF", "0483:374b"),
        ("/dev/ttyACM1", ["rpi-pico"], "E6614C", "2e8a:000c")]
    assert main(["boards", "--connected"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].startswith("/dev/ttyACM1") and "rpi-pico" in lines[1]
    ports.set([_port("/dev/ttyUSB0", FTDI, "A50285BI")])
    assert main(["boards", "--connected", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"connected": []}
    assert main(["boards", "--connected"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "no known board is connected" in captured.err


def test_board_files_name_runners_that_exist():
    from generator.device.flash import RUNNERS

    for name in ("nucleo-f746zg", "nucleo-l4r5zi", "nrf52840dk", "rpi-pico"):
        board = load_board(name)
        assert board.usb is not None and board.flash is not None
        assert board.flash.runner in board.flash.runners
        assert set(board.flash.runners) <= set(RUNNERS), name
