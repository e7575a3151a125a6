"""A board's UART through pyserial, as a Link (the device is already running)."""

from __future__ import annotations

from generator.errors import DeviceError, ToolchainError


class SerialLink:
    def __init__(self, port: str, baud: int = 115200) -> None:
        try:
            import serial
        except ImportError as exc:
            raise ToolchainError("serial ports need pyserial",
                                 hint="pip install pyserial") from exc
        self.description = f"serial port {port}"
        self._serial_error = serial.SerialException
        try:
            self.port = serial.Serial(port, baudrate=baud, timeout=0)
        except (serial.SerialException, ValueError) as exc:
            raise DeviceError(f"cannot open {port}: {exc}") from exc

    def write(self, data: bytes) -> None:
        try:
            self.port.write(data)
            self.port.flush()
        except self._serial_error as exc:
            raise DeviceError(f"{self.description}: write failed ({exc})") from exc

    def read(self, timeout: float) -> bytes:
        try:
            self.port.timeout = timeout
            first = self.port.read(1)
            if not first:
                return b""
            return first + self.port.read(self.port.in_waiting)
        except self._serial_error as exc:
            raise DeviceError(f"{self.description}: read failed ({exc})") from exc

    def close(self, hung: bool = False) -> None:
        self.port.close()
