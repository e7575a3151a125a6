"""The host link of host-driven mode: session bytes, the device's RPC server, link faults.

Device tests run the real firmware of a host-driven project (host board, ASan + UBSan)
and talk to it through generator.link.session at the packet level, without TCP.
"""

from __future__ import annotations

import random
import struct
import time
import zlib

import numpy as np
import pytest

from generator.device.runner import Device
from generator.errors import DeviceError
from generator.link.framing import crc16_ccitt
from generator.link.session import (
    MSG_LOG,
    MSG_START_REPLY,
    MSG_TERMINATE,
    DeviceReset,
    LinkTimeout,
    Session,
    SessionTimeouts,
    encode_message,
    next_nonce,
)
from generator.rpc import packets
from generator.rpc.packets import Handle, PacketClient, Requests, Tensor, decode_return
from tests.conftest import host_driven_project

H = bytes.fromhex
MAX_PAYLOAD = 4096  # HOST_DRIVEN_MAX_PAYLOAD


# ---- Session bytes (test vectors of microtvm-v018-facts.md §4.4) ----------------------------


def test_crc_check_values():
    assert crc16_ccitt(b"123456789") == 0x29B1
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the device's CRC-32 is zlib's


@pytest.mark.parametrize("nonce,after", [(0x01, 0x21), (0x5A, 0x43), (0xFF, 0xE8), (0x80, 0x05)])
def test_nonce_steps(nonce, after):
    assert next_nonce(nonce) == after


@pytest.mark.parametrize("sid,kind,body,nop,wire", [
    (0, MSG_TERMINATE, b"", True, "FE FF FD 03 00 00 00 00 00 02 66 77"),
    (0x5A, 0x00, b"\x01", False, "FF FD 04 00 00 00 5A 00 00 01 BB C4"),
    (0x335A, MSG_START_REPLY, b"\x01", False, "FF FD 04 00 00 00 5A 33 01 01 7F 6B"),
    (0, MSG_LOG, b"hi", False, "FF FD 05 00 00 00 00 00 03 68 69 1A 8F"),
    (0x335A, 0x10, b"\xff\x01", False, "FF FD 05 00 00 00 5A 33 10 FF FF 01 73 B1"),
    (0x335A, 0x10, H("0400000000000000 01000000"), False,
     "FF FD 0F 00 00 00 5A 33 10 04 00 00 00 00 00 00 00 01 00 00 00 17 74"),
])
def test_session_message_bytes(sid, kind, body, nop, wire):
    assert encode_message(sid, kind, body, leading_nop=nop) == H(wire.replace(" ", ""))


def test_rpc_packet_bytes_match_the_capture():
    # kGetGlobalFunc "ffi.SystemLib" and the void return, as captured (protocol digest §5.2).
    assert Requests.get_global("ffi.SystemLib") == H(
        "2100000000000000 09000000 01000000 08000000 0d00000000000000 6666692e53797374656d4c6962"
        .replace(" ", ""))
    assert packets.exception_packet("x")[:12] == H("1500000000000000 05000000".replace(" ", ""))


# ---- The device -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def device_elf(operators_archive, tmp_path_factory):
    project = host_driven_project(operators_archive, "host",
                                  tmp_path_factory.mktemp("hd") / "proj", sanitize=True)
    return project / "build" / "firmware.elf"


def open_session(elf, logs=None, timeouts=None) -> tuple[Device, Session]:
    device = Device([str(elf)], "rpc firmware")
    session = Session(device, timeouts or SessionTimeouts(start=10, reply=10),
                      on_log=(logs.append if logs is not None else None), max_payload=MAX_PAYLOAD,
                      seed=1)
    session.start()
    return device, session


def test_device_boots_with_terminate_and_log(device_elf):
    banner = encode_message(0, MSG_LOG, b"rpc server: 3 functions, 262144 bytes of tensor memory")
    with Device([str(device_elf)], "rpc firmware") as device:
        data = b""
        deadline = time.monotonic() + 10
        while banner not in data and time.monotonic() < deadline:
            data += device.read(0.5)
    assert data.startswith(H("FEFFFD0300000000000266 77".replace(" ", "")))
    assert banner in data


