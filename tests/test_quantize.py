"""Quantized models stay integer: every int8 operator the exporter rewrites gives exactly
TensorFlow Lite Micro's bytes (single-operator models built in tests/tflite_models.py,
run as the archive's C); the fixed-point primitives; the float fallback and its report.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from generator.export import export_model, export_relax
from generator.export.fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    PyArith,
    accumulator_bound,
    exp_on_negative_values,
    multiply_by_quantized_multiplier,
    narrow_fits,
    narrow_requantize,
    one_over_one_plus_x,
    quantize_multiplier,
    softmax_params,
)
from generator.export.planner import Interval, lower_bound, plan
from generator.export.qkernels import Requant
from tests.c_runner import CModel
from tests.tflite_models import (
    QTensor,
    add_model,
    avg_pool_model,
    concat_model,
    conv2d_model,
    conv_output_size,
    depthwise_conv2d_model,
    fully_connected_model,
    max_pool_model,
    random_input,
    random_weights_and_bias,
    reshape_model,
    softmax_model,
    softmax_output,
)

SAMPLES = 4  # random inputs per model


def tflm(path: Path, inputs: list[np.ndarray]) -> np.ndarray:
    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime",
                                  reason="tflite-micro (the [test] extra) is the oracle")
    interp = runtime.Interpreter.from_file(str(path))
    for i, x in enumerate(inputs):
        interp.set_input(x, i)
    interp.invoke()
    return np.array(interp.get_output(0))


def check_bit_exact(buf: bytes, inputs: list[QTensor], tmp_path: Path, kinds: set[str],
                    seed: int = 0) -> None:
    """Export the model, run its C, and compare every output byte with TFLite Micro."""
    path = tmp_path / "model.tflite"
    path.write_bytes(buf)
    result = export_model(path, tmp_path / "model.tar")
    assert not result.quant.fallback, result.quant.fallback
    assert kinds <= set(result.quant.integer), result.quant.integer
    model = CModel(result, tmp_path)
    rng = np.random.default_rng(seed)
    for _ in range(SAMPLES):
        xs = [random_input(rng, t) for t in inputs]
        got = model(*xs)[0]
        want = tflm(path, xs)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes(), np.abs(got.astype(int) - want).max()


# ---- operators against TFLite Micro -------------------------------------------------------

@pytest.mark.parametrize("stride,padding,activation,dilation,per_channel", [
    ((1, 1), "SAME", "NONE", (1, 1), True),
    ((2, 2), "VALID", "RELU", (1, 1), True),
    ((1, 2), "SAME", "RELU6", (2, 1), True),
    ((1, 1), "SAME", "NONE", (1, 1), False),
    ((2, 1), "SAME", "RELU", (3, 2), True),  # border outputs whose taps miss the input
])
def test_conv2d(stride, padding, activation, dilation, per_channel, tmp_path):
    rng = np.random.default_rng(1)
    inp = QTensor((1, 9, 8, 3), 0.05, 4)
    weights, bias = random_weights_and_bias(rng, (5, 3, 3, 3), inp.scales[0],
                                            per_channel=per_channel)
    oh = conv_output_size(9, 3, stride[0], padding, dilation[0])
    ow = conv_output_size(8, 3, stride[1], padding, dilation[1])
    out = QTensor((1, oh, ow, 5), 0.1, -3)
    buf = conv2d_model(inp, weights, bias, out, stride, padding, activation, dilation)
    check_bit_exact(buf, [inp], tmp_path, {"conv2d"})


@pytest.mark.parametrize("kernel,channels,padding", [
    (1, 8, "VALID"),  # blocks of 4 output channels
    (3, 6, "SAME"),  # blocks of 2
])
def test_conv2d_output_channel_blocks(kernel, channels, padding, tmp_path):
    rng = np.random.default_rng(5)
    inp = QTensor((1, 6, 5, 7), 0.05, -128)
    weights, bias = random_weights_and_bias(rng, (channels, kernel, kernel, 7), inp.scales[0])
    out = QTensor((1, conv_output_size(6, kernel, 1, padding),
                   conv_output_size(5, kernel, 1, padding), channels), 0.2, 5)
    buf = conv2d_model(inp, weights, bias, out, (1, 1), padding, "RELU")
    check_bit_exact(buf, [inp], tmp_path, {"conv2d"})


@pytest.mark.parametrize("multiplier,stride,padding,activation", [
    (1, (1, 1), "SAME", "NONE"),
    (2, (2, 2), "VALID", "RELU"),
    (2, (2, 2), "SAME", "RELU6"),
])
def test_depthwise_conv2d(multiplier, stride, padding, activation, tmp_path):
    rng = np.random.default_rng(2)
    inp = QTensor((1, 7, 7, 4), 0.04, -2)
    weights, bias = random_weights_and_bias(rng, (1, 3, 3, 4 * multiplier), inp.scales[0],
                                            quantized_dimension=3)
    oh = conv_output_size(7, 3, stride[0], padding)
    out = QTensor((1, oh, oh, 4 * multiplier), 0.08, 1)
    buf = depthwise_conv2d_model(inp, weights, bias, out, stride, padding, activation,
                                 depth_multiplier=multiplier)
    check_bit_exact(buf, [inp], tmp_path, {"depthwise_conv2d"})


@pytest.mark.parametrize("in_shape,per_channel,activation", [
    ((2, 16), False, "NONE"),
    ((2, 16), True, "RELU"),
    ((1, 2, 2, 4), False, "NONE"),  # flattened to [1, 16], as TFLite does
])
def test_fully_connected(in_shape, per_channel, activation, tmp_path):
    rng = np.random.default_rng(3)
    inp = QTensor(in_shape, 0.03, 5)
    weights, bias = random_weights_and_bias(rng, (10, 16), inp.scales[0],
                                            per_channel=per_channel)
    out = QTensor((int(np.prod(in_shape)) // 16, 10), 0.15, -7)
    buf = fully_connected_model(inp, weights, bias, out, activation)
    check_bit_exact(buf, [inp], tmp_path, {"dense"})


@pytest.mark.parametrize("out_scale,bias_range", [
    (1e-4, 1000),  # a multiplier above 1: a left shift
    (8000.0, 2_000_000_000),  # accumulators beyond 2**30
])
def test_fully_connected_outside_the_short_output_stage(out_scale, bias_range, tmp_path):
    """Layers the short output stage does not cover take TFLite's general form."""
    rng = np.random.default_rng(4)
    inp = QTensor((2, 16), 0.05, 5)
    weights, bias = random_weights_and_bias(rng, (10, 16), inp.scales[0],
                                            bias_range=bias_range)
    shifts = np.array([quantize_multiplier(0.05 * s / out_scale)[1] for s in weights.scales])
    folded = bias.data.astype(np.int64) - 5 * weights.data.astype(np.int64).sum(axis=1)
    assert not narrow_fits(shifts, accumulator_bound(weights.data, folded, False))
    out = QTensor((2, 10), out_scale, -7)
    check_bit_exact(fully_connected_model(inp, weights, bias, out, "NONE"), [inp], tmp_path,
                    {"dense"})


