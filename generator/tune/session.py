"""A device session for measuring: a private `microtvm-gen serve` and a tvm.rpc client.

Unlike `generator.rpc.connect`, the session can be closed on purpose (the runner drops a
device that a candidate crashed or hung and starts a fresh one).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from generator.device.runner import child_dies_with_parent
from generator.rpc import _stop, _wait_listening

START_TIMEOUT = 120.0


@dataclass
class DeviceSession:
    project: Path
    reply_timeout: float
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
        import numpy as np
        import tvm

        if self.remote is None or self.proc is None or self.proc.poll() is not None:
            return False
        try:
            probe = np.arange(4, dtype="int32")
            t = tvm.runtime.tensor(probe, self.remote.cpu(0))
            return bool((t.numpy() == probe).all())
        except Exception:
            return False

    def __enter__(self) -> DeviceSession:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
