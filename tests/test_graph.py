"""Graph-executor archives on the device: the hannah magic_wand archive against TFLM's outputs,
v5 and v7 layouts, storage reports, and archives the executor must refuse.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from generator.boards import load_board
from generator.build import build
from generator.cli import main
from generator.errors import DeviceError, UnsupportedModelError
from generator.mlf import read_mlf
from generator.project.generate import generate
from generator.run import run_project
from tests.conftest import ALL_BOARDS, REPO, archive, ram_beside_stack, require_board_tools

HANNAH = archive("hannah-magicwand-graph-c-tvm0.11dev")
ORACLE = REPO / "tests" / "fixtures" / "models" / "magic_wand"
SAMPLES = 4
INPUT = "conv2d_input"
OUTPUT = "Identity"
STORAGE_BYTES = 15248  # activations + input + output; the 8 params stay in flash
# The boards whose RAM beside the stack holds that storage (not the micro:bit's 16 KiB).
GRAPH_BOARDS = [b for b in ALL_BOARDS if ram_beside_stack(load_board(b)) >= STORAGE_BYTES]


def _samples() -> list[dict[str, np.ndarray]]:
    return [{INPUT: np.load(ORACLE / f"input_{i}.npy")} for i in range(SAMPLES)]


def _expected() -> list[np.ndarray]:
    return [np.load(ORACLE / f"expected_{i}.npy") for i in range(SAMPLES)]


_runs: dict[str, object] = {}


def _run_on(board: str, tmp_path_factory) -> object:
    """Generate, build and run the archive once per board (shared by the tests below)."""
    if board not in _runs:
        require_board_tools(board)
        project = tmp_path_factory.mktemp("graph") / board
        generate(HANNAH, board, project)
        _runs[board] = run_project(project, _samples())
    return _runs[board]


@pytest.mark.slow
@pytest.mark.parametrize("board", GRAPH_BOARDS)
def test_magic_wand_matches_tflite_micro(board, tmp_path_factory):
    report = _run_on(board, tmp_path_factory)
    for got, want in zip(report.outputs, _expected(), strict=True):
        assert got[OUTPUT].shape == want.shape
        assert np.max(np.abs(got[OUTPUT] - want)) < 1e-4
    assert report.storage_bytes == report.storage_used == STORAGE_BYTES
    assert all(0 < r.workspace_peak <= report.arena_bytes for r in report.results)
    assert all(r.ticks > 0 for r in report.results)


@pytest.mark.slow
def test_every_board_agrees_with_the_host(tmp_path_factory):
    """Soft float, single- and double-precision FPUs, MVE and RV32 give the host's outputs."""
    host = _run_on("host", tmp_path_factory)
    for board in GRAPH_BOARDS[1:]:
        other = _run_on(board, tmp_path_factory)
        for a, b in zip(host.outputs, other.outputs, strict=True):
            assert np.max(np.abs(a[OUTPUT] - b[OUTPUT])) <= 1e-5, board


def test_too_big_for_the_microbit_is_refused(tmp_path, capsys):
    require_board_tools("qemu-microbit")
    with pytest.raises(UnsupportedModelError, match=r"cannot fit board 'qemu-microbit': it needs "
                       r"at least [\d,]+ B of RAM \(.*graph storage 15,248 B.*\) \+ 2,048 B "
                       r"stack; qemu-microbit has 16,384 B"):
        generate(HANNAH, "qemu-microbit", tmp_path / "p")
    assert not (tmp_path / "p").exists()


def test_info_reports_storage(capsys):
    assert main(["info", str(HANNAH)]) == 0
    text = capsys.readouterr().out
    assert "graph executor" in text
    assert f"storage {STORAGE_BYTES} B of RAM needed by the graph" in text
    assert "used in place from flash" in text
    assert main(["info", "--json", str(HANNAH)]) == 0
    graph = json.loads(capsys.readouterr().out)["modules"][0]["graph"]
    assert graph["storage_bytes"] == STORAGE_BYTES
    assert graph["params_in_place_bytes"] == 17200 and graph["params_copied_bytes"] == 0
    assert graph["problems"] == []
    # TVM computed metadata 'sids' by indexing shapes with storage ids: wrong from id 7 on.
    assert graph["sids_disagree"] == [7, 8, 9, 10, 11, 12]


def test_build_reports_storage_reserved(tmp_path, capsys):
    require_board_tools("host")
    project = tmp_path / "p"
    generate(HANNAH, "host", project)
    result = build(project)
    assert result.storage_bytes_reserved == result.storage_bytes_needed == STORAGE_BYTES
    assert result.arena_bytes > 0
    assert main(["build", str(project)]) == 0
    assert f"graph storage {STORAGE_BYTES} B reserved, the graph needs {STORAGE_BYTES} B" \
        in capsys.readouterr().out


# ---- Archives made from the good one -----------------------------------------------------

def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read()
                for m in tar.getmembers() if m.isfile()}