@pytest.mark.parametrize("shape_b,activation", [((1, 4, 4, 8), "NONE"), ((1, 1, 1, 8), "RELU")])
def test_add(shape_b, activation, tmp_path):
    a, b = QTensor((1, 4, 4, 8), 0.05, 3), QTensor(shape_b, 0.02, -10)
    out = QTensor((1, 4, 4, 8), 0.07, 2)
    check_bit_exact(add_model(a, b, out, activation), [a, b], tmp_path, {"add"})


@pytest.mark.parametrize("filt,stride,padding", [((2, 2), (2, 2), "VALID"),
                                                 ((3, 3), (2, 2), "SAME")])
def test_avg_pool(filt, stride, padding, tmp_path):
    inp = QTensor((1, 7, 6, 3), 0.05, -4)
    oh = conv_output_size(7, filt[0], stride[0], padding)
    ow = conv_output_size(6, filt[1], stride[1], padding)
    out = QTensor((1, oh, ow, 3), 0.05, -4)
    check_bit_exact(avg_pool_model(inp, out, filt, stride, padding), [inp], tmp_path,
                    {"avg_pool2d"})


def test_max_pool_is_integer_as_is(tmp_path):
    inp = QTensor((1, 6, 6, 2), 0.05, 3)
    out = QTensor((1, 3, 3, 2), 0.05, 3)
    check_bit_exact(max_pool_model(inp, out, (2, 2), (2, 2)), [inp], tmp_path, {"max_pool2d"})


def test_concatenation(tmp_path):
    parts = [QTensor((1, 2, 3, c), 0.04, -1) for c in (2, 5)]
    out = QTensor((1, 2, 3, 7), 0.04, -1)
    check_bit_exact(concat_model(parts, out, 3), parts, tmp_path, {"concatenation"})


def test_reshape_is_integer_as_is(tmp_path):
    inp = QTensor((1, 4, 6), 0.1, 0)
    out = QTensor((1, 24), 0.1, 0)
    buf = reshape_model(inp, out, (1, 24))
    path = tmp_path / "model.tflite"
    path.write_bytes(buf)
    result = export_model(path, tmp_path / "model.tar")
    assert result.quant.integer == ["reshape"] and not result.quant.fallback


