"""Offer our RPC endpoint to a stock TVM 0.27 RPC tracker.

A stock client asks the tracker for a server by key (``connect_tracker(h, p).request(key)``)
and the tracker hands out an address, a port and a one-time *matchkey* that some server
offered earlier. :class:`TrackerRegistrar` makes those offers on behalf of our host-side
bridge, so clients are sent to the bridge's ``host:port``.

Wire format (see the protocol digest, section 1.4): after both sides exchange the i32 LE
magic ``0x0002F271``, every message is an i32 LE length followed by that many bytes of
UTF-8 JSON. We always speak first; the tracker answers each message exactly once.

    [5, {"key": "server:<key>", "addr": [custom_addr, port]}]   -> 0     (UPDATE_INFO)
    [3, "<key>", [port, "<key>:<random>"], custom_addr]         -> 0     (PUT one offer)
    [7]                                                         -> [...] (offers not yet taken)

An offer is consumed when a client takes it. We notice that when its matchkey is missing
from the ``[7]`` reply and then offer a fresh one: right away if a session has run since,
or after a grace period if the client that took it never came.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from generator.errors import InputError, MtgError

log = logging.getLogger(__name__)

TRACKER_MAGIC = 0x0002F271
MAX_MESSAGE_BYTES = 1 << 20
DEFAULT_TIMEOUT = 5.0
# Reconnect delays after the tracker connection drops: doubles from the first to the cap.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 10.0
# A taken matchkey whose client has not connected after this many poll intervals is
# replaced (the stock server waits about 4 s with its 2 s ping period).
UNCLAIMED_POLLS = 2

_I32 = struct.Struct("<i")


class TrackerCode(IntEnum):
    """Message codes of the tracker protocol."""

    FAIL = -1
    SUCCESS = 0
    PING = 1
    STOP = 2
    PUT = 3
    REQUEST = 4
    UPDATE_INFO = 5
    SUMMARY = 6
    GET_PENDING_MATCHKEYS = 7


class TrackerError(MtgError):
    """The RPC tracker cannot be reached, or it does not speak the tracker protocol."""


def parse_tracker_address(text: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (or ``[IPV6]:PORT``) as given to ``--tracker``."""
    stripped = text.strip()
    host, sep, port_text = stripped.rpartition(":")
    if not sep or not host:
        raise InputError(f"--tracker '{text}': expected HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise InputError(f"--tracker '{text}': expected HOST:PORT",
                         hint="write an IPv6 address in brackets, e.g. [::1]:9190")
    if not host or any(ch.isspace() for ch in host):
        raise InputError(f"--tracker '{text}': expected HOST:PORT")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InputError(f"--tracker '{text}': the port must be a number from 1 to 65535")
    return host, int(port_text)


def new_matchkey(key: str) -> str:
    """A fresh one-time matchkey for *key*; the tracker wants ``<key>:<anything>``."""
    return f"{key}:{secrets.token_hex(8)}"


