"""Our TFLite importer, one operator at a time (tests/tflite_cases.py): the core operators,
byte-equal with TFLite's reference kernels."""

from __future__ import annotations

import numpy as np
import pytest

from generator.errors import ExportError
from generator.export.api import export_model
from tests.tflite_builder import Tensor, litert_missing, op_model
from tests.tflite_cases import ALL, Case, check_case, f32, q8

pytestmark = pytest.mark.skipif(litert_missing() is not None, reason=str(litert_missing()))

RNG = np.random.default_rng(24)


def _conv_case(id_, dtype, depthwise, stride, padding, act, per_channel):
    cin, cout, k = 3, (6 if depthwise else 4), 3
    zero_in = -3 if dtype == "int8" else 120
    x = q8((1, 7, 6, cin), 0.05, zero_in, dtype)
    w_shape = (1, k, k, cout) if depthwise else (cout, k, k, cin)
    axis = 3 if depthwise else 0
    if dtype == "uint8":
        w = Tensor(w_shape, "uint8", 0.02, 130, data=RNG.integers(0, 256, w_shape))
    else:
        scales = list(RNG.uniform(0.005, 0.03, cout)) if per_channel else 0.02
        w = Tensor(w_shape, "int8", scales, 0, quantized_dimension=axis,
                   data=RNG.integers(-127, 128, w_shape))
    b = Tensor((cout,), "int32", None, None, data=RNG.integers(-2000, 2000, cout))
    size = lambda n: (n + stride - 1) // stride if padding == "SAME" else (n - k) // stride + 1  # noqa: E731
    out = q8((1, size(7), size(6), cout), 0.1, 5 if dtype == "int8" else 128, dtype)
    opts = {"padding": padding, "stride_h": stride, "stride_w": stride,
            "fused_activation_function": act}
    if depthwise:
        opts["depth_multiplier"] = 2
    return Case(id_, "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, w, b], [out], opts)


CASES = [
    _conv_case("conv-int8-same-relu6-perchannel", "int8", False, 1, "SAME", "RELU6", True),
    _conv_case("conv-int8-valid-stride2", "int8", False, 2, "VALID", "NONE", False),
    _conv_case("conv-uint8-same", "uint8", False, 1, "SAME", "RELU", False),
    _conv_case("depthwise-int8-same-mult2", "int8", True, 1, "SAME", "NONE", True),
    _conv_case("depthwise-int8-valid-stride2", "int8", True, 2, "VALID", "RELU", True),
    Case("fc-int8-4d-input", "FULLY_CONNECTED",
         [q8((1, 2, 2, 3), 0.04, 2), Tensor((5, 12), "int8", 0.01, 0,
                                            data=RNG.integers(-127, 128, (5, 12))),
          Tensor((5,), "int32", data=RNG.integers(-500, 500, 5))],
         [q8((1, 5), 0.08, -4)]),
    Case("add-int8-broadcast-relu", "ADD", [q8((1, 4, 5), 0.03, 3), q8((1, 1, 5), 0.07, -9)],
         [q8((1, 4, 5), 0.06, -2)], {"fused_activation_function": "RELU"}),
    Case("sub-int8", "SUB", [q8((2, 6), 0.03, 3), q8((2, 6), 0.05, -1)],
         [q8((2, 6), 0.06, 0)]),
    Case("mul-int8-broadcast", "MUL", [q8((3, 4), 0.05, 1), q8((1, 4), 0.04, -7)],
         [q8((3, 4), 0.02, 3)]),
    Case("avg-pool-int8-same", "AVERAGE_POOL_2D", [q8((1, 5, 5, 2), 0.1, -1)],
         [q8((1, 3, 3, 2), 0.1, -1)],
         {"padding": "SAME", "stride_h": 2, "stride_w": 2, "filter_height": 3,
          "filter_width": 3}),
    Case("max-pool-int8-relu", "MAX_POOL_2D", [q8((1, 4, 4, 3), 0.1, 4)],
         [q8((1, 2, 2, 3), 0.1, 4)],
         {"padding": "VALID", "stride_h": 2, "stride_w": 2, "filter_height": 2,
          "filter_width": 2, "fused_activation_function": "RELU"}),
    Case("softmax-int8-beta", "SOFTMAX", [q8((2, 10), 0.1, 3)], [q8((2, 10), 1 / 256, -128)],
         {"beta": 0.5}),
    Case("logistic-int8", "LOGISTIC", [q8(ALL, 0.06, 7)], [q8(ALL, 1 / 256, -128)],
         all_values=True),
    Case("logistic-uint8", "LOGISTIC", [q8(ALL, 0.05, 120, "uint8")],
         [q8(ALL, 1 / 256, 0, "uint8")], all_values=True),
    Case("tanh-int8", "TANH", [q8(ALL, 0.03, -5)], [q8(ALL, 1 / 128, 0)], all_values=True),
    Case("relu-int8", "RELU", [q8(ALL, 0.05, -10)], [q8(ALL, 0.03, -128)], all_values=True),
    Case("relu6-int8", "RELU6", [q8(ALL, 0.05, 10)], [q8(ALL, 6 / 255, -128)],
         all_values=True),
    Case("relu-n1-to-1-int8", "RELU_N1_TO_1", [q8(ALL, 0.02, 0)], [q8(ALL, 1 / 128, 0)],
         all_values=True),
    Case("leaky-relu-int8", "LEAKY_RELU", [q8(ALL, 0.05, 3)], [q8(ALL, 0.04, -20)],
         {"alpha": 0.2}, all_values=True),
    Case("requantize-int8", "QUANTIZE", [q8(ALL, 0.05, 3)], [q8(ALL, 0.021, -9)],
         all_values=True),
    Case("requantize-uint8-to-int8", "QUANTIZE", [q8(ALL, 0.05, 130, "uint8")],
         [q8(ALL, 0.05, 2)], all_values=True),
    Case("quantize-float-int8", "QUANTIZE", [f32((3, 7))], [q8((3, 7), 0.013, -4)]),
    Case("dequantize-int8", "DEQUANTIZE", [q8(ALL, 0.037, 5)], [f32(ALL)], all_values=True),
    Case("reshape-int8", "RESHAPE", [q8((1, 2, 3, 4), 0.1, 0),
                                     Tensor((2,), "int32", data=np.array([4, 6]))],
         [q8((4, 6), 0.1, 0)], {"new_shape": [4, 6]}),
    Case("transpose-int8", "TRANSPOSE", [q8((2, 3, 4), 0.1, 0),
                                         Tensor((3,), "int32", data=np.array([2, 0, 1]))],
         [q8((4, 2, 3), 0.1, 0)]),
    Case("concat-int8", "CONCATENATION",
         [q8((1, 2, 3), 0.1, 0), q8((1, 2, 2), 0.1, 0)], [q8((1, 2, 5), 0.1, 0)],
         {"axis": 2}),
    Case("concat-uint8-requantized", "CONCATENATION",  # int8 must share the output's
         [q8((1, 2, 3), 0.1, 128, "uint8"), q8((1, 2, 2), 0.05, 130, "uint8")],
         [q8((1, 2, 5), 0.1, 128, "uint8")], {"axis": 2}),
    Case("pad-int8", "PAD", [q8((1, 2, 3, 1), 0.1, -7),
                             Tensor((4, 2), "int32", data=np.array([[0, 0], [1, 2],
                                                                    [2, 0], [0, 0]]))],
         [q8((1, 5, 5, 1), 0.1, -7)]),
    Case("strided-slice-int8", "STRIDED_SLICE",
         [q8((1, 6, 5), 0.1, 0), Tensor((3,), "int32", data=np.array([0, 1, 0])),
          Tensor((3,), "int32", data=np.array([1, 6, 5])),
          Tensor((3,), "int32", data=np.array([1, 2, 2]))], [q8((1, 3, 3), 0.1, 0)]),
    Case("gather-int8", "GATHER", [q8((5, 3), 0.1, 0),
                                   Tensor((4,), "int32", data=np.array([4, 0, 2, 2]))],
         [q8((4, 3), 0.1, 0)], {"axis": 0}),
    Case("conv-float-same", "CONV_2D",
         [f32((1, 5, 5, 2)), f32((3, 3, 3, 2), RNG.uniform(-1, 1, (3, 3, 3, 2))),
          f32((3,), RNG.uniform(-1, 1, 3))], [f32((1, 5, 5, 3))],
         {"padding": "SAME", "stride_h": 1, "stride_w": 1, "fused_activation_function": "RELU"}),
    Case("depthwise-float", "DEPTHWISE_CONV_2D",
         [f32((1, 5, 5, 2)), f32((1, 3, 3, 2), RNG.uniform(-1, 1, (1, 3, 3, 2))),
          f32((2,), RNG.uniform(-1, 1, 2))], [f32((1, 3, 3, 2))],
         {"padding": "VALID", "stride_h": 1, "stride_w": 1, "depth_multiplier": 1}),
    Case("logistic-float", "LOGISTIC", [f32((2, 8))], [f32((2, 8))]),
    Case("hard-swish-float", "HARD_SWISH", [f32((2, 8))], [f32((2, 8))]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_operator_equals_tflite_reference(case, tmp_path):
    check_case(case, tmp_path)


def test_unsupported_operator_is_one_line_naming_it(tmp_path):
    path = tmp_path / "model.tflite"
    # TFLite has no uint8 SQUARED_DIFFERENCE either
    u8 = [q8((2, 3), 0.1, 128, "uint8") for _ in range(3)]
    path.write_bytes(op_model("SQUARED_DIFFERENCE", u8[:2], u8[2:]))
    with pytest.raises(ExportError) as err:
        export_model(path, tmp_path / "model.tar")
    text = err.value.one_line()
    assert "operator #0 SQUARED_DIFFERENCE (uint8 → uint8)" in text
    assert "\n" not in text
    assert not (tmp_path / "model.tar").exists()


def _float_io_model() -> bytes:
    """float input → QUANTIZE → CONV_2D → RESHAPE → FULLY_CONNECTED → SOFTMAX → DEQUANTIZE:
    the common "float outside, int8 inside" layout converters write."""
    from tests.tflite_builder import ModelBuilder

    rng = np.random.default_rng(5)
    m = ModelBuilder()
    x = m.tensor(f32((1, 6, 6, 2)))
    xq = m.tensor(q8((1, 6, 6, 2), 0.02, 4))
    w = m.tensor(Tensor((3, 3, 3, 2), "int8", [0.01, 0.02, 0.015], 0,
                        data=rng.integers(-127, 128, (3, 3, 3, 2))))
    b = m.tensor(Tensor((3,), "int32", data=rng.integers(-300, 300, 3)))
    c = m.tensor(q8((1, 6, 6, 3), 0.05, -10))
    shape = m.tensor(Tensor((2,), "int32", data=np.array([1, 108])))
    flat = m.tensor(q8((1, 108), 0.05, -10))
    fw = m.tensor(Tensor((4, 108), "int8", 0.01, 0, data=rng.integers(-127, 128, (4, 108))))
    fb = m.tensor(Tensor((4,), "int32", data=rng.integers(-300, 300, 4)))
    logits = m.tensor(q8((1, 4), 0.2, 3))
    probs = m.tensor(q8((1, 4), 1 / 256, -128))
    out = m.tensor(f32((1, 4)))
    m.op("QUANTIZE", [x], [xq])
    m.op("CONV_2D", [xq, w, b], [c], {"padding": "SAME", "stride_h": 1, "stride_w": 1,
                                      "fused_activation_function": "RELU"})
    m.op("RESHAPE", [c, shape], [flat], {"new_shape": [1, 108]})
    m.op("FULLY_CONNECTED", [flat, fw, fb], [logits])
    m.op("SOFTMAX", [logits], [probs], {"beta": 1.0})
    m.op("DEQUANTIZE", [probs], [out])
    m.inputs(x)
    m.outputs(out)
    return m.build()


def test_float_outside_int8_inside_is_integer_and_bit_exact(tmp_path):
    from tests.c_runner import CModel
    from tests.tflite_builder import reference

    path = tmp_path / "model.tflite"
    path.write_bytes(_float_io_model())
    result = export_model(path, tmp_path / "model.tar")
    assert result.quant.fallback == []
    assert {"quantize", "conv2d", "dense", "softmax", "dequantize"} <= set(result.quant.integer)
    assert [t.dtype for t in result.inputs] == ["float32"]
    assert [t.dtype for t in result.outputs] == ["float32"]
    model = CModel(result, tmp_path)
    rng = np.random.default_rng(2)
    for _ in range(5):
        x = rng.uniform(-2, 2, (1, 6, 6, 2)).astype(np.float32)
        assert model(x)[0].tobytes() == reference(path.read_bytes(), [x])[0].tobytes()


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
def test_binary_int8_on_every_pair_of_values(op, tmp_path):
    """Every int8 pair (a column of 256 values against a row of 256: 65,536 outputs), for
    scales whose ratios make the rescaling steps hit exact ties."""
    from tests.c_runner import CModel
    from tests.tflite_builder import reference

    a, b = q8((256, 1), 0.0517, 3), q8((1, 256), 0.0517 * (1 + 2 ** -10), -5)
    out = q8((256, 256), 0.1034 if op != "MUL" else 0.0123, 1)
    path = tmp_path / "model.tflite"
    path.write_bytes(op_model(op, [a, b], [out]))
    result = export_model(path, tmp_path / "model.tar")
    values = np.arange(-128, 128, dtype=np.int8)
    xs = [values.reshape(256, 1), values.reshape(1, 256)]
    got = CModel(result, tmp_path)(*xs)[0]
    want = reference(path.read_bytes(), xs)[0]
    assert np.count_nonzero(got != want) == 0


def test_a_pad_after_a_max_pool_writes_its_padding(tmp_path):
    """MAX_POOL_2D then a channel PAD (BlazeFace's shortcut): fused into one kernel, the pad
    must still write its padded elements (moving it under the pool's loops dropped them)."""
    from tests.c_runner import CModel
    from tests.tflite_builder import ModelBuilder, reference

    b = ModelBuilder()
    x = b.tensor(q8((1, 4, 4, 3), 0.1, -128))
    y = b.tensor(q8((1, 2, 2, 3), 0.1, -128))
    p = b.tensor(Tensor((4, 2), "int32", data=np.array([[0, 0], [0, 0], [0, 0], [0, 2]])))
    z = b.tensor(q8((1, 2, 2, 5), 0.1, -128))
    b.op("MAX_POOL_2D", [x], [y], {"padding": "VALID", "stride_h": 2, "stride_w": 2,
                                   "filter_height": 2, "filter_width": 2})
    b.op("PAD", [y, p], [z])
    b.inputs(x)
    b.outputs(z)
    buf = b.build()
    path = tmp_path / "model.tflite"
    path.write_bytes(buf)
    model = CModel(export_model(path, tmp_path / "model.tar"), tmp_path)
    xs = [np.random.default_rng(0).integers(-128, 128, (1, 4, 4, 3)).astype(np.int8)]
    assert model(*xs)[0].tobytes() == reference(buf, xs)[0].tobytes()