@pytest.mark.parametrize("shape,scale", [((1, 10), 0.1), ((3, 7), 0.02), ((2, 12), 0.6)])
def test_softmax(shape, scale, tmp_path):
    inp = QTensor(shape, scale, 7)
    check_bit_exact(softmax_model(inp, softmax_output(shape)), [inp], tmp_path, {"softmax"})


# ---- the fixed-point primitives -----------------------------------------------------------

def test_saturating_rounding_doubling_high_multiply():
    ar = PyArith()
    assert ar.srdhm(INT32_MIN, INT32_MIN) == INT32_MAX  # the one overflow case
    assert ar.srdhm(1 << 30, 1 << 30) == 1 << 29  # 0.5 · 0.5 in Q0.31
    assert ar.srdhm(-(1 << 30), 1 << 30) == -(1 << 29)
    assert ar.srdhm(3, 1 << 30) == 2  # 1.5 rounds up
    assert ar.srdhm(-3, 1 << 30) == -1  # -1.5 too: gemmlowp's nudge for negative products
    assert ar.srdhm(-5, 1 << 30) == -2


def test_rounding_divide_by_power_of_two():
    ar = PyArith()
    assert [ar.rdbp(v, 1) for v in (5, -5, 6, -6, 7, -7)] == [3, -3, 3, -3, 4, -4]
    assert ar.rdbp(-1, 31) == 0 and ar.rdbp(INT32_MAX, 31) == 1


def test_short_output_stage_equals_tflites_two_roundings():
    """One 64-bit multiply and int32 steps give TFLite's rounding doubling high multiply,
    rounding divide and zero point, ties included, wherever `narrow_fits` allows it."""
    rng = np.random.default_rng(7)
    ar = PyArith()
    cases = [(int(rng.integers(-(1 << 30) + 1, 1 << 30)), int(rng.integers(1 << 30, 1 << 31)),
              -int(rng.integers(1, 23)), int(rng.integers(-128, 128))) for _ in range(20000)]
    # products exactly between two results (multiplier 2**30: h = (acc + 1) >> 1), and
    # h exactly between two multiples of 2**e
    cases += [(a, 1 << 30, -e, zp) for e in (1, 2, 7, 22) for zp in (-128, 0, 127)
              for a in range(-600, 600)]
    cases += [(2 * (k << (e - 1)), 1 << 30, -e, zp) for e in (1, 5, 22) for zp in (-128, 3)
              for k in range(-50, 50)]
    for acc, m, shift, zp in cases:
        want = multiply_by_quantized_multiplier(ar, acc, m, shift) + zp
        assert narrow_requantize(acc, m, shift, zp) == want, (acc, m, shift, zp)


def test_short_output_stage_is_taken_only_within_its_bounds():
    weights = np.full((4, 3, 3, 2), 127, np.int8)  # Σ|w| = 2286 per output channel
    bias = np.zeros(4, np.int64)
    bound = accumulator_bound(weights, bias, depthwise=False)
    assert (bound == 128 * 2286).all()
    assert (accumulator_bound(weights, bias, False, weight_zero=-1) == 128 * 2304).all()
    assert (accumulator_bound(np.ones((3, 3, 5), np.int8), bias[:1], True) == 128 * 9).all()
    assert narrow_fits(np.array([-1, -22]), bound)
    assert not narrow_fits(np.array([-1, 0]), bound)  # no right shift
    assert not narrow_fits(-23, bound)
    assert not narrow_fits(-5, np.array([1 << 30]))
    requant = Requant(np.array([1 << 30] * 4), np.array([-5] * 4), 3)
    assert requant.narrowed(bound).narrow
    assert requant.narrowed(bound).constants()[1].tolist() == [-5] * 4  # same parameters
    assert not replace(requant, single_rounding=True).narrowed(bound).narrow


def test_quantize_multiplier():
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    m, s = quantize_multiplier(0.0123)
    assert (1 << 30) <= m < (1 << 31) and abs(m * 2.0 ** (s - 31) - 0.0123) < 1e-9
    assert quantize_multiplier(1 - 2 ** -40) == (1 << 30, 1)  # rounds up to 2**31: halved
    # x · 0.0123 with TFLite's rounding, for a few accumulators
    for x in (0, 1, -1, 12345, -12345, 1 << 20):
        got = multiply_by_quantized_multiplier(PyArith(), x, m, s)
        assert abs(got - x * 0.0123) <= 1


