"""uint8 (asymmetric) TFLite models stay integer: a person-detection-style model and single
operators export with no float fallback, the tflite's weight bytes, uint8 inputs and
outputs, and TFLite's bytes on the archive's C, the host board and a Cortex-M3 in QEMU.

The oracle is TFLite's interpreter (ai-edge-litert) with its reference kernels: TFLite
Micro has no uint8 kernels. Also: a quantized conv2d or fully connected layer that keeps the
float path is reported under its own name, not as the bias add around it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tflite

from generator.errors import ExportError
from generator.export import export_model
from generator.project.generate import generate
from generator.run import run_project
from tests.c_runner import CModel
from tests.conftest import require_board_tools
from tests.tflite_models import (
    QTensor,
    _activation,
    _Graph,
    add_model,
    avg_pool_model,
    concat_model,
    conv2d_model,
    conv_output_size,
    depthwise_conv2d_model,
    fully_connected_model,
    max_pool_model,
    person_model,
    random_input,
    random_qtensor,
    random_weights_and_bias,
    softmax_model,
)

MODEL_SEED = 19
SAMPLES = 20  # random inputs for the person-style model
OP_SAMPLES = 4  # random inputs per single-operator model
WEIGHTED = (tflite.BuiltinOperator.CONV_2D, tflite.BuiltinOperator.DEPTHWISE_CONV_2D,
            tflite.BuiltinOperator.FULLY_CONNECTED)


def tflite_reference(path: Path, samples: list[list[np.ndarray]]) -> list[np.ndarray]:
    """TFLite's interpreter with its reference kernels (BUILTIN_REF) on each sample."""
    litert = pytest.importorskip("ai_edge_litert.interpreter",
                                 reason="ai-edge-litert (the [test] extra) is the uint8 oracle")
    interp = litert.Interpreter(model_path=str(path),
                                experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    inputs, output = interp.get_input_details(), interp.get_output_details()[0]
    outs = []
    for xs in samples:
        for detail, x in zip(inputs, xs, strict=True):
            interp.set_tensor(detail["index"], x)
        interp.invoke()
        outs.append(interp.get_tensor(output["index"]).copy())
    return outs


def weight_and_bias_bytes(buf: bytes) -> tuple[int, int]:
    """The weight and bias buffer bytes of the model's conv, depthwise and fully connected
    operators, as stored in the tflite file."""
    model = tflite.Model.GetRootAsModel(buf, 0)
    graph = model.Subgraphs(0)
    totals = [0, 0]
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex()).BuiltinCode()
        if code not in WEIGHTED:
            continue
        for slot in (1, 2):
            tensor = graph.Tensors(op.Inputs(slot))
            totals[slot - 1] += model.Buffers(tensor.Buffer()).DataLength()
    return totals[0], totals[1]


@pytest.fixture(scope="module")
def person(tmp_path_factory):
    work = tmp_path_factory.mktemp("person_uint8")
    buf, inp = person_model(np.random.default_rng(MODEL_SEED))
    path = work / "person_uint8.tflite"
    path.write_bytes(buf)
    result = export_model(path, work / "person_uint8.tar")
    rng = np.random.default_rng(0)
    xs = [random_input(rng, inp) for _ in range(SAMPLES)]
    return buf, path, result, xs, tflite_reference(path, [[x] for x in xs])


def test_person_uint8_is_integer_with_the_files_weight_bytes(person):
    buf, _, result, _, want = person
    assert result.quant.fallback == []
    assert {"conv2d", "depthwise_conv2d", "avg_pool2d", "dense", "softmax"} <= \
        set(result.quant.integer), result.quant.integer
    weights, biases = weight_and_bias_bytes(buf)
    assert result.quant.constant_bytes["weights"] == weights  # 1 byte a weight, as the file
    assert result.quant.constant_bytes["bias"] == biases
    assert result.quant.constant_bytes["requant"] == 0  # per-tensor: in the code
    assert [(t.dtype, t.shape) for t in result.inputs] == [("uint8", (1, 20, 20, 1))]
    assert [(t.dtype, t.shape) for t in result.outputs] == [("uint8", (1, 3))]
    assert len({w.tobytes() for w in want}) > 1  # the outputs depend on the input


