"""Tensor names from models are data: C names by generator.cnames, originals in metadata.

PyTorch's ONNX export names tensors `input.1`, `0`, `23`, `onnx::Conv_5`; such a model
must export, compile, read back, generate and run by the names the model gives.
"""

from __future__ import annotations

import json
import random
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from generator.cli import main
from generator.cnames import MAX_C_NAME, c_identifiers, is_c_identifier
from generator.errors import ExportError, MlfError
from generator.export.api import export_model
from generator.mlf import read_mlf
from tests.c_runner import CModel
from tests.conftest import require_board_tools

onnx = pytest.importorskip("onnx", reason="needs the onnx package")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

LONG = "x" * 300  # survives any importer's renaming unchanged
LONG_ODD = ("layer.3/attn::out*/ " * 16)[:300]  # 300 characters, "*/" included


# ---- the rule ------------------------------------------------------------------------------

def test_leading_digits_get_a_prefix():
    assert c_identifiers(["1", "23", "0"]) == ["t_1", "t_23", "t_0"]


def test_pytorch_names():
    assert c_identifiers(["input.1", "onnx::Conv_5", "23"]) == \
        ["input_1", "onnx__Conv_5", "t_23"]


def test_valid_names_are_kept():
    names = ["Input3", "Plus214_Output_0", "serving_default_x", "_x", "x"]
    assert c_identifiers(names) == names


def test_empty_and_unicode():
    assert c_identifiers([""]) == ["t_"]
    assert c_identifiers(["größe", "日本", "é1"]) == ["gr__e", "t___", "_1"]


def test_keywords_and_standard_names_get_a_suffix():
    assert c_identifiers(["int", "void", "class", "NULL", "int8_t", "memcpy"]) == \
        ["int_", "void_", "class_", "NULL_", "int8_t_", "memcpy_"]


def test_reserved_identifiers_get_a_prefix():
    assert c_identifiers(["__x", "_X", "__"]) == ["t___x", "t__X", "t___"]


def test_collisions_after_sanitising():
    assert c_identifiers(["a.b", "a_b"]) == ["a_b_2", "a_b"]  # the valid name keeps its own
    assert c_identifiers(["a.b", "a:b", "a b"]) == ["a_b", "a_b_2", "a_b_3"]
    assert c_identifiers(["1", "t_1"]) == ["t_1_2", "t_1"]
    assert c_identifiers(["a.b", "a_b", "a_b_2"]) == ["a_b_3", "a_b", "a_b_2"]


def test_names_differing_only_in_case_differ_in_upper_case_too():
    out = c_identifiers(["A", "a", "x.y", "X_Y"])
    assert out == ["A", "a_2", "x_y_2", "X_Y"]
    assert len({c.upper() for c in out}) == 4  # TVMGEN_<MOD>_<NAME>_SIZE macros


def test_long_names_are_cut_with_a_stable_hash():
    a, b = LONG, LONG[:-1] + "y"
    ca, cb = c_identifiers([a, b])
    assert len(ca) == len(cb) == MAX_C_NAME and ca != cb
    assert ca[:54] == cb[:54] == "x" * 54
    assert ca == c_identifiers([a])[0]  # the hash is of the name, not of its position
    long_odd = c_identifiers([LONG_ODD])[0]
    assert is_c_identifier(long_odd) and len(long_odd) == MAX_C_NAME
    # Collisions of cut names stay within the bound.
    same = c_identifiers(["y" * 300, "y" * 300 + "."])
    assert all(len(c) <= MAX_C_NAME for c in same) and len(set(same)) == 2


def test_every_result_is_a_unique_valid_identifier_and_deterministic():
    rng = random.Random(24)
    alphabet = "ab_.:/0123 -éß*AZ"
    for _ in range(200):
        names = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))
                 for _ in range(rng.randrange(1, 8))]
        out = c_identifiers(names)
        assert out == c_identifiers(list(names))
        assert all(is_c_identifier(c) for c in out), (names, out)
        assert len({c.lower() for c in out}) == len(out), (names, out)


# ---- a model exported from PyTorch ---------------------------------------------------------