def test_fixed_point_exp_and_reciprocal_track_the_real_functions():
    ar = PyArith()
    for a in np.linspace(-31.9, 0, 97):
        raw = int(round(a * (1 << 26)))
        assert abs(exp_on_negative_values(ar, raw) / 2 ** 31 - math.exp(raw / 2 ** 26)) < 1e-6
    assert exp_on_negative_values(ar, 0) == INT32_MAX
    for x in np.linspace(0, 0.999, 50):
        raw = int(x * 2 ** 31)
        assert abs(one_over_one_plus_x(ar, raw) / 2 ** 31 - 1 / (1 + raw / 2 ** 31)) < 1e-6


def test_softmax_params():
    multiplier, shift, diff_min = softmax_params(0.14469251)
    assert (1 << 30) <= multiplier < (1 << 31) and shift >= 0 and diff_min < 0
    with pytest.raises(ValueError):
        softmax_params(1e-12)


# ---- the memory planner -------------------------------------------------------------------

def test_planner_reaches_the_bound_a_largest_first_order_misses():
    """Largest first puts both 192 B tensors at 0, so the 64 B tensor sits above them and
    the 16 B one, live with the first 192 B tensor and the 64 B one, lands at 256: 272 B.
    The plan moves the first 192 B tensor up instead and reaches the 256 B bound."""
    items = [Interval(0, 192, 0, 0), Interval(1, 16, 0, 1), Interval(2, 64, 1, 3),
             Interval(3, 192, 3, 5)]
    p = plan(items)
    assert p.lower_bound == 256
    assert p.pool_bytes == 256
    for a in p.placements:
        for b in p.placements:
            if a.tensor < b.tensor and a.first <= b.last and b.first <= a.last:
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset


def test_planner_small_random_cases_reach_the_bound():
    rng = np.random.default_rng(3)
    for _ in range(300):
        items = []
        for t in range(int(rng.integers(1, 5))):
            first = int(rng.integers(0, 4))
            items.append(Interval(t, int(rng.choice([16, 32, 48, 96, 192])), first,
                                  first + int(rng.integers(0, 3))))
        assert plan(items).pool_bytes == lower_bound(items), items


# ---- the float fallback -------------------------------------------------------------------

def test_an_operator_without_integer_kernel_falls_back_to_float(tmp_path, capsys):
    """dequantize → sigmoid → quantize has no integer kernel: it runs in float, exactly as
    TVM's own build of the same module, and export says so."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            f = bb.emit(relax.op.dequantize(x, relax.const(0.05, "float32"),
                                            relax.const(-3, "int32")))
            s = bb.emit(relax.op.sigmoid(f))
            y = bb.emit_output(relax.op.quantize(s, relax.const(1 / 256, "float32"),
                                                 relax.const(-128, "int32")))
        bb.emit_func_output(y)
    mod = bb.get()
    result = export_relax(mod, tmp_path / "sigmoid.tar")
    assert result.quant.integer == []
    assert [op for op, _ in result.quant.fallback] == ["sigmoid"]
    assert "no integer kernel for sigmoid" in result.quant.fallback[0][1]

    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    model = CModel(result, tmp_path)
    xs = np.arange(-128, 128, 16, dtype=np.int8).reshape(1, 16)
    assert model(xs)[0].tobytes() == vm["main"](tvm.runtime.tensor(xs)).numpy().tobytes()


def test_export_says_which_operators_run_integer(tmp_path, capsys):
    import json

    from generator.cli import main

    model = Path(__file__).parent / "fixtures" / "models" / "hello_world" / \
        "hello_world_int8.tflite"
    assert main(["export", str(model), "-o", str(tmp_path / "h.tar")]) == 0
    assert "int8    integer: dense ×3" in capsys.readouterr().out
    assert main(["export", str(model), "-o", str(tmp_path / "h.tar"), "--force",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["integer_ops"] == ["dense"] * 3 and report["float_fallback"] == []


def test_an_int16_quantize_is_reported_as_float(tmp_path):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8), "int16"))
    with bb.function("main", [x]):
        with bb.dataflow():
            f = bb.emit(relax.op.dequantize(x, relax.const(0.1, "float32"),
                                            relax.const(0, "int32")))
            y = bb.emit_output(relax.op.quantize(f, relax.const(0.1, "float32"),
                                                 relax.const(0, "int32"), out_dtype="int16"))
        bb.emit_func_output(y)
    result = export_relax(bb.get(), tmp_path / "i16.tar")
    assert result.quant.fallback == [("dequantize", "int16 quantization (the integer kernels "
                                                    "are int8 and uint8)")]
