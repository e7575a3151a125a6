"""`microtvm-gen info MODEL.tflite|.onnx`: what export would make of a model (issue 24)."""

from __future__ import annotations

import json

import pytest

from generator.cli import main
from tests.conftest import shared_path
from tests.tflite_builder import ModelBuilder, Tensor


def _info(capsys, path, *extra) -> tuple[int, str, str]:
    code = main(["info", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_kws_lists_every_operator_and_the_planner_bound(capsys):
    model = shared_path("models", "mlperftiny_kws", "kws_ref_model.tflite")
    code, out, err = _info(capsys, model)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("model ") and "TFLite" in lines[0]
    assert "  input   input_1 (C name input_1): int8[1x49x10x1], scale 0.584703, zero point 83" \
        in lines
    assert any(ln.startswith("  output  Identity (C name Identity): int8[1x12]") for ln in lines)
    assert "  op #0   CONV_2D (int8 → int8): integer" in lines
    assert "  op #12  SOFTMAX (int8 → int8): integer" in lines
    assert "  summary 13 operators: 13 integer" in lines
    # export's planner reports a lower bound of 16,000 B for this model
    assert "activations need at least 16000 B of RAM" in out
    assert "bound from the model's tensors" in out and "reshapes become views" in out
    assert lines[-1] == f"next      microtvm-gen export {model} -o model.tar"


@pytest.mark.parametrize("name, dtype, bound", [("hello_world_int8", "int8", 32),
                                                 ("hello_world_float", "float32", 128)])
def test_hello_world_json(capsys, name, dtype, bound):
    """The bounds are those export's planner reports (32 B and 128 B)."""
    model = shared_path("models", "hello_world", f"{name}.tflite")
    code, out, _ = _info(capsys, model, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["format"] == "tflite" and data["path"] == str(model)
    assert data["activation_lower_bound_bytes"] == bound
    assert [op["op"] for op in data["operators"]] == ["FULLY_CONNECTED"] * 3
    status = "integer" if dtype == "int8" else "float"
    assert data["counts"] == {status: 3}
    assert data["summary"] == f"3 operators: 3 {status}"
    (inp,) = data["inputs"]
    assert inp["name"] == "serving_default_dense_input:0"
    assert inp["c_name"] == "serving_default_dense_input_0"
    assert inp["dtype"] == dtype and inp["shape"] == [1, 1]
    assert (inp["quantization"] is None) == (dtype == "float32")
    if dtype == "int8":
        assert set(inp["quantization"]) == {"scale", "zero_point", "axis"}
    assert data["next_step"] == f"microtvm-gen export {model} -o model.tar"


def _chain_with_custom_op(tmp_path):
    """input → RELU → t1 → CUSTOM → t2 → ADD(t1, t2) → output: t1 and t2 (20 B each, 32
    aligned) are alive together at operators 1 and 2; the input and output are not counted."""
    m = ModelBuilder()
    q = {"scale": 0.05, "zero_point": -3}
    x = m.tensor(Tensor((1, 20), "int8", name="input 1", **q))
    t1 = m.tensor(Tensor((1, 20), "int8", name="t1", **q))
    t2 = m.tensor(Tensor((1, 20), "int8", name="t2", **q))
    y = m.tensor(Tensor((1, 20), "int8", name="out", **q))
    m.op("RELU", [x], [t1])
    m.op("CUSTOM", [t1], [t2], custom_code="MtgNoSuchOp")
    m.op("ADD", [t1, t2], [y])
    m.inputs(x)
    m.outputs(y)
    path = tmp_path / "custom.tflite"
    path.write_bytes(m.build())
    return path


def test_unsupported_operator_is_reported_not_an_error(tmp_path, capsys):
    path = _chain_with_custom_op(tmp_path)
    code, out, err = _info(capsys, path)
    assert code == 0 and err == ""
    assert "  input   input 1 (C name input_1): int8[1x20], scale 0.05, zero point -3" in out
    assert "  op #0  RELU (int8 → int8): integer" in out
    assert "  op #1  MtgNoSuchOp (int8 → int8): unsupported: " in out
    assert "  op #2  ADD (int8 → int8): integer" in out  # surveyed past the failure
    assert "  summary 3 operators: 2 integer, 1 unsupported (MtgNoSuchOp #1)" in out
    assert "export refuses this model" in out
    assert "activations need at least 64 B of RAM" in out
    assert out.splitlines()[-1] == f"next      microtvm-gen export {path} -o model.tar"

    code, out, _ = _info(capsys, path, "--json")
    data = json.loads(out)
    assert code == 0 and data["counts"] == {"integer": 2, "unsupported": 1}
    bad = data["operators"][1]
    assert bad["status"] == "unsupported" and bad["reason"] and bad["index"] == 1
    assert data["activation_lower_bound_bytes"] == 64


def test_onnx_nodes_and_converters(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [0.1])
    zero = helper.make_tensor("zero", TensorProto.INT8, [], [0])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "scale", "zero"], ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["d"], name="dequant"),
        helper.make_node("MtgNoSuchOp", ["d"], ["y"], name="mystery", domain="mtg.test"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], [scale, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("mtg.test", 1)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))

    code, out, err = _info(capsys, path)
    assert code == 0 and err == ""
    assert "ONNX, opset 13" in out.splitlines()[0]
    assert "  input   x (C name x): float32[Nx8]" in out
    assert "  op #0  Relu 'relu' (float32 → float32): supported" in out
    assert "  op #1  QuantizeLinear 'quant' (float32 → int8): quantized" in out
    assert "  op #2  DequantizeLinear 'dequant' (int8 → float32): quantized" in out
    assert "  op #3  MtgNoSuchOp 'mystery' (float32 → float32): unsupported: TVM 0.27's Relax " \
           "ONNX frontend has no converter for it (domain 'mtg.test')" in out
    assert "4 nodes: 1 supported, 2 quantized, 1 unsupported (MtgNoSuchOp #3)" in out
    assert "--input-shape x=D0,8" in out
    assert "activations need" not in out
    assert out.splitlines()[-1] == f"next      microtvm-gen export {path} -o model.tar"

    code, out, _ = _info(capsys, path, "--json")
    data = json.loads(out)
    assert code == 0 and data["format"] == "onnx" and data["opset"] == 13
    assert data["inputs"][0]["shape"] == ["N", 8]
    assert data["activation_lower_bound_bytes"] is None
    assert [op["status"] for op in data["operators"]] == ["supported", "quantized",
                                                          "quantized", "unsupported"]


