"""Direct clients: a host-process firmware answers a served client on the client's socket.

`serve` on the host board bridges nothing per call: after the TVM RPC handshake it hands
the client's TCP socket to the firmware process over a Unix socket pair, and the firmware
answers the client's packets itself until the session ends, then says why with one byte.
The protocol and the shared state file are the C header's,
templates/common/platform/posix/direct_client.h; this module is serve's side of it.

When the firmware dies during such a session, the state file says where the client's
stream stands (between packets, inside one, owed a reply, inside a reply), so serve can
read the rest of an unanswered request, answer it with the device's error and go on
bridging the same client to a restarted device, as it does for every other board.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from generator.device.runner import Device
from generator.errors import DeviceError

# Mirrors of direct_client.h (tests/test_direct_clients.py compares them).
DIRECT_FD_ENV = "MTVG_DIRECT_FD"
HELLO = b"H"
HANDOVER = struct.Struct("<cI")  # 'D', idle timeout in ms
HANDOVER_TAG = b"D"
STATE_BYTES = 64
STATE = struct.Struct("<IIQQQ8s")  # phase, requests, packet, consumed, written, prefix
MAX_CLIENT_PACKET = 1 << 28
PREFIX_BYTES = 8
PHASE_PREFIX, PHASE_BODY, PHASE_ANSWER, PHASE_REPLY = 0, 1, 2, 3
END_CLOSED, END_SHUTDOWN, END_IDLE, END_NOT_RPC, END_REFUSED = b"E", b"S", b"I", b"N", b"R"
END_REASONS = (END_CLOSED, END_SHUTDOWN, END_IDLE, END_NOT_RPC, END_REFUSED)
DEVICE_ENDED = b""  # the pair closed: the firmware process ended during the session

POLL = 0.25  # seconds between checks for a stop signal while a session runs
DROP_CHUNK = 1 << 16
MAX_IDLE_MS = (1 << 31) - 1


class HandoverDevice(Device):
    """A firmware process that can take served clients (the host board's link)."""

    def __init__(self, argv: list[str], description: str) -> None:
        ours, theirs = socket.socketpair()
        try:
            super().__init__(argv, description,
                             env=dict(os.environ, **{DIRECT_FD_ENV: str(theirs.fileno())}),
                             pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pair = ours
        self._said_hello: bool | None = None

    def takes_clients(self) -> bool:
        """Whether the firmware said it takes clients (a firmware of a project generated
        before direct clients existed never does). Asked once its link is up."""
        if self._said_hello is None:
            ready, _, _ = select.select([self.pair], [], [], 0)
            self._said_hello = bool(ready) and self.pair.recv(1) == HELLO
        return self._said_hello

    def stop_handing_over(self) -> None:
        """Serve every later client through the bridge (the firmware refused one)."""
        self._said_hello = False

    def close(self, hung: bool = False) -> None:
        super().close(hung)
        self.pair.close()


@dataclass
class DirectEnd:
    """How a direct session ended: `reason` is the firmware's END_* byte, or DEVICE_ENDED.
    After DEVICE_ENDED, `owed` says the client waits for a reply to a request the firmware
    read whole (its bytes are consumed), `broken` that the firmware died inside a reply."""

    reason: bytes
    owed: bool = False
    broken: bool = False
    hung: bool = False  # serve stopped it: one request went unanswered for the reply timeout


def serve_client(device: HandoverDevice, conn: socket.socket, idle_timeout: float,
                 reply_timeout: float, take: Callable[[int], bytes],
                 pump_logs: Callable[[], None]) -> DirectEnd:
    """Hand `conn` to the firmware and wait for the session's end. A request unanswered
    for `reply_timeout` seconds means a hung firmware: serve stops it. `take(n)` reads n
    more bytes of the client's stream (after a death); `pump_logs()` reads the link
    meanwhile (Log messages) and raises DeviceError when the firmware has ended."""
    idle_ms = min(MAX_IDLE_MS, round(idle_timeout * 1000)) if idle_timeout > 0 else 0
    with tempfile.TemporaryFile() as state:
        state.truncate(STATE_BYTES)
        try:
            socket.send_fds(device.pair, [HANDOVER.pack(HANDOVER_TAG, idle_ms)],
                            [conn.fileno(), state.fileno()])
        except OSError:  # the firmware is gone before it got the client
            return DirectEnd(DEVICE_ENDED)
        watch = _Watch(state.fileno(), reply_timeout)
        link = device.fileno()
        hung = False
        while not hung:
            ready, _, _ = select.select([device.pair, link], [], [], POLL)
            if device.pair in ready:
                why = device.pair.recv(1)
                if why:
                    # a byte this serve does not know: the stream's state is unknown
                    return DirectEnd(why if why in END_REASONS else END_CLOSED)
                break
            if link in ready:
                try:
                    pump_logs()
                except DeviceError:
                    break
            hung = watch.hung()
        if hung:
            device.close(hung=True)
        end = _where_it_stopped(os.pread(state.fileno(), STATE_BYTES, 0), take)
        end.hung = hung
        return end


class _Watch:
    """Looks at the state file between waits: the same request in its answer phase for
    the reply timeout is a hung firmware."""

    def __init__(self, fd: int, reply_timeout: float) -> None:
        self.fd = fd
        self.reply_timeout = reply_timeout
        self.request: int | None = None  # the request seen in its answer phase
        self.since = 0.0

    def hung(self) -> bool:
        raw = os.pread(self.fd, STATE.size, 0)
        phase, requests = struct.unpack_from("<II", raw) if len(raw) >= 8 else (0, 0)
        if phase != PHASE_ANSWER:
            self.request = None
            return False
        now = time.monotonic()
        if self.request != requests:
            self.request, self.since = requests, now
        return self.reply_timeout > 0 and now - self.since >= self.reply_timeout


def _where_it_stopped(raw: bytes, take: Callable[[int], bytes]) -> DirectEnd:
    """After the firmware died: bring the client's stream to the end of the packet it was
    sending, and say whether it is owed a reply."""
    if len(raw) < STATE.size:
        return DirectEnd(DEVICE_ENDED, broken=True)
    phase, _, packet, consumed, written, prefix = STATE.unpack_from(raw)
    if phase == PHASE_PREFIX:
        if consumed == 0:
            return DirectEnd(DEVICE_ENDED)
        if consumed > PREFIX_BYTES:
            return DirectEnd(DEVICE_ENDED, broken=True)
        head = prefix[:consumed] + take(PREFIX_BYTES - consumed)
        (body,) = struct.unpack("<Q", head)
        if body > MAX_CLIENT_PACKET:
            return DirectEnd(DEVICE_ENDED, broken=True)
        packet, consumed = PREFIX_BYTES + body, PREFIX_BYTES
        phase = PHASE_BODY
    if phase == PHASE_BODY:
        if consumed > packet:
            return DirectEnd(DEVICE_ENDED, broken=True)
        left = packet - consumed
        while left:
            left -= len(take(min(left, DROP_CHUNK)))
        return DirectEnd(DEVICE_ENDED, owed=packet > PREFIX_BYTES)
    if phase == PHASE_ANSWER or (phase == PHASE_REPLY and written == 0):
        return DirectEnd(DEVICE_ENDED, owed=True)
    return DirectEnd(DEVICE_ENDED, broken=True)
