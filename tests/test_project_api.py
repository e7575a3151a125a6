"""The Project API, checked with a client written here from the v0.18 facts (§5), not ours.

The server runs as its own process, started the way TVM's client starts it (the
directory's launch script with `--read-fd`/`--write-fd`), and is spoken to over two pipes,
one JSON object per line.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from generator.link.app_client import AppClient
from tests.conftest import BOARDS, REPO, require_board_tools, shared_path
from tests.test_end_to_end import _kws_vectors

TEMPLATE = REPO / "templates" / "crt"
OPTION_KEYS = {"name", "choices", "default", "type", "required", "optional", "help"}
# TVM 0.18's default_project_options(), as its client sends them (unset ones as null).
SERVER_FILES = ("microtvm_api_server.py", "launch_microtvm_api_server.sh")
TVM_DEFAULT_OPTIONS = ("verbose", "project_type", "board", "cmsis_path", "warning_as_error",
                       "compile_definitions", "extra_files_tar")


class RawServer:
    """A Project API server process and the two pipes to it (§5.1)."""

    def __init__(self, directory: Path) -> None:
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()
        argv = [str(directory / "launch_microtvm_api_server.sh"),
                str(directory / "microtvm_api_server.py"),
                "--read-fd", str(to_r), "--write-fd", str(from_w)]
        env = {**os.environ, "MICROTVM_GEN_PYTHON": str(REPO / ".venv" / "bin" / "python")}
        if not Path(env["MICROTVM_GEN_PYTHON"]).exists():
            env.pop("MICROTVM_GEN_PYTHON")
        self.proc = subprocess.Popen(argv, cwd=directory, pass_fds=(to_r, from_w), env=env,
                                     stderr=subprocess.PIPE)
        os.close(to_r)
        os.close(from_w)
        self.w = os.fdopen(self._to_w, "wb", buffering=0)
        self.r = os.fdopen(self._from_r, "rb")
        self.next_id = 1

    def send_line(self, line: bytes) -> dict | None:
        self.w.write(line + b"\n")
        reply = self.r.readline()
        return json.loads(reply) if reply else None

    def request(self, method: str, params: dict) -> dict:
        request_id, self.next_id = self.next_id, self.next_id + 1
        reply = self.send_line(json.dumps({"jsonrpc": "2.0", "method": method,
                                           "params": params, "id": request_id}).encode())
        assert reply is not None and reply["jsonrpc"] == "2.0" and reply["id"] == request_id
        return reply

    def call(self, method: str, **params):
        reply = self.request(method, params)
        assert "error" not in reply, reply["error"]
        return reply["result"]

    def close(self) -> str:
        """End the server; returns what it wrote on stderr."""
        self.w.close()
        self.r.close()
        _, err = self.proc.communicate(timeout=30)
        return err.decode(errors="replace")


def test_every_template_presents_the_one_server():
    """templates/common/project_api holds the server files once; each template folder holds
    links to them (a wheel holds copies), executable, as TVM's client starts them."""
    common = REPO / "templates" / "common" / "project_api"
    for folder in ("crt", "zephyr"):
        for name in SERVER_FILES:
            presented = REPO / "templates" / folder / name
            assert presented.is_symlink(), presented
            assert presented.resolve() == (common / name).resolve()
            assert os.access(presented, os.X_OK), presented


@pytest.fixture
def template():
    server = RawServer(TEMPLATE)
    yield server
    assert "Traceback" not in server.close()


def test_template_server_info(template):
    info = template.call("server_info_query", tvm_version="0.18.0")
    assert info["protocol_version"] == 1 and info["is_template"] is True
    assert info["platform_name"] == "crt" and info["model_library_format_path"] == ""
    names = [o["name"] for o in info["project_options"]]
    assert set(TVM_DEFAULT_OPTIONS) <= set(names) and "serial_number" in names
    for option in info["project_options"]:
        assert set(option) == OPTION_KEYS, option
        assert option["type"] in ("bool", "int", "str") and option["help"]
        assert option["required"] or option["optional"]