def _torch_style_model(path: Path, input_name: str = "input.1", output_name: str = "23",
                       opset: int = 13) -> Path:
    """Conv → Relu → Flatten → Gemm, named the way torch.onnx.export names things."""
    rng = np.random.default_rng(5)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
                                "onnx::Conv_5"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "onnx::Conv_6"),
        numpy_helper.from_array(rng.standard_normal((5, 144)).astype(np.float32),
                                "fc.weight"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc.bias"),
    ]
    nodes = [
        helper.make_node("Conv", [input_name, "onnx::Conv_5", "onnx::Conv_6"], ["1"],
                         name="/conv/Conv", kernel_shape=[3, 3]),
        helper.make_node("Relu", ["1"], ["2"], name="/relu/Relu"),
        helper.make_node("Flatten", ["2"], ["3"], name="/Flatten"),
        helper.make_node("Gemm", ["3", "fc.weight", "fc.bias"], [output_name],
                         name="/fc/Gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [1, 5])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _reference(model: Path, x: np.ndarray) -> np.ndarray:
    """onnxruntime's output when it is installed, else the same model in numpy."""
    try:
        import onnxruntime
    except ImportError:
        m = onnx.load(str(model))
        w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        cw, cb = w["onnx::Conv_5"], w["onnx::Conv_6"]
        conv = np.zeros((1, 4, 6, 6), np.float64)
        for i in range(6):
            for j in range(6):
                conv[0, :, i, j] = np.tensordot(cw[:, 0], x[0, 0, i:i + 3, j:j + 3], 2)
        conv += cb[None, :, None, None]
        flat = np.maximum(conv, 0).reshape(1, -1)
        return (flat @ w["fc.weight"].T + w["fc.bias"]).astype(np.float32)
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _metadata(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        return json.load(tar.extractfile("./metadata.json"))["modules"]["default"]


def _header(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        return tar.extractfile("./codegen/host/include/tvmgen_default.h").read().decode()


@pytest.mark.parametrize(("input_name", "input_c", "opset"),
                         [("input.1", "input_1", 13), ("0", "t_0", 17)])
def test_pytorch_style_onnx_exports_and_computes(tmp_path, input_name, input_c, opset):
    model = _torch_style_model(tmp_path / "torch.onnx", input_name, opset=opset)
    result = export_model(model, tmp_path / "m.tar")
    assert [(t.name, t.c_name) for t in result.inputs] == [(input_name, input_c)]
    assert [(t.name, t.c_name) for t in result.outputs] == [("23", "t_23")]
    meta = _metadata(result.path)
    assert [(t["name"], t["c_name"]) for t in meta["inputs"]] == [(input_name, input_c)]
    assert [(t["name"], t["c_name"]) for t in meta["outputs"]] == [("23", "t_23")]
    assert list(meta["memory"]["functions"]["main"][0]["outputs"]) == ["23"]
    header = _header(result.path)
    assert f"  void* {input_c};" in header and "  void* t_23;" in header
    assert "#define TVMGEN_DEFAULT_T_23_SIZE 20" in header

    module = read_mlf(result.path).module()
    assert [(t.name, t.c_name) for t in module.inputs] == [(input_name, input_c)]
    assert [(t.name, t.c_name, t.shape) for t in module.outputs] == [("23", "t_23", (1, 5))]

    x = np.random.default_rng(7).standard_normal((1, 1, 8, 8)).astype(np.float32)
    (got,) = CModel(result, tmp_path / "c")(x)  # lib1.c includes the header: -Werror
    np.testing.assert_allclose(got, _reference(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
def test_generate_and_run_by_either_name(tmp_path, capsys, board):
    require_board_tools(board)
    model = _torch_style_model(tmp_path / "torch.onnx")
    archive = tmp_path / "m.tar"
    assert main(["export", str(model), "-o", str(archive)]) == 0
    project = tmp_path / "project"
    assert main(["generate", str(archive), "--board", board, "-o", str(project)]) == 0
    listed = json.loads((project / "project.json").read_text())["module"]
    assert [(t["name"], t["c_name"]) for t in listed["inputs"]] == [("input.1", "input_1")]
    glue = (project / "app" / "model_glue.c").read_text()
    assert ".input_1 = input_0," in glue and ".t_23 = output_0," in glue
    capsys.readouterr()

    x = np.random.default_rng(3).standard_normal((1, 1, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = _reference(model, x)
    for name in ("input.1", "input_1"):  # the model's name, then the C name
        assert main(["run", str(project), "--input", f"{name}={tmp_path / 'x.npy'}",
                     "--json"]) == 0
        sample = json.loads(capsys.readouterr().out)["samples"][0]
        assert list(sample["outputs"]) == ["23"]
        np.testing.assert_allclose(np.array(sample["outputs"]["23"], np.float32), want,
                                   rtol=1e-5, atol=1e-5)

    out_dir = tmp_path / "out"
    assert main(["run", str(project), "--input", f"input.1={tmp_path / 'x.npy'}",
                 "--output-dir", str(out_dir)]) == 0
    assert np.load(out_dir / "t_23.npy").shape == (1, 5)
    capsys.readouterr()

    assert main(["run", str(project), "--input", f"input.2={tmp_path / 'x.npy'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "no input 'input.2'" in err and "input.1 (C name input_1)" in err


# ---- names the reader and the C must not trip on ---------------------------------------------

def test_300_character_names_round_trip(tmp_path, capsys):
    model = _torch_style_model(tmp_path / "long.onnx", LONG, LONG_ODD)
    archive = tmp_path / "long.tar"
    assert main(["export", str(model), "-o", str(archive)]) == 0
    meta = _metadata(archive)
    assert meta["inputs"][0]["name"] == LONG and meta["outputs"][0]["name"] == LONG_ODD
    c_in, c_out = meta["inputs"][0]["c_name"], meta["outputs"][0]["c_name"]
    assert c_in == c_identifiers([LONG, LONG_ODD])[0] and len(c_in) == MAX_C_NAME
    assert is_c_identifier(c_out)
    assert "*/ " not in _header(archive).split("*/", 1)[1].replace(" */\n", "\n")
    capsys.readouterr()

    assert main(["info", str(archive), "--json"]) == 0
    module = json.loads(capsys.readouterr().out)["modules"][0]
    assert [(t["name"], t["c_name"]) for t in module["inputs"]] == [(LONG, c_in)]
    assert [(t["name"], t["c_name"]) for t in module["outputs"]] == [(LONG_ODD, c_out)]
    assert main(["info", str(archive)]) == 0
    assert LONG in capsys.readouterr().out

    project = tmp_path / "project"
    assert main(["generate", str(archive), "--board", "host", "-o", str(project)]) == 0
    glue = (project / "app" / "model_glue.c").read_text()
    assert f".{c_in} = input_0," in glue and f".{c_out} = output_0," in glue
    assert LONG_ODD not in glue  # only as an escaped string literal


def test_a_name_with_control_characters_is_refused_at_export(tmp_path, capsys):
    model = _torch_style_model(tmp_path / "bad.onnx", output_name="out\nput")
    with pytest.raises(ExportError, match="control characters"):
        export_model(model, tmp_path / "a.tar")
    assert main(["export", str(model), "-o", str(tmp_path / "b.tar")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err
    assert err.splitlines()[-1].endswith("holds control characters; an archive cannot keep "
                                         "this name")
    assert not (tmp_path / "a.tar").exists() and not (tmp_path / "b.tar").exists()


def _extracted(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest


@pytest.mark.parametrize(("c_name", "why"), [
    ("t_23; int evil", "not a C identifier"),
    ("t_24", "does not declare"),
])
def test_reader_checks_c_names(tmp_path, c_name, why):
    model = _torch_style_model(tmp_path / "torch.onnx")
    src = _extracted(export_model(model, tmp_path / "m.tar").path, tmp_path / "src")
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    meta_path = bad / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["modules"]["default"]["outputs"][0]["c_name"] = c_name
    meta_path.write_text(json.dumps(meta))
    assert read_mlf(src).module().outputs[0].c_name == "t_23"
    with pytest.raises(MlfError, match=why):
        read_mlf(bad)
