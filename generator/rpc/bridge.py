"""The host bridge: a stock TVM RPC endpoint on TCP whose server is the device.

A client connects (`tvm.rpc.connect`, or through a tracker), the bridge does the socket
handshake itself, then forwards each packet to the device inside the link's session and
writes the device's reply back. Packets are forwarded unchanged; the bridge answers only
what the device cannot: a packet too large for the link (an exception reply, the stream
stays in sync) and a device that stopped answering or restarted (an exception reply; the
device session is started again, so the next client finds a working device).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from generator.errors import DeviceError
from generator.link.session import DeviceReset, Link, LinkTimeout, Session, SessionTimeouts
from generator.rpc import packets

RPC_MAGIC = 0x000FF271
RPC_KEY_MISMATCH = 0x000FF273
CLIENT_PREFIX = "client:"
MAX_KEY_BYTES = 4096
MAX_CLIENT_PACKET = 1 << 28  # a larger length field means the stream is not TVM RPC
HANDSHAKE_TIMEOUT = 10.0


class ClientGone(Exception):
    """The TCP client closed its end (internal to the bridge)."""


@dataclass
class DeviceLink:
    """Opens the device and keeps a session with it; reopens both after a failure."""

    open_link: Callable[[], Link]
    timeouts: SessionTimeouts
    max_payload: int
    on_log: Callable[[str], None] | None = None
    on_event: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        self.link: Link | None = None
        self.session: Session | None = None

    def ensure(self) -> Session:
        if self.link is None:
            self.link = self.open_link()
            self.session = None
        if self.session is None or not self.session.session_id:
            session = Session(self.link, self.timeouts, on_log=self.on_log,
                              max_payload=self.max_payload)
            session.start()
            self.session = session
        return self.session

    def request(self, packet: bytes, reply_expected: bool = True) -> bytes:
        session = self.ensure()
        try:
            return session.request(packet, reply_expected)
        except (DeviceReset, LinkTimeout) as exc:
            self._event(f"{exc.one_line()}; starting a new device session")
            self.session = None
            raise
        except DeviceError as exc:  # the device's link closed (process ended, port gone)
            self._event(f"{exc.one_line()}; the device will be started again")
            self.close()
            raise

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
        self.link = None
        self.session = None

    def _event(self, text: str) -> None:
        if self.on_event is not None:
            self.on_event(text)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise ClientGone()
        data += chunk
    return bytes(data)


class Bridge:
    """Listens on host:port and serves one client session at a time."""

    def __init__(self, device: DeviceLink, host: str = "127.0.0.1", port: int = 9090,
                 key: str = "", on_event: Callable[[str], None] | None = None) -> None:
        self.device = device
        self.key = key
        self.on_event = on_event
        self.sessions_served = 0
        self.listener = socket.create_server((host, port), reuse_port=False)
        self.host, self.port = self.listener.getsockname()[:2]

    def close(self) -> None:
        self.listener.close()
        self.device.close()

    def serve(self, sessions: int = 0, on_session_start: Callable[[], None] | None = None,
              on_session_end: Callable[[], None] | None = None) -> None:
        """Serve clients one after another; stop after `sessions` of them (0: never)."""
        while sessions == 0 or self.sessions_served < sessions:
            conn, peer = self.listener.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    if self._handshake(conn):
                        self._event(f"client {peer[0]}:{peer[1]} connected")
                        if on_session_start is not None:
                            on_session_start()
                        self._serve_client(conn)
                except (ClientGone, ConnectionError, TimeoutError):
                    pass
                finally:
                    self.sessions_served += 1
                    self._event(f"client {peer[0]}:{peer[1]} left")
            if on_session_end is not None:
                on_session_end()

    def _event(self, text: str) -> None:
        if self.on_event is not None:
            self.on_event(text)

    def _handshake(self, conn: socket.socket) -> bool:
        conn.settimeout(HANDSHAKE_TIMEOUT)
        magic, keylen = struct.unpack("<ii", _recv_exact(conn, 8))
        if magic != RPC_MAGIC or not 0 <= keylen <= MAX_KEY_BYTES:
            return False
        key = _recv_exact(conn, keylen).decode(errors="replace")
        if not key.startswith(CLIENT_PREFIX):
            conn.sendall(struct.pack("<i", RPC_KEY_MISMATCH))
            return False
        reply = f"server:{self.key}".encode()
        conn.sendall(struct.pack("<ii", RPC_MAGIC, len(reply)) + reply)
        conn.settimeout(None)
        return True

    def _serve_client(self, conn: socket.socket) -> None:
        try:
            self.device.ensure()
        except DeviceError as exc:
            self._event(exc.one_line())
        while True:
            try:
                (nbytes,) = struct.unpack("<Q", _recv_exact(conn, 8))
            except ClientGone:
                self._reset_device_state()  # the client vanished without kShutdown
                return
            if nbytes == 0:
                continue
            if nbytes > MAX_CLIENT_PACKET:
                self._event(f"client sent a packet length of {nbytes}: not TVM RPC; closing")
                return
            packet = struct.pack("<Q", nbytes) + _recv_exact(conn, nbytes)
            code = packets.packet_code(packet) if nbytes >= 4 else -1
            if code == packets.SHUTDOWN:
                self._reset_device_state(packet)
                return
            conn.sendall(self._forward(packet))

    def _forward(self, packet: bytes) -> bytes:
        try:
            max_packet = self.device.ensure().max_packet
        except DeviceError as exc:
            return packets.exception_packet(exc.one_line())
        if len(packet) > max_packet:
            return packets.exception_packet(
                f"packet of {len(packet)} bytes does not fit the device link ({max_packet} "
                "bytes at most); tensor copies are split to fit, calls must be smaller")
        try:
            return self.device.request(packet)
        except DeviceError as exc:
            return packets.exception_packet(exc.one_line())

    def _reset_device_state(self, shutdown: bytes | None = None) -> None:
        try:
            self.device.request(shutdown or packets.Requests.shutdown(), reply_expected=False)
        except DeviceError:
            pass
