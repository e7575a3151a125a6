"""The host bridge: a stock TVM RPC endpoint on TCP whose server is the device.

A client connects (`tvm.rpc.connect`, or through a tracker), the bridge does the socket
handshake itself, then forwards each packet to the device inside the link's session and
writes the device's reply back. Packets are forwarded unchanged except for their handles,
which carry the bridge's epoch (generator/rpc/handles.py). The bridge answers what the
device cannot: a packet too large for the link, a stale handle, a device that stopped
answering or restarted (an exception reply; the device session is started again, so the
next client finds a working device), and a second client while one is served (busy).

With a `FirmwareSlot` (`serve --accept-firmware`, generator/rpc/firmware.py) the bridge
also answers `tvm.rpc.server.upload` and `tvm.rpc.server.load_module` itself: load_module
restarts the device from the uploaded firmware and answers with the new device's system
library, so the client's module is the new firmware's functions.

On the host board the bridge steps aside: after the handshake the client's socket goes to
the firmware process, which answers the client itself until the session ends
(generator/device/direct_clients.py); a device that ends meanwhile is started again and
the same client goes on through the bridge, its old handles stale.

Connections are admitted by a thread of their own each: only a connection that completes
the TVM RPC handshake becomes a session, and a client silent for `idle_timeout` seconds
loses its session. The device is only ever driven from the thread that calls `serve`.
"""

from __future__ import annotations

import queue
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from generator.device import direct_clients
from generator.device.direct_clients import HandoverDevice
from generator.errors import DeviceError
from generator.link.session import DeviceReset, Link, LinkTimeout, Session, SessionTimeouts
from generator.rpc import firmware, packets
from generator.rpc.firmware import FirmwareRefused, FirmwareSlot
from generator.rpc.handles import HandleEpochs, Stale

RPC_MAGIC = 0x000FF271
RPC_KEY_MISMATCH = 0x000FF273
CLIENT_PREFIX = "client:"
MAX_KEY_BYTES = 4096
MAX_CLIENT_PACKET = 1 << 28  # a larger length field means the stream is not TVM RPC
# Larger packets are read and dropped, not held (no device link carries them anyway).
MAX_HELD_PACKET = 1 << 20
HANDSHAKE_TIMEOUT = 10.0  # seconds a new connection has to complete the handshake
IDLE_TIMEOUT = 60.0  # default: seconds a served client may stay silent
MAX_PENDING = 16  # connections in their handshake at the same time; more are closed
POLL = 0.25  # seconds between checks for a stop request while waiting
LINGER = 2.0  # seconds a refused client gets to read its answer and close
# A client that arrives while the previous one is leaving (its kShutdown on the way) waits
# this long for the device before it is told that the device is busy.
BUSY_GRACE = 2.0


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
        self.generation = 0  # device sessions started so far


    def ensure(self) -> Session:
        if self.link is None:
            self.link = self.open_link()
            self.session = None
        if self.session is None or not self.session.session_id:
            session = Session(self.link, self.timeouts, on_log=self.on_log,
                              max_payload=self.max_payload)
            session.start()
            self.session = session
            self.generation += 1
        return self.session

    def request(self, packet: bytes, reply_expected: bool = True) -> bytes:
        session = self.ensure()
        try:
            return session.request(packet, reply_expected)
        except DeviceReset as exc:
            self._event(f"{exc.one_line()}; starting a new device session")
            self.session = None
            raise
        except LinkTimeout as exc:
            # A hung device answers no new session either: it is started again (a process
            # or QEMU restarted, a serial port opened again), not waited for.
            self._event(f"{exc.one_line()}; the device will be started again")
            self.close(hung=True)
            raise
        except DeviceError as exc:  # the device's link closed (process ended, port gone)
            self._event(f"{exc.one_line()}; the device will be started again")
            self.close()
            raise

    def close(self, hung: bool = False) -> None:
        if self.link is not None:
            self.link.close(hung)
        self.link = None
        self.session = None

    def pump_logs(self) -> None:
        if self.session is not None:
            self.session.pump_logs()

    def ended(self, hung: bool = False) -> DeviceError:
        """The error of a device found ended outside a request of ours (its link closed),
        or stopped by serve as `hung`, as a request would have raised it; the device will
        be started again."""
        if hung:
            description = self.link.description if self.link is not None else "the device"
            error: DeviceError = LinkTimeout(f"{description} did not answer within "
                                             f"{self.timeouts.reply:g} s")
        else:
            error = DeviceError("the device ended")
            deadline = time.monotonic() + POLL
            try:
                while self.link is not None and time.monotonic() < deadline:
                    self.link.read(POLL)  # what it wrote before it ended, then its end
            except DeviceError as exc:
                error = exc
        self._event(f"{error.one_line()}; the device will be started again")
        self.close(hung=True)
        return error

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


