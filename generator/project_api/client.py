"""A Project API client: starts a directory's server and calls it (public API).

    from generator.project_api import ProjectClient
    with ProjectClient(Path("templates/crt")) as template:
        template.generate_project("model.tar", Path("proj"), {"board": "host"})
    with ProjectClient(Path("proj")) as project:
        project.build({})
        link = project.transport()          # read(timeout) / write(data) / close()

The server is started as TVM's client starts it (§5.1 of the v0.18 facts): through
`launch_microtvm_api_server.sh` when the directory has one, else with this interpreter,
with `--read-fd`/`--write-fd` pipes. Errors the server reports for our own error types come
back as those types, so the CLI prints the same one line it would print in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from generator import errors
from generator.device.runner import child_dies_with_parent
from generator.errors import DeviceError, MtgError, ProjectError
from generator.project_api.protocol import (
    JSONRPC_VERSION,
    PROTOCOL_VERSION,
    decode_data,
    encode_data,
)

SERVER_SCRIPT = "microtvm_api_server.py"
LAUNCH_SCRIPT = "launch_microtvm_api_server.sh"
PYTHON_ENV = "MICROTVM_GEN_PYTHON"
STOP_SECONDS = 10.0


class ProjectAPIError(MtgError):
    """The server is missing, died, or broke the protocol."""


class ServerMethodError(MtgError):
    """A server method failed with an error that is not one of the tool's own."""


class TransportTimeout(DeviceError):
    """read_transport found no data before its deadline (IoTimeoutError)."""


class TransportClosed(DeviceError):
    """The device closed the transport (TransportClosedError)."""

    def __init__(self, message: str, exit_status: int | None = None) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def server_argv(directory: Path, read_fd: int, write_fd: int, debug: bool = False) -> list[str]:
    launcher, script = directory / LAUNCH_SCRIPT, directory / SERVER_SCRIPT
    if launcher.is_file():
        argv = [str(launcher), str(script)]
    elif script.is_file():
        argv = [sys.executable, str(script)]
    else:
        raise ProjectAPIError(f"{directory} has no Project API server ({SERVER_SCRIPT})")
    argv += ["--read-fd", str(read_fd), "--write-fd", str(write_fd)]
    return argv + (["--debug"] if debug else [])


