"""TVM 0.27 RPC packets: codes, value encoding, and a small request builder.

The bridge needs only `exception_packet` and the header fields; the rest encodes the
requests a stock client sends, for tests and benchmarks that talk to the device without
TCP (docs/host-driven.md has the wire layout).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from generator.errors import DeviceError
from generator.mlf.dtypes import dlpack_type_code, dtype_bits

# RPC codes
SHUTDOWN = 1
INIT_SERVER = 2
CALL_FUNC = 3
RETURN = 4
EXCEPTION = 5
COPY_FROM_REMOTE = 6
COPY_TO_REMOTE = 7
COPY_ACK = 8
GET_GLOBAL_FUNC = 9
FREE_HANDLE = 10
DEV_GET_ATTR = 12
DEV_FREE_DATA = 14
DEV_STREAM_SYNC = 15
DEV_ALLOC_DATA_WITH_SCOPE = 17

# tvm-ffi type indices
T_NONE, T_INT, T_BOOL, T_FLOAT, T_PTR, T_DTYPE, T_DEVICE, T_DLTENSOR, T_RAW_STR = range(9)
T_BYTE_ARRAY = 9
T_BYTES = 66
T_FUNCTION = 68
T_MODULE = 73

PROTOCOL_VERSION = b"0.8.0"
PREFIX = struct.Struct("<Q")


def packet(code: int, body: bytes = b"") -> bytes:
    return PREFIX.pack(len(body) + 4) + struct.pack("<i", code) + body


def packet_code(data: bytes) -> int:
    return struct.unpack_from("<i", data, PREFIX.size)[0]


def exception_packet(message: str) -> bytes:
    text = message.encode()
    return packet(EXCEPTION, struct.pack("<iiQ", 1, T_RAW_STR, len(text)) + text)


@dataclass(frozen=True)
class Handle:
    """An OpaquePtr, Module or Function handle as it goes on the wire."""

    value: int
    type_index: int = T_PTR


@dataclass(frozen=True)
class Tensor:
    """A DLTensor header: data handle, shape, dtype (cpu(0), compact)."""

    data: int
    shape: tuple[int, ...]
    dtype: str = "float32"
    byte_offset: int = 0

    def encode(self) -> bytes:
        return (struct.pack("<QiiiBBH", self.data, 1, 0, len(self.shape),
                            dlpack_type_code(self.dtype), dtype_bits(self.dtype), 1)
                + b"".join(struct.pack("<q", d) for d in self.shape)
                + struct.pack("<Q", self.byte_offset))


def encode_value(value) -> bytes:
    if value is None:
        return struct.pack("<i", T_NONE)
    if isinstance(value, bool):
        return struct.pack("<iq", T_BOOL, int(value))
    if isinstance(value, int):
        return struct.pack("<iq", T_INT, value)
    if isinstance(value, float):
        return struct.pack("<id", T_FLOAT, value)
    if isinstance(value, str):
        text = value.encode()
        return struct.pack("<iQ", T_RAW_STR, len(text)) + text
    if isinstance(value, Handle):
        return struct.pack("<iQ", value.type_index, value.value)
    if isinstance(value, Tensor):
        return struct.pack("<i", T_DLTENSOR) + value.encode()
    raise TypeError(f"cannot encode {type(value).__name__}")


def encode_args(*values) -> bytes:
    return struct.pack("<i", len(values)) + b"".join(encode_value(v) for v in values)


def decode_return(reply: bytes) -> list:
    """The values of a Return packet; an Exception packet raises DeviceError with its text."""
    (nbytes,) = PREFIX.unpack_from(reply)
    if nbytes != len(reply) - PREFIX.size:
        raise DeviceError(f"reply length field {nbytes} does not match {len(reply)} bytes")
    code = packet_code(reply)
    pos = PREFIX.size + 4
    if code not in (RETURN, EXCEPTION):
        raise DeviceError(f"reply code {code}, expected Return or Exception")
    (count,) = struct.unpack_from("<i", reply, pos)
    pos += 4
    values: list = []
    for _ in range(count):
        (kind,) = struct.unpack_from("<i", reply, pos)
        pos += 4
        if kind == T_NONE:
            values.append(None)
        elif kind in (T_INT, T_BOOL):
            values.append(struct.unpack_from("<q", reply, pos)[0])
            pos += 8
        elif kind == T_FLOAT:
            values.append(struct.unpack_from("<d", reply, pos)[0])
            pos += 8
        elif kind == T_PTR:
            values.append(Handle(struct.unpack_from("<Q", reply, pos)[0]))
            pos += 8
        elif kind in (T_RAW_STR, T_BYTE_ARRAY):
            (n,) = struct.unpack_from("<Q", reply, pos)
            raw = reply[pos + 8:pos + 8 + n]
            values.append(raw.decode(errors="replace") if kind == T_RAW_STR else raw)
            pos += 8 + n
        else:
            raise DeviceError(f"reply value of type index {kind} not understood")
    if pos != len(reply):
        raise DeviceError("reply has bytes after its values")
    if code == EXCEPTION:
        raise DeviceError(f"device: {values[0] if values else '(no message)'}")
    return values


# cpu(0) as a Device value: i32 device_type 1, i32 device_id 0 (one little-endian u64).
CPU = Handle(1, T_DEVICE)


class Requests:
    """Builds the packets of the stock client's requests (names follow the client calls)."""

    @staticmethod
    def init_server() -> bytes:
        return packet(INIT_SERVER, struct.pack("<Q", len(PROTOCOL_VERSION)) + PROTOCOL_VERSION
                      + encode_args())

    @staticmethod
    def get_global(name: str) -> bytes:
        return packet(GET_GLOBAL_FUNC, encode_args(name))

    @staticmethod
    def call(handle: int, *args) -> bytes:
        return packet(CALL_FUNC, struct.pack("<Q", handle) + encode_args(*args))

    @staticmethod
    def alloc(shape: tuple[int, ...], dtype: str = "float32") -> bytes:
        return packet(DEV_ALLOC_DATA_WITH_SCOPE, encode_args(Tensor(0, shape, dtype), None))

    @staticmethod
    def copy_to(tensor: Tensor, data: bytes) -> bytes:
        return packet(COPY_TO_REMOTE, tensor.encode() + struct.pack("<Q", len(data)) + data)

    @staticmethod
    def copy_from(tensor: Tensor, nbytes: int) -> bytes:
        return packet(COPY_FROM_REMOTE, tensor.encode() + struct.pack("<Q", nbytes))

    @staticmethod
    def free_data(data: int) -> bytes:
        return packet(DEV_FREE_DATA, encode_args(CPU, Handle(data)))

    @staticmethod
    def free_handle(handle: int) -> bytes:
        return packet(FREE_HANDLE, encode_args(Handle(handle)))

    @staticmethod
    def shutdown() -> bytes:
        return packet(SHUTDOWN)


