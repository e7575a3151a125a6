"""Every hint in generator/hints.py, followed to the letter: the input that raises it, then
the step it names, which must succeed (issue: no surprises). A hint added to the catalogue
without a test here fails `test_every_hint_has_a_test`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from generator import hints
from generator.cli import main
from generator.rpc.serve import host_driven_project
from tests.conftest import REPO, YES_NO, require_board_tools, shared_path

MODELS = REPO / "tests" / "fixtures" / "models"
HELLO = MODELS / "hello_world" / "hello_world_int8.tflite"
FOLLOWED: set[str] = set()  # filled as the tests below are defined


def followed(key: str):
    """Marks the test that follows hint `key`."""
    FOLLOWED.add(key)
    return lambda f: f


def refused_with(capsys, argv: list[str]) -> str:
    """The hint of the one-line error `argv` ends in."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    found = re.search(r"\(hint: (.*)\)$", err[0])
    assert found, err[0]
    return found.group(1)


def succeeds(capsys, argv: list[str]) -> None:
    capsys.readouterr()
    code = main(argv)
    assert code == 0, capsys.readouterr().err


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> dict[str, Path]:
    """hello_world int8 exported once each way: the whole model, and operator by operator."""
    out = tmp_path_factory.mktemp("hello")
    assert main(["export", str(HELLO), "-o", str(out / "whole.tar")]) == 0
    assert main(["export", str(HELLO), "-o", str(out / "ops.tar"), "--style", "operator"]) == 0
    return {"whole": out / "whole.tar", "operator": out / "ops.tar"}


