"""`serve --accept-firmware`: a stock tvm.rpc client uploads a new firmware and loads it.

Two host-driven projects with different operators (A: vadd; B: vmul, vsub) are built;
serve runs A, the client uploads B's firmware with `remote.upload` and gets B's functions
from `remote.load_module`. Everything is real: the firmware process (or QEMU), serve, the
stock client, and a stock tracker for the two-device case.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from generator.rpc.firmware import MAX_FIRMWARE_BYTES
from tests.conftest import REPO, host_driven_project

tvm = pytest.importorskip("tvm")

N = 64
PADDING = 3 << 20  # appended to one upload: its call is larger than the bridge's usual limit


def _operators(kind: str) -> dict:
    from tvm import te

    a = te.placeholder((N,), name="a")
    b = te.placeholder((N,), name="b")
    if kind == "A":
        return {"vadd": [a, b, te.compute((N,), lambda i: a[i] + b[i], name="add")]}
    return {"vmul": [a, b, te.compute((N,), lambda i: a[i] * b[i], name="mul")],
            "vsub": [a, b, te.compute((N,), lambda i: a[i] - b[i], name="sub")]}


def _projects(board: str, root: Path) -> dict[str, Path]:
    from generator.export.operators import export_operators

    made = {}
    for kind in ("A", "B"):
        archive = root / f"{kind}.tar"
        export_operators(_operators(kind), archive, module="ops")
        made[kind] = host_driven_project(archive, board, root / f"proj{kind}")
    return made


@pytest.fixture(scope="module")
def host_projects(tmp_path_factory) -> dict[str, Path]:
    return _projects("host", tmp_path_factory.mktemp("fw-host"))


def _firmware(project: Path) -> Path:
    return project / "build" / "firmware.elf"


class Served:
    """A `microtvm-gen serve` child process; its stderr (the event log) goes to a file."""

    def __init__(self, project: Path, log: Path, *args: str) -> None:
        self.log = log
        env = {**os.environ, "TMPDIR": str(log.parent / "tmp")}
        (log.parent / "tmp").mkdir(exist_ok=True)
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "generator", "serve", str(project), "--port", "0",
                 "--json", *args], stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env)
        line = self.proc.stdout.readline()
        if not line:
            self.stop()
            pytest.fail(f"serve exited: {log.read_text()}")
        self.port = json.loads(line)["port"]

    def events(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


@contextlib.contextmanager
def servers_under_tracker(project: Path, work: Path, key: str, count: int, *args: str
                          ) -> Iterator[tuple[int, list[Served]]]:
    """A stock RPC tracker and `count` `serve --accept-firmware` devices of `project`
    registered with it under `key`: (the tracker's port, the servers), all stopped after."""
    pytest.importorskip("tornado", reason="tvm.exec.rpc_tracker needs tornado")
    pytest.importorskip("cloudpickle", reason="tvm.exec.rpc_tracker needs cloudpickle")
    from generator.rpc.tracker import free_servers
    from tests.test_rpc_tracker import _free_port, _start_tracker, _stop_tracker

    port = _free_port()
    tracker = _start_tracker(port, work / "tracker.log")
    served: list[Served] = []
    try:
        for i in range(count):
            (work / f"s{i}").mkdir()
            served.append(Served(project, work / f"s{i}" / "serve.log", "--accept-firmware",
                                 "--tracker", f"127.0.0.1:{port}", "--key", key, *args))
        deadline = time.monotonic() + 60
        while free_servers("127.0.0.1", port, key) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"{count} servers never registered under '{key}'")
            time.sleep(0.2)
        yield port, served
    finally:
        for s in served:
            s.stop()
        _stop_tracker(tracker)