def test_session_start_reply_bytes(device_elf):
    with Device([str(device_elf)], "rpc firmware") as device:
        device.write(encode_message(0x5A, 0x00, b"\x01"))
        data = b""
        want = encode_message(0x5A | (next_nonce(0x5A) << 8), MSG_START_REPLY, b"\x01")
        deadline = time.monotonic() + 10
        while want not in data and time.monotonic() < deadline:
            data += device.read(0.5)
        assert want in data


def test_plain_normal_messages_get_normal_replies(device_elf):
    """microTVM's Normal message type still works (no seq, no CRC-32)."""
    device, session = open_session(device_elf)
    with device:
        device.write(encode_message(session.session_id, 0x10, Requests.init_server()))
        got = b""
        void = H("0c00000000000000040000000100000000000000")
        want = encode_message(session.session_id, 0x10, void)
        deadline = time.monotonic() + 10
        while want not in got and time.monotonic() < deadline:
            got += device.read(0.5)
        assert want in got


def test_vadd_through_the_session(device_elf):
    logs: list[str] = []
    device, session = open_session(device_elf, logs)
    with device:
        client = PacketClient(session)
        handles = client.setup("vadd")
        a, b = np.arange(256, dtype="float32"), np.full(256, 0.5, dtype="float32")
        ta, tb, tc = client.tensor((256,)), client.tensor((256,)), client.tensor((256,))
        client.upload(ta, a.tobytes())
        client.upload(tb, b.tobytes())
        assert client.ask(Requests.call(handles["vadd"], ta, tb, tc)) == [0, None]
        out = np.frombuffer(client.download(tc, 1024), dtype="float32")
        np.testing.assert_array_equal(out, a + b)
        assert ta.data % 64 == 0 and tb.data % 64 == 0  # TVM's CPU alignment
    assert logs == ["rpc server: 3 functions, 262144 bytes of tensor memory"]


def _malformed(h: dict[str, int], t: Tensor) -> list[tuple[bytes, str]]:
    call = packets.CALL_FUNC
    return [
        (H("0500000000000000 09000000".replace(" ", "")), "length field"),  # nbytes says 5, has 4
        (packets.packet(99), "code 99 is not supported"),
        (packets.packet(packets.RETURN, packets.encode_args()), "is a reply"),
        (packets.packet(call, struct.pack("<Q", h["vadd"]) + struct.pack("<i", 3)), "malformed"),
        (packets.packet(call, struct.pack("<Qi", h["vadd"], -1)), "malformed"),
        (packets.packet(call, struct.pack("<Qii", h["vadd"], 1, 42)), "malformed"),
        (packets.packet(call, struct.pack("<QiiQ", h["vadd"], 1, 8, 1 << 60)), "malformed"),
        (packets.packet(call, struct.pack("<Qi", h["vadd"], 100)), "MTVG_RPC_MAX_ARGS"),
        (Requests.call(0x7777), "no function with this handle"),
        (Requests.call(h["vadd"], t, t), "expects 3"),
        (Requests.call(h["vadd"], Tensor(t.data + 64, (256,)), t, t), "not a live tensor"),
        (Requests.call(h["vadd"], Tensor(t.data, (300,)), t, t), "outside the tensor"),
        (Requests.call(h["vadd"], Tensor(t.data, (1 << 40, 1 << 40)), t, t), "negative or too"),
        (Requests.call(h["vadd"], 1.5, "x", None), "is not a tensor"),
        (Requests.get_global(""), None),
        (packets.packet(packets.GET_GLOBAL_FUNC, packets.encode_args(3)), "malformed"),
        (Requests.alloc((1 << 20, 1 << 20)), "larger than MTVG_RPC_POOL_BYTES"),
        (Requests.alloc((65400,)), "out of device tensor memory"),
        (packets.packet(packets.DEV_ALLOC_DATA_WITH_SCOPE,
                        packets.encode_args(Tensor(0, (4,)), "texture")), "memory scopes"),
        (packets.packet(packets.DEV_ALLOC_DATA_WITH_SCOPE, struct.pack("<ii", 1, 7)
                        + struct.pack("<QiiiBBH", 0, 1, 0, 100, 2, 32, 1)), "dimensions"),
        (Requests.copy_to(Tensor(t.data, (256,), byte_offset=1020), b"x" * 20), "outside"),
        (Requests.copy_to(Tensor(12345, (1,)), b"x"), "not a live tensor"),
        (Requests.copy_to(t, b"xy")[:-1], "malformed"),
        (Requests.copy_from(Tensor(t.data, (256,), byte_offset=1025), 1), "outside"),
        (Requests.free_data(999), "no tensor at this address"),
        (packets.packet(packets.INIT_SERVER, struct.pack("<Q", 5) + b"0.9.0"
                        + packets.encode_args()), "protocol 0.8.0"),
        (packets.packet(16, packets.encode_args()), "not supported"),
    ]


