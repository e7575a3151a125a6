"""Host-driven mode end to end: stock tvm.rpc clients drive the device through `serve`.

The firmware runs on the host board (a process) and on qemu-mps2-an385; the client is
TVM 0.27's own `tvm.rpc`, directly (`generator.rpc.connect`) and through a stock tracker.
Every other QEMU board takes one call and one timing through the same stock client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from generator.cli import main
from tests.conftest import (
    BOARDS,
    QEMU_BOARDS,
    REPO,
    YES_NO,
    host_driven_project,
    serve_device_pid,
    serve_server_pid,
    shared_path,
)
from tests.test_rpc_tracker import _free_port, _start_tracker, _stop_tracker

tvm = pytest.importorskip("tvm")


@pytest.fixture(scope="module", params=BOARDS)
def project(request, operators_archive, tmp_path_factory):
    board = request.param
    return host_driven_project(operators_archive, board,
                               tmp_path_factory.mktemp(f"hd-{board}") / "proj")


def conv2d_reference(data: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """NCHW conv2d, stride 1, padding 1."""
    padded = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, h, w = data.shape
    out = np.zeros((n, kernel.shape[0], h, w), dtype=np.float64)
    for dy in range(kernel.shape[2]):
        for dx in range(kernel.shape[3]):
            window = padded[:, :, dy:dy + h, dx:dx + w]
            out += np.einsum("nchw,oc->nohw", window, kernel[:, :, dy, dx])
    return out.astype(np.float32)


def check_operators(remote, rng) -> None:
    """vadd, dense and conv2d on the device equal numpy."""
    dev = remote.cpu(0)
    lib = remote.system_lib()
    a, b = rng.standard_normal(256, dtype=np.float32), rng.standard_normal(256, dtype=np.float32)
    out = tvm.runtime.tensor(np.zeros(256, np.float32), dev)
    lib.get_function("vadd")(tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    np.testing.assert_array_equal(out.numpy(), a + b)

    x, w = rng.standard_normal((4, 64), np.float32), rng.standard_normal((32, 64), np.float32)
    y = tvm.runtime.tensor(np.zeros((4, 32), np.float32), dev)
    lib["dense"](tvm.runtime.tensor(x, dev), tvm.runtime.tensor(w, dev), y)  # w: 8 KiB, chunked
    np.testing.assert_allclose(y.numpy(), x @ w.T, rtol=1e-5, atol=1e-4)

    d, k = rng.standard_normal((1, 3, 16, 16), np.float32), rng.standard_normal((8, 3, 3, 3),
                                                                                 np.float32)
    c = tvm.runtime.tensor(np.zeros((1, 8, 16, 16), np.float32), dev)
    lib["conv2d"](tvm.runtime.tensor(d, dev), tvm.runtime.tensor(k, dev), c)
    np.testing.assert_allclose(c.numpy(), conv2d_reference(d, k), rtol=1e-5, atol=1e-4)


def time_vadd(remote) -> tuple[float, ...]:
    dev = remote.cpu(0)
    lib = remote.system_lib()
    args = [tvm.runtime.tensor(np.ones(256, np.float32), dev) for _ in range(3)]
    return tuple(lib.time_evaluator("vadd", dev, number=10, repeat=3)(*args).results)


def test_stock_client_calls_three_operators(project):
    from generator.rpc import connect

    remote = connect(project)
    check_operators(remote, np.random.default_rng(1))
    lib = remote.system_lib()
    with pytest.raises(AttributeError, match="no function 'nope'"):
        lib["nope"]
    with pytest.raises(tvm.error.RPCError, match="vadd: expects 3 tensor arguments"):
        lib["vadd"](tvm.runtime.tensor(np.ones(256, np.float32), remote.cpu(0)))
    check_operators(remote, np.random.default_rng(2))  # the session goes on after an error
    times = time_vadd(remote)
    assert len(times) == 3 and all(t > 0 for t in times)


@pytest.mark.qemu
def test_qemu_timings_repeat_exactly(project):
    """With -icount, time_evaluator gives the same numbers on every boot."""
    from generator.rpc import connect

    if "qemu" not in str(project):
        pytest.skip("only QEMU has deterministic time")
    first = time_vadd(connect(project))
    second = time_vadd(connect(project))
    assert first == second
    assert len(set(first)) == 1, first  # and within a run, every repeat reads the same


@pytest.mark.qemu
@pytest.mark.parametrize("board", [b for b in QEMU_BOARDS if b not in BOARDS])
def test_one_call_on_every_qemu_board(board, operators_archive, tmp_path_factory):
    """vadd through the stock client equals numpy; its timing repeats exactly (within the
    session: the new boot's repeat is test_qemu_timings_repeat_exactly's, on the reference
    boards; one boot per board here keeps the suite short)."""
    from generator.rpc import connect

    project = host_driven_project(operators_archive, board,
                                  tmp_path_factory.mktemp(f"hd-{board}") / "proj")
    rng = np.random.default_rng(5)
    remote = connect(project)
    dev = remote.cpu(0)
    a, b = rng.standard_normal(256, dtype=np.float32), rng.standard_normal(256, dtype=np.float32)
    out = tvm.runtime.tensor(np.zeros(256, np.float32), dev)
    remote.system_lib().get_function("vadd")(tvm.runtime.tensor(a, dev),
                                             tvm.runtime.tensor(b, dev), out)
    np.testing.assert_array_equal(out.numpy(), a + b)
    first = time_vadd(remote)
    assert len(set(first)) == 1 and all(t > 0 for t in first), first


def _serve(project, *args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "generator", "serve", str(project), "--port",
                             "0", "--json", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO)
    line = proc.stdout.readline()
    if not line:
        pytest.fail(f"serve exited: {proc.stderr.read().decode()}")
    event = json.loads(line)
    assert event["event"] == "listening" and event["host"] == "127.0.0.1"
    return proc, event["port"]


def test_two_sessions_through_a_stock_tracker(project, tmp_path):
    pytest.importorskip("tornado")
    pytest.importorskip("cloudpickle")
    tracker_port = _free_port()
    tracker = _start_tracker(tracker_port, tmp_path / "tracker.log")
    proc, _ = _serve(project, "--tracker", f"127.0.0.1:{tracker_port}", "--key", "mcu",
                     "--sessions", "2")
    try:
        client = tvm.rpc.connect_tracker("127.0.0.1", tracker_port)
        for seed in (3, 4):
            remote = client.request("mcu", priority=1, session_timeout=60)
            check_operators(remote, np.random.default_rng(seed))
            del remote  # ends the session; the bridge offers the device again
            time.sleep(0.1)
        assert proc.wait(timeout=60) == 0
        assert json.loads(proc.stdout.readline()) == {"event": "done", "sessions": 2}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _stop_tracker(tracker)


def test_serve_refuses_a_standalone_project(tmp_path, capsys):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "project.json").write_text(json.dumps(
        {"schema": 1, "board": "host", "project_type": "standalone"}))
    assert main(["serve", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "standalone project" in err and "host-driven" in err


def test_serve_on_a_standalone_project_hints_a_step_that_works(tmp_path, capsys):
    """The hint follows the archive: with a system library, generating it host-driven works
    (and the hint says so); without one, that generate is refused, so the hint says to export
    the model operator by operator instead."""
    plain = tmp_path / "plain"
    assert main(["generate", str(YES_NO / "model.tar"), "--board", "host", "-o", str(plain)]) == 0
    capsys.readouterr()
    assert main(["serve", str(plain)]) == 2
    err = capsys.readouterr().err
    assert "'--style operator'" in err and "generate model.tar again" not in err
    assert main(["generate", str(YES_NO / "model.tar"), "--board", "host", "-o",
                 str(tmp_path / "refused"), "--project-type", "host-driven"]) == 2
    capsys.readouterr()

    syslib = shared_path("mlf", "snu-conv-graph-syslib-params-tvm0.18", "model.tar")
    standalone = tmp_path / "standalone"
    assert main(["generate", str(syslib), "--board", "host", "-o", str(standalone)]) == 0
    capsys.readouterr()
    assert main(["serve", str(standalone)]) == 2
    assert "hint: generate model.tar again with '--project-type host-driven'" in \
        capsys.readouterr().err
    assert main(["generate", str(syslib), "--board", "host", "-o", str(tmp_path / "followed"),
                 "--project-type", "host-driven"]) == 0


def test_serve_rejects_bad_options(project, capsys):
    assert main(["serve", str(project), "--tracker", "nohost"]) == 2
    assert main(["serve", str(project), "--port", "70000"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("error:" in line for line in lines)


def test_serve_restarts_its_project_api_server(project):
    """kill -9 of the project's Project API server (and with it the QEMU it started) in the
    middle of a session: the client gets an error; the next session finds a new server and
    device. The host board's link is opened by serve itself: no server to kill there."""
    if "qemu" not in str(project):
        pytest.skip("serve opens the host board's firmware itself, not through the server")
    proc, port = _serve(project, "--sessions", "2")
    try:
        remote = tvm.rpc.connect("127.0.0.1", port)
        check_operators(remote, np.random.default_rng(7))
        os.kill(serve_server_pid(proc.pid), signal.SIGKILL)
        with pytest.raises(tvm.error.RPCError):
            tvm.runtime.tensor(np.ones(4, np.float32), remote.cpu(0))
        del remote
        # While the first session winds down (a new server, a new QEMU) a client is told the
        # device is busy, as serve documents: try again, as its message says.
        deadline = time.monotonic() + 60
        while True:
            try:
                check_operators(tvm.rpc.connect("127.0.0.1", port), np.random.default_rng(8))
                break
            except (tvm.error.RPCError, tvm.error.InternalError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    proc.kill()
                    said = proc.stdout.read() + proc.stderr.read()
                    raise AssertionError(said.decode()) from None
                time.sleep(0.5)
        assert proc.wait(timeout=60) == 0
        said = proc.stdout.read() + proc.stderr.read()
        assert b"Project API server" in said and b"starting it again" in said, said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_restarts_a_device_that_died(project):
    """The firmware process dies mid-session: the client gets one clear error, and the next
    client finds a working device again."""
    if "qemu" in str(project):
        pytest.skip("one board is enough: the bridge's restart does not depend on it")
    proc, port = _serve(project, "--sessions", "2")
    try:
        remote = tvm.rpc.connect("127.0.0.1", port)
        check_operators(remote, np.random.default_rng(5))
        firmware = serve_device_pid(proc.pid)
        os.kill(firmware, signal.SIGKILL)
        with pytest.raises(tvm.error.RPCError, match="closed its link|stopped accepting"):
            tvm.runtime.tensor(np.ones(4, np.float32), remote.cpu(0))
        del remote
        check_operators(tvm.rpc.connect("127.0.0.1", port), np.random.default_rng(6))
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_refused_handover_serves_the_client_through_the_bridge(project, monkeypatch):
    """The host firmware refuses a handover it cannot use (here a state file too small for
    it) without reading from the client: serve goes on with that client, and the later
    ones, through the bridge. (serve runs in this process to be given the small file; the
    stock clients in another, since a blocking call of theirs holds the interpreter.)"""
    import threading

    from generator.device import direct_clients
    from generator.rpc.serve import ServeOptions, serve

    if json.loads((project / "project.json").read_text())["board"] != "host":
        pytest.skip("direct clients exist on the host board only")
    monkeypatch.setattr(direct_clients, "STATE_BYTES", 8)
    events: list[str] = []
    ports: list[int] = []
    listening = threading.Event()
    served = []

    def announce(bridge) -> None:
        ports.append(bridge.port)
        listening.set()

    thread = threading.Thread(target=lambda: served.append(serve(
        project, ServeOptions(port=0, sessions=2), announce, on_log=lambda _: None,
        on_event=events.append)), daemon=True)
    thread.start()
    assert listening.wait(60)
    clients = ("import sys, numpy as np, tvm.rpc\n"
               "from tests.test_host_driven import check_operators\n"
               "for seed in (5, 6):\n"
               "    remote = tvm.rpc.connect('127.0.0.1', int(sys.argv[1]))\n"
               "    check_operators(remote, np.random.default_rng(seed))\n"
               "    del remote\n")
    done = subprocess.run([sys.executable, "-c", clients, str(ports[0])], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    thread.join(60)
    assert served == [2]
    refused = [e for e in events if "refused" in e]
    assert len(refused) == 1 and "through the bridge" in refused[0], events