def tiny_onnx(path: Path, batch: int | str) -> Path:
    """A Relu over [batch, 8]: a str batch leaves the dimension open."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.fixture(scope="module")
def host_project(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("hints") / "yes_no"
    assert main(["generate", str(YES_NO / "model.tar"), "--board", "host", "-o",
                 str(project)]) == 0
    return project


@followed("batch")
def test_batch(host_project, tmp_path, capsys):
    one = np.fromfile(YES_NO / "yes_0a2b400e_nohash_0.raw", dtype=np.int8).reshape(1, 1960)
    stacked = tmp_path / "three.npy"
    np.save(stacked, np.repeat(one[None], 3, axis=0))
    argv = ["run", str(host_project), "--input", f"Reshape_1={stacked}"]
    assert refused_with(capsys, argv) == hints.batch() == "add --batch to run each of them"
    succeeds(capsys, [*argv, "--batch"])


@followed("operator-style")
def test_operator_style(hello, tmp_path, capsys):
    hint = refused_with(capsys, ["generate", str(hello["whole"]), "--board", "host",
                                 "--project-type", "host-driven", "-o", str(tmp_path / "r")])
    assert hint == hints.operator_style()
    # the step: export with --style operator (the fixture did), then the same generate
    succeeds(capsys, ["generate", str(hello["operator"]), "--board", "host",
                      "--project-type", "host-driven", "-o", str(tmp_path / "followed")])


@followed("host-driven")
def test_host_driven(hello, tmp_path, capsys):
    argv = ["generate", str(hello["operator"]), "--board", "host", "--project-type",
            "standalone", "-o", str(tmp_path / "p")]
    assert refused_with(capsys, argv) == hints.host_driven()
    argv[argv.index("standalone")] = "host-driven"
    succeeds(capsys, argv)


@followed("dsp-board")
def test_dsp_board(tmp_path, capsys):
    archive = shared_path("mlf", "letscope-dense3-aot-c-m7-tvm0.13dev", "model.tar")
    hint = refused_with(capsys, ["generate", str(archive), "--board", "qemu-mps2-an385",
                                 "-o", str(tmp_path / "refused")])
    boards = hint.split(": ", 1)[1].split(", ")
    assert hint == hints.dsp_board(boards) and "qemu-mps2-an386" in boards
    for board in {boards[0], boards[-1]}:  # the list's ends (one rule picked them all)
        succeeds(capsys, ["generate", str(archive), "--board", board, "-o",
                          str(tmp_path / board)])


@followed("generate-first")
def test_generate_first(tmp_path, capsys):
    folder = tmp_path / "not-a-project"
    folder.mkdir()
    hint = refused_with(capsys, ["run", str(folder)])
    assert hint == hints.generate_first()
    require_board_tools("host")
    succeeds(capsys, ["generate", str(YES_NO / "model.tar"), "--board", "host", "-o",
                      str(folder), "--force"])
    raw = YES_NO / "yes_0a2b400e_nohash_0.raw"
    succeeds(capsys, ["run", str(folder), "--input", f"Reshape_1={raw}"])


@followed("input-shape")
def test_input_shape(tmp_path, capsys):
    model = tiny_onnx(tmp_path / "dynamic.onnx", "N")
    hint = refused_with(capsys, ["export", str(model), "-o", str(tmp_path / "a.tar")])
    assert hint == hints.input_shape("x", [None, 8])
    option = re.search(r"--input-shape (\S+)", hint).group(1)
    assert option == "x=D0,8"
    succeeds(capsys, ["export", str(model), "-o", str(tmp_path / "a.tar"), "--input-shape",
                      option.replace("D0", "1")])  # the size deployed with


@followed("fixed-shape")
def test_fixed_shape(tmp_path, capsys):
    argv = ["export", str(tiny_onnx(tmp_path / "fixed.onnx", 1)), "-o", str(tmp_path / "m.tar")]
    hint = refused_with(capsys, [*argv, "--input-shape", "x=2,8"])
    assert hint == hints.fixed_shape("x") == "leave out --input-shape x"
    succeeds(capsys, argv)


@followed("serve-host-driven")
def test_serve_host_driven(tmp_path, capsys):
    archive = shared_path("mlf", "snu-conv-graph-syslib-params-tvm0.18", "model.tar")
    succeeds(capsys, ["generate", str(archive), "--board", "host", "-o", str(tmp_path / "s")])
    hint = refused_with(capsys, ["serve", str(tmp_path / "s")])
    assert hint == hints.serve_host_driven("model.tar")
    succeeds(capsys, ["generate", str(archive), "--board", "host", "-o", str(tmp_path / "hd"),
                      "--project-type", "host-driven"])
    host_driven_project(tmp_path / "hd")  # what serve checks first: accepted


@followed("serve-operator-style")
def test_serve_operator_style(hello, tmp_path, capsys):
    succeeds(capsys, ["generate", str(hello["whole"]), "--board", "host", "-o",
                      str(tmp_path / "s")])
    hint = refused_with(capsys, ["serve", str(tmp_path / "s")])
    assert hint == hints.serve_operator_style()
    # the step: export with --style operator (the fixture did), generate it host-driven
    succeeds(capsys, ["generate", str(hello["operator"]), "--board", "host", "-o",
                      str(tmp_path / "hd"), "--project-type", "host-driven"])
    host_driven_project(tmp_path / "hd")


@followed("bigger-board")
def test_bigger_board(tmp_path, capsys):
    hint = refused_with(capsys, ["generate", str(YES_NO / "model.tar"), "--board",
                                 "qemu-microbit", "-o", str(tmp_path / "refused")])
    boards = hint.split(": ", 1)[1].split(", ")
    assert hint == hints.bigger_board(boards) and "qemu-mps2-an385" in boards
    for board in {boards[0], boards[-1]}:  # the list's ends (one rule picked them all)
        succeeds(capsys, ["generate", str(YES_NO / "model.tar"), "--board", board, "-o",
                          str(tmp_path / board)])


@followed("profile-project")
def test_profile_project(hello, tmp_path, capsys):
    project = tmp_path / "hello"
    succeeds(capsys, ["generate", str(hello["whole"]), "--board", "host", "-o", str(project)])
    sample = tmp_path / "x.npy"
    np.save(sample, np.zeros((1, 1), np.int8))
    run = ["run", str(project), "--input", f"serving_default_dense_input:0={sample}",
           "--profile"]
    hint = refused_with(capsys, run)
    assert hint == hints.profile_project(project, "host")
    succeeds(capsys, hint.split(": ", 1)[1].split()[1:])  # the command, as it is written
    succeeds(capsys, run)


def test_every_hint_has_a_test():
    assert FOLLOWED == set(hints.CATALOGUE)
