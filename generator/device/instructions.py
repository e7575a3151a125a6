"""How many instructions a QEMU guest has executed: QEMU's own count, read over QMP.

Under `-icount` QEMU counts every guest instruction it executes. QMP's `query-replay`
answers with that raw count (`icount`), which, unlike the virtual clock, does not advance
while the guest sleeps in WFI waiting for its UART: the difference of two readings is
exactly what the core executed in between, the link's byte handling included. A pipeline
counts each processing element's instructions per inference this way.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from generator.errors import DeviceError

CONNECT_SECONDS = 10.0
REPLY_SECONDS = 10.0


def qmp_args(path: Path) -> list[str]:
    """QEMU options for a QMP server on a Unix socket at `path` (QEMU creates it)."""
    return ["-qmp", f"unix:{path},server=on,wait=off"]


class InstructionCounter:
    """A QMP client of one QEMU instance: `executed()` is its guest's instruction count."""

    def __init__(self, path: Path, description: str) -> None:
        self.path = path
        self.description = description
        self._sock: socket.socket | None = None
        self._buffer = b""

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(self.path))
                break
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    raise DeviceError(f"{self.description}: no QMP socket at {self.path}") \
                        from None
                time.sleep(0.05)
        sock.settimeout(REPLY_SECONDS)
        self._sock = sock
        self._message()  # the greeting
        self._command("qmp_capabilities")
        return sock

    def _message(self) -> dict:
        assert self._sock is not None
        while b"\n" not in self._buffer:
            try:
                chunk = self._sock.recv(4096)
            except OSError as exc:
                raise DeviceError(f"{self.description}: QMP: {exc}") from None
            if not chunk:
                raise DeviceError(f"{self.description}: QEMU closed its QMP socket")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise DeviceError(f"{self.description}: QMP sent something not JSON") from None

    def _command(self, name: str) -> dict:
        assert self._sock is not None
        self._sock.sendall(json.dumps({"execute": name}).encode() + b"\n")
        while True:
            reply = self._message()
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise DeviceError(f"{self.description}: QMP {name}: "
                                  f"{reply['error'].get('desc', reply['error'])}")
            # an asynchronous event: skip it

    def executed(self) -> int:
        """Guest instructions executed since QEMU started."""
        if self._sock is None:
            self._connect()
        count = self._command("query-replay").get("icount")
        if not isinstance(count, int):
            raise DeviceError(f"{self.description}: QEMU does not count instructions "
                              "(it runs without -icount)")
        return count

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