class ProjectClient:
    """One server process for one directory; use as a context manager."""

    def __init__(self, directory: Path, debug: bool = False) -> None:
        self.directory = directory.resolve()
        if not self.directory.is_dir():
            raise ProjectError(f"{directory} is not a directory")
        to_server_r, to_server_w = os.pipe()
        from_server_r, from_server_w = os.pipe()
        argv = server_argv(self.directory, to_server_r, from_server_w, debug)
        env = {**os.environ, PYTHON_ENV: os.environ.get(PYTHON_ENV) or sys.executable}
        try:
            self.proc = subprocess.Popen(argv, cwd=self.directory, env=env,
                                         pass_fds=(to_server_r, from_server_w),
                                         **child_dies_with_parent())
        except OSError as exc:
            for fd in (to_server_r, to_server_w, from_server_r, from_server_w):
                os.close(fd)
            raise ProjectAPIError(f"cannot start {argv[0]}: {exc.strerror}") from exc
        os.close(to_server_r)
        os.close(from_server_w)
        self.writer = os.fdopen(to_server_w, "wb", buffering=0)
        self.reader = os.fdopen(from_server_r, "rb")
        self.next_id = 1
        self.stopped = False  # set when its pipe closed

    def __enter__(self) -> ProjectClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End the server: close its input, then wait (terminate if it lingers)."""
        for stream in (self.writer, self.reader):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    # ---- Calls ---------------------------------------------------------------------------

    def call(self, method: str, params: dict) -> Any:
        request_id = self.next_id
        self.next_id += 1
        line = json.dumps({"jsonrpc": JSONRPC_VERSION, "method": method, "params": params,
                           "id": request_id}).encode() + b"\n"
        try:
            self.writer.write(line)
            reply_line = self.reader.readline()
        except (BrokenPipeError, OSError):
            reply_line = b""
        if not reply_line:
            self.stopped = True
            raise ProjectAPIError(f"the Project API server of {self.directory} stopped "
                                  f"(during {method}; exit status {self.proc.poll()})")
        try:
            reply = json.loads(reply_line)
        except ValueError:
            raise ProjectAPIError(f"the server's reply to {method} is not JSON") from None
        if not isinstance(reply, dict) or reply.get("jsonrpc") != JSONRPC_VERSION \
                or reply.get("id") != request_id:
            raise ProjectAPIError(f"the server's reply to {method} is malformed")
        if "error" in reply:
            raise _error(method, reply["error"])
        if "result" not in reply:
            raise ProjectAPIError(f"the server's reply to {method} has no result")
        return reply["result"]

    def server_info_query(self, tvm_version: str = "microtvm-gen") -> dict:
        info = self.call("server_info_query", {"tvm_version": tvm_version})
        if info.get("protocol_version") != PROTOCOL_VERSION:
            raise ProjectAPIError(f"{self.directory}: Project API protocol "
                                  f"{info.get('protocol_version')!r}; this client speaks "
                                  f"{PROTOCOL_VERSION}")
        return info

    def generate_project(self, archive: Path, project_dir: Path, options: dict) -> None:
        self.call("generate_project", {"model_library_format_path": str(archive.resolve()),
                                       "standalone_crt_dir": "", "options": options,
                                       "project_dir": str(project_dir.resolve())})

    def build(self, options: dict) -> None:
        self.call("build", {"options": options})

    def flash(self, options: dict) -> None:
        self.call("flash", {"options": options})

    def alive(self) -> bool:
        """Whether the server still answers: its process runs and its pipe did not close (a
        killed server closes its pipe a moment before the process is gone)."""
        return not self.stopped and self.proc.poll() is None

    def transport(self, options: dict | None = None) -> ProjectTransport:
        self.call("open_transport", {"options": options or {}})
        return ProjectTransport(self)


class ProjectTransport:
    """The device's link through the server: the Link interface run and serve use."""

    def __init__(self, client: ProjectClient) -> None:
        self.client = client
        self.description = f"the device of {client.directory.name}"
        self.open = True

    def write(self, data: bytes) -> None:
        try:
            self.client.call("write_transport", {"data": encode_data(data), "timeout_sec": None})
        except ProjectAPIError as exc:  # the server itself ended: so did its device
            raise TransportClosed(exc.one_line(), None) from None

    def read(self, timeout: float) -> bytes:
        """Bytes within timeout seconds; b'' on timeout; DeviceError when the device ends."""
        try:
            reply = self.client.call("read_transport", {"n": 1 << 20,
                                                        "timeout_sec": max(0.0, timeout)})
        except TransportTimeout:
            return b""
        except ProjectAPIError as exc:  # the server itself ended: so did its device
            raise TransportClosed(exc.one_line(), None) from None
        return decode_data(reply["data"])

    def wait(self, timeout: float) -> int:
        """Read until the device closes the link; its exit status (0 when unknown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.read(min(1.0, max(0.0, deadline - time.monotonic())))
            except TransportClosed as exc:
                return exc.exit_status or 0
        raise DeviceError(f"{self.description} did not stop within {timeout:.0f} s")

    def close(self, hung: bool = False) -> None:
        if self.open:
            self.open = False
            try:
                self.client.call("close_transport", {"hung": True} if hung else {})
            except MtgError:
                pass

    def __enter__(self) -> ProjectTransport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _error(method: str, error: object) -> MtgError:
    if not isinstance(error, dict):
        return ProjectAPIError(f"the server's error reply to {method} is malformed")
    message = str(error.get("message", ""))
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    ours = data.get("mtvg_error") if isinstance(data.get("mtvg_error"), dict) else None
    if message == "IoTimeoutError":
        return TransportTimeout(f"{method}: no data before the deadline")
    if message == "TransportClosedError":
        text = ours.get("message") if ours else "the device closed the transport"
        return TransportClosed(str(text), (ours or {}).get("exit_status"))
    if ours:
        kind = getattr(errors, str(ours.get("type")), None)
        cls = kind if isinstance(kind, type) and issubclass(kind, MtgError) else MtgError
        return cls(str(ours.get("message")))
    last = str(data.get("traceback", "")).strip().splitlines()[-1:] or [message]
    return ServerMethodError(f"Project API {method} failed: {last[0]}")
