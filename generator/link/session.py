"""The session layer of the host link, host side (the mirror of templates/common/src/session.c).

Each frame payload starts with u16 LE session id and u8 message type. Types 0x00-0x03 and
0x10 keep microTVM's bytes; 0x11 (Sequenced) and 0x12 (Nak) are ours and make the link
survive lost and damaged bytes:

- every request goes out as Sequenced: u8 seq, the RPC packet, u32 LE CRC-32 of both;
- it is sent again after a retransmission timeout (doubling up to a cap), at once when
  the device reports a damaged frame (Nak), and at once when a damaged frame arrives here;
- the timeout grows with the request's transfer time at the host-to-device speed, which is
  learnt apart from the device-to-host speed (a UART can be much faster one way than the
  other: QEMU's moves replies about 10x faster than requests, and one rate for both made
  the uploads after a download retransmit);
- the device answers a repeated seq from its reply cache without running the request
  again, and replies whose seq or CRC-32 is wrong are dropped here.

A request that gets no reply within its deadline raises LinkTimeout; a device that
restarts (it sends TerminateSession at boot) raises DeviceReset. Both are DeviceErrors
with one-line messages; the session must then be started again.
"""

from __future__ import annotations

import random
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from generator import abi
from generator.errors import DeviceError
from generator.link.framing import Unframer, encode_frame

MSG_START_INIT = abi.constant("MTVG_MSG_START_INIT")
MSG_START_REPLY = abi.constant("MTVG_MSG_START_REPLY")
MSG_TERMINATE = abi.constant("MTVG_MSG_TERMINATE")
MSG_LOG = abi.constant("MTVG_MSG_LOG")
MSG_NORMAL = abi.constant("MTVG_MSG_NORMAL")
MSG_SEQUENCED = abi.constant("MTVG_MSG_SEQUENCED")
MSG_NAK = abi.constant("MTVG_MSG_NAK")

SESSION_VERSION = abi.constant("MTVG_SESSION_VERSION")
HEADER = struct.Struct("<HB")  # MTVG_SESSION_HEADER_BYTES: u16 session id, u8 type
SEQUENCED_EXTRA = abi.constant("MTVG_SEQUENCED_EXTRA_BYTES")  # u8 seq + u32 CRC-32
PUMP_SLICE = 0.05  # longest single wait for device bytes, seconds
# A request waits this many times its bytes' expected transfer time before a retransmission
# (on top of SessionTimeouts.retransmit); bytes arriving from the device push it back.
TRANSFER_SAFETY = 3.0
RATE_SAMPLE_BYTES = 512  # a direction's speed is measured by exchanges this large in it
RATE_DOMINANCE = 4  # ... that carry this many times more bytes that way than the other


class Link(Protocol):
    """A byte stream to the device (a process's pipes, QEMU's serial port, a UART)."""

    description: str

    def write(self, data: bytes) -> None: ...

    def read(self, timeout: float) -> bytes:
        """Bytes that arrived within timeout seconds; b'' on timeout; DeviceError at the end."""
        ...

    def close(self, hung: bool = False) -> None:
        """End the link. `hung`: the device stopped answering, so it is not given time to
        end by itself (a process is terminated at once)."""
        ...


class LinkTimeout(DeviceError):
    """The device did not answer within the deadline."""


class DeviceReset(DeviceError):
    """The device restarted; everything the session created on it is gone."""


@dataclass(frozen=True)
class SessionTimeouts:
    start: float = 10.0  # seconds to get StartSessionReply
    start_retry: float = 1.0  # resend StartSessionInit this often
    reply: float = 30.0  # seconds a request may take, retransmissions included
    retransmit: float = 0.05  # first retransmission timeout, plus the frame's own time
    retransmit_max: float = 1.0  # cap of the doubling retransmission timeout
    # First guess of the link's speed; measured copies replace it (QEMU's UART moves a few
    # KB/s, a process's pipes hundreds of MB/s).
    initial_bytes_per_second: float = 20_000.0


def next_nonce(nonce: int) -> int:
    """microTVM's nonce step: rotate left by 5 in 8 bits, add one, never 0."""
    value = ((((nonce << 5) | (nonce >> 5)) & 0xFF) + 1) & 0xFF
    return value or 1


