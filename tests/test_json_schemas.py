"""Every command's --json against its schema in docs/json.md (issue: no surprises).

Each command runs for real (export, generate, build and run on the host and in QEMU, serve
with a stock TVM RPC client, tune on the host) and what it prints must validate; the
schemas' `additionalProperties: false` make a key the doc does not list a failure.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from generator.cli import COMMANDS, main
from tests.conftest import REPO, YES_NO, require_board_tools

DOC = REPO / "docs" / "json.md"
HELLO = REPO / "tests" / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
MNIST = REPO / "examples" / "mnist" / "mnist-8.onnx"
RAW = YES_NO / "yes_0a2b400e_nohash_0.raw"


def schemas() -> dict[str, dict]:
    """Heading (e.g. "export (operator style)") → its schema, the shared $defs merged in."""
    text = DOC.read_text()
    defs = json.loads(re.search(r"```json defs\n(.*?)```", text, re.S).group(1))
    found = {}
    blocks = re.findall(r"^### `([^`]+)`([^\n]*)\n(?:[^`]|`(?!``))*?```json schema\n(.*?)```",
                        text, re.S | re.M)
    for heading, tail, body in blocks:
        schema = json.loads(body)
        schema["$defs"] = {**defs, **schema.get("$defs", {})}
        jsonschema.Draft202012Validator.check_schema(schema)
        found[(heading + tail).strip()] = schema
    return found


SCHEMAS = schemas()


def validate(heading: str, document: object) -> None:
    jsonschema.Draft202012Validator(SCHEMAS[heading]).validate(document)


def cli_json(capsys, argv: list[str], code: int = 0) -> object:
    capsys.readouterr()
    assert main([*argv, "--json"]) == code, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_every_reporting_command_has_a_schema():
    reporting = {c.name for c in COMMANDS if c.reports}
    assert reporting == {heading.split()[0] for heading in SCHEMAS}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("json")


@pytest.fixture(scope="module")
def exported(work) -> dict[str, dict]:
    """export --json of hello_world int8, both styles (the archives land in `work`)."""
    import contextlib
    import io

    printed = {}
    for style, name in (("full-model", "m.tar"), ("operator", "ops.tar")):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["export", str(HELLO), "-o", str(work / name), "--style", style,
                         "--json"]) == 0
        printed[style] = json.loads(out.getvalue())
    return printed


def test_export_and_info(work, exported, capsys):
    validate("export", exported["full-model"])
    validate("export (operator style)", exported["operator"])
    archives = [work / "m.tar", work / "ops.tar", YES_NO / "model.tar",
                REPO / "tests" / "fixtures" / "mlf" / "hannah-magicwand-graph-c-tvm0.11dev"
                / "model.tar"]
    for archive in archives:
        validate("info", cli_json(capsys, ["info", str(archive)]))
    for model in (HELLO, MNIST):
        validate("info (model file)", cli_json(capsys, ["info", str(model)]))


def test_boards_and_accelerators(capsys):
    validate("boards", cli_json(capsys, ["boards"]))
    validate("accelerators", cli_json(capsys, ["accelerators"]))


@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
def test_generate_build_run(board, work, capsys):
    require_board_tools(board)
    project = work / f"p-{board}"
    validate("generate", cli_json(capsys, ["generate", str(YES_NO / "model.tar"), "--board",
                                           board, "-o", str(project)]))
    validate("build", cli_json(capsys, ["build", str(project)]))
    report = cli_json(capsys, ["run", str(project), "--input", f"Reshape_1={RAW}",
                               "--output-dir", str(work / f"out-{board}")])
    validate("run", report)
    assert report["samples"][0]["unit"] == ("ns" if board == "host" else "instructions")
    validate("report", cli_json(capsys, ["report", str(project)]))  # TVM 0.8's archive


def test_profiled_run_and_report(work, exported, capsys):
    """run --profile and report of an archive our exporter wrote (its layers, the profile)."""
    project = work / "profiled"
    assert main(["generate", str(work / "m.tar"), "--board", "host", "-o", str(project),
                 "--profile"]) == 0
    sample = work / "hello.npy"
    np.save(sample, np.zeros((1, 1), np.int8))
    run = cli_json(capsys, ["run", str(project), "--input",
                            f"serving_default_dense_input:0={sample}", "--profile"])
    validate("run", run)
    assert len(run["profile"]) == len(run["samples"][0]["profile"]) == 3
    report = cli_json(capsys, ["report", str(project), "--html", str(work / "r.html")])
    validate("report", report)
    validate("report", cli_json(capsys, ["info", "--memory", str(work / "m.tar"), "--board",
                                         "qemu-mps2-an385"]))
    assert all(layer["profile"] for layer in report["layers"])


def test_flash_dry_run(work, capsys):
    project = work / "physical"
    assert main(["generate", str(YES_NO / "model.tar"), "--board", "nucleo-f746zg", "-o",
                 str(project)]) == 0
    validate("flash", cli_json(capsys, ["flash", str(project), "--dry-run"]))


def test_serve_events(work, exported, capsys):
    """serve --json --sessions 1: the listening event, a stock client's session, done."""
    import tvm

    require_board_tools("host")
    project = work / "served"
    assert main(["generate", str(work / "ops.tar"), "--board", "host", "-o",
                 str(project), "--project-type", "host-driven"]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "generator", "serve", str(project),
                             "--port", "0", "--sessions", "1", "--json"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        listening = json.loads(proc.stdout.readline())
        validate("serve", listening)
        remote = tvm.rpc.connect("127.0.0.1", listening["port"])
        assert remote.device("cpu").exist  # one round trip, then the session ends
        del remote
        done = json.loads(proc.stdout.readline())
        validate("serve", done)
        assert (listening["event"], done["event"]) == ("listening", "done")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_tune(work, capsys):
    """A one-operator model (one task), one candidate: the whole summary, quickly."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    require_board_tools("host")
    weights = numpy_helper.from_array(np.ones((16, 8), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [weights])
    model = work / "matmul.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    summary = cli_json(capsys, ["tune", str(model), "--board", "host", "--trials", "1",
                                "-o", str(work / "tuning")])
    validate("tune", summary)
    assert len(summary["tasks"]) == 1 and summary["measured"] == 1


def test_report_of_placed_memory(work, exported, capsys):
    """A board with [[regions]] (their kinds: tcm, external...) and memory placed in them."""
    require_board_tools("qemu-mps3-an547")
    project = work / "placed"
    assert main(["generate", str(work / "m.tar"), "--board", "qemu-mps3-an547", "-o",
                 str(project), "--place", "activations=DTCM,weights=DDR"]) == 0
    assert main(["build", str(project)]) == 0
    report = cli_json(capsys, ["report", str(project)])
    validate("report", report)
    kinds = {r["name"]: r["kind"] for r in report["regions"]}
    assert kinds["DTCM"] == "tcm" and kinds["DDR"] == "external"
    ddr = [b for r in report["regions"] if r["name"] == "DDR" for b in r["blocks"]]
    assert {b["category"] for b in ddr} <= {"weights", "other"}  # other: alignment padding
    assert sum(b["bytes"] for b in ddr if b["category"] == "weights") > 0
