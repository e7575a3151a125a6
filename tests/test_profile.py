"""`run --profile`: the firmware reads its timer at each call of the run function.

On QEMU (-icount) the per-call instructions add up to the whole inference's, and equal what
TVM's own `time_evaluator` measures through `serve` for the same kernel on the same data
(a stock client replays the inference call by call); the normal build has no marks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from generator.build import build
from generator.cli import main
from generator.elfsize import elf_symbols
from generator.export.operators import export_model_operators
from generator.project.generate import generate
from tests.conftest import (
    REPO,
    archive,
    exported_once,
    host_driven_project,
    require_board_tools,
)

KWS = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"
QEMU = "qemu-mps2-an385"


@pytest.fixture(scope="module")
def kws(tmp_path_factory) -> Path:
    return exported_once(tmp_path_factory, KWS)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("profile-in") / "in.npy"
    np.save(path, np.random.default_rng(5).integers(-128, 128, (1, 49, 10, 1), dtype=np.int8))
    return path


@pytest.fixture(scope="module")
def profiled(kws, sample, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """board → (kws generated with --profile, what `run --profile --json` printed)."""
    import contextlib
    import io

    out = {}
    for board in (QEMU, "host"):
        require_board_tools(board)
        project = tmp_path_factory.mktemp("profiled") / "kws"
        generate(kws, board, project, profile=True)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["run", str(project), "--input", f"input_1={sample}", "--profile",
                         "--json"]) == 0
        out[board] = project, json.loads(printed.getvalue())
    return out


@pytest.mark.parametrize("board", [QEMU, "host"])
def test_calls_add_up_to_the_inference(profiled, board, capsys):
    project, result = profiled[board]
    whole = result["samples"][0]["count"]
    calls = result["samples"][0]["profile"]
    assert len(calls) == 12 and all(c > 0 for c in calls)
    assert abs(sum(calls) - whole) <= 0.01 * whole, (sum(calls), whole)
    rows = result["profile"]
    assert [r["count"] for r in rows] == calls
    assert rows[0]["kernel"] == "q_conv2d" and rows[0]["macs"] == 320_000
    assert abs(sum(r["share"] for r in rows) - 1) < 1e-9
    # `report` shows the profile of this build beside each layer.
    assert main(["report", str(project), "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    unit = result["samples"][0]["unit"]
    assert [la["profile"][unit] for la in layers] == calls


def test_without_profile_the_firmware_has_no_marks(kws, sample, tmp_path, capsys):
    project = tmp_path / "plain"
    generate(kws, QEMU, project)
    build(project)
    names = {s.name for s in elf_symbols(project / "build" / "firmware.elf")}
    assert "mtvg_profile_mark" not in names and "tvmgen_default_run" in names
    assert main(["run", str(project), "--input", f"input_1={sample}", "--profile"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generated without --profile" in err[0] \
        and "--profile" in err[0].split("hint:")[1]


def test_an_archive_without_marks_is_refused(tmp_path, capsys):
    """An AOT archive TVM 0.8 wrote (in the repo: examples/yes_no)."""
    old = archive("guberti-yesno-aot-packed-v5")
    assert main(["generate", str(old), "--board", "host", "-o", str(tmp_path / "p"),
                 "--profile"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no profile marks" in err[0], err
    assert not (tmp_path / "p").exists()


def _constants(project: Path) -> dict[str, bytes]:
    """The weights as the archive's C holds them (`tvmgen_default_const_N`)."""
    text = (project / "model" / "src" / "default_lib2.c").read_text()
    return {m.group(1): bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", m.group(2)))
            for m in re.finditer(r"tvmgen_default_(const_\d+)\[\d+\] = \{(.*?)\};", text, re.S)}


def _replay(tvm, port: int, layers: list[dict], constants: dict[str, bytes],
            values: dict[str, np.ndarray]) -> list[int]:
    """Each layer's kernel called through the stock client on its data (the outputs become
    the next layers' inputs in `values`); time_evaluator's instructions for each call."""
    remote = tvm.rpc.connect("127.0.0.1", port)
    dev, lib = remote.cpu(0), remote.system_lib()
    measured = []
    for layer in layers:
        args, outs = [], []
        for a in layer["args"]:
            dtype, shape = np.dtype(a["dtype"]), a["shape"]
            if a["role"] == "output":
                data = np.zeros(shape, dtype)
            elif a["kind"] == "constant":
                data = np.frombuffer(constants[a["ref"]], dtype).reshape(shape)
            else:
                data = values[a["ref"]].reshape(shape).astype(dtype)
            args.append(tvm.runtime.tensor(data, dev))
            if a["role"] == "output":
                outs.append((a["ref"], args[-1]))
        seconds = lib.time_evaluator(layer["kernel"], dev, number=1, repeat=1)(*args).mean
        measured.append(round(seconds * 1e9))  # the AN385's -icount shift is 0: 1 ns each
        for ref, tensor in outs:
            values[ref] = tensor.numpy()
    return measured


def test_calls_equal_time_evaluator_through_serve(profiled, sample, tmp_path_factory):
    """The stock client replays the inference kernel by kernel on the same data through
    `serve` (an operator-style export of the same model); TVM's time_evaluator and the
    profile agree per call, and the replay ends in the firmware's own output."""
    tvm = pytest.importorskip("tvm")
    from tests.test_host_driven import _serve

    work = tmp_path_factory.mktemp("profile-te")
    standalone, result = profiled[QEMU]
    calls, output = result["samples"][0]["profile"], result["samples"][0]["outputs"]
    operators = export_model_operators(KWS, work / "ops.tar").path
    served = host_driven_project(operators, QEMU, work / "served")
    layers = json.loads((standalone / "model" / "metadata.json").read_text())[
        "modules"]["default"]["layers"]
    constants = _constants(standalone)
    values = {"input_1": np.load(sample)}
    proc, port = _serve(served, "--sessions", "1")
    try:
        measured = _replay(tvm, port, layers, constants, values)
        assert proc.wait(timeout=60) == 0  # the session ended with the replay
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The evaluator times the kernel bound to its checked arguments (mtvg/operator.h), the
    # marks the kernel's call in the run function: every call within 1 %, the smallest too.
    for layer, profiled_count, count, in zip(layers, calls, measured, strict=True):
        assert abs(count - profiled_count) <= 0.01 * profiled_count, (
            layer["kernel"], profiled_count, count)
    assert values["Identity"].tolist() == output["Identity"]


def test_profile_is_refused_for_host_driven_projects(operators_archive, tmp_path):
    """A host-driven project is timed per operator by its client (time_evaluator)."""
    from generator.errors import ProjectError

    with pytest.raises(ProjectError, match="standalone projects"):
        generate(operators_archive, "host", tmp_path / "p", project_type="host-driven",
                 profile=True)
    assert not (tmp_path / "p").exists()
