"""A firmware started on this machine (a host process or QEMU), its link a byte stream.

The links that start one (generator/device/links.py) give the command line: the ELF itself,
talking over its stdin/stdout, or qemu-system-* with UART0 on QEMU's stdin/stdout or on a
TCP socket this tool connects to after the firmware has booted (SocketDevice).

A device process never outlives the process that started it: on Linux it gets SIGKILL
when its parent dies (PR_SET_PDEATHSIG), even when the parent itself was killed; `close`
stops it (end of input for a firmware process, SIGTERM for QEMU, SIGKILL as a last resort).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from generator.errors import DeviceError, ToolchainError

READ_CHUNK = 65536
STOP_GRACE_SECONDS = 5.0
TERMINATE_GRACE_SECONDS = 2.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def child_dies_with_parent(signum: int = signal.SIGKILL) -> dict:
    """Popen arguments that send the child `signum` when its parent dies (Linux; elsewhere
    none). The parent is the thread that starts the child: start it from one that lives."""
    if _LIBC is None:
        return {}

    parent = os.getpid()

    def die_with_parent() -> None:  # in the child, before exec
        _LIBC.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return {"preexec_fn": die_with_parent}


class Device:
    """A running firmware with a byte-stream link. Use as a context manager."""

    def __init__(self, argv: list[str], description: str, env: dict | None = None,
                 stops_at_end_of_input: bool = True, pass_fds: tuple[int, ...] = ()) -> None:
        self.argv = argv
        self.description = description
        # A firmware process exits when its stdin ends; QEMU does not (the UART cannot tell).
        self.stops_at_end_of_input = stops_at_end_of_input
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env,
                                         pass_fds=pass_fds, **child_dies_with_parent())
        except OSError as exc:
            raise ToolchainError(f"cannot start {argv[0]}: {exc.strerror}") from exc
        # Drain stderr while the device runs: a chatty device (sanitizer reports,
        # semihosting text) must never block on a full pipe.
        self._stderr = bytearray()
        self._stderr_reader = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_reader.start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(READ_CHUNK), b""):
            self._stderr += chunk

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def write(self, data: bytes) -> None:
        try:
            assert self.proc.stdin is not None
            fd = self.proc.stdin.fileno()  # straight to the pipe: one write, no buffer
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except (BrokenPipeError, OSError) as exc:
            raise DeviceError(f"{self.description} stopped accepting input"
                              f"{self._exit_text()}") from exc

    def fileno(self) -> int:
        """The descriptor `read` reads (for select)."""
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def read(self, timeout: float) -> bytes:
        """Bytes available within timeout seconds; b'' on timeout; DeviceError at end."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return b""
        data = os.read(fd, READ_CHUNK)
        if not data:
            self.proc.wait(timeout=STOP_GRACE_SECONDS)
            raise DeviceError(f"{self.description} closed its link{self._exit_text()}")
        return data

    def _wait_exit(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)

    def _exit_text(self) -> str:
        code = self.proc.poll()
        if code is None:
            return ""
        err = self.stderr_text().strip().splitlines()
        detail = f": {err[-1]}" if err else ""
        return f" (exit status {code}{detail})"

    def stderr_text(self) -> str:
        """What the device wrote to stderr so far (all of it once the process has exited)."""
        if self.proc.poll() is not None:
            self._stderr_reader.join(timeout=STOP_GRACE_SECONDS)
        return bytes(self._stderr).decode(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.proc.kill()
            self.proc.wait()
            raise DeviceError(f"{self.description} did not exit within {timeout:.0f} s") from exc

    def terminate(self) -> None:
        """Ask the process to stop (SIGTERM) and return: a thread blocked reading its link
        then sees the link end. `close` still reaps it and closes the streams."""
        if self.proc.poll() is None:
            self.proc.terminate()

    def close(self, hung: bool = False) -> None:
        """Close stdin and let the firmware end (not when `hung`), then terminate, then kill."""
        if self.proc.poll() is None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
            except OSError:
                pass
            if self.stops_at_end_of_input and not hung:
                self._wait_exit(STOP_GRACE_SECONDS)
            if self.proc.poll() is None:
                self.proc.terminate()
                self._wait_exit(TERMINATE_GRACE_SECONDS)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._stderr_reader.join(timeout=STOP_GRACE_SECONDS)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


# How long a socket-attached emulator runs before this tool connects (its firmware boots
# with nobody listening), and how long QEMU may take to open its socket.
SOCKET_CONNECT_AFTER = 0.5
SOCKET_LISTEN_SECONDS = 10.0


class SocketDevice(Device):
    """An emulator whose UART is a TCP server (QEMU's `-chardev socket,server=on,wait=off`):
    started, left to boot with nobody connected, then connected, as a host opens a physical
    board's port long after reset. `reconnect` drops the connection and opens a new one."""

    def __init__(self, argv: list[str], description: str, port: int,
                 connect_after: float = SOCKET_CONNECT_AFTER) -> None:
        super().__init__(argv, description, stops_at_end_of_input=False)
        self.port = port
        self.sock: socket.socket | None = None
        time.sleep(connect_after)
        self.reconnect()

    def reconnect(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        deadline = time.monotonic() + SOCKET_LISTEN_SECONDS
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=1.0)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return
            except OSError as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise DeviceError(f"{self.description}: cannot connect to its UART on "
                                      f"port {self.port} ({exc.strerror or exc})"
                                      f"{self._exit_text()}") from exc
                time.sleep(0.05)

    def write(self, data: bytes) -> None:
        try:
            assert self.sock is not None
            self.sock.sendall(data)
        except OSError as exc:
            raise DeviceError(f"{self.description} stopped accepting input"
                              f"{self._exit_text()}") from exc

    def read(self, timeout: float) -> bytes:
        assert self.sock is not None
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return b""
        try:
            data = self.sock.recv(READ_CHUNK)
        except OSError:
            data = b""
        if not data:
            self._wait_exit(STOP_GRACE_SECONDS)
            raise DeviceError(f"{self.description} closed its link{self._exit_text()}")
        return data

    def close(self, hung: bool = False) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        super().close(hung)


def free_tcp_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
