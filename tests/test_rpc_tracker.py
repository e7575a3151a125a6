"""TrackerRegistrar against the stock TVM 0.27 RPC tracker (`python -m tvm.exec.rpc_tracker`).

The test plays the client through its own raw-socket tracker connection, so these tests
check the registrar against the real tracker, not against our own reading of the protocol.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import generator.rpc.tracker as tracker_module
from generator.errors import InputError, MtgError
from generator.rpc.tracker import (
    TRACKER_MAGIC,
    TrackerError,
    TrackerRegistrar,
    parse_tracker_address,
)

HOST = "127.0.0.1"
POLL = 0.2
BRIDGE_PORT = 9091  # never dialled: the tracker only hands the number to clients
_I32 = struct.Struct("<i")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class RawTrackerClient:
    """The client side of the tracker protocol, written out by hand."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.sendall(_I32.pack(TRACKER_MAGIC))
        assert _I32.unpack(self._recv(4))[0] == TRACKER_MAGIC

    def _recv(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("tracker closed the connection")
            data += chunk
        return data

    def call(self, message: list[object]) -> object:
        body = json.dumps(message).encode()
        self.sock.sendall(_I32.pack(len(body)) + body)
        return json.loads(self._recv(_I32.unpack(self._recv(4))[0]))

    def summary(self) -> dict:
        code, summary = self.call([6])
        assert code == 0
        return summary

    def request(self, key: str) -> tuple[str, int, str]:
        code, (addr, port, matchkey) = self.call([4, key, "", 1])
        assert code == 0
        return addr, port, matchkey

    def close(self) -> None:
        self.sock.close()


@dataclass
class StockTracker:
    port: int
    proc: subprocess.Popen


def _start_tracker(port: int, log: Path) -> StockTracker:
    with log.open("ab") as out:
        # A session of its own: the tracker forks a popen_worker that must die with it.
        proc = subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", HOST,
             "--port", str(port), "--port-end", str(port + 1)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"rpc_tracker exited with {proc.returncode}:\n{log.read_text()}")
        try:
            RawTrackerClient(port, timeout=1.0).close()
            return StockTracker(port, proc)
        except OSError:
            time.sleep(0.05)
    _stop_tracker(StockTracker(port, proc))
    pytest.fail(f"rpc_tracker did not listen on {HOST}:{port}:\n{log.read_text()}")


def _stop_tracker(tracker: StockTracker) -> None:
    if tracker.proc.poll() is None:
        os.killpg(tracker.proc.pid, signal.SIGTERM)
        try:
            tracker.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(tracker.proc.pid, signal.SIGKILL)
            tracker.proc.wait(5)
    try:  # the popen_worker child shares the process group
        os.killpg(tracker.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def tracker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockTracker]:
    pytest.importorskip("tvm", reason="the stock RPC tracker is part of apache-tvm")
    pytest.importorskip("tornado", reason="tvm.exec.rpc_tracker needs tornado "
                                          "(pip install tornado)")
    pytest.importorskip("cloudpickle", reason="tvm.exec.rpc_tracker needs cloudpickle "
                                              "(pip install cloudpickle)")
    log = tmp_path_factory.mktemp("tracker") / "rpc_tracker.log"
    started = _start_tracker(_free_port(), log)
    yield started
    _stop_tracker(started)


@pytest.fixture
def client(tracker: StockTracker) -> Iterator[RawTrackerClient]:
    conn = RawTrackerClient(tracker.port)
    yield conn
    conn.close()


@pytest.fixture
def registrars() -> Iterator[list[TrackerRegistrar]]:
    made: list[TrackerRegistrar] = []
    yield made
    for registrar in made:
        registrar.stop()


def _registrar(made: list[TrackerRegistrar], port: int, key: str, **kwargs) -> TrackerRegistrar:
    registrar = TrackerRegistrar(HOST, port, key, BRIDGE_PORT, poll_interval=POLL, **kwargs)
    made.append(registrar)
    return registrar


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _free(client: RawTrackerClient, key: str) -> int:
    return client.summary()["queue_info"].get(key, {}).get("free", 0)


def test_registers_one_free_offer(tracker, client, registrars):
    events: list[str] = []
    registrar = _registrar(registrars, tracker.port, "reg-one", on_event=events.append)
    registrar.start()
    summary = client.summary()
    assert summary["queue_info"]["reg-one"] == {"free": 1, "pending": 0}
    assert {"key": "server:reg-one", "addr": [HOST, BRIDGE_PORT]} in summary["server_info"]
    assert registrar.matchkey is not None and registrar.matchkey.startswith("reg-one:")
    assert any("registered" in event for event in events)
    # Idle polling keeps exactly one offer, it does not pile up new ones.
    time.sleep(3 * POLL)
    assert client.summary()["queue_info"]["reg-one"] == {"free": 1, "pending": 0}
    # stop() closes the connection and the tracker withdraws the offer.
    registrar.stop()
    assert _wait_for(lambda: _free(client, "reg-one") == 0)


