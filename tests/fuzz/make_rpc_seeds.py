"""Write the seed corpus of the fuzz_rpc harness (tests/fuzz/corpus/rpc/).

Run from the repository root:

    python tests/fuzz/make_rpc_seeds.py [--traces DIR] [--out DIR]

DIR defaults to $MTVG_RPC_TRACES, else /work/shared/rpc-trace/traces.

Seed format (see tests/fuzz/fuzz_rpc.c): one byte selecting the reply capacity
(cap = 64 * (1 + (byte & 7))), then records of u16 LE length + one RPC packet. Data handles
are written as tokens 0x20000000 + k, which the harness replaces by the address of the k-th
allocation of the input.

Two kinds of seeds:
  trace_*  the client->server packets of the `mini_syslib` and `mini_chunked` captures of the
           stock TVM 0.27 client (DIR/<scenario>/c2s.bin, split with packets.json; the
           handshake records are dropped). The captured server's handles are mapped to ours
           (rpc_server.c): globals 0x10001..0x10004, module 0x20001, kernels 0x30000 + index in
           fuzz_rpc.c's library, timers 0x40000 + slot, data handles to tokens. The mapping is
           learnt from the server->client replies of the same capture.
  syn_*    hand-written sessions for paths the captures do not reach (other kernels, value
           kinds, DevAllocData, time_evaluator options, limits, stale handles, bad packets).
Without the captures (DIR missing), only the syn_* seeds are written.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "tests" / "fuzz" / "corpus" / "rpc"
DEFAULT_TRACES = Path(os.environ.get("MTVG_RPC_TRACES", "/work/shared/rpc-trace/traces"))
TRACES = {"mini_syslib": 512, "mini_chunked": 128}  # scenario -> reply capacity of its seed

# Handles of templates/common/src/rpc_server.c.
H_SYSTEM_LIB = 0x10001
H_MODULE_GET_FUNCTION = 0x10002
H_TIME_EVALUATOR = 0x10003
H_MAX_PACKET_SIZE = 0x10004
H_MODULE = 0x20001
H_KERNEL_BASE = 0x30000
H_TIMER_BASE = 0x40000
TOKEN_BASE = 0x20000000
GLOBALS = {
    "ffi.SystemLib": H_SYSTEM_LIB,
    "tvm.rpc.server.ModuleGetFunction": H_MODULE_GET_FUNCTION,
    "runtime.RPCTimeEvaluator": H_TIME_EVALUATOR,
    "tvm.rpc.server.GetCRTMaxPacketSize": H_MAX_PACKET_SIZE,
}
FUNCTIONS = ["vadd", "fail", "echo", "mute"]  # fuzz_rpc.c's system library, in order
VADD, FAIL, ECHO, MUTE = (H_KERNEL_BASE + i for i in range(len(FUNCTIONS)))

# RPC codes and wire type indices (docs: tvm027-rpc-protocol.md §2.2, §3.1).
SHUTDOWN, INIT, CALL, RETURN, EXCEPTION, COPY_FROM, COPY_TO, COPY_ACK = range(1, 9)
GET_GLOBAL, FREE_HANDLE, SET_DEVICE, GET_ATTR, ALLOC, FREE_DATA, STREAM_SYNC = range(9, 16)
COPY_AMONG, ALLOC_SCOPE, CREATE_STREAM, FREE_STREAM, SET_STREAM, GET_STREAM = range(16, 22)
T_NONE, T_INT, T_BOOL, T_FLOAT, T_PTR, T_DTYPE, T_DEVICE, T_DLTENSOR = range(8)
T_RAW_STR, T_BYTE_ARRAY, T_SMALL_STR, T_SMALL_BYTES = 8, 9, 11, 12
T_STR, T_BYTES, T_FUNCTION, T_MODULE, T_RPC_OBJECT = 65, 66, 68, 73, 115
FLOAT32 = (2, 32, 1)

# ---- Encoding --------------------------------------------------------------------------------


def u64(v: int) -> bytes:
    return struct.pack("<Q", v & 0xFFFF_FFFF_FFFF_FFFF)


def i32(v: int) -> bytes:
    return struct.pack("<i", v)


def packet(code: int, body: bytes = b"") -> bytes:
    return u64(4 + len(body)) + i32(code) + body


def seq(*values: bytes) -> bytes:
    return i32(len(values)) + b"".join(values)


def v_none() -> bytes:
    return i32(T_NONE)


def v_int(v: int, kind: int = T_INT) -> bytes:
    return i32(kind) + u64(v)


def v_float(x: float) -> bytes:
    return i32(T_FLOAT) + struct.pack("<d", x)


def v_ptr(h: int) -> bytes:
    return i32(T_PTR) + u64(h)


def v_str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return i32(T_RAW_STR) + u64(len(b)) + b


def v_object(outer: int, inner: int, payload: bytes) -> bytes:
    return i32(outer) + i32(inner) + payload


def v_device(dev_type: int = 1, dev_id: int = 0) -> bytes:
    return i32(T_DEVICE) + i32(dev_type) + i32(dev_id)


def v_dtype(code: int, bits: int, lanes: int) -> bytes:
    return i32(T_DTYPE) + struct.pack("<BBH", code, bits, lanes) + i32(0)


def header(data: int, shape: tuple[int, ...], dtype=FLOAT32, offset: int = 0,
           dev: tuple[int, int] = (1, 0)) -> bytes:
    return (u64(data) + i32(dev[0]) + i32(dev[1]) + i32(len(shape))
            + struct.pack("<BBH", *dtype) + b"".join(u64(d) for d in shape) + u64(offset))


def v_tensor(data: int, shape: tuple[int, ...], dtype=FLOAT32, offset: int = 0) -> bytes:
    return i32(T_DLTENSOR) + header(data, shape, dtype, offset)


def tok(k: int) -> int:
    return TOKEN_BASE + k


INIT_PACKET = packet(INIT, u64(5) + b"0.8.0" + seq())
SHUTDOWN_PACKET = packet(SHUTDOWN)


def get_global(name: str) -> bytes:
    return packet(GET_GLOBAL, seq(v_str(name)))


def call(handle: int, *args: bytes) -> bytes:
    return packet(CALL, u64(handle) + seq(*args))


def get_function(name: str) -> bytes:
    return call(H_MODULE_GET_FUNCTION, i32(T_MODULE) + u64(H_MODULE), v_str(name),
                v_int(1, T_BOOL))


def alloc(shape: tuple[int, ...], dtype=FLOAT32, scope: bytes | None = None) -> bytes:
    return packet(ALLOC_SCOPE, seq(v_tensor(0, shape, dtype), scope or v_none()))


def alloc_data(nbytes: int, align: int = 64) -> bytes:
    return packet(ALLOC, seq(v_device(), v_int(nbytes), v_int(align), v_dtype(*FLOAT32)))


def free_data(data: int) -> bytes:
    return packet(FREE_DATA, seq(v_device(), v_ptr(data)))


def free_handle(h: int) -> bytes:
    return packet(FREE_HANDLE, seq(v_ptr(h)))


def copy_to(data: int, shape: tuple[int, ...], payload: bytes, offset: int = 0,
            dtype=FLOAT32) -> bytes:
    return packet(COPY_TO, header(data, shape, dtype, offset) + u64(len(payload)) + payload)


def copy_from(data: int, shape: tuple[int, ...], nbytes: int, offset: int = 0,
              dtype=FLOAT32) -> bytes:
    return packet(COPY_FROM, header(data, shape, dtype, offset) + u64(nbytes))


def time_evaluator(name: str, number: int = 1, repeat: int = 1, min_repeat_ms: int = 0,
                   limit_zero: int = 100, cooldown_ms: int = 0, repeats_to_cooldown: int = 1,
                   cache_flush: int = 0, preproc: str = "") -> bytes:
    ints = [1, 0, number, repeat, min_repeat_ms, limit_zero, cooldown_ms, repeats_to_cooldown,
            cache_flush]
    return call(H_TIME_EVALUATOR, i32(T_MODULE) + u64(H_MODULE), v_str(name),
                *(v_int(v) for v in ints), v_str(preproc))


def floats(*xs: float) -> bytes:
    return struct.pack(f"<{len(xs)}f", *xs)


def seed(cap: int, packets: list[bytes]) -> bytes:
    assert cap % 64 == 0 and 64 <= cap <= 512
    out = bytearray([cap // 64 - 1])
    for p in packets:
        assert len(p) <= 0xFFFF
        out += struct.pack("<H", len(p)) + p
    return bytes(out)


# ---- Hand-written sessions ---------------------------------------------------------------------


def _three_tensors(n: int = 4) -> list[bytes]:
    """Allocations 0, 1, 2: float32[n] each, a and b filled."""
    return [alloc((n,)), alloc((n,)), alloc((n,)),
            copy_to(tok(0), (n,), floats(*range(n))), copy_to(tok(1), (n,), floats(*[0.5] * n))]


def synthetic_seeds() -> dict[str, bytes]:
    start = [INIT_PACKET, get_global("ffi.SystemLib"), call(H_SYSTEM_LIB),
             get_global("tvm.rpc.server.ModuleGetFunction")]
    t = (4,)
    seeds = {
        "syn_kernels": start + [
            get_function("vadd"), get_function("fail"), get_function("echo"),
            get_function("mute"), get_function("nope"), get_function("vad"), *_three_tensors(),
            call(VADD, v_tensor(tok(0), t), v_tensor(tok(1), t), v_tensor(tok(2), t)),
            copy_from(tok(2), t, 16),
            call(VADD, v_tensor(tok(0), t), v_tensor(tok(1), t)),
            call(VADD, v_tensor(tok(0), t), v_tensor(tok(1), t), v_int(3)),
            call(VADD, v_tensor(tok(0), t), v_tensor(tok(1), (2, 2)), v_tensor(tok(2), t)),
            call(VADD, v_tensor(tok(0), t), v_tensor(tok(1), (3,)), v_tensor(tok(2), t)),
            call(VADD, v_tensor(tok(0), (2,), offset=8), v_tensor(tok(1), (2,), offset=4),
                 v_tensor(tok(2), (2,), offset=8)),
            call(VADD, v_tensor(tok(0), (1,), offset=2), v_tensor(tok(1), (1,)),
                 v_tensor(tok(2), (1,))),
            call(VADD, v_tensor(tok(0), (2,), offset=12), v_tensor(tok(1), (2,)),
                 v_tensor(tok(2), (2,))),
            call(VADD, v_tensor(tok(0), t, (0, 32, 1)), v_tensor(tok(1), t, (0, 32, 1)),
                 v_tensor(tok(2), t, (0, 32, 1))),
            call(FAIL), call(FAIL, v_tensor(tok(0), t)), call(MUTE),
            call(ECHO, v_int(-7)), call(ECHO, v_float(-1.5)), call(ECHO, v_int(1, T_BOOL)),
            call(ECHO, v_none()), call(ECHO, v_str("hi"), v_str(""), v_tensor(tok(1), t)),
            call(ECHO, v_object(T_SMALL_STR, T_STR, u64(2) + b"ab")),
            call(ECHO, v_object(T_SMALL_BYTES, T_BYTES, u64(2) + b"xy")),
            call(ECHO, v_object(T_RPC_OBJECT, T_RPC_OBJECT, u64(0x1234))),
            call(ECHO, v_dtype(*FLOAT32)), call(ECHO, v_device()), call(ECHO, v_ptr(0)),
            call(ECHO, v_str("x" * 70)),
            call(ECHO, *(v_int(i) for i in range(13))),
            call(ECHO, v_tensor(tok(0), (1, 1, 1, 1, 1))),
            call(ECHO, v_tensor(tok(0), (-1,))),
            call(H_KERNEL_BASE + len(FUNCTIONS)), call(0x12345),
            free_handle(VADD), free_handle(FAIL), free_handle(ECHO), free_handle(H_MODULE),
            SHUTDOWN_PACKET,
        ],
        "syn_timers": start + [
            get_global("runtime.RPCTimeEvaluator"), *_three_tensors(8),
            time_evaluator("vadd", number=2, repeat=8, min_repeat_ms=1, cooldown_ms=3,
                           repeats_to_cooldown=2),
            call(H_TIMER_BASE, *(v_tensor(tok(k), (8,)) for k in range(3))),
            time_evaluator("echo", number=1, repeat=2, min_repeat_ms=5, limit_zero=4),
            call(H_TIMER_BASE + 1, v_int(1)),
            time_evaluator("fail"),
            free_handle(H_TIMER_BASE + 1),
            time_evaluator("fail"),
            call(H_TIMER_BASE + 1),
            free_handle(H_TIMER_BASE + 1),
            call(H_TIMER_BASE + 1),
            time_evaluator("nope"),
            time_evaluator("vadd", repeat=9),
            time_evaluator("vadd", cache_flush=1),
            time_evaluator("vadd", preproc="cache_flush_cpu_non_first_arg"),
            time_evaluator("vadd", number=0, repeat=0),
            call(H_TIMER_BASE + 1, *(v_tensor(tok(k), (8,)) for k in range(3))),
            call(H_TIME_EVALUATOR, v_none(), v_str("vadd")),
            free_handle(H_TIMER_BASE + 1),
            time_evaluator("echo", number=1 << 30, repeat=1),
            call(H_TIMER_BASE + 1, v_int(1)),
            free_handle(H_TIMER_BASE),
            call(H_TIMER_BASE, *(v_tensor(tok(k), (8,)) for k in range(3))),
        ],
        "syn_memory": [
            INIT_PACKET,
            alloc_data(100), alloc_data(0, 1), alloc_data(10, 3), alloc_data(-1),
            alloc((0,)), alloc((2, 3), (1, 8, 1)), alloc((3,), (1, 1, 1)), alloc((4,), (2, 32, 0)),
            alloc((1024,)), alloc((5000,), (1, 8, 1)), alloc((-1,)),
            alloc((4,), scope=v_str("global")), alloc((4,), scope=v_str("texture")),
            packet(ALLOC_SCOPE, seq(i32(T_DLTENSOR) + header(0, (4,), dev=(2, 0)), v_none())),
            copy_to(tok(0), (25,), bytes(range(100))),
            copy_to(tok(0), (25,), bytes(range(36)), offset=64),
            copy_to(tok(0), (25,), bytes(range(37)), offset=64),
            copy_to(tok(0), (25,), b"", offset=100),
            copy_from(tok(0), (25,), 36, offset=64),
            copy_from(tok(0), (25,), 1, offset=100),
            copy_from(tok(0), (25,), 100),
            copy_to(tok(1), (1,), b"\x01"),
            free_data(tok(0)), free_data(tok(0)), copy_from(tok(0), (25,), 4),
            free_data(0x1234), alloc_data(100),
            *(alloc_data(1) for _ in range(8)),
            packet(GET_ATTR, seq(v_device(), v_int(0))),
            packet(GET_ATTR, seq(v_device(), v_int(14))),
            packet(GET_ATTR, seq(v_device(), v_int(5))),
            INIT_PACKET, copy_from(tok(1), (1,), 1), alloc((4,)),
            SHUTDOWN_PACKET, alloc((4,)), free_data(tok(2)),
        ],
        "syn_misc": [
            packet(INIT, u64(5) + b"0.7.0" + seq()),
            packet(INIT, u64(5) + b"0.8.0" + seq(v_str("rpc.PopenSession"))),
            INIT_PACKET,
            get_global("tvm.rpc.server.GetCRTMaxPacketSize"), call(H_MAX_PACKET_SIZE),
            get_global("tvm.rpc.server.upload"), get_global("runtime.SystemLib"),
            packet(GET_GLOBAL, seq(v_object(T_STR, T_STR, u64(13) + b"ffi.SystemLib"))),
            packet(SET_DEVICE, seq(v_device())), packet(STREAM_SYNC, seq(v_device(), v_ptr(0))),
            packet(CREATE_STREAM, seq(v_device())), packet(GET_STREAM, seq(v_device())),
            packet(FREE_STREAM, seq(v_device(), v_ptr(0))),
            packet(SET_STREAM, seq(v_device(), v_ptr(0))),
            packet(COPY_AMONG, seq()), packet(22, seq()), packet(1000, seq()),
            packet(0), packet(RETURN, seq(v_none())), packet(EXCEPTION), packet(COPY_ACK),
            packet(-3), u64(100) + i32(GET_GLOBAL), b"\x04\x00\x00", b"",
            packet(GET_GLOBAL, seq(v_str("ffi.SystemLib")) + b"\x00"),
            packet(GET_GLOBAL, seq(i32(10))), packet(GET_GLOBAL, i32(-1)),
            packet(CALL, u64(H_SYSTEM_LIB) + i32(13)),
            packet(FREE_HANDLE, seq(v_int(5))),
            get_global("ffi.SystemLib")[:-3],
            SHUTDOWN_PACKET + b"\x00", SHUTDOWN_PACKET,
        ],
    }
    out = {f"{name}.bin": seed(512, packets) for name, packets in seeds.items()}
    out["syn_kernels_cap64.bin"] = seed(64, seeds["syn_kernels"])
    out["syn_timers_cap64.bin"] = seed(64, seeds["syn_timers"])
    return out


# ---- Captures ----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise ValueError("truncated packet")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def i32(self) -> int:
        return struct.unpack("<i", self.take(4))[0]


def _values(r: _Reader, handle_at: list[int]) -> list[tuple[int, object]]:
    """A packed sequence as (type, value); offsets of handle and data fields go to handle_at."""
    out: list[tuple[int, object]] = []
    for _ in range(r.i32()):
        t = r.i32()
        if t in (T_SMALL_STR, T_SMALL_BYTES) or (t >= 64 and t not in (T_FUNCTION, T_MODULE)):
            inner = r.i32()
            if inner == T_RPC_OBJECT:
                handle_at.append(r.pos)
                out.append((T_RPC_OBJECT, r.u64()))
            elif inner in (T_STR, T_BYTES):
                out.append((T_RAW_STR if inner == T_STR else T_BYTE_ARRAY, r.take(r.u64())))
            else:
                raise ValueError(f"object form with inner type {inner}")
        elif t in (T_PTR, T_FUNCTION, T_MODULE):
            handle_at.append(r.pos)
            out.append((t, r.u64()))
        elif t in (T_INT, T_BOOL, T_FLOAT, T_DTYPE, T_DEVICE):
            out.append((t, r.u64() if t in (T_INT, T_BOOL) else r.take(8)))
        elif t == T_DLTENSOR:
            out.append((t, _header(r, handle_at)))
        elif t in (T_RAW_STR, T_BYTE_ARRAY):
            out.append((t, r.take(r.u64())))
        elif t == T_NONE:
            out.append((t, None))
        else:
            raise ValueError(f"type index {t}")
    return out


def _header(r: _Reader, handle_at: list[int]) -> int:
    handle_at.append(r.pos)
    data = r.u64()
    r.take(8)
    ndim = r.i32()
    r.take(4 + 8 * ndim + 8)
    return data


def _exchanges(trace: Path) -> list[tuple[bytes, bytes | None]]:
    """(client packet, server reply or None) pairs, in order, without the handshake."""
    stream = (trace / "c2s.bin").read_bytes()
    records = json.loads((trace / "packets.json").read_text())
    out: list[tuple[bytes, bytes | None]] = []
    for rec in records:
        if rec["kind"] != "packet":
            continue
        if rec["dir"] == "C->S":
            data = stream[rec["stream_offset"]:rec["stream_offset"] + rec["nbytes"]]
            assert data.hex() == rec["hex"], f"{trace}: packet {rec['index']} differs"
            out.append((data, None))
        else:
            assert out and out[-1][1] is None, f"{trace}: reply {rec['index']} without request"
            out[-1] = (out[-1][0], bytes.fromhex(rec["hex"]))
    return out


def _reply_values(reply: bytes | None) -> list[tuple[int, object]]:
    if reply is None or struct.unpack_from("<i", reply, 8)[0] != RETURN:
        return []
    return _values(_Reader(reply, 12), [])


def rewrite_trace(trace: Path) -> list[bytes]:
    """The capture's client packets with the captured server's handles replaced by ours."""
    mapping: dict[int, int] = {0: 0}
    timers: list[int] = []  # captured handle of each live timer slot (0 = free)
    allocations = 0
    packets = []
    for request, reply in _exchanges(trace):
        r = _Reader(request, 8)
        code = r.i32()
        handle_at: list[int] = []
        args: list[tuple[int, object]] = []
        func = None
        if code == CALL:
            handle_at.append(r.pos)
            func = mapping.get(r.u64())
            args = _values(r, handle_at)
        elif code in (COPY_FROM, COPY_TO):
            _header(r, handle_at)
        elif code == INIT:
            r.take(r.u64())
            _values(r, handle_at)
        elif code >= GET_GLOBAL:
            args = _values(r, handle_at)
        result = _reply_values(reply)
        returned = result[-1][1] if result and result[-1][0] == T_PTR else 0
        if code == GET_GLOBAL and returned:
            mapping[returned] = GLOBALS.get(args[0][1].decode(), 0)
        elif code == CALL and func == H_SYSTEM_LIB:
            mapping[returned] = H_MODULE
        elif code == CALL and func == H_MODULE_GET_FUNCTION and returned:
            mapping[returned] = H_KERNEL_BASE + FUNCTIONS.index(args[1][1].decode())
        elif code == CALL and func == H_TIME_EVALUATOR and returned:
            slot = timers.index(0) if 0 in timers else len(timers)
            timers[slot:slot + 1] = [returned]
            mapping[returned] = H_TIMER_BASE + slot
        elif code in (ALLOC, ALLOC_SCOPE) and returned:
            mapping[returned] = TOKEN_BASE + allocations
            allocations += 1
        elif code == FREE_HANDLE and args[0][1] in timers:
            timers[timers.index(args[0][1])] = 0
        out = bytearray(request)
        for at in handle_at:
            old = struct.unpack_from("<Q", request, at)[0]
            if old not in mapping:
                raise ValueError(f"{trace}: handle {old:#x} at {at} of {request.hex()} unknown")
            struct.pack_into("<Q", out, at, mapping[old])
        packets.append(bytes(out))
    return packets


def trace_seeds(traces: Path) -> dict[str, bytes]:
    out = {}
    for name, cap in TRACES.items():
        packets = rewrite_trace(traces / name)
        out[f"trace_{name}.bin"] = seed(cap, packets)
        out[f"trace_{name}_cap64.bin"] = seed(64, packets)
    return out


def all_seeds(traces: Path, warn: Callable[[str], None] = print) -> dict[str, bytes]:
    seeds = synthetic_seeds()
    if all((traces / name / "c2s.bin").is_file() for name in TRACES):
        seeds.update(trace_seeds(traces))
    else:
        warn(f"{traces}: captures not found, writing only the syn_* seeds")
    return seeds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES,
                        help=f"directory of the rpc-trace scenarios (default {DEFAULT_TRACES})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="where the seeds go (default tests/fuzz/corpus/rpc)")
    opts = parser.parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    for name, data in sorted(all_seeds(opts.traces).items()):
        (opts.out / name).write_bytes(data)
        print(f"wrote {opts.out / name} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