def encode_message(session_id: int, message_type: int, body: bytes = b"",
                   leading_nop: bool = False) -> bytes:
    return encode_frame(HEADER.pack(session_id, message_type) + body, leading_nop)


def sequenced_body(seq: int, packet: bytes) -> bytes:
    covered = bytes([seq]) + packet
    return covered + struct.pack("<I", zlib.crc32(covered))


@dataclass
class LinkRate:
    """The speed of one direction of the link, in seconds per byte, learnt from exchanges
    that carry far more bytes that way than back (quick to speed up, slow to slow down).

    A sample is an exchange's whole time over its bytes in this direction, so it includes
    the device's work and the small message the other way: it errs on the slow side, and
    a retransmission timeout computed from it on the long side."""

    seconds_per_byte: float
    samples: int = 0

    def learn(self, seconds: float, nbytes: int, other_bytes: int) -> None:
        if nbytes < RATE_SAMPLE_BYTES or nbytes < RATE_DOMINANCE * other_bytes or seconds <= 0:
            return
        sample = seconds / nbytes
        weight = 0.5 if sample < self.seconds_per_byte else 0.1
        self.seconds_per_byte += weight * (sample - self.seconds_per_byte)
        self.samples += 1

    @property
    def bytes_per_second(self) -> float:
        return 1.0 / self.seconds_per_byte


@dataclass
class LinkStats:
    """What the link went through (for benchmarks and the fault-injection test)."""

    requests: int = 0
    retransmissions: int = 0
    naks: int = 0
    damaged_frames: int = 0
    stale_replies: int = 0


