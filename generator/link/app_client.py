"""Requests to the standalone application (templates/crt/src/app.c) over a framed link."""

from __future__ import annotations

import secrets
import struct
import time
from dataclasses import dataclass

from generator import abi
from generator.device.runner import Device
from generator.errors import DeviceError
from generator.link.framing import Unframer, encode_frame

DEVICE_MAX_PAYLOAD = abi.constant("MTVG_LINK_MAX_PAYLOAD")  # the default the app is built with
# The command bytes of templates/crt/src/app.c (CMD_*; tests/test_abi.py compares them).
CMD_HELLO_REQUEST, CMD_HELLO, CMD_ERROR = b"h", b"H", b"E"
CMD_INPUT, CMD_ACK = b"I", b"A"
CMD_RUN, CMD_DONE = b"R", b"D"
CMD_OUTPUT, CMD_OUTPUT_DATA = b"O", b"o"
CMD_COUNTERS, CMD_COUNTERS_TEXT = b"K", b"k"
CMD_QUIT = b"Q"
CMD_PROFILE, CMD_PROFILE_DATA = b"P", b"p"
INPUT_CHUNK = DEVICE_MAX_PAYLOAD - 6
OUTPUT_CHUNK = DEVICE_MAX_PAYLOAD - 1
# The hello request is sent again while no answer comes (a device still booting, a port
# opened mid-frame): first after this many seconds, then twice as long each time, at most
# HELLO_RETRY_MAX.
HELLO_RETRY_FIRST = 0.2
HELLO_RETRY_MAX = 1.6
# Reads (0.1 s each) for what a device that ended wrote before it did.
LAST_WORDS_READS = 20


@dataclass(frozen=True)
class Hello:
    abi: int
    input_sizes: list[int]
    output_sizes: list[int]
    arena_bytes: int
    storage_bytes: int = 0  # graph executor storage reserved
    storage_used: int = 0  # and used


@dataclass(frozen=True)
class RunResult:
    status: int
    ticks: int
    hz: int
    workspace_peak: int
    frame_errors: int
    message: str

    @property
    def seconds(self) -> float:
        return self.ticks / self.hz if self.hz else 0.0


