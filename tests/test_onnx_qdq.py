"""Quantized ONNX models (onnxruntime.quantization.quantize_static, QDQ and QOperator) run
integer and give ONNX Runtime's bytes: on the archive's C on this machine and in QEMU.

The oracle is ONNX Runtime's CPU provider at its default optimization level (which fuses the
QDQ groups into QLinearConv, QGemm, QLinearGlobalAveragePool, ...) with the session option
`session.x64quantprecision=1`: on x86 CPUs without VNNI, MLAS's default u8s8 kernels sum
pairs of products in saturating int16 (vpmaddubsw) and so differ from the int32 arithmetic
of the operators' definition (and of ONNX Runtime on ARM64 or VNNI CPUs); that option makes
them exact.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")

from onnx import TensorProto  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

from generator.errors import ExportError  # noqa: E402
from generator.export.api import export_model  # noqa: E402
from tests.c_runner import CModel  # noqa: E402
from tests.conftest import require_board_tools  # noqa: E402

SAMPLES = 10


def _init(name: str, arr: np.ndarray):
    return nh.from_array(np.asarray(arr, np.float32), name)


def float_model(nodes, inits, in_shape, out_shape) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "m", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                 list(in_shape))],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
                          inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


def cnn(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv → Relu → MaxPool → Conv → GlobalAveragePool → Flatten → Gemm."""
    nodes = [
        oh.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c1"], ["r1"]),
        oh.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        oh.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        oh.make_node("GlobalAveragePool", ["c2"], ["g"]),
        oh.make_node("Flatten", ["g"], ["f"]),
        oh.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]
    inits = [_init("w1", rng.normal(0, .3, (8, 3, 3, 3))), _init("b1", rng.normal(0, .1, 8)),
             _init("w2", rng.normal(0, .2, (16, 8, 3, 3))), _init("b2", rng.normal(0, .1, 16)),
             _init("w3", rng.normal(0, .3, (10, 16))), _init("b3", rng.normal(0, .1, 10))]
    return float_model(nodes, inits, (1, 3, 16, 16), (1, 10))