def _write_tar(dest: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(dest, "w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dest


def _with_graph(edit: Callable[[dict], None]) -> Callable[[dict[str, bytes]], None]:
    def change(files: dict[str, bytes]) -> None:
        path = "executor-config/graph/default.graph"
        graph = json.loads(files[path])
        edit(graph)
        files[path] = json.dumps(graph).encode()
    return change


def _as_v5(files: dict[str, bytes]) -> None:
    """The same model in the MLF v5 layout (metadata without modules, graph.json)."""
    meta = json.loads(files.pop("metadata.json"))
    module = meta["modules"]["default"]
    module.update({"version": 5, "model_name": "default", "target": {"1": module["target"][0]}})
    files["metadata.json"] = json.dumps(module).encode()
    files["executor-config/graph/graph.json"] = files.pop("executor-config/graph/default.graph")
    files["src/relay.txt"] = files.pop("src/default.relay")


def _set_node(index: int, **changes) -> Callable[[dict], None]:
    def edit(graph: dict) -> None:
        node = graph["nodes"][index]
        for key, value in changes.items():
            if key in ("op", "name"):
                node[key] = value
            else:
                node["attrs"][key] = value
    return edit


def _derived(tmp_path: Path, change: Callable[[dict[str, bytes]], None]) -> Path:
    files = _members(HANNAH)
    change(files)
    return _write_tar(tmp_path / "derived.tar", files)


def test_v5_layout_runs_the_same(tmp_path):
    require_board_tools("host")
    v5 = _derived(tmp_path, _as_v5)
    module = read_mlf(v5).module()
    assert (v5.exists(), module.graph_json) == (True, "executor-config/graph/graph.json")
    project = tmp_path / "p"
    generate(v5, "host", project)
    report = run_project(project, _samples()[:1])
    assert np.max(np.abs(report.outputs[0][OUTPUT] - _expected()[0])) < 1e-4


def _drop_params(files: dict[str, bytes]) -> None:
    del files["parameters/default.params"]


def _nop_elsewhere(graph: dict) -> None:
    graph["attrs"]["storage_id"][1][9] = 12  # reshape_nop output no longer shares storage


REFUSED = {
    "params file missing": (_drop_params, "no parameters/default.params"),
    "function not in the registry": (
        _with_graph(_set_node(3, func_name="tvmgen_default_fused_nn_conv2d_add_nn_relu_9")),
        "'tvmgen_default_fused_nn_conv2d_add_nn_relu_9', which the archive's system library "
        "does not provide"),
    "storage_scope": (
        _with_graph(lambda g: g["attrs"].update(
            storage_scope=["list_str", ["global"] * len(g["attrs"]["storage_id"][1])])),
        "storage_scope"),
    "op other than tvm_op": (_with_graph(_set_node(4, op="my_op")),
                             "has op 'my_op'; only 'tvm_op' is supported"),
    "__copy": (_with_graph(_set_node(4, func_name="__copy")),
               "special function '__copy'"),
    "__nop not in place": (_with_graph(_nop_elsewhere), "__nop (reshape)"),
    "param shape differs": (
        _with_graph(lambda g: g["attrs"]["shape"][1].__setitem__(2, [9])),
        "parameter 'p1' is float32[8] in the params file but float32[9] in the graph"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_one_line(case, tmp_path, capsys):
    change, message = REFUSED[case]
    bad = _derived(tmp_path, change)
    out = tmp_path / "proj"
    assert main(["generate", str(bad), "--board", "host", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert message in err, err
    assert not out.exists()


def test_foreign_objects_refused(tmp_path, capsys):
    out = tmp_path / "proj"
    code = main(["generate", str(archive("staticrt-conv1d-graph-llvm-v5")), "--board",
                 "qemu-mps2-an385", "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "compiled objects for aarch64" in err
    assert not out.exists()


def test_device_reports_a_failed_set_up(tmp_path):
    """A firmware whose embedded params were damaged says why instead of saying hello."""
    require_board_tools("host")
    project = tmp_path / "p"
    generate(HANNAH, "host", project)
    glue = project / "app" / "model_glue.c"
    text = glue.read_text()
    start = text.index("graph_params[")
    first_byte = text.index("0xb7", start)  # the list magic's first byte
    glue.write_text(text[:first_byte] + "0x00" + text[first_byte + 4:])
    with pytest.raises(DeviceError, match="params: not a TVM params blob"):
        run_project(project, _samples()[:1])


def test_archive_without_system_library_gets_a_registry(tmp_path):
    """system-lib=0 archives: the generated glue lists the graph's operators itself."""
    require_board_tools("host")

    def drop_registry(files: dict[str, bytes]) -> None:
        del files["codegen/host/src/default_lib0.c"]

    bare = _derived(tmp_path, drop_registry)
    assert read_mlf(bare).module().registry is None
    project = tmp_path / "p"
    generate(bare, "host", project)
    assert "TVMSystemLibEntryPoint(void) { return &system_lib; }" in \
        (project / "app" / "model_glue.c").read_text()
    report = run_project(project, _samples()[:1])
    assert np.max(np.abs(report.outputs[0][OUTPUT] - _expected()[0])) < 1e-4