class AppClient:
    def __init__(self, device: Device, timeout: float) -> None:
        self.device = device
        self.timeout = timeout
        self.unframer = Unframer()
        self._pending: list[bytes] = []

    def _receive(self, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (timeout or self.timeout)
        while not self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeviceError(f"{self.device.description} did not answer within "
                                  f"{timeout or self.timeout:.0f} s")
            self._pending.extend(self.unframer.feed(self.device.read(min(left, 0.5))))
        payload = self._pending.pop(0)
        if payload[:1] == CMD_ERROR:
            raise DeviceError(f"device: {payload[1:].decode(errors='replace')}")
        return payload

    def _expect(self, code: bytes, timeout: float | None = None) -> bytes:
        payload = self._receive(timeout)
        if payload[:1] != code:
            raise DeviceError(f"device answered {payload[:1]!r}, expected {code!r}")
        return payload[1:]

    def hello(self, timeout: float) -> Hello:
        """Start a session: ask for the hello until the device answers (it answers at any
        time: after reset, long after, after another host's session). Each request carries
        a new nonce; only the answer to the last one is taken, so no answer to an earlier
        request is left in the stream. Other frames (the end of an earlier session) are
        dropped; an error frame is the device's set-up failure."""
        deadline = time.monotonic() + timeout
        retry = HELLO_RETRY_FIRST
        while True:
            nonce = secrets.randbits(32) or 1
            try:
                self.device.write(encode_frame(CMD_HELLO_REQUEST + struct.pack("<I", nonce)))
            except DeviceError as exc:  # it ended: a set-up failure says why before exiting
                raise self._last_words() or exc from None
            wait_until = min(deadline, time.monotonic() + retry)
            while time.monotonic() < wait_until:
                if not self._pending:
                    self._pending.extend(self.unframer.feed(
                        self.device.read(min(wait_until - time.monotonic(), 0.5))))
                    continue
                payload = self._pending.pop(0)
                if payload[:1] == CMD_ERROR:
                    raise DeviceError(f"device: {payload[1:].decode(errors='replace')}")
                if payload[:1] == CMD_HELLO and payload[1:5] == struct.pack("<I", nonce):
                    return self._parse_hello(payload[5:])
            if time.monotonic() >= deadline:
                raise DeviceError(f"{self.device.description} did not answer the hello "
                                  f"within {timeout:.0f} s")
            retry = min(retry * 2, HELLO_RETRY_MAX)

    def _last_words(self) -> DeviceError | None:
        """The error frame a device that already ended left in the stream, if any."""
        frames = list(self._pending)
        try:
            for _ in range(LAST_WORDS_READS):
                frames.extend(self.unframer.feed(self.device.read(0.1)))
        except DeviceError:
            pass  # the end of its output
        found = next((f for f in frames if f[:1] == CMD_ERROR), None)
        return DeviceError(f"device: {found[1:].decode(errors='replace')}") if found else None

    @staticmethod
    def _parse_hello(body: bytes) -> Hello:
        if len(body) < 12:
            raise DeviceError(f"device hello is {len(body) + 5} bytes, too short")
        abi, n_in, n_out = struct.unpack_from("<III", body)
        count = (len(body) - 12) // 4
        if count < n_in + n_out + 1:
            raise DeviceError(f"device hello is {len(body) + 1} bytes, too short")
        sizes = struct.unpack_from(f"<{count}I", body, 12)
        tail = list(sizes[n_in + n_out:]) + [0, 0]
        return Hello(abi, list(sizes[:n_in]), list(sizes[n_in:n_in + n_out]), tail[0], tail[1],
                     tail[2])

    def set_input(self, index: int, data: bytes) -> None:
        for offset in range(0, len(data), INPUT_CHUNK):
            chunk = data[offset:offset + INPUT_CHUNK]
            self.device.write(encode_frame(CMD_INPUT + struct.pack("<BI", index, offset) + chunk))
            status = self._expect(CMD_ACK)
            if status != b"\x00":
                raise DeviceError(f"device refused input {index} at offset {offset}")

    def run(self) -> RunResult:
        self.device.write(encode_frame(CMD_RUN))
        body = self._expect(CMD_DONE)
        status, ticks, hz, peak, errors = struct.unpack_from("<iQQII", body)
        message = body[struct.calcsize("<iQQII"):].decode(errors="replace")
        return RunResult(status, ticks, hz, peak, errors, message)

    def counters(self) -> dict[str, dict[str, int]]:
        """The accelerator drivers' counters: {accelerator: {counter: value}}."""
        self.device.write(encode_frame(CMD_COUNTERS))
        text = self._expect(CMD_COUNTERS_TEXT).decode("ascii", errors="replace")
        out: dict[str, dict[str, int]] = {}
        for line in text.splitlines():
            parts = line.split(" ")
            if len(parts) == 3 and parts[2].isdigit():
                out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
        return out

    def profile(self) -> list[int]:
        """The timer at each mark of the last run (point 0 before the first call, point k
        after call k); a firmware built without profiling answers with an error."""
        ticks: list[int] = []
        while True:
            self.device.write(encode_frame(CMD_PROFILE + struct.pack("<I", len(ticks))))
            body = self._expect(CMD_PROFILE_DATA)
            marked, first = struct.unpack_from("<II", body)
            values = body[8:]
            if first != len(ticks) or len(values) % 8 or (not values and first < marked):
                raise DeviceError("the device's profile reply is malformed")
            ticks += [v for (v,) in struct.iter_unpack("<Q", values)]
            if len(ticks) >= marked:
                return ticks[:marked]

    def get_output(self, index: int, size: int) -> bytes:
        parts = []
        for offset in range(0, size, OUTPUT_CHUNK):
            count = min(OUTPUT_CHUNK, size - offset)
            self.device.write(encode_frame(CMD_OUTPUT + struct.pack("<BII", index, offset, count)))
            data = self._expect(CMD_OUTPUT_DATA)
            if len(data) != count:
                raise DeviceError(f"device sent {len(data)} bytes of output {index}, "
                                  f"expected {count}")
            parts.append(data)
        return b"".join(parts)

    def quit(self, status: int = 0) -> None:
        self.device.write(encode_frame(CMD_QUIT + struct.pack("<i", status)))
