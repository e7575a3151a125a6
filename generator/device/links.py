"""Links: how a board's firmware is started and reached, one small class per kind.

A board file names its link (`link = "process" | "qemu" | "serial"`); the class of that name
declares what the link can do and opens it. Code elsewhere asks the class (`link_of(board)`)
what it needs to know: whether this tool starts the firmware itself, whether the board's
timer is an emulator's, whether the firmware must be flashed first. It never compares the
name. A new link is one class here, added to LINKS: the CLI, the board registry, `run` and
`serve` take it from there. (The flash runners that put firmware on a physical board are
the classes of generator/device/flash.py; boards stay data, as in Zephyr's runners.)
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar, Protocol

from generator.device.direct_clients import HandoverDevice
from generator.device.instructions import InstructionCounter, qmp_args
from generator.device.runner import Device, SocketDevice, free_tcp_port
from generator.errors import BoardError, DeviceError, ToolchainError

# Debian packages of the QEMU system emulators the boards use.
QEMU_PACKAGES = {"qemu-system-arm": "qemu-system-arm", "qemu-system-riscv32": "qemu-system-misc"}


class Board(Protocol):
    """What a link reads of a board: a generator.boards.Board (not imported here: the board
    registry imports this module to check the links its files name)."""

    name: str
    link: str
    qemu: Any  # generator.boards.QemuSpec, or None
    usb: Any  # generator.boards.UsbSpec, or None


class Link:
    """One way a board's firmware runs and talks to the host (a byte stream)."""

    name: ClassVar[str]
    where: ClassVar[str]  # for messages: "board 'x' runs in QEMU"
    # This tool starts the firmware on this machine (`run`, `serve --accept-firmware`);
    # otherwise it runs on a board and is reached over the board's serial port.
    runs_locally: ClassVar[bool] = False
    needs_flash: ClassVar[bool] = False  # a flash runner must put the firmware on the board
    # An emulator runs the firmware: the board timer is the emulator's, never CPU cycles.
    emulated: ClassVar[bool] = False
    # The firmware exits when its input ends (otherwise `close` stops it with a signal).
    stops_at_end_of_input: ClassVar[bool] = False
    # `serve` opens it in its own process, not through the project's Project API server:
    # a link so fast that the server's JSON hop per read and write would dominate a call.
    serve_in_process: ClassVar[bool] = False

    def problem(self, board: Board) -> str | None:
        """What the board file lacks for this link (None: nothing)."""
        return None

    def icount_shift(self, board: Board) -> int | None:
        """-icount shift when the timer counts emulated instructions (2**shift ns each)."""
        return None

    def open(self, board: Board, elf: Path, serial_number: str | None = None) -> Any:
        """The running firmware's link: something with read, write, close (and, when this
        tool started it, wait)."""
        raise NotImplementedError

    def check_reachable(self, board: Board, serial_number: str | None = None) -> None:
        """Raise (one line) when no device for `board` can be opened now: checked before
        long work (a tuning run's builds) that ends on the device."""

    def open_counted(self, board: Board, elf: Path, workdir: Path) -> tuple[Any, Any]:
        """The link, and an InstructionCounter of the firmware's executed instructions
        where the link can count them (None elsewhere). `workdir`: for the link's files."""
        return self.open(board, elf), None


class HostProcess(Link):
    """The firmware is a program of this machine, its link its stdin/stdout."""

    name = "process"
    where = "runs as a process on this machine"
    runs_locally = True
    stops_at_end_of_input = True
    serve_in_process = True

    def open(self, board, elf, serial_number=None):
        require_built(elf)
        return HandoverDevice([str(elf)], f"firmware process {elf.name}")