def test_malformed_packets_get_exceptions_and_the_stream_stays_in_sync(device_elf):
    device, session = open_session(device_elf)
    with device:
        client = PacketClient(session)
        h = client.setup("vadd")
        t = client.tensor((256,))
        for packet, message in _malformed(h, t):
            reply = session.request(packet)
            if message is None:  # an unknown global is "not found", not an error
                assert decode_return(reply) == [Handle(0)]
                continue
            with pytest.raises(DeviceError, match=message):
                decode_return(reply)
        # Still in sync, and nothing leaked: the pool takes a full-size tensor again.
        assert client.ask(Requests.call(h["vadd"], t, t, t)) == [0, None]
        assert client.ask(Requests.free_data(t.data)) == [None]
        big = client.tensor((65536,))  # the whole 256 KiB pool
        assert client.ask(Requests.free_data(big.data)) == [None]


def test_time_evaluator_and_timer_limits(device_elf):
    device, session = open_session(device_elf)
    with device:
        client = PacketClient(session)
        h = client.setup("vadd")
        t = client.tensor((256,))
        factory = client.ask(Requests.get_global("runtime.RPCTimeEvaluator"))[0].value
        mod = Handle(h["module"], packets.T_MODULE)
        timer = client.ask(Requests.call(factory, mod, "vadd", 1, 0, 10, 3, 0, 100, 0, 1, 0, ""))
        assert timer[0] == packets.T_FUNCTION
        blob = client.ask(Requests.call(timer[1].value, t, t, t))[1]
        times = struct.unpack("<3d", blob)
        assert all(x > 0 for x in times)
        # min_repeat_ms makes each measurement last at least that long.
        timer2 = client.ask(Requests.call(factory, mod, "vadd", 1, 0, 1, 1, 20, 100, 0, 1, 0, ""))
        start = time.monotonic()
        (per_call,) = struct.unpack("<d", client.ask(Requests.call(timer2[1].value, t, t, t))[1])
        assert time.monotonic() - start >= 0.02 and per_call > 0
        with pytest.raises(DeviceError, match="f_preproc"):
            client.ask(Requests.call(factory, mod, "vadd", 1, 0, 1, 1, 0, 100, 0, 1, 0, "pre"))
        with pytest.raises(DeviceError, match="no such function"):
            client.ask(Requests.call(factory, mod, "nope", 1, 0, 1, 1, 0, 100, 0, 1, 0, ""))
        assert client.ask(Requests.free_handle(timer[1].value)) == [None]
        with pytest.raises(DeviceError, match="no function with this handle"):
            client.ask(Requests.call(timer[1].value, t, t, t))


def test_max_packet_size_is_reported(device_elf):
    device, session = open_session(device_elf)
    with device:
        client = PacketClient(session)
        client.setup("vadd")
        h = client.ask(Requests.get_global("tvm.rpc.server.GetCRTMaxPacketSize"))[0].value
        assert client.ask(Requests.call(h)) == [packets.T_INT, session.max_packet - 8]