def test_person_uint8_equals_tflite_in_the_archives_c(person, tmp_path):
    _, _, result, xs, want = person
    model = CModel(result, tmp_path)
    got = [model(x)[0] for x in xs]
    assert [g.dtype for g in got] == [np.uint8] * len(xs)
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
def test_person_uint8_equals_tflite_on_the_board(person, board, tmp_path):
    require_board_tools(board)
    _, _, result, xs, want = person
    project = tmp_path / "proj"
    generate(result.path, board, project)
    report = run_project(project, [{"input": x} for x in xs])
    got = [o["output"] for o in report.outputs]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    assert all(t.count > 0 for t in report.timings)


# ---- single operators ------------------------------------------------------------------------

def check_uint8(buf: bytes, inputs: list[QTensor], tmp_path: Path, kinds: set[str],
                seed: int = 0) -> None:
    """Export, run the archive's C, and compare every output byte with TFLite's."""
    path = tmp_path / "model.tflite"
    path.write_bytes(buf)
    result = export_model(path, tmp_path / "model.tar")
    assert result.quant.fallback == []
    assert kinds <= set(result.quant.integer), result.quant.integer
    model = CModel(result, tmp_path)
    rng = np.random.default_rng(seed)
    samples = [[random_input(rng, t) for t in inputs] for _ in range(OP_SAMPLES)]
    want = tflite_reference(path, samples)
    for xs, w in zip(samples, want, strict=True):
        got = model(*xs)[0]
        assert got.dtype == w.dtype == np.uint8 and got.shape == w.shape
        assert got.tobytes() == w.tobytes(), np.abs(got.astype(int) - w).max()


def uint8_weights(rng: np.random.Generator, shape: tuple[int, ...], in_scale: float,
                  channels: int, zero: int) -> tuple[QTensor, QTensor]:
    scale = float(rng.uniform(0.002, 0.02))
    weights = random_qtensor(rng, shape, scale, zero, "uint8")
    bias = random_qtensor(rng, (channels,), in_scale * scale, 0, "int32", low=-2000,
                          high=2000)
    return weights, bias


@pytest.mark.parametrize("stride,padding,activation,dilation,w_zero", [
    ((2, 2), "SAME", "RELU6", (1, 1), 141),
    ((1, 1), "VALID", "NONE", (1, 1), 97),
    ((1, 2), "SAME", "RELU", (2, 1), 128),  # weight zero point 0 once mapped to int8
    ((2, 1), "SAME", "NONE", (3, 2), 200),  # border outputs whose taps miss the input
])
def test_conv2d(stride, padding, activation, dilation, w_zero, tmp_path):
    rng = np.random.default_rng(1)
    inp = QTensor((1, 9, 8, 3), 0.05, 117, "uint8")
    weights, bias = uint8_weights(rng, (6, 3, 3, 3), inp.scales[0], 6, w_zero)
    oh = conv_output_size(9, 3, stride[0], padding, dilation[0])
    ow = conv_output_size(8, 3, stride[1], padding, dilation[1])
    out = QTensor((1, oh, ow, 6), 0.1, 131, "uint8")
    buf = conv2d_model(inp, weights, bias, out, stride, padding, activation, dilation)
    check_uint8(buf, [inp], tmp_path, {"conv2d"})


def test_conv2d_multiplier_comes_from_a_float32_scale_product(tmp_path):
    """TFLite's uint8 conv multiplies input and weight scales in float32 before dividing
    by the output scale: with these scales the double product's multiplier is 95 units
    larger, and about one output in 25,000 differs (27 in 655,360 when this was written)."""
    rng = np.random.default_rng(11)
    inp = QTensor((1, 64, 64, 16), 0.004450608044862747, 120, "uint8")
    weights = random_qtensor(rng, (16, 1, 1, 16), 0.007358923554420471, 130, "uint8")
    bias = random_qtensor(rng, (16,), inp.scales[0] * weights.scales[0], 0, "int32",
                          low=-500, high=500)
    out = QTensor((1, 64, 64, 16), 0.0023734048008918762, 128, "uint8")
    buf = conv2d_model(inp, weights, bias, out, padding="VALID")
    check_uint8(buf, [inp], tmp_path, {"conv2d"}, seed=11)