class Inbox:
    """A client's bytes, read in large pieces: a small packet takes one recv, not two (its
    length, then its body). Bytes past the packet wait for the next one."""

    CHUNK = 1 << 16

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self._buf = bytearray()

    def take(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.conn.recv(max(n - len(self._buf), self.CHUNK))
            if not chunk:
                raise ClientGone()
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data


class NotRpc(Exception):
    """The client sent a packet length that is not TVM RPC (internal to the bridge)."""


def _recv_packet(inbox: Inbox,
                 hold_large: Callable[[int, bytes], bool] | None = None) -> bytes | int:
    """One client packet with its length prefix, or the length of one too large to hold
    (its bytes are read and dropped, so the stream stays in sync). `hold_large(nbytes,
    head)` may keep a larger packet after seeing the start of its body."""
    prefix = inbox.take(8)
    (nbytes,) = struct.unpack("<Q", prefix)
    if nbytes > MAX_CLIENT_PACKET:
        raise NotRpc()
    if nbytes > MAX_HELD_PACKET:
        head = inbox.take(firmware.CALL_HEAD)
        if hold_large is not None and hold_large(nbytes, head):
            return prefix + head + inbox.take(nbytes - len(head))
        left = nbytes - len(head)
        while left:
            left -= len(inbox.take(min(left, 1 << 16)))
        return nbytes + 8
    return prefix + inbox.take(nbytes)


def _close_gently(conn: socket.socket) -> None:
    """Close after the peer has read what was sent (no reset that would discard it)."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(LINGER)
        while conn.recv(4096):
            pass
    except OSError:
        pass
    finally:
        conn.close()


class Bridge:
    """Listens on host:port and serves one client session at a time."""

    def __init__(self, device: DeviceLink, host: str = "127.0.0.1", port: int = 9090,
                 key: str = "", on_event: Callable[[str], None] | None = None,
                 idle_timeout: float = IDLE_TIMEOUT,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 firmware_slot: FirmwareSlot | None = None) -> None:
        self.device = device
        self.firmware_slot = firmware_slot
        self._oversized_upload = 0  # the length of an upload call too large to hold
        self.key = key
        self.on_event = on_event
        self.idle_timeout = idle_timeout
        self.handshake_timeout = handshake_timeout
        self.sessions_served = 0
        self.epochs = HandleEpochs()
        self.listener = socket.create_server((host, port), reuse_port=False)
        self.host, self.port = self.listener.getsockname()[:2]
        self._admitted: queue.Queue[tuple[socket.socket, str]] = queue.Queue()
        self._lock = threading.Condition()
        self._busy_with: str | None = None  # the peer holding the device
        self._closing = threading.Event()
        self._pending = threading.BoundedSemaphore(MAX_PENDING)
        self._acceptor: threading.Thread | None = None
        self._generation = 0

    def close(self) -> None:
        self._closing.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout=2 * POLL)
        self.listener.close()
        while True:
            try:
                conn, _ = self._admitted.get_nowait()
            except queue.Empty:
                break
            conn.close()
        self.device.close()

    def serve(self, sessions: int = 0, on_session_start: Callable[[], None] | None = None,
              on_session_end: Callable[[], None] | None = None) -> None:
        """Serve clients one after another; stop after `sessions` of them (0: never)."""
        if self._acceptor is None:
            self._acceptor = threading.Thread(target=self._accept_loop, name="bridge-accept",
                                              daemon=True)
            self._acceptor.start()
        while sessions == 0 or self.sessions_served < sessions:
            conn, peer = self._next_client()
            try:
                self._event(f"client {peer} connected")
                if on_session_start is not None:
                    on_session_start()
                self._serve_client(conn, peer)
            except OSError as exc:  # reset, or a client that stopped reading its replies
                self._event(f"client {peer}: {exc.strerror or type(exc).__name__}")
                self._reset_device_state()
            finally:
                conn.close()
                self.sessions_served += 1
                self._event(f"client {peer} left")
                last = sessions != 0 and self.sessions_served >= sessions
                with self._lock:
                    if last:
                        self._closing.set()  # later arrivals are not served; refuse them
                    self._busy_with = None
                    self._lock.notify_all()
            if on_session_end is not None:
                on_session_end()

    def _next_client(self) -> tuple[socket.socket, str]:
        while True:  # short waits: a signal handler in this thread can stop the bridge
            try:
                return self._admitted.get(timeout=POLL)
            except queue.Empty:
                continue

    def _event(self, text: str) -> None:
        if self.on_event is not None:
            self.on_event(text)

    # ---- admission (acceptor thread, one thread per connection in its handshake) ----------

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                ready, _, _ = select.select([self.listener], [], [], POLL)
                if not ready:
                    continue
                conn, addr = self.listener.accept()
            except (OSError, ValueError):  # the listener was closed
                return
            peer = f"{addr[0]}:{addr[1]}"
            if not self._pending.acquire(blocking=False):
                self._event(f"connection from {peer} closed: {MAX_PENDING} connections are "
                            "already in their handshake")
                conn.close()
                continue
            threading.Thread(target=self._admit, args=(conn, peer), name=f"bridge-{peer}",
                             daemon=True).start()

    def _admit(self, conn: socket.socket, peer: str) -> None:
        """Handshake; then hand the connection to `serve`, or tell it the device is busy."""
        handed_over = False
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(self.handshake_timeout)
            if not self._handshake(conn):
                self._event(f"connection from {peer} is not a TVM RPC client; closed")
                return
            with self._lock:
                self._lock.wait_for(lambda: self._busy_with is None or self._closing.is_set(),
                                    timeout=BUSY_GRACE)
                holder = self._busy_with
                if holder is None and not self._closing.is_set():
                    self._busy_with = peer
                    self._admitted.put((conn, peer))
                    handed_over = True
                    return
            self._refuse_busy(conn, peer, holder)
        except (ClientGone, NotRpc, OSError):
            self._event(f"connection from {peer} closed before completing the TVM RPC "
                        "handshake; not a session")
        finally:
            if not handed_over:
                conn.close()
            self._pending.release()

    def _refuse_busy(self, conn: socket.socket, peer: str, holder: str | None) -> None:
        """Answer the client's first packet (InitServer) with a 'busy' exception, then close.

        The handshake's own refusals only offer "key does not match" texts; an exception
        reply reaches the stock client as the RPCError it raises from rpc.connect."""
        packet = _recv_packet(Inbox(conn))
        if isinstance(packet, int) or (len(packet) < packets.PREFIX.size + 4
                                       or packets.packet_code(packet) != packets.SHUTDOWN):
            why = (f"serving another client ({holder})" if holder is not None
                   else "no longer accepting clients")
            conn.sendall(packets.exception_packet(
                f"the device is busy: microtvm-gen serve is {why}; try again later"))
        self._event(f"client {peer} refused: the device is busy")
        _close_gently(conn)

    def _handshake(self, conn: socket.socket) -> bool:
        magic, keylen = struct.unpack("<ii", _recv_exact(conn, 8))
        if magic != RPC_MAGIC or not 0 <= keylen <= MAX_KEY_BYTES:
            return False
        key = _recv_exact(conn, keylen).decode(errors="replace")
        if not key.startswith(CLIENT_PREFIX):
            conn.sendall(struct.pack("<i", RPC_KEY_MISMATCH))
            return False
        reply = f"server:{self.key}".encode()
        conn.sendall(struct.pack("<ii", RPC_MAGIC, len(reply)) + reply)
        return True

    # ---- one client (the serving thread) ------------------------------------------------

    def _serve_client(self, conn: socket.socket, peer: str) -> None:
        conn.settimeout(self.idle_timeout if self.idle_timeout > 0 else None)
        self.epochs.advance()  # nothing an earlier client was given is valid now
        try:
            self.device.ensure()
        except DeviceError as exc:
            self._event(exc.one_line())
        inbox = Inbox(conn)
        if self._takes_clients() and not self._serve_directly(conn, peer, inbox):
            return
        while True:
            started = time.monotonic()
            try:
                packet = _recv_packet(inbox, self._hold_upload)
            except ClientGone:
                self._reset_device_state()  # the client vanished without kShutdown
                return
            except TimeoutError:
                self._event(f"client {peer} sent nothing for {time.monotonic() - started:.0f} s "
                            f"(--idle-timeout {self.idle_timeout:g}); ending its session")
                self._reset_device_state()
                return
            except NotRpc:
                self._event(f"client {peer} sent a packet length that is not TVM RPC; closing")
                self._reset_device_state()
                return
            if isinstance(packet, int):
                conn.sendall(self._too_large(packet))
                self._oversized_upload = 0
                continue
            if len(packet) == packets.PREFIX.size:
                continue
            code = packets.packet_code(packet) if len(packet) >= packets.PREFIX.size + 4 else -1
            if code == packets.SHUTDOWN:
                self._reset_device_state(packet)
                return
            local = self._local(packet, code)
            conn.sendall(local if local is not None else self._forward(packet))

    def _takes_clients(self) -> bool:
        link = self.device.link
        return (self.firmware_slot is None and isinstance(link, HandoverDevice)
                and self.device.session is not None and link.takes_clients())

    def _serve_directly(self, conn: socket.socket, peer: str, inbox: Inbox) -> bool:
        """Let the firmware process answer the client itself (no bridge per call). True
        when the client goes on through the bridge: its device ended during the session,
        or the firmware refused the handover without reading from the client."""
        link = self.device.link
        assert isinstance(link, HandoverDevice)
        try:
            end = direct_clients.serve_client(link, conn, self.idle_timeout,
                                              self.device.timeouts.reply, inbox.take,
                                              self.device.pump_logs)
        except ClientGone:  # gone while serve read the rest of its last request
            self.device.ended()
            return False
        if end.reason == direct_clients.DEVICE_ENDED:
            # Between packets the client's next request finds the device ended, as bridged.
            if end.broken or end.owed or end.hung:
                error = self.device.ended(hung=end.hung)
            if end.broken:
                self._event(f"client {peer}: the device ended while answering; closing")
                return False
            if end.owed:
                conn.sendall(packets.exception_packet(error.one_line()))
            return True
        if end.reason == direct_clients.END_IDLE:
            self._event(f"client {peer} sent nothing for {self.idle_timeout:.0f} s "
                        f"(--idle-timeout {self.idle_timeout:g}); ending its session")
        elif end.reason == direct_clients.END_NOT_RPC:
            self._event(f"client {peer} sent a packet length that is not TVM RPC; closing")
        elif end.reason == direct_clients.END_REFUSED:  # it read nothing of the client's
            self._event(f"the device refused client {peer}'s socket; serving it and later "
                        "clients through the bridge")
            link.stop_handing_over()
            return True
        self._reset_device_state()
        return False

    def _forward(self, packet: bytes) -> bytes:
        try:
            max_packet = self.device.ensure().max_packet
        except DeviceError as exc:
            return packets.exception_packet(exc.one_line())
        if self.device.generation != self._generation:  # a new device session: new epoch
            self._generation = self.device.generation
            self.epochs.advance()
        if len(packet) > max_packet:
            return self._too_large(len(packet), max_packet)
        if len(packet) >= packets.PREFIX.size + 4 and \
                packets.packet_code(packet) == packets.INIT_SERVER:
            self.epochs.advance()  # the device drops every object
        request = self.epochs.to_device(packet)
        if isinstance(request, Stale):
            return request.reply
        try:
            return self.epochs.to_client(self.device.request(request))
        except DeviceError as exc:
            return packets.exception_packet(exc.one_line())

    def _too_large(self, nbytes: int, max_packet: int | None = None) -> bytes:
        if self._oversized_upload:
            return packets.exception_packet(
                f"{firmware.UPLOAD}: a call of {nbytes} bytes; files of at most "
                f"{firmware.MAX_FIRMWARE_BYTES} bytes are accepted")
        if max_packet is None:
            session = self.device.session
            max_packet = session.max_packet if session is not None else MAX_HELD_PACKET
        return packets.exception_packet(
            f"packet of {nbytes} bytes does not fit the device link ({max_packet} bytes at "
            "most); tensor copies are split to fit, calls must be smaller")

    def _reset_device_state(self, shutdown: bytes | None = None) -> None:
        self.epochs.advance()
        try:
            self.device.request(shutdown or packets.Requests.shutdown(), reply_expected=False)
        except DeviceError:
            pass

    # ---- functions the bridge answers itself (serve --accept-firmware) -------------------

    def _hold_upload(self, nbytes: int, head: bytes) -> bool:
        if self.firmware_slot is None or not firmware.is_upload_call(nbytes, head):
            return False
        if nbytes > firmware.MAX_UPLOAD_PACKET:
            self._oversized_upload = nbytes
            return False
        return True

    def _local(self, packet: bytes, code: int) -> bytes | None:
        """The reply to a request the bridge answers itself, or None to forward it."""
        if self.firmware_slot is None:  # the device refuses upload and load_module itself
            return None
        if code == packets.GET_GLOBAL_FUNC:
            name = firmware.global_name(packet)
            if name is None:
                return None
            handle = packets.Handle(firmware.LOCAL_HANDLES[name])
            return packets.packet(packets.RETURN, packets.encode_args(handle))
        if code not in (packets.CALL_FUNC, packets.FREE_HANDLE):
            return None
        start = packets.PREFIX.size + 4
        try:
            if code == packets.FREE_HANDLE:
                args = firmware.call_args(packet, start)
                if args and args[0] in firmware.LOCAL_HANDLES.values():
                    return packets.packet(packets.RETURN, packets.encode_args(None))
                return None
            target = firmware.call_target(packet)
            if target not in firmware.LOCAL_HANDLES.values():
                return None
            args = firmware.call_args(packet, start + 8)
        except (ValueError, struct.error):
            return None
        try:
            if target == firmware.LOCAL_HANDLES[firmware.UPLOAD]:
                if len(args) != 2 or not isinstance(args[0], str) \
                        or not isinstance(args[1], bytes):
                    raise FirmwareRefused(f"{firmware.UPLOAD} expects (target name, bytes)")
                self.firmware_slot.upload(args[0], args[1])
                self._event(f"received {args[0]} ({len(args[1])} bytes)")
                return packets.packet(packets.RETURN, packets.encode_args(0, None))
            if len(args) != 1 or not isinstance(args[0], str):
                raise FirmwareRefused(f"{firmware.LOAD_MODULE} expects (target name)")
            return self._load_module(args[0])
        except (FirmwareRefused, OSError) as exc:
            text = exc.one_line() if isinstance(exc, FirmwareRefused) else \
                f"serve could not keep the file: {exc.strerror or exc}"
            self._event(f"refused: {text}")
            return packets.exception_packet(text)

    def _load_module(self, name: str) -> bytes:
        """Restart the device from the uploaded file `name`; answer with its system library.

        A firmware that does not start a device session is replaced by the previous one
        again (restarted), and the client gets an exception."""
        slot = self.firmware_slot
        assert slot is not None
        path = slot.check(name)
        self.device.close()
        loaded = slot.install(path)
        try:
            self.device.ensure()
        except DeviceError as exc:
            self.device.close()
            slot.restore()
            try:
                self.device.ensure()
                again = "the previous firmware runs again"
            except DeviceError as second:
                again = f"the previous firmware did not start either: {second.one_line()}"
            raise FirmwareRefused(f"firmware {name} did not start a device session "
                                  f"({exc.one_line()}); {again}") from None
        self._event(f"firmware {loaded.name} ({loaded.size} bytes, sha256 "
                    f"{loaded.sha256[:12]}) loaded; device restarted")
        return self._system_lib()

    def _system_lib(self) -> bytes:
        """The reply to `ffi.SystemLib()` on the device: a Module handle for the client."""
        reply = self._forward(packets.Requests.get_global("ffi.SystemLib"))
        try:
            found = packets.decode_return(reply)
        except DeviceError as exc:
            return packets.exception_packet(exc.one_line())
        if not found or not isinstance(found[0], packets.Handle) or not found[0].value:
            return packets.exception_packet("the new firmware has no system library")
        module = self._forward(packets.Requests.call(found[0].value))
        self._forward(packets.Requests.free_handle(found[0].value))
        return module