class _Reader:
    """quantize_static's calibration data: a few random inputs."""

    def __init__(self, shape, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.it = iter([{"x": rng.normal(0, 1, shape).astype(np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.it, None)


def quantized(model: onnx.ModelProto, work: Path, activations: str = "int8",
              per_channel: bool = True, qoperator: bool = False) -> Path:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    work.mkdir(parents=True, exist_ok=True)
    src, dst = work / "float.onnx", work / "quantized.onnx"
    onnx.save(model, src)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    quantize_static(str(src), str(dst), _Reader(shape, 7),
                    quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8 if activations == "uint8"
                    else QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=per_channel)
    return dst


def reference(path: Path, xs: list[np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()  # default optimization level: the fused integer kernels
    options.add_session_config_entry("session.x64quantprecision", "1")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [session.run(None, {"x": x})[0] for x in xs]


def inputs(shape, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1 + 2 * (i % 3), shape).astype(np.float32) for i in range(SAMPLES)]


def check_host(path: Path, tmp_path: Path, kinds: set[str], memory: str = "fast"):
    result = export_model(path, tmp_path / "model.tar", memory=memory)
    assert kinds <= set(result.quant.integer), result.quant.integer
    assert result.quant.fallback == []
    xs = inputs(result.inputs[0].shape)
    want = reference(path, xs)
    model = CModel(result, tmp_path)
    got = [model(x)[0] for x in xs]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    assert len({w.tobytes() for w in want}) > 1  # the outputs depend on the input
    return result


# ---- the small CNN -------------------------------------------------------------------------

@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_cnn_equals_onnxruntime_in_the_archives_c(activations, tmp_path):
    path = quantized(cnn(np.random.default_rng(1)), tmp_path / "q", activations)
    result = check_host(path, tmp_path, {"quantize", "conv2d", "global_avg_pool2d", "dense",
                                         "dequantize"})
    assert [(t.dtype, t.shape) for t in result.inputs] == [("float32", (1, 3, 16, 16))]
    assert [(t.dtype, t.shape) for t in result.outputs] == [("float32", (1, 10))]
    assert result.quant.constant_bytes["weights"] == 8 * 27 + 16 * 72 + 160  # 1 byte each


@pytest.mark.slow
def test_cnn_equals_onnxruntime_on_the_board(tmp_path):
    from generator.project.generate import generate
    from generator.run import run_project

    board = "qemu-mps2-an385"
    require_board_tools(board)
    path = quantized(cnn(np.random.default_rng(1)), tmp_path / "q", "int8")
    result = export_model(path, tmp_path / "model.tar")
    xs = inputs((1, 3, 16, 16))
    want = reference(path, xs)
    project = tmp_path / "proj"
    generate(result.path, board, project)
    report = run_project(project, [{"x": x} for x in xs])
    got = [o["y"] for o in report.outputs]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


def test_cnn_with_memory_small(tmp_path):
    """`--memory small` on the ONNX QDQ path: its NCHW kernels do not run in place yet
    (docs/memory.md), so the plan is the fast one's and the outputs onnxruntime's."""
    path = quantized(cnn(np.random.default_rng(1)), tmp_path / "q")
    result = check_host(path, tmp_path, {"conv2d", "dense"}, memory="small")
    assert result.over_inputs == 0 and result.plan.pool_bytes == result.lifetime_bound


# ---- single operators ------------------------------------------------------------------------

def test_depthwise_conv_with_stride_and_padding(tmp_path):
    rng = np.random.default_rng(2)
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["y"], group=4, pads=[1, 0, 1, 2],
                          strides=[2, 1])]
    inits = [_init("w", rng.normal(0, .4, (4, 1, 3, 3))), _init("b", rng.normal(0, .1, 4))]
    path = quantized(float_model(nodes, inits, (1, 4, 9, 7), (1, 4, 5, 8)), tmp_path / "q")
    check_host(path, tmp_path, {"depthwise_conv2d"})


@pytest.mark.parametrize("per_channel", [True, False])
def test_conv_relu_without_bias_uint8(per_channel, tmp_path):
    rng = np.random.default_rng(3)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["c"], ["y"])]
    inits = [_init("w", rng.normal(0, .4, (6, 2, 3, 3)))]
    path = quantized(float_model(nodes, inits, (1, 2, 6, 6), (1, 6, 6, 6)), tmp_path / "q",
                     "uint8", per_channel)
    check_host(path, tmp_path, {"conv2d"})


def test_matmul_and_reshape_transpose(tmp_path):
    rng = np.random.default_rng(4)
    nodes = [oh.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
             oh.make_node("Reshape", ["t", "shape"], ["r"]),
             oh.make_node("MatMul", ["r", "w"], ["y"])]
    inits = [_init("w", rng.normal(0, .3, (12, 5))),
             nh.from_array(np.array([2, 12], np.int64), "shape")]
    path = quantized(float_model(nodes, inits, (1, 6, 4), (2, 5)), tmp_path / "q")
    check_host(path, tmp_path, {"dense"})


def test_qoperator_format(tmp_path):
    rng = np.random.default_rng(5)
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Reshape", ["c", "shape"], ["r"]),
             oh.make_node("MatMul", ["r", "w2"], ["y"])]
    inits = [_init("w", rng.normal(0, .4, (4, 3, 3, 3))), _init("b", rng.normal(0, .1, 4)),
             _init("w2", rng.normal(0, .2, (64, 7))),
             nh.from_array(np.array([1, 64], np.int64), "shape")]
    path = quantized(float_model(nodes, inits, (1, 3, 4, 4), (1, 7)), tmp_path / "q",
                     "uint8", qoperator=True)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"QLinearConv", "QLinearMatMul"} <= ops, ops
    check_host(path, tmp_path, {"conv2d", "dense"})


def test_an_operator_without_an_integer_conversion_is_refused_by_name(tmp_path):
    rng = np.random.default_rng(6)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"]),
             oh.make_node("Sigmoid", ["c"], ["y"])]
    inits = [_init("w", rng.normal(0, .4, (2, 2, 1, 1)))]
    path = quantized(float_model(nodes, inits, (1, 2, 3, 3), (1, 2, 3, 3)), tmp_path / "q")
    with pytest.raises(ExportError, match="Sigmoid"):
        export_model(path, tmp_path / "model.tar")


def test_concat_and_clip_on_quantized_tensors(tmp_path):
    rng = np.random.default_rng(7)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"]),
             oh.make_node("Concat", ["c", "c"], ["k"], axis=1),
             oh.make_node("MaxPool", ["k"], ["p"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
             oh.make_node("Clip", ["p", "lo", "hi"], ["y"])]
    inits = [_init("w", rng.normal(0, .4, (2, 2, 1, 1))), _init("lo", np.array(-0.5)),
             _init("hi", np.array(0.75))]
    path = quantized(float_model(nodes, inits, (1, 2, 5, 5), (1, 4, 6, 6)), tmp_path / "q")
    # quantize_static folds the Clip into MaxPool's output quantization: DQ → MaxPool → Q
    # with two quantizations, which ONNX Runtime computes in float
    check_host(path, tmp_path, {"conv2d", "requantize"})
