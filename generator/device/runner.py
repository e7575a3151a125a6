"""Runners: each starts a built firmware and exposes its link as a byte stream.

A runner declares what it needs from the board (the board file names it in `runner`).
The host runner starts the ELF as a process and talks over its stdin/stdout; the QEMU
runner starts qemu-system-* with UART0 on QEMU's stdin/stdout and semihosting for exit.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import threading
import time
from pathlib import Path

from generator.boards import Board
from generator.errors import DeviceError, ToolchainError

READ_CHUNK = 65536
STOP_GRACE_SECONDS = 5.0


class Device:
    """A running firmware with a byte-stream link. Use as a context manager."""

    def __init__(self, argv: list[str], description: str, env: dict | None = None) -> None:
        self.argv = argv
        self.description = description
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env)
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
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise DeviceError(f"{self.description} stopped accepting input"
                              f"{self._exit_text()}") from exc

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

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
            except OSError:
                pass
            deadline = time.monotonic() + STOP_GRACE_SECONDS
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._stderr_reader.join(timeout=STOP_GRACE_SECONDS)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


def qemu_argv(board: Board, elf: Path) -> list[str]:
    assert board.qemu is not None
    binary = shutil.which(board.qemu.binary)
    if binary is None:
        raise ToolchainError(f"board '{board.name}' needs {board.qemu.binary}, which is not on "
                             "PATH", hint="apt-get install qemu-system-arm")
    argv = [binary, "-M", board.qemu.machine, "-cpu", board.qemu.cpu,
            "-display", "none", "-monitor", "none", "-nodefaults", "-nic", "user,restrict=on",
            "-chardev", "stdio,id=link,mux=off,signal=off", "-serial", "chardev:link",
            "-semihosting-config", "enable=on,target=native",
            "-kernel", str(elf)]
    if board.qemu.icount_shift is not None:
        argv += ["-icount", f"shift={board.qemu.icount_shift}"]
    return argv


def open_device(board: Board, elf: Path) -> Device:
    if not elf.is_file():
        raise DeviceError(f"{elf} does not exist; build the project first")
    if board.runner == "process":
        return Device([str(elf)], f"firmware process {elf.name}")
    if board.runner == "qemu":
        return Device(qemu_argv(board, elf), f"QEMU ({board.name})")
    raise DeviceError(f"board '{board.name}' has no runner this tool can start")
