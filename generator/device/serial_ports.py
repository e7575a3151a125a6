"""Finding physical boards by the USB ids of their debug probes (pyserial's port list).

A board file's [usb] table names the vendor and product ids of the probe whose virtual COM
port carries the board's link (ST-LINK, J-Link OB, the Raspberry Pi Debug Probe). The USB
serial number of that port is also the probe's serial number, which openocd and pyocd take
to pick one of several probes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from generator.errors import BoardError, DeviceError, ToolchainError


class Board(Protocol):
    """What finding a board's port reads of it: a generator.boards.Board (not imported here:
    the board registry imports the links, whose serial link opens a port found here)."""

    name: str
    usb: Any  # generator.boards.UsbSpec, or None


@dataclass(frozen=True)
class ConnectedPort:
    device: str  # /dev/ttyACM0, COM3, ...
    vid: int
    pid: int
    serial_number: str | None
    description: str
    boards: tuple[str, ...]  # the boards whose [usb] ids match this port

    @property
    def usb_id(self) -> str:
        return f"{self.vid:04x}:{self.pid:04x}"

    def to_json(self) -> dict:
        return {**asdict(self), "boards": list(self.boards), "usb_id": self.usb_id}


def _comports() -> list:
    try:
        from serial.tools import list_ports
    except ImportError as exc:
        raise ToolchainError("finding serial ports needs pyserial",
                             hint="pip install pyserial") from exc
    return list(list_ports.comports())


def connected_ports(boards: list[Board]) -> list[ConnectedPort]:
    """Serial ports whose USB ids match one of `boards`, sorted by device name."""
    found = []
    for port in _comports():
        if port.vid is None or port.pid is None:
            continue
        names = tuple(b.name for b in boards if b.usb is not None and b.usb.matches(port.vid,
                                                                                      port.pid))
        if names:
            found.append(ConnectedPort(device=port.device, vid=port.vid, pid=port.pid,
                                       serial_number=port.serial_number or None,
                                       description=port.description or "", boards=names))
    return sorted(found, key=lambda p: p.device)


def _usb_ids(board: Board) -> str:
    assert board.usb is not None
    return "/".join(f"{board.usb.vid:04x}:{pid:04x}" for pid in board.usb.pids)


def find_board_port(board: Board, serial_number: str | None = None) -> ConnectedPort:
    """The one connected port of `board` (with that serial number, when given).

    No such port, or several without a serial number to choose, is a DeviceError.
    """
    if board.usb is None:
        raise BoardError(f"board '{board.name}' has no USB ids ([usb] in its board file), so "
                         "it cannot be found on a serial port")
    ports = connected_ports([board])
    if serial_number is not None:
        chosen = [p for p in ports if p.serial_number == serial_number]
        if not chosen:
            others = ", ".join(p.serial_number or "?" for p in ports) or "none"
            raise DeviceError(f"no {board.name} with serial number {serial_number} is connected "
                              f"(serial numbers of connected ones: {others})")
        return chosen[0]
    if not ports:
        raise DeviceError(f"no {board.name} is connected: no serial port with USB id "
                          f"{_usb_ids(board)}", hint="plug it in, or check the cable and "
                          "the permissions of /dev/ttyACM*")
    if len(ports) > 1:
        numbers = ", ".join(f"{p.serial_number or '?'} ({p.device})" for p in ports)
        raise DeviceError(f"{len(ports)} {board.name} boards are connected ({numbers}); pick "
                          "one with --serial-number")
    return ports[0]
