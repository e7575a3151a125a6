"""Direct clients (the host board's `serve` fast path): serve's side of the protocol in
generator/device/direct_clients.py against the C header, and where serve finds the client's
stream after the firmware died in each phase (a real socket pair stands in for the client).

The whole path, firmware and stock client, runs in tests/test_serve_trust.py and
tests/test_host_driven.py; the speed is benchmarks/host_driven.py's table."""

from __future__ import annotations

import re
import socket
import struct

import pytest

from generator.device import direct_clients as dc
from tests.conftest import REPO

HEADER = REPO / "templates" / "common" / "platform" / "posix" / "direct_client.h"
SOURCE = REPO / "templates" / "common" / "platform" / "posix" / "direct_client.c"


def _defines() -> dict[str, str]:
    return dict(re.findall(r"^#define (\w+) (.+?)(?:\s*/\*.*)?$", HEADER.read_text(), re.M))


def test_constants_match_the_header():
    d = _defines()
    assert d["MTVG_DIRECT_FD_ENV"] == f'"{dc.DIRECT_FD_ENV}"'
    assert d["DIRECT_HELLO"] == f"'{dc.HELLO.decode()}'"
    assert d["DIRECT_HANDOVER"] == f"'{dc.HANDOVER_TAG.decode()}'"
    assert int(d["DIRECT_HANDOVER_BYTES"].rstrip("u")) == dc.HANDOVER.size
    assert int(d["DIRECT_STATE_BYTES"].rstrip("u")) == dc.STATE_BYTES >= dc.STATE.size
    assert d["DIRECT_MAX_CLIENT_PACKET"] == "(1ull << 28)" and dc.MAX_CLIENT_PACKET == 1 << 28
    phases = {name: int(d[f"DIRECT_PHASE_{name}"].rstrip("u"))
              for name in ("PREFIX", "BODY", "ANSWER", "REPLY")}
    assert phases == {"PREFIX": dc.PHASE_PREFIX, "BODY": dc.PHASE_BODY,
                      "ANSWER": dc.PHASE_ANSWER, "REPLY": dc.PHASE_REPLY}
    ends = {d[f"DIRECT_END_{name}"].strip("'").encode()
            for name in ("CLOSED", "SHUTDOWN", "IDLE", "NOT_RPC", "REFUSED")}
    assert ends == set(dc.END_REASONS) and len(dc.END_REASONS) == 5


def test_state_layout_matches_the_c_struct():
    """The struct in direct_client.c, field by field, is STATE's format."""
    body = re.search(r"typedef struct \{(.*?)\} direct_state_t;", SOURCE.read_text(), re.S)[1]
    fields = re.findall(r"(uint\d+)_t (\w+)(\[PREFIX_BYTES\])?;", body)
    widths = {"uint32": "I", "uint64": "Q", "uint8": "s"}
    fmt = "<" + "".join("8s" if arr else widths[t] for t, _, arr in fields)
    assert fmt == dc.STATE.format
    assert [f[1] for f in fields] == ["phase", "requests", "packet", "consumed", "written",
                                      "prefix"]


def _state(phase: int, packet: int = 0, consumed: int = 0, written: int = 0,
           prefix: bytes = b"") -> bytes:
    return dc.STATE.pack(phase, 0, packet, consumed, written, prefix.ljust(8, b"\0"))


@pytest.fixture
def client():
    """(what the client sends, how serve reads it): a real socket pair."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)

    def take(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = ours.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    yield theirs, take, ours
    ours.close()
    theirs.close()


def _rest_is(ours: socket.socket, expected: bytes) -> None:
    ours.setblocking(False)
    try:
        assert ours.recv(100) == expected
    except BlockingIOError:
        assert expected == b""


def test_between_packets_nothing_is_owed(client):
    sender, take, ours = client
    sender.sendall(b"next")
    end = dc._where_it_stopped(_state(dc.PHASE_PREFIX), take)
    assert end == dc.DirectEnd(dc.DEVICE_ENDED)
    _rest_is(ours, b"next")  # the client's next packet is left for the bridge


@pytest.mark.parametrize("consumed", [3, 8])
def test_inside_the_length_field_the_rest_is_read_and_owed(client, consumed):
    sender, take, ours = client
    packet = struct.pack("<Q", 12) + bytes(range(12))
    sender.sendall(packet[consumed:] + b"next")
    raw = _state(dc.PHASE_PREFIX, consumed=consumed, prefix=packet[:consumed])
    if consumed == 8:
        raw = _state(dc.PHASE_BODY, packet=20, consumed=8, prefix=packet[:8])
    assert dc._where_it_stopped(raw, take) == dc.DirectEnd(dc.DEVICE_ENDED, owed=True)
    _rest_is(ours, b"next")


def test_inside_the_body_the_rest_is_dropped(client):
    sender, take, ours = client
    sender.sendall(bytes(70_000) + b"next")  # more than one drop chunk
    raw = _state(dc.PHASE_BODY, packet=100_008, consumed=30_008)
    assert dc._where_it_stopped(raw, take).owed
    _rest_is(ours, b"next")


@pytest.mark.parametrize("phase,written,owed,broken", [
    (dc.PHASE_ANSWER, 0, True, False),
    (dc.PHASE_REPLY, 0, True, False),
    (dc.PHASE_REPLY, 5, False, True),  # half a reply on the wire: the stream cannot go on
])
def test_after_the_request(client, phase, written, owed, broken):
    _, take, _ = client
    end = dc._where_it_stopped(_state(phase, packet=20, consumed=20, written=written), take)
    assert (end.owed, end.broken) == (owed, broken)


@pytest.mark.parametrize("raw", [
    _state(dc.PHASE_PREFIX, consumed=9),
    _state(dc.PHASE_BODY, packet=8, consumed=20),
    b"short",
])
def test_a_state_that_cannot_be_is_a_broken_stream(client, raw):
    _, take, _ = client
    assert dc._where_it_stopped(raw, take).broken


def test_a_length_field_beyond_tvm_rpc_is_a_broken_stream(client):
    sender, take, _ = client
    prefix = struct.pack("<Q", dc.MAX_CLIENT_PACKET + 1)
    sender.sendall(prefix[4:])
    raw = _state(dc.PHASE_PREFIX, consumed=4, prefix=prefix[:4])
    assert dc._where_it_stopped(raw, take).broken
