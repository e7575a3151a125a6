"""Our TFLite importer's reductions, pools and binary operators (issue 24), one operator at a
time (tests/tflite_cases.py): byte-equal with TFLite's kernels, float within 1e-5.

Oracles: TFLite's reference kernels (BUILTIN_REF), except where they cannot serve:
- int8 SUM: BUILTIN_REF returns garbage (every output −1 whatever the input), so int8 SUM
  follows TFLite's builtin kernel (optimized_ops::QuantizedMeanOrSum, float32 rescaling),
  checked with BUILTIN_WITHOUT_DEFAULT_DELEGATES: plain BUILTIN lets the XNNPACK delegate take
  the operator, and XNNPACK's SUM rounds differently from both of TFLite's own kernels.
- uint8 SUM: BUILTIN_REF works and is the oracle (reference_ops::QuantizedMeanOrSum).
- MEAN int8/uint8: BUILTIN_REF takes the general QuantizedMeanOrSum path for every axis set,
  the 4-D height-width global-average-pool form included (the older
  reference_integer_ops::Mean special case is gone from this TFLite).
"""

from __future__ import annotations

import numpy as np
import pytest

from generator.export.api import export_model
from tests.c_runner import CModel
from tests.tflite_builder import Tensor, litert_missing, reference
from tests.tflite_cases import ALL, Case, check_case, f32, q8

pytestmark = pytest.mark.skipif(litert_missing() is not None, reason=str(litert_missing()))

RNG = np.random.default_rng(2424)
OPTIMIZED = "BUILTIN_WITHOUT_DEFAULT_DELEGATES"


def axes(*values: int) -> Tensor:
    return Tensor((len(values),), "int32", data=np.array(values))


def _reduce(id_, op, x, ax, out, keep, **kw):
    return Case(id_, op, [x, axes(*ax)], [out], {"keep_dims": keep}, **kw)


