"""Device sessions for measuring a batch's firmware, opened by a device source.

`LocalDevices`: each session is a private `microtvm-gen serve` of the batch's project and a
tvm.rpc client. `TrackerDevices`: each session is a server registered under a key with a
stock RPC tracker (`serve --accept-firmware --tracker ... --key K`, on any machine); the
batch's firmware goes to it through the RPC session itself (`remote.upload` +
`remote.load_module`). Unlike `generator.rpc.connect`, a session can be closed on purpose
(the runner drops a device that a candidate crashed or hung and opens a fresh one).
"""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from generator.device.runner import child_dies_with_parent
from generator.errors import MtgError
from generator.export.lower import last_line
from generator.rpc import _stop, _wait_listening

START_TIMEOUT = 120.0


@dataclass
class DeviceSession:
    project: Path
    reply_timeout: float
    name: str = "local"  # the device, as the log names it
    proc: subprocess.Popen | None = None
    remote: object = None  # tvm.rpc.RPCSession
    log: object = None
    # The current call's tensors. Freeing a tensor is a call to the device: a hung device
    # would make each free wait for the reply timeout, so they are dropped after close().
    held: list = field(default_factory=list)

    def open(self) -> DeviceSession:
        from tvm import rpc

        self.log = tempfile.TemporaryFile()
        argv = [sys.executable, "-m", "generator", "serve", str(self.project), "--port", "0",
                "--sessions", "1", "--json", "--timeout", str(self.reply_timeout),
                "--idle-timeout", "0"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log,
                                     **child_dies_with_parent(signal.SIGTERM))
        try:
            port = _wait_listening(self.proc, self.log, START_TIMEOUT)
            self.remote = rpc.connect("127.0.0.1", port)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self.proc is not None:
            _stop(self.proc, self.log)
            self.proc = None
        self.held.clear()
        self.remote = None

    def alive(self) -> bool:
        """The device still answers (a small tensor makes the round trip)."""
        if self.remote is None or self.proc is None or self.proc.poll() is not None:
            return False
        return probe(self.remote)

    def __enter__(self) -> DeviceSession:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


def probe(remote) -> bool:
    """The device behind `remote` still answers (a small tensor makes the round trip)."""
    import numpy as np
    import tvm

    try:
        data = np.arange(4, dtype="int32")
        return bool((tvm.runtime.tensor(data, remote.cpu(0)).numpy() == data).all())
    except Exception:
        return False


@dataclass
class RemoteSession:
    """A server the tracker handed out, running the batch's firmware."""
    tracker: tuple[str, int]
    key: str
    request_timeout: float
    name: str = ""
    remote: object = None
    held: list = field(default_factory=list)

    def open(self, project: Path) -> RemoteSession:
        from tvm import rpc

        from generator.rpc.tracker import request_server
        from generator.toolchain import BUILD_DIR, FIRMWARE

        host, port, matchkey = request_server(*self.tracker, self.key, self.request_timeout)
        self.name = f"{host}:{port}"
        target = f"{Path(project).parent.name}-{FIRMWARE}"  # the batch number and the file
        try:
            self.remote = rpc.connect(host, port, key="client:" + matchkey)
            self.remote.upload(str(Path(project) / BUILD_DIR / FIRMWARE), target)
            self.remote.load_module(target)
        except Exception as exc:
            self.close()
            raise MtgError(f"server {self.name}: {last_line(exc)}") from exc
        return self

    def close(self) -> None:
        self.held.clear()
        self.remote = None
        gc.collect()  # the RPC session ends when its last reference goes: the server is free

    def alive(self) -> bool:
        return self.remote is not None and probe(self.remote)


@dataclass
class LocalDevices:
    """Sessions on this machine: a private `serve` of each batch's project."""
    reply_timeout: float
    label: str = "local"

    def open(self, project: Path) -> DeviceSession:
        return DeviceSession(Path(project), self.reply_timeout).open()


@dataclass
class TrackerDevices:
    """Sessions from a stock RPC tracker: any free server registered under `key`."""
    tracker: tuple[str, int]
    key: str
    request_timeout: float = 120.0
    label: str = "tracker"

    def open(self, project: Path) -> RemoteSession:
        return RemoteSession(self.tracker, self.key, self.request_timeout).open(project)