class PacketClient:
    """The requests of a stock client at the packet level, over a link Session (no TCP)."""

    def __init__(self, session) -> None:
        self.session = session

    def ask(self, packet: bytes) -> list:
        return decode_return(self.session.request(packet))

    def setup(self, function: str) -> dict[str, int]:
        """InitServer, system_lib() and get_function(function): the handles, by role."""
        self.ask(Requests.init_server())
        syslib = self.ask(Requests.get_global("ffi.SystemLib"))[0].value
        module = self.ask(Requests.call(syslib))[1].value
        getter = self.ask(Requests.get_global("tvm.rpc.server.ModuleGetFunction"))[0].value
        found = self.ask(Requests.call(getter, Handle(module, T_MODULE), function, True))
        if found[0] != T_FUNCTION:
            raise DeviceError(f"the device's system library has no '{function}'")
        return {"module": module, "getter": getter, function: found[1].value}

    def tensor(self, shape: tuple[int, ...], dtype: str = "float32") -> Tensor:
        return Tensor(self.ask(Requests.alloc(shape, dtype))[0].value, shape, dtype)

    def upload(self, t: Tensor, data: bytes) -> None:
        self.ask(Requests.copy_to(t, data))

    def download(self, t: Tensor, nbytes: int) -> bytes:
        reply = self.session.request(Requests.copy_from(t, nbytes))
        if packet_code(reply) != COPY_ACK:
            decode_return(reply)  # raises with the device's message
            raise DeviceError(f"device answered a copy with code {packet_code(reply)}")
        return reply[PREFIX.size + 4:]
