"""Handle epochs: the bridge tags every handle it passes to a client with the current epoch.

The device names its objects with small constants and tensor addresses, and after a restart
it hands out the same values again: an old tensor handle would reach a new tensor. The
device cannot know it restarted (it forgot everything), but the bridge does. So the bridge
keeps an epoch, a number in 1..MAX_EPOCH that moves on whenever the device's RPC state is
dropped (a new device session after a restart or a link failure, a new client, InitServer),
and rewrites the handles in both directions:

- replies: every non-zero OpaquePtr value v becomes v | epoch << EPOCH_SHIFT;
- requests: every handle field (CallFunc's function, OpaquePtr / Function / Module /
  RPC object arguments, the data field of a tensor header) must carry the current epoch,
  which is stripped before the packet goes to the device. A field with another epoch (or
  none) makes the request stale: the bridge answers it without the device (an exception,
  or void for a free of something that no longer exists).

Device handles must fit in EPOCH_SHIFT bits (32-bit devices; a 64-bit host process's
addresses use 47). A packet the bridge cannot parse goes to the device as it is, whose own
checks reject it; an untranslated tagged handle never matches a device handle.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from generator.rpc import packets

EPOCH_SHIFT = 48
MAX_EPOCH = (1 << (64 - EPOCH_SHIFT)) - 1
DEVICE_MASK = (1 << EPOCH_SHIFT) - 1
MAX_NDIM = 64  # a larger ndim is not a tensor header the bridge walks past (the device: 6)
_U64 = struct.Struct("<Q")
_I32 = struct.Struct("<i")

HANDLE_TYPES = (packets.T_PTR, packets.T_FUNCTION, packets.T_MODULE)
FREE_CODES = (packets.FREE_HANDLE, packets.DEV_FREE_DATA)
SCALAR_TYPES = (packets.T_INT, packets.T_BOOL, packets.T_FLOAT, packets.T_DTYPE,
                packets.T_DEVICE)
T_SMALL_STR, T_SMALL_BYTES, T_OBJECT_FIRST, T_STR, T_RPC_OBJECT = 11, 12, 64, 65, 115


class Unparsed(Exception):
    """The packet does not decode as the protocol says (internal)."""


@dataclass
class Stale:
    """A request that names a handle of an earlier epoch; `reply` answers it."""

    reply: bytes
    handle: int


@dataclass
class _Fields:
    """Offsets of the handle fields of one packet."""

    offsets: list[int] = field(default_factory=list)


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> int:
        if n < 0 or self.pos + n > len(self.data):
            raise Unparsed()
        at = self.pos
        self.pos += n
        return at

    def i32(self) -> int:
        return _I32.unpack_from(self.data, self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack_from(self.data, self.take(8))[0]


def _tensor_header(r: _Reader, fields: _Fields) -> None:
    fields.offsets.append(r.take(8))  # data
    r.take(8)  # device
    ndim = r.i32()
    if not 0 <= ndim <= MAX_NDIM:
        raise Unparsed()
    r.take(4 + 8 * ndim + 8)  # dtype, shape, byte_offset


def _value(r: _Reader, fields: _Fields) -> None:
    kind = r.i32()
    if kind in (T_SMALL_STR, T_SMALL_BYTES) or (kind >= T_OBJECT_FIRST and kind not in
                                                (packets.T_FUNCTION, packets.T_MODULE)):
        inner = r.i32()
        if inner in (T_STR, packets.T_BYTES):
            r.take(r.u64())
        elif inner == T_RPC_OBJECT:
            fields.offsets.append(r.take(8))
        else:
            raise Unparsed()
    elif kind == packets.T_NONE:
        pass
    elif kind in HANDLE_TYPES:
        fields.offsets.append(r.take(8))
    elif kind in SCALAR_TYPES:
        r.take(8)
    elif kind == packets.T_DLTENSOR:
        _tensor_header(r, fields)
    elif kind in (packets.T_RAW_STR, packets.T_BYTE_ARRAY):
        r.take(r.u64())
    else:
        raise Unparsed()


def _args(r: _Reader, fields: _Fields) -> None:
    count = r.i32()
    if count < 0:
        raise Unparsed()
    for _ in range(count):
        _value(r, fields)
    if r.pos != len(r.data):
        raise Unparsed()


def request_handle_fields(packet: bytes) -> list[int]:
    """Byte offsets of the handle fields of a request packet; Unparsed if it is malformed."""
    r = _Reader(packet, packets.PREFIX.size)
    code = r.i32()
    fields = _Fields()
    if code in (packets.SHUTDOWN, packets.INIT_SERVER):
        return []
    if code == packets.CALL_FUNC:
        fields.offsets.append(r.take(8))
        _args(r, fields)
    elif code in (packets.COPY_FROM_REMOTE, packets.COPY_TO_REMOTE):
        _tensor_header(r, fields)
    elif code >= packets.GET_GLOBAL_FUNC:
        _args(r, fields)
    else:
        raise Unparsed()
    return fields.offsets


def reply_handle_fields(reply: bytes) -> list[int]:
    """Byte offsets of the OpaquePtr values of a Return packet (none for other replies)."""
    r = _Reader(reply, packets.PREFIX.size)
    if r.i32() != packets.RETURN:
        return []
    fields = _Fields()
    count = r.i32()
    for _ in range(max(count, 0)):
        kind = r.i32()
        if kind == packets.T_PTR:
            fields.offsets.append(r.take(8))
        elif kind in (packets.T_INT, packets.T_BOOL, packets.T_FLOAT):
            r.take(8)
        elif kind in (packets.T_RAW_STR, packets.T_BYTE_ARRAY):
            r.take(r.u64())
        elif kind != packets.T_NONE:
            raise Unparsed()
    return fields.offsets


class HandleEpochs:
    """The bridge's epoch and the rewriting of handles in both directions."""

    def __init__(self) -> None:
        self.epoch = 1
        # The last packet rewritten each way, with its epoch and result: a timing loop
        # sends the same call again and again, and gets the same reply.
        self._last: dict[str, tuple[int, bytes, object]] = {}

    def advance(self) -> None:
        """The device's RPC state was dropped: every handle given out so far is stale."""
        self.epoch = self.epoch % MAX_EPOCH + 1

    def to_device(self, packet: bytes) -> bytes | Stale:
        """The request with device handles, or Stale when it names an old handle."""
        return self._remembered("request", packet, self._to_device)

    def to_client(self, reply: bytes) -> bytes:
        """The reply with every non-zero OpaquePtr tagged with the current epoch."""
        return self._remembered("reply", reply, self._to_client)

    def _remembered(self, way: str, packet: bytes, rewrite):
        """`rewrite(packet)`, or what it gave for the same packet last time in this epoch."""
        last = self._last.get(way)
        if last is not None and last[0] == self.epoch and last[1] == packet:
            return last[2]
        result = rewrite(packet)
        self._last[way] = (self.epoch, packet, result)
        return result

    def _to_device(self, packet: bytes) -> bytes | Stale:
        try:
            offsets = request_handle_fields(packet)
        except (Unparsed, struct.error):
            return packet
        if not offsets:
            return packet
        out = bytearray(packet)
        for at in offsets:
            (value,) = _U64.unpack_from(out, at)
            if value == 0:
                continue
            if value >> EPOCH_SHIFT != self.epoch:
                return Stale(self._stale_reply(packet, value), value)
            _U64.pack_into(out, at, value & DEVICE_MASK)
        return bytes(out)

    def _to_client(self, reply: bytes) -> bytes:
        try:
            offsets = reply_handle_fields(reply)
        except (Unparsed, struct.error):
            return reply
        if not offsets:
            return reply
        out = bytearray(reply)
        for at in offsets:
            (value,) = _U64.unpack_from(out, at)
            if value == 0:
                continue
            if value > DEVICE_MASK:
                return packets.exception_packet(
                    f"the device returned handle {value:#x}, wider than {EPOCH_SHIFT} bits; "
                    "the bridge cannot tag it with its epoch")
            _U64.pack_into(out, at, value | self.epoch << EPOCH_SHIFT)
        return bytes(out)

    def _stale_reply(self, packet: bytes, value: int) -> bytes:
        if packets.packet_code(packet) in FREE_CODES:
            return packets.packet(packets.RETURN, packets.encode_args(None))  # already gone
        return packets.exception_packet(
            f"stale handle {value:#x}: it belongs to an earlier device session (the device "
            "restarted, or another client's session ended); its object no longer exists")
