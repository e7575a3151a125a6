"""microTVM-compatible framing (same bytes as templates/common/src/framing.c).

A frame is FF FD, u32 LE payload length, payload, u16 LE CRC-16/CCITT-FALSE; every FF in
length, payload and CRC is doubled. The CRC covers the wire bytes from FF FD through the
escaped payload. Outside a frame a receiver skips everything up to FF FD.
"""

from __future__ import annotations

import binascii
import struct
from collections.abc import Iterator

from generator import abi

ESC = abi.constant("MTVG_FRAME_ESC")
NOP = abi.constant("MTVG_FRAME_NOP")
START = abi.constant("MTVG_FRAME_START")
MAX_PAYLOAD = 1 << 20  # the host accepts larger frames than a device would send


def crc16_ccitt(data: bytes, crc: int = 0xFFFF) -> int:
    """CRC-16/CCITT-FALSE (poly 0x1021, MSB first, no reflection): binascii's CRC-CCITT."""
    return binascii.crc_hqx(data, crc)


def _escape(data: bytes) -> bytes:
    return data.replace(b"\xff", b"\xff\xff")


def encode_frame(payload: bytes, leading_nop: bool = False) -> bytes:
    body = bytes([ESC, START]) + _escape(struct.pack("<I", len(payload)) + payload)
    crc = crc16_ccitt(body)
    return (b"\xfe" if leading_nop else b"") + body + _escape(struct.pack("<H", crc))


class Unframer:
    """Feed it bytes; it yields the payloads of intact frames and counts damaged ones."""

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self.errors = 0
        self._in_frame = False
        self._saw_esc = False
        self._wire_crc = 0xFFFF
        self._logical = bytearray()  # length + payload + crc, unescaped
        self._crc_at_payload_end: int | None = None

    def _start(self) -> None:
        self._in_frame = True
        self._saw_esc = False
        self._wire_crc = crc16_ccitt(bytes([ESC, START]))
        self._logical.clear()
        self._crc_at_payload_end = None

    def _need(self) -> int | None:
        if len(self._logical) < 4:
            return None
        return 4 + struct.unpack_from("<I", self._logical)[0] + 2

    def feed(self, data: bytes) -> Iterator[bytes]:
        whole = self._whole_frame(data)
        if whole is not None:
            yield whole
            return
        i = 0
        n = len(data)
        while i < n:
            if not self._in_frame:
                byte = data[i]
                i += 1
                if self._saw_esc and byte == START:
                    self._start()
                else:
                    self._saw_esc = byte == ESC
                continue
            if self._saw_esc:
                byte = data[i]
                i += 1
                self._saw_esc = False
                if byte == ESC:
                    yield from self._take(b"\xff", b"\xff\xff")
                elif byte == START:
                    self.errors += 1
                    self._start()
                elif byte != NOP:
                    self.errors += 1
                    self._in_frame = False
                continue
            if data[i] == ESC:
                self._saw_esc = True
                i += 1
                continue
            # A run of plain bytes, up to the next escape or the end of the CRC-covered part.
            end = data.find(b"\xff", i)
            end = n if end < 0 else end
            end = min(end, i + self._room())
            run = data[i:end]
            i = end
            yield from self._take(run, run)

    def _whole_frame(self, data: bytes) -> bytes | None:
        """The payload when `data` is exactly one intact frame without a doubled FF (a
        reply that came in one read), found without the byte-wise path; else None."""
        if self._in_frame or self._saw_esc or len(data) < 8 or data[0] != ESC or \
                data[1] != START or data.find(b"\xff", 2) >= 0:
            return None
        length = struct.unpack_from("<I", data, 2)[0]
        if len(data) != 8 + length or length > self.max_payload:
            return None
        if struct.unpack_from("<H", data, 6 + length)[0] != crc16_ccitt(data[:6 + length]):
            return None  # the byte-wise path counts the error
        return data[6:6 + length]

    def frame_bytes_left(self) -> int:
        """Bytes (unescaped) still to come of the frame being received; 0 if none or unknown."""
        need = self._need() if self._in_frame else None
        return 0 if need is None else need - len(self._logical)

    def _room(self) -> int:
        """Bytes the frame takes before its next boundary (length, CRC start, end)."""
        need = self._need()
        have = len(self._logical)
        if need is None:
            return 4 - have
        return need - 2 - have if have < need - 2 else need - have

    def _take(self, logical: bytes, wire: bytes) -> Iterator[bytes]:
        need = self._need()
        if need is None or len(self._logical) < need - 2:
            self._wire_crc = crc16_ccitt(wire, self._wire_crc)
        self._logical += logical
        need = self._need()
        if need is not None and need - 6 > self.max_payload:
            self.errors += 1
            self._in_frame = False
            return
        if need is not None and len(self._logical) == need:
            self._in_frame = False
            got = struct.unpack_from("<H", self._logical, need - 2)[0]
            if got != self._wire_crc:
                self.errors += 1
                return
            yield bytes(self._logical[4:need - 2])