def _call(module, name: str, remote, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    dev = remote.cpu(0)
    out = tvm.runtime.tensor(np.zeros(N, np.float32), dev)
    module[name](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    return out.numpy()


def _vectors(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)


def _load_b(remote, firmware_b: Path, a: np.ndarray, b: np.ndarray, name: str = "fw.elf"):
    """The calls the tuner makes: upload, load_module, call, time_evaluator."""
    remote.upload(str(firmware_b), name)
    module = remote.load_module(name)
    np.testing.assert_array_equal(_call(module, "vmul", remote, a, b), a * b)
    dev = remote.cpu(0)
    args = [tvm.runtime.tensor(v, dev) for v in (a, b, np.zeros(N, np.float32))]
    timings = module.time_evaluator("vmul", dev, number=5, repeat=2)(*args).results
    assert len(timings) == 2 and all(t > 0 for t in timings)
    return module


def test_upload_and_load_module_replace_the_firmware(host_projects, tmp_path):
    firmware_a, firmware_b = _firmware(host_projects["A"]), _firmware(host_projects["B"])
    a_digest = hashlib.sha256(firmware_a.read_bytes()).hexdigest()
    served = Served(host_projects["A"], tmp_path / "serve.log", "--accept-firmware",
                    "--sessions", "1")
    try:
        remote = tvm.rpc.connect("127.0.0.1", served.port)
        a, b = _vectors(1)
        lib_a = remote.system_lib()
        np.testing.assert_array_equal(_call(lib_a, "vadd", remote, a, b), a + b)

        module = _load_b(remote, firmware_b, a, b)
        with pytest.raises(tvm.error.RPCError, match="stale handle"):
            lib_a["vadd"]  # A's device is gone, and with it every handle it gave out
        np.testing.assert_array_equal(_call(remote.system_lib(), "vsub", remote, a, b), a - b)
        with pytest.raises(AttributeError, match="no function 'vadd'"):
            module["vadd"]
        with pytest.raises(AttributeError, match="no function 'vadd'"):
            remote.system_lib()["vadd"]

        # Larger than the 1 MiB the bridge holds for the device: an ELF with zeros after it.
        padded = bytearray(firmware_b.read_bytes()) + bytes(PADDING)
        remote.upload(padded, "padded.elf")
        again = remote.load_module("padded.elf")
        np.testing.assert_array_equal(_call(again, "vsub", remote, a, b), a - b)
        del lib_a, module, again, remote
        assert served.proc.wait(timeout=60) == 0
    finally:
        served.stop()
    events = served.events()
    size = firmware_b.stat().st_size
    digest = hashlib.sha256(firmware_b.read_bytes()).hexdigest()[:12]
    assert f"serve: firmware fw.elf ({size} bytes, sha256 {digest}) loaded; device " \
           "restarted" in events
    padded_digest = hashlib.sha256(bytes(padded)).hexdigest()[:12]
    assert f"firmware padded.elf ({len(padded)} bytes, sha256 {padded_digest})" in events
    # The user's project is untouched, and serve's private copy is gone.
    assert hashlib.sha256(firmware_a.read_bytes()).hexdigest() == a_digest
    assert list((tmp_path / "tmp").iterdir()) == []


def test_without_accept_firmware_upload_is_refused(host_projects, tmp_path):
    served = Served(host_projects["A"], tmp_path / "serve.log", "--sessions", "1")
    try:
        remote = tvm.rpc.connect("127.0.0.1", served.port)
        with pytest.raises(tvm.error.RPCError, match="does not take new firmware.*"
                                                     "--accept-firmware"):
            remote.upload(bytearray(_firmware(host_projects["B"]).read_bytes()), "fw.elf")
        with pytest.raises(tvm.error.RPCError, match="--accept-firmware"):
            remote.load_module("fw.elf")
        a, b = _vectors(2)
        np.testing.assert_array_equal(_call(remote.system_lib(), "vadd", remote, a, b), a + b)
    finally:
        served.stop()


def test_wrong_files_and_names_are_refused_and_the_device_keeps_serving(host_projects,
                                                                       tmp_path):
    served = Served(host_projects["A"], tmp_path / "serve.log", "--accept-firmware",
                    "--sessions", "1")
    try:
        remote = tvm.rpc.connect("127.0.0.1", served.port)
        remote.upload(bytearray(b"not a firmware" * 10), "notes.txt")
        with pytest.raises(tvm.error.RPCError, match="notes.txt is not an ELF file"):
            remote.load_module("notes.txt")
        elf = bytearray(_firmware(host_projects["B"]).read_bytes())
        elf[18:20] = (40).to_bytes(2, "little")  # e_machine: ARM
        remote.upload(elf, "arm.elf")
        with pytest.raises(tvm.error.RPCError, match="arm.elf is a 64-bit little-endian ARM "
                                                     "ELF; this device runs a 64-bit "
                                                     "little-endian x86-64 ELF"):
            remote.load_module("arm.elf")
        with pytest.raises(tvm.error.RPCError, match=f"at most {MAX_FIRMWARE_BYTES} bytes"):
            remote.upload(bytearray(MAX_FIRMWARE_BYTES + 1), "big.elf")
        for name in ("../fw.elf", "a/b.elf", ".."):
            with pytest.raises(tvm.error.RPCError, match="must be a plain file name"):
                remote.upload(bytearray(b"x"), name)
        with pytest.raises(tvm.error.RPCError, match="no such uploaded file"):
            remote.load_module("never.elf")
        (work,) = (tmp_path / "tmp").glob("mtvg-serve-*")
        assert sorted(p.name for p in (work / "uploads").iterdir()) == ["arm.elf", "notes.txt"]
        assert not (work / "fw.elf").exists() and not (work / "a").exists()
        a, b = _vectors(3)
        np.testing.assert_array_equal(_call(remote.system_lib(), "vadd", remote, a, b), a + b)
    finally:
        served.stop()
    assert "loaded; device restarted" not in served.events()


def test_a_firmware_that_does_not_start_is_replaced_by_the_previous(host_projects, tmp_path):
    """A valid ELF of the right machine that is no RPC server: the client gets an error and
    the previous firmware serves again."""
    served = Served(host_projects["A"], tmp_path / "serve.log", "--accept-firmware",
                    "--sessions", "1", "--timeout", "5")
    try:
        remote = tvm.rpc.connect("127.0.0.1", served.port)
        remote.upload("/bin/true", "true.elf")
        with pytest.raises(tvm.error.RPCError, match="true.elf did not start a device session"
                                                     ".*the previous firmware runs again"):
            remote.load_module("true.elf")
        a, b = _vectors(4)
        np.testing.assert_array_equal(_call(remote.system_lib(), "vadd", remote, a, b), a + b)
    finally:
        served.stop()


@pytest.mark.qemu
def test_qemu_board_takes_a_new_firmware(tmp_path):
    projects = _projects("qemu-mps2-an385", tmp_path)
    served = Served(projects["A"], tmp_path / "serve.log", "--accept-firmware",
                    "--sessions", "1")
    try:
        remote = tvm.rpc.connect("127.0.0.1", served.port)
        a, b = _vectors(5)
        _load_b(remote, _firmware(projects["B"]), a, b)
        with pytest.raises(AttributeError, match="no function 'vadd'"):
            remote.system_lib()["vadd"]
    finally:
        served.stop()


def test_two_devices_through_a_stock_tracker(host_projects, tmp_path):
    """What the tuner does: request two devices from a tracker, load a firmware on each."""
    pytest.importorskip("tornado")
    pytest.importorskip("cloudpickle")
    from tests.test_rpc_tracker import _free_port, _start_tracker, _stop_tracker

    tracker_port = _free_port()
    tracker = _start_tracker(tracker_port, tmp_path / "tracker.log")
    served = []
    try:
        for i in range(2):
            (tmp_path / str(i)).mkdir()
            served.append(Served(host_projects["A"], tmp_path / str(i) / "serve.log",
                                 "--accept-firmware", "--tracker",
                                 f"127.0.0.1:{tracker_port}", "--key", "fwtest"))
        client = tvm.rpc.connect_tracker("127.0.0.1", tracker_port)
        deadline = time.monotonic() + 20
        while client.summary()["queue_info"].get("fwtest", {}).get("free", 0) < 2:
            assert time.monotonic() < deadline, client.text_summary()
            time.sleep(0.2)
        remotes = [client.request("fwtest", priority=1, session_timeout=60) for _ in range(2)]
        for i, remote in enumerate(remotes):
            a, b = _vectors(10 + i)
            _load_b(remote, _firmware(host_projects["B"]), a, b, name=f"batch{i}.elf")
        del remotes, remote
    finally:
        for s in served:
            s.stop()
        _stop_tracker(tracker)
    for s in served:
        assert "firmware batch" in s.events() and "loaded; device restarted" in s.events()


def test_accept_firmware_is_refused_where_serve_does_not_start_the_device(host_projects,
                                                                         tmp_path, capsys):
    from generator.cli import main
    from generator.project.generate import generate

    flashed = tmp_path / "nucleo"
    generate(host_projects["A"] / "model.tar", "nucleo-f746zg", flashed,
             project_type="host-driven")
    assert main(["serve", str(flashed), "--accept-firmware"]) == 2
    assert main(["serve", str(host_projects["A"]), "--serial", "/dev/null",
                 "--accept-firmware"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert "board 'nucleo-f746zg' is flashed, not started by serve" in lines[0]
    assert "--accept-firmware cannot be used with --serial" in lines[1]


def test_beyond_loopback_serve_warns_that_clients_can_run_code_here(host_projects, tmp_path):
    served = Served(host_projects["A"], tmp_path / "serve.log", "--accept-firmware",
                    "--host", "0.0.0.0", "--sessions", "1")
    try:
        tvm.rpc.connect("127.0.0.1", served.port)  # dropped at once: the session ends
        assert served.proc.wait(timeout=60) == 0
    finally:
        served.stop()
    assert "warning: --accept-firmware: anyone who can reach 0.0.0.0:" in served.events()
    assert "the 'host' board's firmware is a process on THIS machine" in served.events()


@pytest.mark.parametrize("name", ["fw.elf", "batch-00007.elf", "a b", "é.elf"])
def test_plain_target_names_are_taken(name):
    from generator.rpc.firmware import check_target_name

    assert check_target_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "a\\b", "x..y", "/etc/passwd",
                                  "nul\0byte", "x" * 256])
def test_other_target_names_are_refused(name):
    from generator.rpc.firmware import FirmwareRefused, check_target_name

    with pytest.raises(FirmwareRefused, match="plain file name"):
        check_target_name(name)


def test_elf_ident_reads_class_byte_order_and_machine():
    from generator.rpc.firmware import ElfIdent, FirmwareRefused, elf_ident

    arm = b"\x7fELF\x01\x01\x01" + bytes(9) + (2).to_bytes(2, "little") + (40).to_bytes(2,
                                                                                        "little")
    assert elf_ident(arm, "a") == ElfIdent(32, True, 40)
    assert elf_ident(arm, "a").describe() == "a 32-bit little-endian ARM ELF"
    big = b"\x7fELF\x01\x02\x01" + bytes(9) + (2).to_bytes(2, "big") + (8).to_bytes(2, "big")
    assert elf_ident(big, "b") == ElfIdent(32, False, 8)
    with pytest.raises(FirmwareRefused, match="of type 1, not an executable"):
        elf_ident(arm[:16] + (1).to_bytes(2, "little") + arm[18:], "obj")  # ET_REL
    with pytest.raises(FirmwareRefused, match="short is not an ELF file"):
        elf_ident(arm[:10], "short")