CASES = [
    # ---- MEAN
    _reduce("mean-int8-hw-keep", "MEAN", q8((2, 5, 7, 16), 0.05, 3), (1, 2),
            q8((2, 1, 1, 16), 0.03, -5), True),
    _reduce("mean-int8-hw-squeezed", "MEAN", q8((1, 7, 7, 24), 0.1, -12), (2, 1),
            q8((1, 24), 0.02, 7), False),
    _reduce("mean-int8-last-negative-axis", "MEAN", q8((3, 4, 10), 0.05, 0), (-1,),
            q8((3, 4, 1), 0.05, 0), True),
    _reduce("mean-int8-axes-0-2", "MEAN", q8((4, 3, 6), 0.02, -100), (0, 2),
            q8((3,), 0.015, 20), False),
    _reduce("mean-uint8-hw-keep", "MEAN", q8((1, 6, 5, 8), 0.04, 130, "uint8"), (1, 2),
            q8((1, 1, 1, 8), 0.02, 120, "uint8"), True),
    _reduce("mean-uint8-axis1", "MEAN", q8((5, 9, 4), 0.03, 100, "uint8"), (1,),
            q8((5, 4), 0.03, 100, "uint8"), False),
    _reduce("mean-float-hw", "MEAN", f32((2, 4, 5, 3)), (1, 2), f32((2, 1, 1, 3)), True),
    _reduce("mean-float-last", "MEAN", f32((3, 4, 6)), (-1,), f32((3, 4)), False),
    # ---- SUM
    _reduce("sum-int8-hw-keep", "SUM", q8((2, 3, 4, 8), 0.05, 3), (1, 2),
            q8((2, 1, 1, 8), 0.4, -5), True, op_resolver=OPTIMIZED),
    _reduce("sum-int8-last", "SUM", q8((4, 3, 9), 0.013, -7), (-1,), q8((4, 3), 0.11, 2),
            False, op_resolver=OPTIMIZED),
    _reduce("sum-uint8-axis1", "SUM", q8((5, 7, 6), 0.05, 130, "uint8"), (1,),
            q8((5, 6), 0.4, 120, "uint8"), False),
    _reduce("sum-uint8-all-but-last", "SUM", q8((2, 3, 4), 0.02, 90, "uint8"), (0, 1),
            q8((1, 1, 4), 0.2, 140, "uint8"), True),
    _reduce("sum-float-axes-0-2", "SUM", f32((3, 4, 5)), (0, 2), f32((4,)), False),
    _reduce("sum-float-keep", "SUM", f32((2, 6)), (1,), f32((2, 1)), True),
    # ---- REDUCE_MAX / REDUCE_MIN (TFLite: equal input and output quantization)
    _reduce("reduce-max-int8-hw", "REDUCE_MAX", q8((1, 4, 5, 6), 0.1, 4), (1, 2),
            q8((1, 1, 1, 6), 0.1, 4), True),
    _reduce("reduce-max-int8-last", "REDUCE_MAX", q8((3, 8), 0.1, -3), (-1,),
            q8((3,), 0.1, -3), False),
    _reduce("reduce-max-uint8", "REDUCE_MAX", q8((4, 5, 3), 0.1, 128, "uint8"), (0,),
            q8((5, 3), 0.1, 128, "uint8"), False),
    _reduce("reduce-max-uint8-keep", "REDUCE_MAX", q8((2, 5, 3), 0.2, 10, "uint8"), (1, 2),
            q8((2, 1, 1), 0.2, 10, "uint8"), True),
    _reduce("reduce-min-int8", "REDUCE_MIN", q8((2, 3, 7), 0.05, 0), (2,),
            q8((2, 3, 1), 0.05, 0), True),
    _reduce("reduce-min-int8-axes", "REDUCE_MIN", q8((4, 3, 5), 0.05, 9), (0, -1),
            q8((3,), 0.05, 9), False),
    _reduce("reduce-min-uint8", "REDUCE_MIN", q8((6, 4), 0.1, 128, "uint8"), (0,),
            q8((4,), 0.1, 128, "uint8"), False),
    _reduce("reduce-min-uint8-keep", "REDUCE_MIN", q8((3, 4, 2), 0.1, 3, "uint8"), (1,),
            q8((3, 1, 2), 0.1, 3, "uint8"), True),
    _reduce("reduce-max-float", "REDUCE_MAX", f32((3, 4, 5)), (1,), f32((3, 5)), False),
    _reduce("reduce-max-float-keep", "REDUCE_MAX", f32((2, 6)), (0, 1), f32((1, 1)), True),
    _reduce("reduce-min-float", "REDUCE_MIN", f32((3, 4, 5)), (-1,), f32((3, 4)), False),
    _reduce("reduce-min-float-keep", "REDUCE_MIN", f32((4, 3)), (0,), f32((1, 3)), True),
    # ---- L2_POOL_2D (float only in TFLite)
    Case("l2-pool-float-same", "L2_POOL_2D", [f32((1, 5, 5, 3))], [f32((1, 3, 3, 3))],
         {"padding": "SAME", "stride_h": 2, "stride_w": 2, "filter_height": 3,
          "filter_width": 3}),
    Case("l2-pool-float-valid-relu6", "L2_POOL_2D", [f32((2, 4, 6, 2))], [f32((2, 2, 3, 2))],
         {"padding": "VALID", "stride_h": 2, "stride_w": 2, "filter_height": 2,
          "filter_width": 2, "fused_activation_function": "RELU6"}),
    # ---- LOG_SOFTMAX (int8 output fixed by TFLite: scale 16/256, zero point 127)
    Case("log-softmax-int8", "LOG_SOFTMAX", [q8((4, 10), 0.1, 3)],
         [q8((4, 10), 16 / 256, 127)]),
    Case("log-softmax-int8-wide-3d", "LOG_SOFTMAX", [q8((2, 3, 40), 0.02, -20)],
         [q8((2, 3, 40), 16 / 256, 127)]),
    Case("log-softmax-int8-coarse", "LOG_SOFTMAX", [q8((5, 7), 0.3, 0)],
         [q8((5, 7), 16 / 256, 127)]),
    Case("log-softmax-int8-all-values", "LOG_SOFTMAX", [q8(ALL, 0.05, -7)],
         [q8(ALL, 16 / 256, 127)], all_values=True),
    Case("log-softmax-float", "LOG_SOFTMAX", [f32((3, 8))], [f32((3, 8))]),
    Case("log-softmax-float-3d", "LOG_SOFTMAX", [f32((2, 2, 5))], [f32((2, 2, 5))]),
    # ---- SQUARED_DIFFERENCE (int8 only in TFLite)
    Case("squared-difference-int8", "SQUARED_DIFFERENCE",
         [q8((2, 3, 4), 0.05, 3), q8((2, 3, 4), 0.07, -9)], [q8((2, 3, 4), 0.12, -128)]),
    Case("squared-difference-int8-broadcast", "SQUARED_DIFFERENCE",
         [q8((1, 4, 5), 0.02, -1), q8((1, 1, 5), 0.02, 4)], [q8((1, 4, 5), 0.01, -100)]),
    Case("squared-difference-float", "SQUARED_DIFFERENCE", [f32((3, 4)), f32((1, 4))],
         [f32((3, 4))]),
    # ---- PRELU
    Case("prelu-int8-per-channel-alpha", "PRELU",
         [q8((1, 4, 4, 3), 0.05, 2),
          Tensor((3,), "int8", 0.01, 0, data=RNG.integers(-128, 128, 3))],
         [q8((1, 4, 4, 3), 0.04, -5)]),
    Case("prelu-int8-full-alpha", "PRELU",
         [q8((2, 5), 0.03, -10), Tensor((2, 5), "int8", 0.02, 7,
                                        data=RNG.integers(-128, 128, (2, 5)))],
         [q8((2, 5), 0.03, -20)]),
    Case("prelu-uint8-broadcast-alpha", "PRELU",
         [q8((1, 3, 3, 4), 0.05, 128, "uint8"),
          Tensor((1, 1, 4), "uint8", 0.01, 120, data=RNG.integers(0, 256, (1, 1, 4)))],
         [q8((1, 3, 3, 4), 0.05, 100, "uint8")]),
    Case("prelu-uint8-all-values", "PRELU",
         [q8((1, 256), 0.04, 140, "uint8"), Tensor((1,), "uint8", 0.005, 100,
                                                  data=np.array([20]))],
         [q8((1, 256), 0.03, 150, "uint8")], all_values=True),
    Case("prelu-float-channel", "PRELU",
         [f32((1, 3, 3, 4)), f32((4,), RNG.uniform(-1, 1, 4))], [f32((1, 3, 3, 4))]),
    Case("prelu-float-full", "PRELU",
         [f32((2, 6)), f32((2, 6), RNG.uniform(-1, 1, (2, 6)))], [f32((2, 6))]),
    # ---- MINIMUM / MAXIMUM (TFLite compares the raw values: equal quantization)
    Case("minimum-int8", "MINIMUM", [q8((2, 3, 4), 0.1, 3), q8((2, 3, 4), 0.1, 3)],
         [q8((2, 3, 4), 0.1, 3)]),
    Case("minimum-int8-broadcast", "MINIMUM", [q8((3, 5), 0.05, -7), q8((1, 5), 0.05, -7)],
         [q8((3, 5), 0.05, -7)]),
    Case("maximum-int8", "MAXIMUM", [q8((4, 6), 0.1, 0), q8((4, 6), 0.1, 0)],
         [q8((4, 6), 0.1, 0)]),
    Case("maximum-int8-broadcast", "MAXIMUM", [q8((1, 2, 3, 4), 0.2, 11), q8((4,), 0.2, 11)],
         [q8((1, 2, 3, 4), 0.2, 11)]),
    # ---- DIV float
    Case("div-float", "DIV", [f32((3, 4)), f32((3, 4), RNG.uniform(0.5, 2, (3, 4)))],
         [f32((3, 4))]),
    Case("div-float-broadcast-relu", "DIV",
         [f32((2, 3, 4)), f32((1, 4), RNG.uniform(-2, -0.5, (1, 4)))], [f32((2, 3, 4))],
         {"fused_activation_function": "RELU"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_operator_equals_tflite(case, tmp_path):
    check_case(case, tmp_path)


def _compiled(case: Case, tmp_path) -> CModel:
    path = tmp_path / "model.tflite"
    path.write_bytes(case.model())
    return CModel(export_model(path, tmp_path / "model.tar"), tmp_path)


ARG_CASES = [
    ("arg-max-int8-int32", "ARG_MAX", q8((3, 7), 0.1, 0), 1, "int32"),
    ("arg-max-uint8-int64", "ARG_MAX", q8((2, 5, 4), 0.1, 128, "uint8"), 1, "int64"),
    ("arg-max-float-int32", "ARG_MAX", f32((4, 6)), -1, "int32"),
    ("arg-min-int8-int64", "ARG_MIN", q8((2, 3, 5), 0.1, 3), -1, "int64"),
    ("arg-min-uint8-int32", "ARG_MIN", q8((6, 3), 0.1, 128, "uint8"), 0, "int32"),
    ("arg-min-float-int64", "ARG_MIN", f32((3, 2, 4)), 1, "int64"),
]


@pytest.mark.parametrize("id_,op,x,axis,out_dtype", ARG_CASES, ids=[c[0] for c in ARG_CASES])
def test_arg_max_min_first_index_wins(id_, op, x, axis, out_dtype, tmp_path):
    """Random values, then values drawn from three levels so that every row has ties: TFLite
    returns the first index of the extreme value."""
    out_shape = tuple(d for i, d in enumerate(x.shape) if i != axis % len(x.shape))
    case = Case(id_, op, [x, axes(axis)], [Tensor(out_shape, out_dtype)],
                {"output_type": out_dtype.upper()})
    rng = np.random.default_rng(7)
    if x.dtype == "float32":
        levels = np.array([-0.5, 0.25, 0.75], np.float32)
        samples = [rng.uniform(-1, 1, x.shape).astype(np.float32)]
    else:
        info = np.iinfo(x.np_dtype)
        levels = np.array([info.min, 3, info.max]).astype(x.np_dtype)
        samples = [rng.integers(info.min, info.max, x.shape, endpoint=True).astype(x.np_dtype)]
    samples.append(levels[rng.integers(0, 3, x.shape)])
    model = _compiled(case, tmp_path)
    for xs in samples:
        got, want = model(xs), reference(case.model(), [xs])
        assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0]), (got, want)