# ---- Link faults ------------------------------------------------------------------------


FAULT_KINDS = ("flip", "drop", "duplicate", "swap")


class FaultyLink:
    """A device link that damages bytes both ways and power-cycles the device on request.

    Faults land at seeded positions in each direction's byte stream (one per `spacing`
    bytes on average), so a run does not depend on how reads happen to be chunked.
    """

    def __init__(self, elf, seed: int, spacing: int) -> None:
        self.elf = elf
        self.rng = random.Random(seed)
        self.spacing = spacing
        self.counts = dict.fromkeys((*FAULT_KINDS, "reset"), 0)
        self.device = Device([str(elf)], "faulty rpc firmware")
        self.description = "faulty link"
        self._until = {"out": self._gap(), "in": self._gap()}

    def _gap(self) -> int:
        return self.rng.randrange(1, 2 * self.spacing)

    @property
    def faults(self) -> int:
        return sum(self.counts.values())

    def _damage(self, data: bytes, direction: str) -> bytes:
        out = bytearray(data)
        pos = self._until[direction]
        while pos < len(out):
            kind = self.rng.choice(FAULT_KINDS)
            if kind == "flip":
                out[pos] ^= 1 << self.rng.randrange(8)
            elif kind == "drop":
                del out[pos]
            elif kind == "duplicate":
                out.insert(pos, out[pos])
            elif pos + 1 < len(out) and out[pos] != out[pos + 1]:
                out[pos], out[pos + 1] = out[pos + 1], out[pos]
            else:
                out[pos] ^= 0x10  # nothing to swap with: damage the byte instead
            self.counts[kind] += 1
            pos += self._gap()
        self._until[direction] = pos - len(out)
        return bytes(out)

    def write(self, data: bytes) -> None:
        self.device.write(self._damage(data, "out"))

    def read(self, timeout: float) -> bytes:
        return self._damage(self.device.read(timeout), "in")

    def power_cycle(self) -> None:
        self.device.close()
        self.device = Device([str(self.elf)], "faulty rpc firmware")
        self.counts["reset"] += 1

    def close(self, hung: bool = False) -> None:
        self.device.close(hung)


FAULTS_WANTED = 10_000


def test_link_faults_are_detected_and_recovered(device_elf):
    """≥10,000 bit flips, drops, duplicates, swaps and resets: every result is right or a
    clear error, within the deadline; no damaged tensor is ever accepted."""
    link = FaultyLink(device_elf, seed=20261121, spacing=1500)
    deadline = 3.0
    timeouts = SessionTimeouts(start=deadline, start_retry=0.05, reply=deadline,
                               retransmit=0.002, retransmit_max=0.02,
                               initial_bytes_per_second=1e7)  # a pipe, not a UART
    rng = np.random.default_rng(7)
    session = None
    client = None
    ok = errors = 0
    slowest = 0.0
    messages: set[str] = set()
    try:
        iteration = 0
        while link.faults < FAULTS_WANTED:
            iteration += 1
            if iteration % 150 == 0:
                link.power_cycle()
            started = time.monotonic()
            try:
                if client is None:
                    session = Session(link, timeouts, max_payload=MAX_PAYLOAD, seed=iteration)
                    session.start()
                    client = PacketClient(session)
                    handles = client.setup("vadd")
                    ta, tb, tc = (client.tensor((256,)) for _ in range(3))
                a = rng.standard_normal(256).astype("float32")
                b = rng.standard_normal(256).astype("float32")
                client.upload(ta, a.tobytes())
                client.upload(tb, b.tobytes())
                assert client.ask(Requests.call(handles["vadd"], ta, tb, tc)) == [0, None]
                out = np.frombuffer(client.download(tc, 1024), dtype="float32")
                np.testing.assert_array_equal(out, a + b)  # never a damaged tensor
                ok += 1
            except (DeviceReset, LinkTimeout) as exc:
                errors += 1
                messages.add(type(exc).__name__)
                assert "\n" not in exc.one_line()
                client = None
            slowest = max(slowest, time.monotonic() - started)
    finally:
        link.close()
    stats = session.stats if session else None
    print(f"\nfaults {link.counts} (total {link.faults}); iterations ok {ok}, reported {errors} "
          f"{sorted(messages)}; slowest iteration {slowest:.2f} s; last session {stats}")
    assert link.faults >= FAULTS_WANTED
    assert ok > 0.9 * (ok + errors)
    # Every iteration ends within its requests' deadlines (setup + 4 requests, 3 s each).
    assert slowest < 9 * deadline
    assert link.counts["reset"] >= 10 and errors >= link.counts["reset"] * 0.5


