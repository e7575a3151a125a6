"""Our TFLite importer's unary 8-bit operators, transposed convolution, resizing and the
space/batch and slicing moves (tests/tflite_cases.py): byte-equal with TFLite's reference
kernels (BUILTIN_REF; ELU has none, its oracle is BUILTIN), float32 within 1e-5."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tflite_builder import Tensor, litert_missing
from tests.tflite_cases import ALL, Case, check_case, f32, q8

pytestmark = pytest.mark.skipif(litert_missing() is not None, reason=str(litert_missing()))

RNG = np.random.default_rng(25)
NO_XNNPACK = "BUILTIN_WITHOUT_DEFAULT_DELEGATES"  # TFLite's own optimized kernels


def i32(*values) -> Tensor:
    return Tensor((len(values),), "int32", data=np.array(values))


def _table_case(id_, op, x, out, **kw) -> Case:
    return Case(id_, op, [x], [out], all_values=True, **kw)


UNARY = [
    _table_case("hard-swish-int8", "HARD_SWISH", q8(ALL, 0.05, 3), q8(ALL, 0.03, -20)),
    _table_case("hard-swish-int8-wide", "HARD_SWISH", q8(ALL, 0.2, -10), q8(ALL, 0.15, -100)),
    _table_case("hard-swish-uint8", "HARD_SWISH", q8(ALL, 0.04, 130, "uint8"),
                q8(ALL, 0.025, 20, "uint8")),
    _table_case("hard-swish-uint8-wide", "HARD_SWISH", q8(ALL, 0.3, 100, "uint8"),
                q8(ALL, 0.2, 30, "uint8")),
    # TFLite has no reference ELU kernel: the oracle is its builtin one, which builds the
    # table (LUTPopulate). Not "BUILTIN": that resolver hands ELU to the XNNPACK delegate,
    # whose table rounds ties to even (elu-int8-wide has ties: 0.2 / 0.08 = 2.5).
    _table_case("elu-int8", "ELU", q8(ALL, 0.05, 3), q8(ALL, 0.03, 40), op_resolver=NO_XNNPACK),
    _table_case("elu-int8-wide", "ELU", q8(ALL, 0.1, -60), q8(ALL, 0.08, -110),
                op_resolver=NO_XNNPACK),
    _table_case("abs-int8-rescaled", "ABS", q8(ALL, 0.05, 3), q8(ALL, 0.03, -128)),
    _table_case("abs-int8-same-scale", "ABS", q8(ALL, 0.05, -7), q8(ALL, 0.05, -100)),
    # RSQRT and SQRT make TFLite fail below the input zero point: every value is above it
    _table_case("rsqrt-int8", "RSQRT", q8(ALL, 0.05, -128), q8(ALL, 0.02, -128)),
    _table_case("rsqrt-int8-small", "RSQRT", q8(ALL, 0.002, -128), q8(ALL, 0.3, -100)),
    _table_case("sqrt-int8", "SQRT", q8(ALL, 0.05, -128), q8(ALL, 0.02, -128)),
    _table_case("sqrt-int8-offset", "SQRT", q8(ALL, 0.3, -128), q8(ALL, 0.07, -50)),
    _table_case("log-int8", "LOG", q8(ALL, 0.05, -100), q8(ALL, 0.04, 60)),
    _table_case("log-int8-negatives", "LOG", q8(ALL, 0.02, 10), q8(ALL, 0.05, 0)),
    _table_case("exp-int8", "EXP", q8(ALL, 0.02, 30), q8(ALL, 0.03, -128)),
    _table_case("exp-int8-small", "EXP", q8(ALL, 0.01, -5), q8(ALL, 0.015, -100)),
    # TFLite's int8 NEG negates the stored value and ignores both tensors' quantization
    _table_case("neg-int8", "NEG", q8(ALL, 0.05, 0), q8(ALL, 0.05, 0)),
    _table_case("neg-int8-other-quant", "NEG", q8(ALL, 0.05, 3), q8(ALL, 0.07, -5)),
]


def _tconv(id_, dtype, stride, padding, in_hw, out_hw, bias=True, per_channel=True, act=None):
    cin, cout, k = 3, 4, 3
    shape_t = i32(1, *out_hw, cout)
    w_shape = (cout, k, k, cin)
    opts = {"padding": padding, "stride_h": stride, "stride_w": stride}
    if act:
        opts["fused_activation_function"] = act
    if dtype == "float32":
        w = f32(w_shape, RNG.uniform(-1, 1, w_shape))
        b = f32((cout,), RNG.uniform(-1, 1, cout)) if bias else None
        ins = [shape_t, w, f32((1, *in_hw, cin))]
        return Case(id_, "TRANSPOSE_CONV", ins + ([b] if bias else []),
                    [f32((1, *out_hw, cout))], opts)
    scales = list(RNG.uniform(0.005, 0.03, cout)) if per_channel else 0.02
    w = Tensor(w_shape, "int8", scales, 0, quantized_dimension=0,
               data=RNG.integers(-127, 128, w_shape))
    ins = [shape_t, w, q8((1, *in_hw, cin), 0.05, -3)]
    if bias:
        ins.append(Tensor((cout,), "int32", data=RNG.integers(-3000, 3000, cout)))
    return Case(id_, "TRANSPOSE_CONV", ins, [q8((1, *out_hw, cout), 0.15, 4)], opts)


TRANSPOSE_CONV = [
    _tconv("tconv-int8-same-stride2", "int8", 2, "SAME", (3, 4), (6, 8)),
    _tconv("tconv-int8-valid-stride2-nobias", "int8", 2, "VALID", (3, 3), (7, 7), bias=False),
    _tconv("tconv-int8-same-stride1-pertensor", "int8", 1, "SAME", (4, 5), (4, 5),
           per_channel=False),
    _tconv("tconv-int8-valid-stride1-relu", "int8", 1, "VALID", (3, 4), (5, 6), act="RELU"),
    _tconv("tconv-float-same-stride2", "float32", 2, "SAME", (3, 4), (6, 8)),
    _tconv("tconv-float-valid-stride1-nobias", "float32", 1, "VALID", (3, 3), (5, 5),
           bias=False),
    _tconv("tconv-float-same-stride2-relu6", "float32", 2, "SAME", (2, 3), (4, 6), act="RELU6"),
]


def _resize(id_, op, dtype, in_hw, out_hw, align=False, half=False):
    c = 3
    size = i32(*out_hw)
    opts = {"align_corners": align, "half_pixel_centers": half}
    if dtype == "float32":
        return Case(id_, op, [f32((1, *in_hw, c)), size], [f32((1, *out_hw, c))], opts)
    zero = -5 if dtype == "int8" else 120
    return Case(id_, op, [q8((1, *in_hw, c), 0.1, zero, dtype), size],
                [q8((1, *out_hw, c), 0.1, zero, dtype)], opts)


RESIZE = [
    _resize("bilinear-int8", "RESIZE_BILINEAR", "int8", (3, 4), (7, 9)),
    _resize("bilinear-int8-align", "RESIZE_BILINEAR", "int8", (3, 4), (5, 7), align=True),
    _resize("bilinear-int8-half", "RESIZE_BILINEAR", "int8", (4, 3), (6, 8), half=True),
    _resize("bilinear-uint8", "RESIZE_BILINEAR", "uint8", (3, 4), (7, 9)),
    _resize("bilinear-uint8-align", "RESIZE_BILINEAR", "uint8", (3, 4), (5, 7), align=True),
    _resize("bilinear-uint8-half", "RESIZE_BILINEAR", "uint8", (4, 3), (6, 8), half=True),
    _resize("bilinear-float", "RESIZE_BILINEAR", "float32", (3, 4), (7, 9)),
    _resize("bilinear-float-half", "RESIZE_BILINEAR", "float32", (4, 3), (6, 8), half=True),
    _resize("bilinear-float-align", "RESIZE_BILINEAR", "float32", (3, 4), (5, 7), align=True),
    _resize("nearest-int8", "RESIZE_NEAREST_NEIGHBOR", "int8", (3, 4), (7, 9)),
    # 3 → 5 with align_corners: source 0.5 rounds half away from zero (to 1)
    _resize("nearest-int8-align", "RESIZE_NEAREST_NEIGHBOR", "int8", (3, 3), (5, 5),
            align=True),
    _resize("nearest-int8-half", "RESIZE_NEAREST_NEIGHBOR", "int8", (4, 3), (6, 8), half=True),
    _resize("nearest-uint8-half", "RESIZE_NEAREST_NEIGHBOR", "uint8", (3, 5), (7, 4),
            half=True),
    _resize("nearest-float-align", "RESIZE_NEAREST_NEIGHBOR", "float32", (3, 3), (5, 5),
            align=True),
    _resize("nearest-float-half", "RESIZE_NEAREST_NEIGHBOR", "float32", (4, 3), (6, 8),
            half=True),
]


def _t(dtype, shape):
    return f32(shape) if dtype == "float32" else q8(shape, 0.1, -3, dtype)


def _moves(dtype: str) -> list[Case]:
    d = dtype
    t = lambda shape: _t(d, shape)  # noqa: E731
    pairs = lambda *v: Tensor((len(v) // 2, 2), "int32", data=np.array(v).reshape(-1, 2))  # noqa: E731
    slice_ = lambda id_, shape, b, e, s, out, **m: Case(  # noqa: E731
        f"strided-slice-{id_}-{d}", "STRIDED_SLICE", [t(shape), i32(*b), i32(*e), i32(*s)],
        [t(out)], m)
    return [
        Case(f"space-to-batch-{d}", "SPACE_TO_BATCH_ND",
             [t((1, 4, 6, 2)), i32(2, 3), pairs(0, 0, 0, 0)], [t((6, 2, 2, 2))]),
        Case(f"space-to-batch-padded-{d}", "SPACE_TO_BATCH_ND",
             [t((2, 3, 5, 2)), i32(2, 2), pairs(1, 0, 2, 1)], [t((8, 2, 4, 2))]),
        Case(f"batch-to-space-{d}", "BATCH_TO_SPACE_ND",
             [t((6, 2, 2, 2)), i32(2, 3), pairs(0, 0, 0, 0)], [t((1, 4, 6, 2))]),
        Case(f"batch-to-space-cropped-{d}", "BATCH_TO_SPACE_ND",
             [t((8, 2, 4, 2)), i32(2, 2), pairs(1, 0, 2, 1)], [t((2, 3, 5, 2))]),
        Case(f"mirror-pad-reflect-{d}", "MIRROR_PAD", [t((1, 4, 5, 2)), pairs(0, 0, 2, 1, 3, 0,
                                                                         0, 0)],
             [t((1, 7, 8, 2))], {"mode": "REFLECT"}),
        Case(f"mirror-pad-symmetric-{d}", "MIRROR_PAD", [t((3, 4, 2)), pairs(1, 2, 0, 4, 1, 1)],
             [t((6, 8, 4))], {"mode": "SYMMETRIC"}),
        Case(f"space-to-depth-{d}", "SPACE_TO_DEPTH", [t((1, 4, 6, 3))], [t((1, 2, 3, 12))],
             {"block_size": 2}),
        Case(f"depth-to-space-{d}", "DEPTH_TO_SPACE", [t((1, 2, 3, 12))], [t((1, 4, 6, 3))],
             {"block_size": 2}),
        Case(f"squeeze-{d}", "SQUEEZE", [t((1, 3, 1, 4))], [t((3, 4))],
             {"squeeze_dims": [0, 2]}),
        Case(f"expand-dims-{d}", "EXPAND_DIMS", [t((3, 4)), i32(-1)], [t((3, 4, 1))]),
        Case(f"pack-{d}", "PACK", [t((3, 4)), t((3, 4))], [t((3, 2, 4))],
             {"axis": 1, "values_count": 2}),
        Case(f"unpack-{d}", "UNPACK", [t((3, 2, 4))], [t((3, 4)), t((3, 4))],
             {"axis": -2, "num": 2}),
        Case(f"split-{d}", "SPLIT", [Tensor((), "int32", data=np.array(-1)), t((2, 6))],
             [t((2, 2))] * 3, {"num_splits": 3}),
        Case(f"split-v-{d}", "SPLIT_V", [t((5, 3)), i32(1, 3, 1), Tensor((), "int32",
                                                                       data=np.array(0))],
             [t((1, 3)), t((3, 3)), t((1, 3))], {"num_splits": 3}),
        Case(f"slice-{d}", "SLICE", [t((3, 5, 4)), i32(1, 0, 2), i32(2, -1, 2)],
             [t((2, 5, 2))]),
        slice_("masks", (4, 6, 5), (1, 1, -3), (3, 1, 5), (1, 2, 1), (3, 3, 3),
               begin_mask=0b001, end_mask=0b010),
        slice_("negative-strides", (5, 6), (-1, 4), (0, -7), (-2, -3), (2, 2)),
        slice_("shrink", (3, 4, 5), (1, 0, -1), (2, 4, 0), (1, 1, 1), (4,),
               shrink_axis_mask=0b101),
        slice_("negative-masked", (4, 5), (0, 3), (0, 0), (-1, -2), (4, 2),
               begin_mask=0b01, end_mask=0b11),
    ]


MOVES = _moves("int8") + _moves("float32")
CASES = UNARY + TRANSPOSE_CONV + RESIZE + MOVES


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_operator_equals_tflite_reference(case, tmp_path):
    check_case(case, tmp_path)


def test_shape_is_a_constant(tmp_path):
    check_case(Case("shape-int8", "SHAPE", [q8((2, 3, 5), 0.1, 0)],
                    [Tensor((3,), "int32")], {"out_type": "INT32"}), tmp_path)