@pytest.mark.parametrize("custom_addr", [None, "10.1.2.3"])
def test_two_sessions_in_a_row(tracker, client, registrars, custom_addr):
    key = f"sessions-{custom_addr or 'default'}"
    registrar = _registrar(registrars, tracker.port, key, custom_addr=custom_addr)
    registrar.start()
    seen: list[str] = []
    for _ in range(2):
        addr, port, matchkey = client.request(key)
        assert (addr, port) == (custom_addr or HOST, BRIDGE_PORT)
        assert matchkey.startswith(f"{key}:") and matchkey not in seen
        seen.append(matchkey)
        registrar.session_started()
        # During the session nothing is offered, however many polls go by.
        time.sleep(3 * POLL)
        assert _free(client, key) == 0
        registrar.session_ended()
        assert _wait_for(lambda: _free(client, key) == 1, timeout=2.0)
    assert registrar.matchkey not in seen


def test_taken_but_unused_matchkey_is_replaced(tracker, client, registrars):
    events: list[str] = []
    registrar = _registrar(registrars, tracker.port, "unclaimed", on_event=events.append)
    registrar.start()
    _, _, first = client.request("unclaimed")
    started = time.monotonic()
    # No session follows; the REQUEST below waits in the tracker until a fresh offer comes.
    _, _, second = client.request("unclaimed")
    assert time.monotonic() - started < 10 * POLL
    assert second != first and second.startswith("unclaimed:")
    assert any(first in event and "never connected" in event for event in events)


def test_reconnects_after_the_tracker_restarts(tmp_path, registrars, monkeypatch):
    pytest.importorskip("tornado", reason="tvm.exec.rpc_tracker needs tornado")
    # The doubling pause capped at 1 s, not BACKOFF_MAX: the test waits for the new tracker
    # (5 s of importing TVM), not for the pause after it.
    monkeypatch.setattr(tracker_module, "BACKOFF_MAX", 1.0)
    port = _free_port()
    first = _start_tracker(port, tmp_path / "first.log")
    events: list[str] = []
    try:
        registrar = _registrar(registrars, port, "phoenix", on_event=events.append)
        registrar.start()
    finally:
        _stop_tracker(first)
    assert _wait_for(lambda: any("lost the connection" in e for e in events), timeout=3.0)
    second = _start_tracker(port, tmp_path / "second.log")
    try:
        # The registrar retries with a doubling pause: however long the new tracker took to
        # start (a busy machine), the next try comes within the cap.
        assert _wait_for(lambda: any("reconnected" in e for e in events), timeout=6.0)
        conn = RawTrackerClient(port)
        try:
            assert conn.summary()["queue_info"]["phoenix"] == {"free": 1, "pending": 0}
        finally:
            conn.close()
    finally:
        registrar.stop()
        _stop_tracker(second)
    assert all("\n" not in event for event in events)


def test_no_tracker_is_a_fast_one_line_error():
    registrar = TrackerRegistrar(HOST, _free_port(), "nobody", BRIDGE_PORT)
    started = time.monotonic()
    with pytest.raises(TrackerError) as info:
        registrar.start()
    assert time.monotonic() - started < 2.0
    assert isinstance(info.value, MtgError)
    message = info.value.one_line()
    assert "\n" not in str(info.value) and "cannot reach the RPC tracker" in message
    assert f"{HOST}:" in message


def _fake_peer(reply: bytes | None) -> tuple[int, threading.Thread, socket.socket]:
    """A listener that accepts once and sends *reply* (None: stays silent until closed)."""
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            if reply is not None:
                conn.sendall(reply)
            conn.settimeout(3.0)
            try:
                conn.recv(64)
                conn.recv(64)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, listener


@pytest.mark.parametrize("reply, words", [
    (struct.pack("<i", 0x000FF271), "answered magic 0xff271"),
    (None, "did not answer the tracker handshake within 0.5 s"),
])
def test_not_a_tracker_is_a_one_line_error(reply, words):
    port, thread, listener = _fake_peer(reply)
    try:
        started = time.monotonic()
        with pytest.raises(TrackerError) as info:
            TrackerRegistrar(HOST, port, "k", BRIDGE_PORT).start(timeout=0.5)
        assert time.monotonic() - started < 2.0
        assert words in str(info.value) and "\n" not in str(info.value)
    finally:
        listener.close()
        thread.join(5)


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9190", ("127.0.0.1", 9190)),
    ("localhost:1", ("localhost", 1)),
    (" tracker.lan:65535 ", ("tracker.lan", 65535)),
    ("[::1]:9190", ("::1", 9190)),
])
def test_parse_tracker_address_good(text, expected):
    assert parse_tracker_address(text) == expected


@pytest.mark.parametrize("text", [
    "", "9190", ":9190", "host:", "host:port", "host:0", "host:65536", "host:-1",
    "::1:9190", "[]:9190", "my host:9190", "host:91 90",
])
def test_parse_tracker_address_bad(text):
    with pytest.raises(InputError) as info:
        parse_tracker_address(text)
    assert "--tracker" in str(info.value) and "\n" not in info.value.one_line()
