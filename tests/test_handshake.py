"""The host starts every session (issue 28): the standalone app answers a hello request at
any time, so a host that opens the link long after reset, or opens it again, gets a session.

QEMU's UART on a TCP socket (link 'qemu-socket': `server=on,wait=off`), connected only after
the firmware has booted with nobody listening: `run` through a board file with that link,
and a reconnect in the middle of a device's life, both giving the bytes `run` gives over
QEMU's stdio; junk and a stale session's frames in the stream are skipped.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from generator.boards import load_board
from generator.build import build
from generator.cli import main
from generator.device.links import QemuSocket, link_named
from generator.link.app_client import AppClient
from generator.link.framing import encode_frame
from generator.project.generate import generate
from generator.resources import ROOT_ENV
from generator.run import run_project
from tests.conftest import REPO, exported_once, require_board_tools

BOARD = "qemu-mps2-an385"
LATE = "qemu-mps2-an385-late"  # the same board, its UART on a socket (written below)
MODEL = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"


def _inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, size=(1, 49, 10, 1), dtype=np.int8)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, list[bytes]]:
    """kws for the AN385, built, and what `run` gives over QEMU's stdio for two inputs."""
    require_board_tools(BOARD)
    root = tmp_path_factory.mktemp("handshake")
    archive = exported_once(tmp_path_factory, MODEL)
    proj = root / "p"
    generate(archive, BOARD, proj)
    report = run_project(proj, [{"input_1": _inputs(1)}, {"input_1": _inputs(2)}])
    return proj, [np.asarray(o["Identity"]).tobytes() for o in report.outputs]


def _session(client: AppClient, x: np.ndarray) -> bytes:
    hello = client.hello(30.0)
    assert hello.input_sizes == [490] and hello.output_sizes == [12]
    client.set_input(0, x.tobytes())
    assert client.run().status == 0
    return client.get_output(0, 12)


def test_reconnect_starts_a_new_session(project):
    """Connected after boot; then the connection dropped in the middle of a session (inputs
    half written, junk on the line) and opened again: the hello restarts the session."""
    proj, want = project
    device = QemuSocket().open(load_board(BOARD), build(proj).elf)
    try:
        assert _session(AppClient(device, 30.0), _inputs(1)) == want[0]
        # A session cut short: half an input, a frame cut in two, then the host goes away.
        device.write(encode_frame(b"I" + struct.pack("<BI", 0, 0) + bytes(100)))
        device.write(encode_frame(b"R")[:3])
        device.reconnect()
        device.write(b"\xff\xfd\x00garbage")  # what a port opened mid-frame may carry
        assert _session(AppClient(device, 30.0), _inputs(2)) == want[1]
    finally:
        device.close()


@pytest.fixture
def late_board_root(tmp_path, monkeypatch) -> Path:
    """A tool root whose boards include LATE: the AN385 with link 'qemu-socket'."""
    root = tmp_path / "root"
    (root / "boards").mkdir(parents=True)
    (root / "templates").symlink_to(REPO / "templates")
    for board in (REPO / "boards").glob("*.toml"):
        shutil.copy(board, root / "boards" / board.name)
    text = (REPO / "boards" / f"{BOARD}.toml").read_text()
    text = text.replace(f'name = "{BOARD}"', f'name = "{LATE}"').replace(
        'link = "qemu"', 'link = "qemu-socket"')
    (root / "boards" / f"{LATE}.toml").write_text(text)
    monkeypatch.setenv(ROOT_ENV, str(root))
    return root


def test_run_over_a_socket_opened_after_boot(project, late_board_root, tmp_path, capsys):
    """`run` itself, on a board whose UART it connects to after the firmware has booted."""
    assert link_named(load_board(LATE).link).name == "qemu-socket"
    proj = tmp_path / "late"
    generate(project[0] / "model.tar", LATE, proj)
    np.save(tmp_path / "x.npy", _inputs(2))
    assert main(["run", str(proj), "--input", f"input_1={tmp_path / 'x.npy'}",
                 "--output-dir", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    assert np.load(tmp_path / "out" / "Identity.npy").tobytes() == project[1][1]


def test_serve_over_a_socket_opened_after_boot(late_board_root, tmp_path):
    """Host-driven firmware behind `serve` on the late-connected UART: a stock tvm.rpc call,
    and again in a second client session."""
    tvm = pytest.importorskip("tvm")
    from generator.export.operators import export_operators
    from tests.conftest import host_driven_project
    from tests.test_serve_firmware import Served, _call, _operators, _vectors

    archive = tmp_path / "ops.tar"
    export_operators(_operators("A"), archive, module="ops")
    proj = host_driven_project(archive, LATE, tmp_path / "proj")
    served = Served(proj, tmp_path / "serve.log", "--sessions", "2")
    try:
        for seed in (3, 4):  # two client sessions, one after the other
            remote = tvm.rpc.connect("127.0.0.1", served.port)
            a, b = _vectors(seed)
            np.testing.assert_array_equal(_call(remote.system_lib(), "vadd", remote, a, b),
                                          a + b)
            del remote
    finally:
        served.stop()


def test_run_on_a_physical_board_opens_its_port(project, tmp_path, capsys):
    """A flashed board's firmware answers whenever its port opens, so `run` drives it too;
    with none plugged in, it says so in one line before building anything."""
    proj = tmp_path / "nucleo"
    generate(project[0] / "model.tar", "nucleo-f746zg", proj)
    np.save(tmp_path / "x.npy", _inputs(1))
    assert main(["run", str(proj), "--input", f"input_1={tmp_path / 'x.npy'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no nucleo-f746zg is connected" in err[0], err
    assert not (proj / "build").exists()