class Session:
    """The host end of a device session. Not thread-safe: one request at a time."""

    def __init__(self, link: Link, timeouts: SessionTimeouts | None = None,
                 on_log: Callable[[str], None] | None = None, max_payload: int = 4096,
                 seed: int | None = None) -> None:
        self.link = link
        self.timeouts = timeouts or SessionTimeouts()
        self.on_log = on_log
        self.max_packet = max_payload - HEADER.size - SEQUENCED_EXTRA
        self.stats = LinkStats()
        self.session_id = 0
        self._rng = random.Random(seed)
        self._nonce = self._rng.randrange(1, 256)
        self._seq = 0
        self._unframer = Unframer(max_payload=max_payload)
        self._errors_seen = 0
        # Host to device (requests) and device to host (replies), learnt apart.
        self.rate_out = LinkRate(1.0 / self.timeouts.initial_bytes_per_second)
        self.rate_in = LinkRate(1.0 / self.timeouts.initial_bytes_per_second)
        self._last_rx = 0.0

    # ---- start and end --------------------------------------------------------------------

    def start(self) -> None:
        """Start a fresh session (TerminateSession, then StartSessionInit until answered)."""
        self.session_id = 0
        deadline = time.monotonic() + self.timeouts.start
        while True:
            self._nonce = next_nonce(self._nonce ^ self._rng.randrange(0, 256))
            self.link.write(encode_message(0, MSG_TERMINATE, leading_nop=True)
                            + encode_message(self._nonce, MSG_START_INIT,
                                             bytes([SESSION_VERSION])))
            retry_at = min(deadline, time.monotonic() + self.timeouts.start_retry)
            while time.monotonic() < retry_at:
                for sid, kind, body in self._pump(retry_at - time.monotonic()):
                    if (kind == MSG_START_REPLY and sid & 0xFF == self._nonce and sid >> 8
                            and body == bytes([SESSION_VERSION])):
                        self.session_id = sid
                        return
            if time.monotonic() >= deadline:
                raise LinkTimeout(f"{self.link.description} did not start a session within "
                                  f"{self.timeouts.start:.0f} s")

    def close(self) -> None:
        """End the session (the device drops its RPC state)."""
        if self.session_id:
            self.link.write(encode_message(0, MSG_TERMINATE))
            self.session_id = 0

    # ---- requests -------------------------------------------------------------------------

    def request(self, packet: bytes, reply_expected: bool = True,
                timeout: float | None = None) -> bytes:
        """Send one RPC packet; return the device's reply packet (b'' if none expected)."""
        if not self.session_id:
            raise DeviceError(f"no session with {self.link.description}")
        if len(packet) > self.max_packet:
            raise DeviceError(f"packet of {len(packet)} bytes is larger than the device's "
                              f"{self.max_packet}")
        self._seq = (self._seq + 1) & 0xFF
        seq = self._seq
        frame = encode_message(self.session_id, MSG_SEQUENCED, sequenced_body(seq, packet))
        self.stats.requests += 1
        self.link.write(frame)
        if not reply_expected:
            return b""
        limit = self.timeouts.reply if timeout is None else timeout
        sent_at = time.monotonic()
        deadline = sent_at + limit
        wait = self.timeouts.retransmit
        transfer = TRANSFER_SAFETY * self.rate_out.seconds_per_byte * len(frame)
        resend_at = sent_at + wait + transfer
        retransmitted = False
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise LinkTimeout(f"{self.link.description} did not answer within {limit:g} s "
                                  f"({self.stats.retransmissions} retransmissions so far)")
            resend_now = False
            for sid, kind, body in self._pump(min(deadline, resend_at) - now):
                if sid != self.session_id:
                    continue
                if kind == MSG_NAK:
                    self.stats.naks += 1
                    resend_now = True
                elif kind == MSG_SEQUENCED:
                    reply = self._sequenced_reply(body, seq)
                    if reply is not None:
                        if not retransmitted:
                            self._measure(time.monotonic() - sent_at, len(frame), len(body))
                        return reply
            if self._unframer.errors != self._errors_seen:
                self.stats.damaged_frames += self._unframer.errors - self._errors_seen
                self._errors_seen = self._unframer.errors
                resend_now = True
            if not resend_now and self._last_rx > resend_at - wait:
                # The device is talking: a reply is coming, at the device-to-host speed.
                resend_at = self._last_rx + wait + (TRANSFER_SAFETY * self.rate_in.seconds_per_byte
                                                    * self._unframer.frame_bytes_left())
            if resend_now or time.monotonic() >= resend_at:
                if not resend_now:
                    wait = min(wait * 2, self.timeouts.retransmit_max)
                self.stats.retransmissions += 1
                retransmitted = True
                self.link.write(frame)
                resend_at = time.monotonic() + wait + transfer

    def _measure(self, seconds: float, sent: int, received: int) -> None:
        """Learn each direction's speed from a clean exchange that was mostly that way."""
        self.rate_out.learn(seconds, sent, received)
        self.rate_in.learn(seconds, received, sent)

    def _sequenced_reply(self, body: bytes, seq: int) -> bytes | None:
        if len(body) < SEQUENCED_EXTRA:
            return None
        covered, crc = body[:-4], struct.unpack("<I", body[-4:])[0]
        if zlib.crc32(covered) != crc:
            self.stats.damaged_frames += 1
            return None
        if covered[0] != seq:
            self.stats.stale_replies += 1
            return None
        return covered[1:]

    # ---- receiving ------------------------------------------------------------------------

    def pump_logs(self) -> None:
        """Read what the device sent between requests: Log messages go to on_log (nothing
        else is expected then); a reboot raises DeviceReset, a closed link DeviceError."""
        self._pump(0.0)

    def _pump(self, timeout: float) -> list[tuple[int, int, bytes]]:
        """Messages that arrived within timeout; Log goes to on_log; a reboot raises."""
        data = self.link.read(max(0.0, min(timeout, PUMP_SLICE)))
        if data:
            self._last_rx = time.monotonic()
        messages = []
        for payload in self._unframer.feed(data):
            if len(payload) < HEADER.size:
                continue
            sid, kind = HEADER.unpack_from(payload)
            body = payload[HEADER.size:]
            if kind == MSG_LOG:
                if self.on_log is not None:
                    self.on_log(body.decode(errors="replace"))
            elif kind == MSG_TERMINATE:
                if self.session_id:
                    self.session_id = 0
                    raise DeviceReset(f"{self.link.description} restarted; the objects of "
                                      "this session are gone")
            else:
                messages.append((sid, kind, body))
        return messages
