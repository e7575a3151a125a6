"""Host-driven mode: the device's RPC server, reached by stock tvm.rpc clients.

`connect(project_dir)` starts `microtvm-gen serve` for the project in a child process (the
bridge must not share a process with a tvm.rpc client: a client blocked in a call holds
the GIL) and returns a stock `tvm.rpc` session connected to it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

from generator.device.runner import child_dies_with_parent
from generator.errors import DeviceError

START_TIMEOUT = 300.0  # building the firmware may come first
STOP_GRACE = 10.0


def connect(project_dir: str | os.PathLike, timeout: float = START_TIMEOUT,
            reply_timeout: float = 60.0):
    """A stock `tvm.rpc` session whose server is the project's device (built if needed)."""
    from tvm import rpc

    log = tempfile.TemporaryFile()
    argv = [sys.executable, "-m", "generator", "serve", str(Path(project_dir)), "--port", "0",
            "--sessions", "1", "--json", "--timeout", str(reply_timeout),
            "--idle-timeout", "0"]  # a private serve: nobody else waits for its device
    # SIGTERM when this process dies: serve then stops its device too.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log,
                            **child_dies_with_parent(signal.SIGTERM))
    try:
        port = _wait_listening(proc, log, timeout)
        session = rpc.connect("127.0.0.1", port)
    except BaseException:
        _stop(proc, log)
        raise
    weakref.finalize(session, _stop, proc, log)
    return session


def _wait_listening(proc: subprocess.Popen, log, timeout: float) -> int:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeviceError(f"'microtvm-gen serve' did not start within {timeout:.0f} s")
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                proc.wait(timeout=STOP_GRACE)
                log.seek(0)
                lines = log.read().decode(errors="replace").strip().splitlines()
                raise DeviceError(lines[-1] if lines else
                                  f"'microtvm-gen serve' exited with status {proc.returncode}")
            line += chunk
    return int(json.loads(line.decode())["port"])


def _stop(proc: subprocess.Popen, log) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    log.close()