class Qemu(Link):
    """qemu-system-* with UART0 on QEMU's stdin/stdout and semihosting for exit ([qemu])."""

    name = "qemu"
    where = "runs in QEMU"
    runs_locally = True
    emulated = True

    def problem(self, board):
        return None if board.qemu is not None else "link 'qemu' needs a [qemu] table"

    def icount_shift(self, board):
        return board.qemu.icount_shift if board.qemu is not None else None

    def open(self, board, elf, serial_number=None):
        require_built(elf)
        return Device(qemu_argv(board, elf), f"QEMU ({board.name})",
                      stops_at_end_of_input=self.stops_at_end_of_input)

    def check_reachable(self, board, serial_number=None):
        qemu_binary(board)

    def open_counted(self, board, elf, workdir):
        if self.icount_shift(board) is None:
            return self.open(board, elf), None
        require_built(elf)
        socket_path = workdir / "qmp.sock"
        socket_path.unlink(missing_ok=True)
        description = f"QEMU ({board.name})"
        device = Device(qemu_argv(board, elf) + qmp_args(socket_path), description,
                        stops_at_end_of_input=self.stops_at_end_of_input)
        return device, InstructionCounter(socket_path, description)


class QemuSocket(Qemu):
    """QEMU as above, its UART0 a TCP server this tool connects to after the firmware has
    booted (as a host opens a physical board's port long after reset; `reconnect` does it
    again): the host-started session of the standalone app and of host-driven firmware,
    proved in QEMU."""

    name = "qemu-socket"
    where = "runs in QEMU, reached over a socket after boot"

    def open(self, board, elf, serial_number=None):
        require_built(elf)
        port = free_tcp_port()
        argv = qemu_argv(board, elf, f"socket,id=link,host=127.0.0.1,port={port},server=on,"
                                     "wait=off")
        return SocketDevice(argv, f"QEMU ({board.name}, UART on port {port})", port)


class SerialPort(Link):
    """A physical board, flashed first, whose link is the serial port of its debug probe
    (found by the board's [usb] ids, or by its USB serial number among several)."""

    name = "serial"
    where = "runs on a physical board"
    needs_flash = True

    def open(self, board, elf, serial_number=None):
        from generator.device.serial_ports import find_board_port
        from generator.link.serial_link import SerialLink

        return SerialLink(find_board_port(board, serial_number).device)

    def check_reachable(self, board, serial_number=None):
        from generator.device.serial_ports import find_board_port

        find_board_port(board, serial_number)


LINKS: dict[str, type[Link]] = {k.name: k for k in (HostProcess, Qemu, QemuSocket, SerialPort)}


def require_built(elf: Path) -> None:
    if not elf.is_file():
        raise DeviceError(f"{elf} does not exist; build the project first")


def link_named(name: str) -> Link:
    if name not in LINKS:
        raise BoardError(f"link '{name}' is not one of {', '.join(LINKS)}")
    return LINKS[name]()


def link_of(board: Board) -> Link:
    """The class of the board's link."""
    return link_named(board.link)


def qemu_binary(board: Board) -> str:
    """The board's QEMU program on PATH (else a one-line error naming its package)."""
    assert board.qemu is not None
    binary = shutil.which(board.qemu.binary)
    if binary is None:
        package = QEMU_PACKAGES.get(board.qemu.binary, "qemu-system-misc")
        raise ToolchainError(f"board '{board.name}' needs {board.qemu.binary}, which is not on "
                             "PATH", hint=f"apt-get install {package}")
    return binary


# The UART's character device: QEMU's stdin and stdout (link 'qemu').
STDIO_CHARDEV = "stdio,id=link,mux=off,signal=off"


def qemu_argv(board: Board, elf: Path, chardev: str = STDIO_CHARDEV) -> list[str]:
    """The QEMU command line; `chardev` (with id=link) is where UART0 goes."""
    assert board.qemu is not None
    argv = [qemu_binary(board), "-M", board.qemu.machine, "-cpu", board.qemu.cpu,
            "-display", "none", "-monitor", "none", "-nodefaults", "-nic", "user,restrict=on",
            "-chardev", chardev, "-serial", "chardev:link",
            "-semihosting-config", "enable=on,target=native",
            "-kernel", str(elf), *board.qemu.args]
    if board.qemu.icount_shift is not None:
        argv += ["-icount", f"shift={board.qemu.icount_shift}"]
    return argv


def open_device(board: Board, elf: Path) -> Device:
    """Start the board's firmware on this machine (a link that `runs_locally`)."""
    require_built(elf)
    link = link_of(board)
    if not link.runs_locally:
        raise DeviceError(f"board '{board.name}' has no runner this tool can start")
    return link.open(board, elf)
