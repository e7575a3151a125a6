"""Float ONNX models as torch.onnx.export writes them (numeric and '::' tensor names, one
opset each from 13 to 18), built with onnx.helper: export, compile the archive's C on the
host, compare with ONNX Runtime within 1e-5."""

from __future__ import annotations

import numpy as np
import pytest

from generator.errors import ExportError
from generator.export.api import export_model
from tests.c_runner import CModel

onnx = pytest.importorskip("onnx", reason="needs the onnx package")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the [test] extra)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(13)


def _w(name: str, *shape: int, scale: float = 0.3) -> object:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32),
                                   name)


def _cnn(opset: int) -> onnx.ModelProto:
    """Conv → BatchNormalization → Relu → MaxPool → Pad → Conv → Clip → AveragePool →
    (Sigmoid, Tanh) → Concat → ReduceMean → Flatten → MatMul → Add → Softmax, with a
    Transpose/Reshape branch, named the PyTorch way."""
    inits = [
        _w("onnx::Conv_101", 4, 1, 3, 3), _w("onnx::Conv_102", 4),
        numpy_helper.from_array(np.abs(RNG.standard_normal(4)).astype(np.float32) + 0.5,
                                "bn.weight"),
        _w("bn.bias", 4), _w("bn.running_mean", 4),
        numpy_helper.from_array(np.abs(RNG.standard_normal(4)).astype(np.float32) + 0.5,
                                "bn.running_var"),
        _w("onnx::Conv_104", 6, 4, 3, 3), _w("onnx::Conv_105", 6),
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array(0.0, np.float32), "clip_lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "clip_hi"),
        numpy_helper.from_array(np.array([1, 12, 25], np.int64), "shape1"),
        _w("fc.weight_t", 12, 5), _w("fc.bias", 5),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["input.1", "onnx::Conv_101", "onnx::Conv_102"], ["1"], kernel_shape=[3, 3],
          pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["1", "bn.weight", "bn.bias", "bn.running_mean",
                                 "bn.running_var"], ["2"], epsilon=1e-5),
        n("Relu", ["2"], ["3"]),
        n("MaxPool", ["3"], ["4"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Pad", ["4", "pads"], ["5"], mode="constant"),
        n("Conv", ["5", "onnx::Conv_104", "onnx::Conv_105"], ["6"], kernel_shape=[3, 3]),
        n("Clip", ["6", "clip_lo", "clip_hi"], ["7"]),
        n("AveragePool", ["7"], ["8"], kernel_shape=[2, 2], strides=[1, 1]),
        n("Sigmoid", ["8"], ["9"]),
        n("Tanh", ["8"], ["10"]),
        n("Concat", ["9", "10"], ["11"], axis=1),
        n("Transpose", ["11"], ["12"], perm=[0, 2, 3, 1]),
        n("Transpose", ["12"], ["13"], perm=[0, 3, 1, 2]),
        n("Reshape", ["13", "shape1"], ["14"]),
        n("ReduceMean", ["14"] + (["axes"] if opset >= 18 else []), ["15"],
          **({"axes": [2]} if opset < 18 else {}), keepdims=0),
        n("MatMul", ["15", "fc.weight_t"], ["16"]),
        n("Add", ["16", "fc.bias"], ["17"]),
        n("Softmax", ["17"], ["output"], axis=-1),
    ]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([2], np.int64), "axes"))
    graph = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 1, 12, 12])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("opset", [13, 15, 17, 18])
def test_pytorch_style_cnn_equals_onnxruntime(opset, tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(_cnn(opset), str(path))
    result = export_model(path, tmp_path / "model.tar")
    model = CModel(result, tmp_path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for _ in range(3):
        x = RNG.standard_normal((1, 1, 12, 12)).astype(np.float32)
        (got,) = model(x)
        (want,) = session.run(None, {"input.1": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _one_op(op: str, opset: int, inits: list, **attrs) -> onnx.ModelProto:
    inputs = ["x", *(i.name for i in inits)]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


ONE_OPS = {
    "softplus": ("Softplus", [], {}),
    "softsign": ("Softsign", [], {}),
    "prelu-per-channel": ("PRelu", [_w("slope", 3, 1, 1)], {}),
    "slice-without-optional-inputs": (  # no axes, no steps: axis 0 from 0 up to 1
        "Slice", [numpy_helper.from_array(np.array([0], np.int64), "starts"),
                  numpy_helper.from_array(np.array([1], np.int64), "ends")], {}),
    "hard-sigmoid": ("HardSigmoid", [], {}),
    "leaky-relu": ("LeakyRelu", [], {"alpha": 0.1}),
}


def test_a_model_with_an_empty_output_is_refused_at_export(tmp_path):
    """A Slice past the end of axis 0 leaves nothing to return: export says so, rather than
    write an archive `generate` cannot use."""
    starts, ends = (numpy_helper.from_array(np.array([v], np.int64), n)
                    for v, n in ((1, "starts"), (3, "ends")))
    path = tmp_path / "model.onnx"
    onnx.save(_one_op("Slice", 17, [starts, ends]), str(path))
    with pytest.raises(ExportError, match=r"output 'y' has no elements \(shape \(0, 3, 4, 4\)\)"):
        export_model(path, tmp_path / "model.tar")
    assert not (tmp_path / "model.tar").exists()


@pytest.mark.parametrize("name", list(ONE_OPS))
def test_float_operator_equals_onnxruntime(name, tmp_path):
    op, inits, attrs = ONE_OPS[name]
    path = tmp_path / "model.onnx"
    onnx.save(_one_op(op, 17, inits, **attrs), str(path))
    result = export_model(path, tmp_path / "model.tar")
    model = CModel(result, tmp_path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32) * 3
    (got,) = model(x)
    (want,) = session.run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("board", ["qemu-mps2-an385"])
def test_pytorch_style_cnn_on_the_board(board, tmp_path):
    from generator.project.generate import generate
    from generator.run import run_project
    from tests.conftest import require_board_tools

    require_board_tools(board)
    path = tmp_path / "model.onnx"
    onnx.save(_cnn(17), str(path))
    result = export_model(path, tmp_path / "model.tar")
    generate(result.path, board, tmp_path / "proj")
    xs = [RNG.standard_normal((1, 1, 12, 12)).astype(np.float32) for _ in range(2)]
    report = run_project(tmp_path / "proj", [{"input.1": x} for x in xs])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for x, outputs in zip(xs, report.outputs, strict=True):
        (want,) = session.run(None, {"input.1": x})
        np.testing.assert_allclose(np.asarray(outputs["output"]), want, rtol=1e-5, atol=1e-6)