@pytest.mark.parametrize("line, code", [
    (b"[1, 2]", -32600),  # not an object
    (b'{"jsonrpc": "2.0", "method": "build", "id": 1}', -32600),  # no params
    (b'{"jsonrpc": "1.0", "method": "build", "params": {}, "id": 1}', -32600),
    (b'{"jsonrpc": "2.0", "method": "bad-name", "params": {}, "id": 1}', -32600),
    (b'{"jsonrpc": "2.0", "method": "frobnicate", "params": {}, "id": 1}', -32601),
    (b'{"jsonrpc": "2.0", "method": "build", "params": {}, "id": 1}', -32602),  # missing
    (b'{"jsonrpc": "2.0", "method": "build", "params": {"options": {}, "x": 1}, "id": 1}',
     -32602),  # extra
    (b'{"jsonrpc": "2.0", "method": "build", "params": {"options": []}, "id": 1}', -32602),
    (b'{"jsonrpc": "2.0", "method": "flash", "params": {"options": 3}, "id": 1}', -32602),
    # close_transport's one parameter beyond TVM's: a bool, nothing else
    (b'{"jsonrpc": "2.0", "method": "close_transport", "params": {"hung": 1}, "id": 1}',
     -32602),
    (b'{"jsonrpc": "2.0", "method": "close_transport", "params": {"x": true}, "id": 1}',
     -32602),
])
def test_invalid_requests_get_their_codes(template, line, code):
    reply = template.send_line(line)
    assert reply["error"]["code"] == code, reply
    if code == -32601:
        assert reply["error"]["message"] == "frobnicate: no such method"
    # The server lives on: the next request is answered.
    assert template.call("server_info_query", tvm_version="0.18.0")["is_template"]


def test_close_transport_takes_hung_as_tvm_sends_nothing(template):
    """TVM's client sends close_transport no parameters; ours may say the device hung."""
    assert template.call("close_transport") is None
    assert template.call("close_transport", hung=True) is None