def test_mnist_onnx_is_fully_converted(capsys):
    model = shared_path("models", "mnist-8", "mnist-8.onnx")
    code, out, _ = _info(capsys, model, "--json")
    data = json.loads(out)
    assert code == 0 and data["counts"] == {"supported": 12}
    assert data["inputs"][0]["shape"] == [1, 1, 28, 28]


@pytest.mark.parametrize("name, content", [
    ("garbage.tflite", b"this is not a flatbuffer at all"),
    ("short.tflite", b""),
    ("damaged.tflite", b"\x10\x00\x00\x00TFL3" + bytes(range(256)) * 4),
    ("garbage.onnx", b"\xff\xfe not protobuf \x00\x01" * 10),
])
def test_unreadable_model_is_one_line(tmp_path, capsys, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    code, out, err = _info(capsys, path)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(path) in err
    assert "Traceback" not in err


def test_missing_model_file_is_one_line(tmp_path, capsys):
    code, _, err = _info(capsys, tmp_path / "absent.tflite")
    assert code == 2 and "no such file" in err and len(err.strip().splitlines()) == 1


def test_names_are_shown_escaped(tmp_path, capsys):
    m = ModelBuilder()
    x = m.tensor(Tensor((1, 4), "float32", name="in\x1b[31mred"))
    y = m.tensor(Tensor((1, 4), "float32", name="out"))
    m.op("RELU", [x], [y])
    m.inputs(x)
    m.outputs(y)
    path = tmp_path / "esc.tflite"
    path.write_bytes(m.build())
    code, out, _ = _info(capsys, path)
    assert code == 0 and "\x1b" not in out
    assert "in\\x1b[31mred (C name in__31mred)" in out
    code, out, _ = _info(capsys, path, "--json")
    data = json.loads(out)
    assert code == 0 and data["inputs"][0]["name"] == "in\x1b[31mred"  # kept whole in JSON
    assert data["activation_lower_bound_bytes"] == 0  # only the caller's input and output