def _show_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _TrackerLink:
    """One TCP connection to the tracker, after the magic exchange."""

    def __init__(self, sock: socket.socket, where: str) -> None:
        self.sock = sock
        self.where = where

    @classmethod
    def open(cls, host: str, port: int, timeout: float) -> _TrackerLink:
        """Connect and exchange the magic; raise TrackerError on any failure."""
        where = _show_address(host, port)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except TimeoutError:
            raise TrackerError(f"cannot reach the RPC tracker at {where}: "
                               f"no answer within {timeout:g} s") from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise TrackerError(f"cannot reach the RPC tracker at {where}: {reason}") from None
        link = cls(sock, where)
        try:
            sock.sendall(_I32.pack(TRACKER_MAGIC))
            (magic,) = _I32.unpack(link._recv_exact(4, "the handshake"))
        except TimeoutError:
            link.close()
            raise TrackerError(f"{where} did not answer the tracker handshake within "
                               f"{timeout:g} s; is it an RPC tracker?") from None
        except OSError as exc:
            link.close()
            raise TrackerError(f"{where}: tracker handshake failed: {exc}") from None
        if magic != TRACKER_MAGIC:
            link.close()
            raise TrackerError(f"{where} answered magic {magic & 0xFFFFFFFF:#x}, not the RPC "
                               f"tracker's {TRACKER_MAGIC:#x}; is it an RPC tracker?")
        return link

    def _recv_exact(self, size: int, what: str) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise TrackerError(f"{self.where} closed the connection during {what}")
            data += chunk
        return bytes(data)

    def call(self, message: list[object]) -> object:
        """Send one JSON message and return the tracker's decoded answer."""
        body = json.dumps(message).encode("utf-8")
        self.sock.sendall(_I32.pack(len(body)) + body)
        (size,) = _I32.unpack(self._recv_exact(4, "a reply"))
        if not 0 < size <= MAX_MESSAGE_BYTES:
            raise TrackerError(f"{self.where} sent a reply of invalid length {size}")
        try:
            return json.loads(self._recv_exact(size, "a reply").decode("utf-8"))
        except ValueError as exc:
            raise TrackerError(f"{self.where} sent a reply that is not JSON: {exc}") from None

    def expect_success(self, message: list[object]) -> None:
        """Send *message* and insist on a SUCCESS answer."""
        reply = self.call(message)
        if reply != TrackerCode.SUCCESS:
            name = TrackerCode(message[0]).name
            raise TrackerError(f"{self.where} refused {name}: answered {reply!r}")

    def shutdown(self) -> None:
        """Unblock a thread waiting in recv (the socket stays open until close)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


@dataclass
class _Offer:
    """The matchkey we last PUT, and what we know about its fate."""

    matchkey: str
    # Sessions started before the newest [7] reply that still listed this key; any session
    # started after that may be the client that took it.
    started_mark: int
    # When a [7] reply first lacked this key (monotonic seconds), else None.
    missing_since: float | None = None


class TrackerRegistrar:
    """Keep one offer of ``host:port`` (our bridge) registered with an RPC tracker.

    ``on_event`` receives one-line announcements (registered, connection lost, reconnected,
    offer replaced); it is called from the background thread after :meth:`start`.
    """

    def __init__(self, tracker_host: str, tracker_port: int, key: str, port: int,
                 custom_addr: str | None = None, poll_interval: float = 2.0,
                 on_event: Callable[[str], None] | None = None) -> None:
        if not key or any(ch.isspace() for ch in key):
            raise InputError(f"RPC key '{key}': must be non-empty and without spaces")
        if not 0 < port < 65536:
            raise InputError(f"RPC port {port}: must be from 1 to 65535")
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.tracker_host = tracker_host
        self.tracker_port = tracker_port
        self.key = key
        self.port = port
        self.custom_addr = custom_addr
        self.poll_interval = poll_interval
        self.on_event = on_event
        self.where = _show_address(tracker_host, tracker_port)
        self._timeout = DEFAULT_TIMEOUT
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._link: _TrackerLink | None = None
        self._offer: _Offer | None = None
        self._in_session = False
        self._sessions_started = 0

    # ---- public API ---------------------------------------------------------------------

    @property
    def matchkey(self) -> str | None:
        """The matchkey currently offered (or last offered), None before the first PUT."""
        with self._lock:
            return self._offer.matchkey if self._offer else None

    def start(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Register and make the first offer, then keep it up from a daemon thread.

        Raises TrackerError if the tracker cannot be reached or misbehaves within *timeout*.
        """
        if self._thread is not None or self._stopping:
            raise RuntimeError("a TrackerRegistrar can be started only once")
        self._timeout = timeout
        link = self._register()
        self._announce(f"registered RPC key '{self.key}' (port {self.port}) with the "
                       f"tracker at {self.where}")
        self._thread = threading.Thread(target=self._run, args=(link,),
                                        name=f"tracker-registrar-{self.key}", daemon=True)
        self._thread.start()

    def session_started(self) -> None:
        """The bridge accepted a client: do not re-offer until :meth:`session_ended`."""
        with self._lock:
            self._in_session = True
            self._sessions_started += 1

    def session_ended(self) -> None:
        """The bridge's session is over: offer a fresh matchkey now."""
        with self._lock:
            if not self._in_session:
                self._sessions_started += 1  # an unannounced session: count it anyway
            self._in_session = False
        self._wake.set()

    def stop(self) -> None:
        """Close the tracker connection (which withdraws our offers) and join the thread."""
        with self._lock:
            self._stopping = True
            link = self._link
        self._wake.set()
        if link is not None:
            link.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout + 1.0)
            self._thread = None

    # ---- background thread --------------------------------------------------------------

    def _announce(self, text: str) -> None:
        log.info("%s", text)
        if self.on_event is not None:
            try:
                self.on_event(text)
            except Exception:  # the callback must not end the registration
                log.exception("tracker registrar on_event callback failed")

    def _register(self) -> _TrackerLink:
        """Connect, send UPDATE_INFO and (unless a session is running) PUT an offer."""
        link = _TrackerLink.open(self.tracker_host, self.tracker_port, self._timeout)
        try:
            info = {"key": f"server:{self.key}", "addr": [self.custom_addr, self.port]}
            link.expect_success([TrackerCode.UPDATE_INFO, info])
            with self._lock:
                self._link = link
                self._offer = None  # the tracker dropped our old offers with the connection
                busy = self._in_session
            if not busy:
                self._put(link)
        except (OSError, TrackerError) as exc:
            with self._lock:
                if self._link is link:
                    self._link = None
            link.close()
            if isinstance(exc, TrackerError):
                raise
            raise TrackerError(f"RPC tracker at {self.where}: registration failed: "
                               f"{exc}") from None
        return link

    def _put(self, link: _TrackerLink) -> None:
        matchkey = new_matchkey(self.key)
        # Recorded before the PUT: once the tracker has the offer, a client may take it and
        # `matchkey` must already name it (a failed PUT ends the link, and the next
        # registration clears the offer).
        with self._lock:
            self._offer = _Offer(matchkey, started_mark=self._sessions_started)
        link.expect_success([TrackerCode.PUT, self.key, [self.port, matchkey],
                             self.custom_addr])
        log.debug("offered %s to the tracker at %s", matchkey, self.where)

    def _poll(self, link: _TrackerLink) -> None:
        """Ask which offers are still pending and replace ours if it was consumed."""
        with self._lock:
            started_before = self._sessions_started
        pending = link.call([TrackerCode.GET_PENDING_MATCHKEYS])
        if not isinstance(pending, list):
            raise TrackerError(f"{self.where} answered GET_PENDING_MATCHKEYS with {pending!r}")
        reason: str | None = None
        with self._lock:
            offer = self._offer
            if self._in_session:
                pass  # re-offer once the session ends
            elif offer is None:
                reason = "offering after the session"
            elif offer.matchkey in pending:
                offer.started_mark = started_before
                offer.missing_since = None
            elif self._sessions_started > offer.started_mark:
                reason = "session over"
            elif offer.missing_since is None:
                offer.missing_since = time.monotonic()
            elif time.monotonic() - offer.missing_since >= UNCLAIMED_POLLS * self.poll_interval:
                reason = "unclaimed"
        if reason == "unclaimed":
            self._announce(f"a client took matchkey {offer.matchkey} but never connected; "
                           "offering a fresh one")
        if reason is not None:
            self._put(link)

    def _run(self, link: _TrackerLink | None) -> None:
        backoff = BACKOFF_FIRST
        while True:
            with self._lock:
                if self._stopping:
                    break
            if link is None:
                try:
                    link = self._register()
                except TrackerError as exc:
                    self._announce(f"{exc}; retrying in {backoff:g} s")
                    self._sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
                    continue
                backoff = BACKOFF_FIRST
                self._announce(f"reconnected to the RPC tracker at {self.where}; "
                               f"RPC key '{self.key}' registered again")
                continue
            self._sleep(self.poll_interval)
            with self._lock:
                if self._stopping:
                    break
            try:
                self._poll(link)
            except (OSError, TrackerError) as exc:
                with self._lock:
                    self._link = None
                    stopping = self._stopping
                link.close()
                link = None
                if stopping:
                    break
                self._announce(f"lost the connection to the RPC tracker at {self.where} "
                               f"({exc}); reconnecting")
        with self._lock:
            self._link = None
        if link is not None:
            link.close()

    def _sleep(self, seconds: float) -> None:
        """Wait up to *seconds*, waking early for session_ended() or stop()."""
        self._wake.wait(seconds)
        self._wake.clear()