# ---- Handle epochs (the bridge's rewriting, generator/rpc/handles.py) ----------------------


def test_handles_carry_the_epoch_both_ways():
    from generator.rpc.handles import EPOCH_SHIFT, HandleEpochs, Stale

    epochs = HandleEpochs()
    tag = epochs.epoch << EPOCH_SHIFT
    device_reply = H("1400000000000000 04000000 01000000 04000000 0000002000000000"
                     .replace(" ", ""))  # AllocWithScope -> OpaquePtr 0x20000000
    assert decode_return(epochs.to_client(device_reply)) == [Handle(0x20000000 | tag)]
    not_found = packets.packet(packets.RETURN, packets.encode_args(Handle(0)))
    assert epochs.to_client(not_found) == not_found  # handle 0 stays 0
    t = Tensor(0x20000000 | tag, (4,))
    assert epochs.to_device(Requests.copy_to(t, b"x" * 16)) == \
        Requests.copy_to(Tensor(0x20000000, (4,)), b"x" * 16)
    assert epochs.to_device(Requests.call(0x30000 | tag, t, 1.5, "s", None)) == \
        Requests.call(0x30000, Tensor(0x20000000, (4,)), 1.5, "s", None)
    epochs.advance()  # the device restarted
    stale = epochs.to_device(Requests.copy_from(t, 16))
    assert isinstance(stale, Stale) and stale.handle == t.data
    with pytest.raises(DeviceError, match="stale handle"):
        decode_return(stale.reply)
    for request in (Requests.call(0x30000 | tag, *[Tensor(t.data, (4,))] * 3),
                    Requests.copy_to(Tensor(0x20000000, (4,)), b"x" * 16)):  # untagged too
        assert isinstance(epochs.to_device(request), Stale)
    freed = epochs.to_device(Requests.free_data(t.data))
    assert isinstance(freed, Stale) and decode_return(freed.reply) == [None]
    assert epochs.to_device(Requests.init_server()) == Requests.init_server()
    junk = packets.packet(packets.CALL_FUNC, b"\x01\x02")
    assert epochs.to_device(junk) == junk  # the device's own checks refuse it


def test_a_repeated_packet_reuses_its_rewriting_within_one_epoch_only():
    from generator.rpc.handles import EPOCH_SHIFT, HandleEpochs, Stale

    epochs = HandleEpochs()
    call = Requests.call(0x30000 | epochs.epoch << EPOCH_SHIFT, Tensor(
        0x20000000 | epochs.epoch << EPOCH_SHIFT, (4,)))
    first = epochs.to_device(call)
    assert epochs.to_device(call) is first  # the memo
    assert first == Requests.call(0x30000, Tensor(0x20000000, (4,)))
    reply = packets.packet(packets.RETURN, packets.encode_args(Handle(0x20000040)))
    assert decode_return(epochs.to_client(reply)) == [Handle(0x20000040 | 1 << EPOCH_SHIFT)]
    epochs.advance()
    assert isinstance(epochs.to_device(call), Stale)  # the same bytes, a new epoch
    assert decode_return(epochs.to_client(reply)) == [Handle(0x20000040 | 2 << EPOCH_SHIFT)]


def test_epochs_wrap_without_zero():
    from generator.rpc.handles import MAX_EPOCH, HandleEpochs

    epochs = HandleEpochs()
    epochs.epoch = MAX_EPOCH
    epochs.advance()
    assert epochs.epoch == 1