@pytest.mark.parametrize("multiplier,stride,padding", [(1, (1, 1), "SAME"),
                                                      (2, (2, 2), "VALID"),
                                                      (2, (2, 2), "SAME")])
def test_depthwise_conv2d(multiplier, stride, padding, tmp_path):
    rng = np.random.default_rng(2)
    inp = QTensor((1, 7, 7, 4), 0.04, 99, "uint8")
    weights, bias = uint8_weights(rng, (1, 3, 3, 4 * multiplier), inp.scales[0],
                                  4 * multiplier, 151)
    oh = conv_output_size(7, 3, stride[0], padding)
    out = QTensor((1, oh, oh, 4 * multiplier), 0.06, 120, "uint8")
    buf = depthwise_conv2d_model(inp, weights, bias, out, stride, padding, "RELU6",
                                 depth_multiplier=multiplier)
    check_uint8(buf, [inp], tmp_path, {"depthwise_conv2d"})


@pytest.mark.parametrize("in_shape,activation", [((64, 24), "NONE"), ((1, 2, 2, 6), "RELU")])
def test_fully_connected(in_shape, activation, tmp_path):
    """Many outputs near a rounding tie: TFLite's uint8 fully connected rounds once."""
    rng = np.random.default_rng(3)
    depth = in_shape[-1] if len(in_shape) == 2 else 24
    inp = QTensor(in_shape, 0.04, 121, "uint8")
    weights, bias = uint8_weights(rng, (10, depth), inp.scales[0], 10, 133)
    out = QTensor((int(np.prod(in_shape)) // depth, 10), 0.3, 110, "uint8")
    buf = fully_connected_model(inp, weights, bias, out, activation)
    check_uint8(buf, [inp], tmp_path, {"dense"})


@pytest.mark.parametrize("filt,stride,padding", [((2, 2), (2, 2), "VALID"),
                                                 ((3, 3), (2, 2), "SAME")])
def test_avg_pool_rounds_as_tflites_uint8_pool(filt, stride, padding, tmp_path):
    inp = QTensor((1, 7, 6, 3), 0.05, 128, "uint8")
    out = QTensor((1, conv_output_size(7, filt[0], stride[0], padding),
                   conv_output_size(6, filt[1], stride[1], padding), 3), 0.05, 128, "uint8")
    check_uint8(avg_pool_model(inp, out, filt, stride, padding), [inp], tmp_path,
                {"avg_pool2d"}, seed=4)


def test_max_pool(tmp_path):
    inp = QTensor((1, 6, 6, 2), 0.05, 30, "uint8")
    out = QTensor((1, 3, 3, 2), 0.05, 30, "uint8")
    check_uint8(max_pool_model(inp, out), [inp], tmp_path, {"max_pool2d"})


@pytest.mark.parametrize("shape_b,activation", [((1, 4, 4, 8), "NONE"), ((1, 1, 1, 8), "RELU")])
def test_add(shape_b, activation, tmp_path):
    a, b = QTensor((1, 4, 4, 8), 0.05, 131, "uint8"), QTensor(shape_b, 0.02, 118, "uint8")
    out = QTensor((1, 4, 4, 8), 0.07, 126, "uint8")
    check_uint8(add_model(a, b, out, activation), [a, b], tmp_path, {"add"})


@pytest.mark.parametrize("shape,scale", [((1, 10), 0.1), ((3, 7), 0.02)])
def test_softmax(shape, scale, tmp_path):
    inp = QTensor(shape, scale, 140, "uint8")
    out = QTensor(shape, 1.0 / 256, 0, "uint8")  # TFLite's uint8 softmax output
    check_uint8(softmax_model(inp, out), [inp], tmp_path, {"softmax"})


def test_concatenation(tmp_path):
    parts = [QTensor((1, 2, 3, c), 0.04, 127, "uint8") for c in (2, 5)]
    out = QTensor((1, 2, 3, 7), 0.04, 127, "uint8")
    check_uint8(concat_model(parts, out, 3), parts, tmp_path, {"concatenation"})


def test_an_integer_logistic_after_an_integer_one_reads_uint8(tmp_path):
    """FULLY_CONNECTED then LOGISTIC, both integer (the logistic a table of TFLite's
    fixed-point results): bit-exact with TFLite, uint8 at the edges."""
    rng = np.random.default_rng(6)
    g = _Graph()
    inp = QTensor((2, 12), 0.03, 125, "uint8")
    weights, bias = uint8_weights(rng, (5, 12), inp.scales[0], 5, 90)
    hidden = QTensor((2, 5), 0.05, 128, "uint8")
    x, w, b, h = g.add("input", inp), g.add("w", weights), g.add("b", bias), g.add("h", hidden)
    y = g.add("output", QTensor((2, 5), 1.0 / 256, 0, "uint8"))

    def fc_options(fb) -> int:
        tflite.FullyConnectedOptionsStart(fb)
        tflite.FullyConnectedOptionsAddFusedActivationFunction(fb, _activation("NONE"))
        return tflite.FullyConnectedOptionsEnd(fb)

    buf = g.serialize_ops([
        (tflite.BuiltinOperator.FULLY_CONNECTED, [x, w, b], [h],
         tflite.BuiltinOptions.FullyConnectedOptions, fc_options),
        (tflite.BuiltinOperator.LOGISTIC, [h], [y], tflite.BuiltinOptions.NONE, lambda fb: 0),
    ], [x], [y])
    path = tmp_path / "model.tflite"
    path.write_bytes(buf)
    result = export_model(path, tmp_path / "model.tar")
    assert result.quant.integer == ["dense", "logistic"]
    assert result.quant.fallback == []
    model = CModel(result, tmp_path)
    samples = [[random_input(rng, inp)] for _ in range(OP_SAMPLES)]
    want = tflite_reference(path, samples)
    for xs, wanted in zip(samples, want, strict=True):
        got = model(*xs)[0]
        assert got.dtype == np.uint8
        assert got.tobytes() == wanted.tobytes()


# ---- the fallback report names the operator ------------------------------------------------

def test_int8_conv2d_weights_with_a_zero_point_are_refused_naming_the_operator(tmp_path):
    """int8 weights with a nonzero zero point: TFLite's int8 kernels take none, and export
    keeps no float path for a quantized operator: one line naming the operator."""
    rng = np.random.default_rng(7)
    inp = QTensor((1, 5, 5, 2), 0.05, 3)
    weights, bias = random_weights_and_bias(rng, (4, 3, 3, 2), inp.scales[0], per_channel=False)
    weights.zero_point = 5
    buf = conv2d_model(inp, weights, bias, QTensor((1, 5, 5, 4), 0.1, 0), activation="RELU")
    path = tmp_path / "conv.tflite"
    path.write_bytes(buf)
    with pytest.raises(ExportError, match=r"operator #0 CONV_2D \(int8 → int8\) is not "
                                          r"supported: int8 weights with a nonzero zero point"):
        export_model(path, tmp_path / "conv.tar")


def test_int8_fully_connected_weights_with_a_zero_point_are_refused(tmp_path):
    rng = np.random.default_rng(8)
    inp = QTensor((1, 16), 0.05, 3)
    weights, bias = random_weights_and_bias(rng, (4, 16), inp.scales[0], per_channel=False)
    weights.zero_point = -7
    buf = fully_connected_model(inp, weights, bias, QTensor((1, 4), 0.1, 0))
    path = tmp_path / "fc.tflite"
    path.write_bytes(buf)
    with pytest.raises(ExportError, match=r"operator #0 FULLY_CONNECTED .* nonzero zero point"):
        export_model(path, tmp_path / "fc.tar")