def request_server(host: str, port: int, key: str, timeout: float,
                   priority: int = 1) -> tuple[str, int, str]:
    """Ask the tracker for a free server registered under `key`, waiting up to `timeout`
    seconds for one: its address and the matchkey a client connects with."""
    link = _TrackerLink.open(host, port, DEFAULT_TIMEOUT)
    try:
        link.sock.settimeout(timeout)
        try:
            reply = link.call([TrackerCode.REQUEST, key, "", priority])
        except TimeoutError:
            raise TrackerError(f"no server under key '{key}' became free at {link.where} "
                               f"within {timeout:g} s") from None
        except OSError as exc:
            raise TrackerError(f"{link.where}: request for key '{key}' failed: {exc}") \
                from None
        if not (isinstance(reply, list) and len(reply) == 2 and reply[0] == TrackerCode.SUCCESS
                and isinstance(reply[1], list) and len(reply[1]) == 3):
            raise TrackerError(f"{link.where} answered the request for '{key}' with {reply!r}")
        server_host, server_port, matchkey = reply[1]
        return str(server_host), int(server_port), str(matchkey)
    finally:
        link.close()


def free_servers(host: str, port: int, key: str, timeout: float = DEFAULT_TIMEOUT) -> int:
    """How many servers under `key` the tracker has free now (its summary's queue)."""
    link = _TrackerLink.open(host, port, timeout)
    try:
        reply = link.call([TrackerCode.SUMMARY])
    finally:
        link.close()
    if not (isinstance(reply, list) and len(reply) == 2 and isinstance(reply[1], dict)):
        raise TrackerError(f"{host}:{port} answered the summary with {reply!r}")
    info = reply[1].get("queue_info", {}).get(key, {})
    free = info.get("free", 0) if isinstance(info, dict) else 0
    return free if isinstance(free, int) else 0