def test_the_launcher_starts_the_named_python_as_it_is(tmp_path):
    """MICROTVM_GEN_PYTHON is started without a trial import first; a Python without the
    package gets the server's own line, and exit status 2."""
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    bare.chmod(0o755)
    template = REPO / "templates" / "crt"
    proc = subprocess.run([str(template / "launch_microtvm_api_server.sh"),
                           str(template / "microtvm_api_server.py"), "--read-fd", "0",
                           "--write-fd", "1"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "MICROTVM_GEN_PYTHON": str(bare)}, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("microtvm_api_server.py: the microtvm-gen package is not "
                                  "importable by ")
    assert len(proc.stderr.splitlines()) == 1


def test_handler_failure_is_a_server_error_with_traceback(template):
    reply = template.request("build", {"options": {}})  # a template cannot build
    error = reply["error"]
    assert error["code"] == -32000 and error["message"] == "calling method build"
    assert "Outermost server-side stack frame" in error["data"]["traceback"]
    reply = template.request("read_transport", {"n": 4, "timeout_sec": 0.1})
    assert reply["error"]["message"] == "TransportClosedError"


def test_line_that_is_not_json_stops_the_server(template):
    assert template.send_line(b"this is not json") is None
    assert template.proc.wait(timeout=10) == 0


def _all_options(board: str, **chosen) -> dict:
    """All the template's options, unset ones as null: what TVM 0.18's client sends."""
    server = RawServer(TEMPLATE)
    names = [o["name"] for o in server.call("server_info_query", tvm_version="0.18.0")
             ["project_options"]]
    server.close()
    return {n: None for n in names} | {"board": board} | chosen


def _generated(tmp_path: Path, archive: Path, board: str) -> RawServer:
    template = RawServer(TEMPLATE)
    project = tmp_path / "project"
    assert template.call("generate_project", model_library_format_path=str(archive),
                         standalone_crt_dir="/nonexistent", project_dir=str(project),
                         options=_all_options(board)) is None
    template.close()
    server = RawServer(project)
    info = server.call("server_info_query", tvm_version="0.18.0")
    assert info["is_template"] is False and info["model_library_format_path"].endswith("model.tar")
    assert server.call("build", options={}) is None
    assert server.call("flash", options={}) is None
    timeouts = server.call("open_transport", options={})["timeouts"]
    assert set(timeouts) == {"session_start_retry_timeout_sec", "session_start_timeout_sec",
                             "session_established_timeout_sec"}
    return server


class RawTransport:
    """The device's link over read_transport / write_transport (base85, §5.3)."""

    description = "project transport"

    def __init__(self, server: RawServer) -> None:
        self.server = server

    def write(self, data: bytes) -> None:
        assert self.server.call("write_transport", data=base64.b85encode(data).decode(),
                                timeout_sec=None) is None

    def read(self, timeout: float) -> bytes:
        reply = self.server.request("read_transport", {"n": 4096, "timeout_sec": timeout})
        if "error" in reply:
            assert reply["error"]["message"] == "IoTimeoutError", reply
            return b""
        data = base64.b85decode(reply["result"]["data"])
        assert 1 <= len(data) <= 4096
        return data


def _run_app(server: RawServer, inputs: list[bytes], output_size: int) -> bytes:
    app = AppClient(RawTransport(server), 30.0)
    app.hello(30.0)
    for i, data in enumerate(inputs):
        app.set_input(i, data)
    assert app.run().status == 0
    out = app.get_output(0, output_size)
    app.quit(0)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("board", BOARDS)
def test_sine_through_the_protocol(tmp_path, board):
    require_board_tools(board)
    server = _generated(tmp_path, shared_path("mlf", "gromero-sine-aot-c-v5", "model.tar"),
                        board)
    out = _run_app(server, [np.array([1.0], dtype="<f4").tobytes()], 4)
    assert abs(float(np.frombuffer(out, dtype="<f4")[0]) - 0.807911) < 1e-4
    _check_closed_and_timeout(server)
    assert server.call("close_transport") is None
    assert "Traceback" not in server.close()


@pytest.mark.slow
@pytest.mark.parametrize("board", BOARDS)
def test_kws_through_the_protocol(tmp_path, board):
    require_board_tools(board)
    vectors, labels = _kws_vectors()
    x, label = vectors[0].tobytes(), labels[0]
    server = _generated(tmp_path, shared_path("mlf", "etiss-kws-aot-usmp-tvm0.16", "model.tar"),
                        board)
    out = np.frombuffer(_run_app(server, [x], 12), dtype=np.int8)
    assert int(np.argmax(out)) == label
    assert server.call("close_transport") is None
    assert "Traceback" not in server.close()


def _check_closed_and_timeout(server: RawServer) -> None:
    """After the app quits: reads end in TransportClosedError; before, a read past its
    deadline is an IoTimeoutError (checked on a fresh transport)."""
    for _ in range(100):
        reply = server.request("read_transport", {"n": 64, "timeout_sec": 1.0})
        if "error" in reply and reply["error"]["message"] == "TransportClosedError":
            break
    else:
        pytest.fail("the transport never reported TransportClosedError")
    server.call("open_transport", options={})
    app = AppClient(RawTransport(server), 30.0)
    app.hello(30.0)  # the boot banner has been read: the device is now silent
    reply = server.request("read_transport", {"n": 64, "timeout_sec": 0.2})
    assert reply["error"]["message"] == "IoTimeoutError"
    assert reply["error"]["code"] == -32000


def test_generate_project_refuses_a_bad_archive_in_one_line(tmp_path):
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w"):
        pass
    template = RawServer(TEMPLATE)
    reply = template.request("generate_project", {
        "model_library_format_path": str(bad), "standalone_crt_dir": "",
        "project_dir": str(tmp_path / "p"), "options": _all_options("host")})
    error = reply["error"]
    assert error["code"] == -32000 and error["data"]["mtvg_error"]["type"] == "MlfError"
    assert not (tmp_path / "p").exists()
    assert "Traceback" not in template.close()
