"""Unary int8/uint8 operators as 256-entry tables, transposed convolution, bilinear
resizing and the space/batch moves.

The tables follow TFLite's reference arithmetic for every possible input value: the
fixed-point HardSwish, RSQRT's Newton-Raphson inverse square root, ABS's requantization,
and the float32 tables TFLite itself builds at prepare time (ELU, EXP, LOG: `_lut_populate`,
evaluated with the C library's float functions where it can be loaded).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math

import numpy as np

from generator.export import qkernels
from generator.export.fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    PyArith,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    round_half_away,
    saturating_shl,
)
from generator.export.quantize import _requant as requantization
from generator.export.tflite import lut
from generator.export.tflite.convert import (
    Context,
    NotMine,
    Unsupported,
    activation_name,
    activation_range,
    all_float,
    converter,
    float_activation,
    int8_offset,
)
from generator.export.tflite.model import TfOp, TfTensor
from generator.export.tflite.ops_nn import _bias, _scales, _weights

_AR = PyArith()
_F = np.float32


# ---- float32 functions of the C library (what TFLite's tables call) ----------------------

@functools.cache
def _libm_fn(name: str):
    """libm's float function `name` (expf, logf, expm1f, sqrtf), or None."""
    path = ctypes.util.find_library("m")
    if path is None:
        return None
    try:
        fn = getattr(ctypes.CDLL(path), name)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float]
    return fn


def _cfloat(name: str, x: np.float32) -> np.float32:
    """C's float `name`(x): libm where available, numpy's float32 otherwise."""
    fn = _libm_fn(name)
    if fn is not None:
        return _F(fn(float(x)))
    with np.errstate(all="ignore"):
        return _F({"expf": np.exp, "logf": np.log, "expm1f": np.expm1,
                   "sqrtf": np.sqrt}[name](_F(x)))


def _to_int32(x: np.float32) -> int:
    """static_cast<int32_t>(float) as x86 does it: truncation, INT32_MIN when out of range."""
    if not np.isfinite(x) or not (INT32_MIN <= float(x) < 2.0 ** 31):
        return INT32_MIN
    return int(math.trunc(float(x)))


def _mbqm(x: int, multiplier: int, shift: int) -> int:
    return multiply_by_quantized_multiplier(_AR, int(x), multiplier, shift)


# ---- the tables --------------------------------------------------------------------------

def lut_populate(in_dtype: str, in_scale: float, in_zero: int, out_dtype: str,
                 out_scale: float, out_zero: int, fn) -> np.ndarray:
    """TFLite's LUTPopulate for 8-bit types: dequantize in float32, apply `fn` (float32 →
    float32), multiply by 1/out_scale, round half away from zero, add the zero point (in
    float32), convert to int32 and clamp. Zero points are the file's."""
    inverse = _F(1) / _F(out_scale)
    lo, hi = lut.type_range(out_dtype)
    out = []
    with np.errstate(all="ignore"):
        for v in lut.file_values(in_dtype):
            dequantized = _F(_F(in_scale) * _F(int(v) - in_zero))
            transformed = _F(fn(dequantized))
            scaled = _F(transformed * inverse)
            rescaled = _F(round_half_away(scaled)) if np.isfinite(scaled) else scaled
            quantized = _to_int32(_F(rescaled + _F(out_zero)))
            out.append(min(max(quantized, lo), hi))
    return lut.store(np.array(out, np.int64), out_dtype)


def elu_table(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero) -> np.ndarray:
    """TFLite's int8 ELU table: expm1(x) below zero, x above."""
    return lut_populate(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero,
                        lambda v: _cfloat("expm1f", v) if v < 0 else v)


def exp_table(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero) -> np.ndarray:
    """TFLite's int8 EXP table."""
    return lut_populate(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero,
                        lambda v: _cfloat("expf", v))


def log_table(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero) -> np.ndarray:
    """TFLite's int8 LOG table: the output's lowest value for inputs ≤ 0."""
    lowest = _F(_F(lut.type_range(out_dtype)[0] - out_zero) * _F(out_scale))
    return lut_populate(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero,
                        lambda v: lowest if v <= 0 else _cfloat("logf", v))


def abs_table(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero) -> np.ndarray:
    """TFLite's quantized ABS: |x − zero_in|, requantized when the scales differ."""
    lo, hi = lut.type_range(out_dtype)
    rescale = _F(in_scale) != _F(out_scale)
    multiplier, shift = quantize_multiplier(float(_F(in_scale) / _F(out_scale)))
    out = []
    for v in lut.file_values(in_dtype):
        value = abs(int(v) - in_zero)
        q = _mbqm(value, multiplier, shift) + out_zero if rescale else value + out_zero
        out.append(min(max(q, lo), hi))
    return lut.store(np.array(out, np.int64), out_dtype)


def _inv_sqrt_multiplier(value: int) -> tuple[int, int]:
    """TFLite's GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1)."""
    if value <= 1:
        return INT32_MAX, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    leading_zeros = 32 - value.bit_length()
    pairs = (leading_zeros - 1) // 2 - 1
    shift -= pairs
    value <<= 2 * pairs
    # Newton-Raphson in Q3.28 (gemmlowp FixedPoint<int32, 3>)
    half_input = _AR.rdbp(value >> 1, 1)
    half_three = (1 << 28) + (1 << 27)
    x = 1 << 28
    for _ in range(5):
        x3 = saturating_shl(_AR, _AR.srdhm(_AR.srdhm(x, x), x), 6)
        x = saturating_shl(_AR, _AR.srdhm(half_three, x) - _AR.srdhm(half_input, x3), 3)
    x = _AR.srdhm(x, 1518500250)  # sqrt(2) / 2 in Q0.31
    if shift < 0:
        x = _AR.shl(x, -shift)
        shift = 0
    return x, -shift


def rsqrt_table(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero) -> np.ndarray:
    """TFLite's int8 RSQRT. Inputs below the zero point make TFLite fail; they get the
    output's highest value here (as an input at the zero point does)."""
    kshift = 20
    lo, hi = lut.type_range(out_dtype)
    scale = 1.0 / float(_F(_cfloat("sqrtf", _F(in_scale)) * _F(out_scale)))
    multiplier, shift = quantize_multiplier(scale)
    out = []
    for v in lut.file_values(in_dtype):
        value = int(v) - in_zero
        if value <= 0:
            out.append(hi)
            continue
        inv, inv_shift = _inv_sqrt_multiplier(value)
        data = _mbqm(1, inv, inv_shift + kshift)
        q = _mbqm(data, multiplier, shift - kshift) + out_zero
        out.append(min(max(q, lo), hi))
    return lut.store(np.array(out, np.int64), out_dtype)


def sqrt_table(in_dtype, in_scale, in_zero, out_dtype, out_scale, out_zero) -> np.ndarray:
    """TFLite's int8 SQRT: sqrt of the float32 dequantized input, divided by the output
    scale and truncated toward zero. Negative inputs make TFLite fail; they get the output
    zero point here."""
    lo, hi = lut.type_range(out_dtype)
    out = []
    for v in lut.file_values(in_dtype):
        x = _F(_F(in_scale) * _F(int(v) - in_zero))
        if x < 0:
            out.append(out_zero)
            continue
        q = _to_int32(_F(_cfloat("sqrtf", x) / _F(out_scale))) + out_zero
        out.append(min(max(q, lo), hi))
    return lut.store(np.array(out, np.int64), out_dtype)


def neg_table(in_dtype: str) -> np.ndarray:
    """TFLite's int8 NEG: the stored value negated (wrapping −(−128) to −128), whatever the
    tensors' quantization."""
    values = -lut.file_values(in_dtype)
    return ((values + 128) % 256 - 128).astype(np.int8)


def _srdhm16(a: int, b: int) -> int:
    """gemmlowp's int16 SaturatingRoundingDoublingHighMul."""
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    total = ab + nudge
    q = abs(total) >> 15
    return q if total >= 0 else -q


def _sdhm16(a: int, b: int) -> int:
    """TFLite's SaturatingDoublingHighMul: the high half of 2·a·b, truncated toward zero."""
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    q = abs(ab) >> 15
    return _wrap16(q if ab >= 0 else -q)


def _wrap16(x: int) -> int:
    return (x + (1 << 15)) % (1 << 16) - (1 << 15)


def _sat_shl16(x: int, amount: int) -> int:
    return min(max(x * (1 << amount), -(1 << 15)), (1 << 15) - 1)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier, then DownScaleInt32ToInt16Multiplier."""
    m32, exponent = quantize_multiplier(real)
    if m32 >= INT32_MAX - (1 << 15):
        return (1 << 15) - 1, exponent
    return (m32 + (1 << 15)) >> 16, exponent


def hard_swish_table(in_dtype, in_scale, in_zero, out_dtype, out_scale,
                     out_zero) -> np.ndarray:
    """TFLite's quantized HardSwish: int16 fixed point, the input on a 2**7 finer scale,
    a "relu-ish" factor in [0, 1] and the output multiplier (both 16-bit)."""
    hires = _F(_F(1.0 / 128.0) * _F(in_scale))
    out_m, out_exp = _int16_multiplier(float(_F(hires / _F(out_scale))))
    if out_exp > 0:
        raise Unsupported("hard swish output scale too small (TFLite refuses it too)")
    relu_m, relu_exp = _int16_multiplier(float(_F(hires / _F(_F(3.0) / _F(32768.0)))))
    lo, hi = lut.type_range(out_dtype)
    out = []
    for v in lut.file_values(in_dtype):
        x = _wrap16((int(v) - in_zero) * 128)
        preshift = _srdhm16(x, out_m)
        r = x
        if relu_exp > 0:
            r = _sat_shl16(r, relu_exp - 1)
        r = _srdhm16(r, relu_m)
        if relu_exp > 0:
            r = _sat_shl16(r, 1)
        if relu_exp < 0:
            r = _AR.rdbp(r, -relu_exp)
        r = (r + (1 << 15)) >> 1
        value = _AR.rdbp(_sdhm16(r, preshift), -out_exp) + out_zero
        out.append(min(max(value, lo), hi))
    return lut.store(np.array(out, np.int64), out_dtype)


_TABLES = {"HARD_SWISH": hard_swish_table, "ELU": elu_table, "ABS": abs_table,
           "RSQRT": rsqrt_table, "SQRT": sqrt_table, "LOG": log_table, "EXP": exp_table}
_UINT8_TOO = ("HARD_SWISH",)  # the others are int8 only in TFLite


@converter("HARD_SWISH", "ELU", "ABS", "RSQRT", "SQRT", "LOG", "EXP", "NEG")
def unary_table(ctx: Context, op: TfOp) -> None:
    """An 8-bit unary operator as a table of TFLite's results."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if all_float(x_t, out_t):
        raise NotMine("float tensors")
    if op.code == "NEG":
        if x_t.dtype != "int8" or out_t.dtype != "int8":
            raise Unsupported(f"{x_t.dtype} negation (TFLite negates int8 only)")
        table = neg_table("int8")
    else:
        x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
        if x.dtype != out.dtype:
            raise Unsupported(f"{x.dtype} input with a {out.dtype} output")
        if x.dtype != "int8" and op.code not in _UINT8_TOO:
            raise Unsupported(f"{x.dtype} {op.code} (TFLite takes int8 only)")
        table = _TABLES[op.code](x.dtype, x.scale, x.zero + int8_offset(x.dtype), out.dtype,
                                 out.scale, out.zero + int8_offset(out.dtype))
    ctx.kernel(op.code.lower(), qkernels.lookup(x_t.shape, table), [ctx.value(x_t)], out_t)


# ---- transposed convolution --------------------------------------------------------------

def _transpose_padding(out_size: int, kernel: int, stride: int, same: bool) -> int:
    """TFLite's padding before the output of a transposed convolution: a convolution's
    padding from the output size back to the input size."""
    conv_out = (out_size + stride - 1) // stride if same else (out_size + stride - kernel) // stride
    return max((conv_out - 1) * stride + kernel - out_size, 0) // 2


def _dilated(ctx: Context, x, shape: tuple[int, ...], strides: tuple[int, int],
             fill: float):
    """x (NHWC) with stride − 1 `fill` values between neighbouring pixels."""
    from tvm import relax

    n, h, w, c = shape
    sh, sw = strides
    if (sh, sw) == (1, 1):
        return x, shape
    y = ctx.emit(relax.op.reshape(x, (n, h, 1, w, 1, c)))
    y = ctx.emit(relax.op.nn.pad(y, [0, 0, 0, 0, 0, sh - 1, 0, 0, 0, sw - 1, 0, 0],
                                 pad_value=fill))
    y = ctx.emit(relax.op.reshape(y, (n, h * sh, w * sw, c)))
    dh, dw = (h - 1) * sh + 1, (w - 1) * sw + 1
    y = ctx.emit(relax.op.strided_slice(y, [1, 2], [0, 0], [dh, dw]))
    return y, (n, dh, dw, c)


def _conv_geometry(ctx: Context, x, shape, out_hw, k_hw, pads_before):
    """Crop the dilated input where the output is shorter than a full transposed
    convolution; the convolution's (top, left, bottom, right) padding."""
    from tvm import relax

    n, dh, dw, c = shape
    before, after, crop = [], [], []
    for size, out, k, p in zip((dh, dw), out_hw, k_hw, pads_before, strict=True):
        b = k - 1 - p
        if b < 0:
            raise Unsupported("transposed convolution padding wider than the kernel")
        a = out + k - 1 - size - b
        before.append(b)
        after.append(max(a, 0))
        crop.append(size + min(a, 0))
    if crop != [dh, dw]:
        x = ctx.emit(relax.op.strided_slice(x, [1, 2], [0, 0], crop))
    return x, (n, crop[0], crop[1], c), (before[0], before[1], after[0], after[1])


@converter("TRANSPOSE_CONV")
def transpose_conv(ctx: Context, op: TfOp) -> None:
    """TFLite's TRANSPOSE_CONV as a stride-1 convolution of the input dilated by the
    strides (zero-point gaps) with the spatially flipped weights."""
    from tvm import relax

    w_t, x_t, out_t = ctx.need(op, 1), ctx.need(op, 2), ctx.out(op)
    b_t = ctx.arg(op, 3)
    o = op.options
    if len(x_t.shape) != 4 or len(w_t.shape) != 4:
        raise Unsupported("a transposed convolution that is not 2-D NHWC")
    strides = (int(o.StrideH()), int(o.StrideW()))
    same = int(o.Padding()) == 0
    _, oh, ow, cout = out_t.shape
    kh, kw = w_t.shape[1], w_t.shape[2]
    if w_t.shape[3] != x_t.shape[3] or w_t.shape[0] != cout:
        raise Unsupported(f"weights of shape {list(w_t.shape)}")
    pads = (_transpose_padding(oh, kh, strides[0], same),
            _transpose_padding(ow, kw, strides[1], same))
    act = activation_name(o)
    if all_float(x_t, w_t, b_t, out_t):
        x, shape = _dilated(ctx, ctx.value(x_t), x_t.shape, strides, 0.0)
        x, shape, conv_pads = _conv_geometry(ctx, x, shape, (oh, ow), (kh, kw), pads)
        w = ctx.const(w_t, "the weights")[:, ::-1, ::-1, :]
        y = ctx.emit(relax.op.nn.conv2d(
            x, relax.const(np.ascontiguousarray(np.transpose(w, (0, 3, 1, 2)), np.float32)),
            strides=(1, 1), padding=conv_pads, data_layout="NHWC", kernel_layout="OIHW",
            out_layout="NHWC"))
        if b_t is not None:
            y = ctx.emit(relax.op.add(y, ctx.value(b_t)))
        ctx.set(out_t, float_activation(ctx, y, act))
        return
    xq, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    if xq.dtype != "int8" or out.dtype != "int8":
        raise Unsupported(f"{xq.dtype} transposed convolution (int8 only)")
    q, scales, w_zero, w_uint8 = _weights(ctx, w_t, 0)
    if w_uint8 or w_zero:
        raise Unsupported("uint8 weights")
    weights = np.ascontiguousarray(q[:, ::-1, ::-1, :]).astype(np.int64)
    sums = weights.reshape(cout, -1).sum(axis=1)
    bias = _bias(ctx, b_t, cout)
    adjusted = bias - xq.zero * sums
    requant = requantization(xq.scale, _scales(scales, cout), out.scale, out.zero,
                             activation_range(act, out.scale, out.zero))
    x, shape = _dilated(ctx, ctx.value(x_t), x_t.shape, strides, float(xq.zero))
    x, shape, conv_pads = _conv_geometry(ctx, x, shape, (oh, ow), (kh, kw), pads)
    kernel = qkernels.conv2d_nhwc(shape, weights, adjusted, out_t.shape, (1, 1), conv_pads,
                                  (1, 1), xq.zero, requant, False, 0)
    ctx.kernel("transpose_conv2d", kernel, [x], out_t)


# ---- bilinear resizing -------------------------------------------------------------------

def _bilinear_axis_int(out_size: int, in_size: int, align: bool, half: bool):
    """Per output index: (lower, upper) source indices and their weights in 1/1024
    (ResizeBilinearInteger's 10-bit fixed point)."""
    if align and out_size > 1:
        scale = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = ((1 << 10) * in_size + out_size // 2) // out_size

    def tdiv(a: int, b: int) -> int:
        q = abs(a) // b
        return q if a >= 0 else -q

    idx, wts = np.zeros((2, out_size), np.int32), np.zeros((2, out_size), np.int32)
    for i in range(out_size):
        v = i * scale + scale // 2 - (1 << 9) if half else i * scale
        lo = max(tdiv(v, 1 << 10), 0)
        hi = min(tdiv(v + (1 << 10) - 1, 1 << 10), in_size - 1)
        frac = v - (1 << 10) * lo
        idx[:, i] = (lo, hi)
        wts[:, i] = ((1 << 10) - frac, frac)
    return idx, wts


def _bilinear_axis_float(out_size: int, in_size: int, align: bool, half: bool):
    """Per output index: (lower, upper) source indices and float32 weights (1 − d, d)."""
    if align and out_size > 1:
        scale = _F(in_size - 1) / _F(out_size - 1)
    else:
        scale = _F(in_size) / _F(out_size)
    idx, wts = np.zeros((2, out_size), np.int32), np.zeros((2, out_size), np.float32)
    for i in range(out_size):
        v = _F(_F(_F(i) + _F(0.5)) * scale - _F(0.5)) if half else _F(_F(i) * scale)
        lo = max(int(np.floor(v)), 0)
        hi = min(int(np.ceil(v)), in_size - 1)
        d = _F(v - _F(lo))
        idx[:, i] = (lo, hi)
        wts[:, i] = (_F(1) - d, d)
    return idx, wts


def resize_bilinear_kernel(in_shape: tuple[int, ...], out_shape: tuple[int, ...],
                           rows: tuple[np.ndarray, np.ndarray],
                           cols: tuple[np.ndarray, np.ndarray], mode: str) -> qkernels.Kernel:
    """out[b, y, x, c] = Σ x[b, rows[i], cols[j], c] · wy[i] · wx[j] over the 2 × 2 source
    pixels, as TFLite computes it: `mode` "int8" (int64 sum of 20-bit products, rounded
    half away from zero), "uint8" (float32, + 0.5, truncated; values carried as int8) or
    "float32"."""
    from tvm import te, tirx

    in_dtype = "float32" if mode == "float32" else "int8"
    x = te.placeholder(in_shape, in_dtype, "x")
    ry = te.placeholder(rows[0].shape, "int32", "row_index")
    wy = te.placeholder(rows[1].shape, str(rows[1].dtype), "row_weight")
    rx = te.placeholder(cols[0].shape, "int32", "col_index")
    wx = te.placeholder(cols[1].shape, str(cols[1].dtype), "col_weight")

    def element(b, i, j, c):
        def at(a, k):
            v = x[b, ry[a, i], rx[k, j], c]
            if mode == "int8":
                return v.astype("int64")
            if mode == "uint8":
                return (v.astype("int32") + 128).astype("float32")
            return v

        if mode == "int8":
            terms = [at(a, k) * wy[a, i].astype("int64") * wx[k, j].astype("int64")
                     for a, k in ((0, 0), (1, 0), (0, 1), (1, 1))]
            total = terms[0] + terms[1] + terms[2] + terms[3]
            half = tirx.const(1 << 19, "int64")
            rounded = tirx.Select(total > tirx.const(0, "int64"), total + half, total - half)
            return tirx.truncdiv(rounded, tirx.const(1 << 20, "int64")).astype("int8")
        terms = [at(a, k) * wy[a, i] * wx[k, j] for a, k in ((0, 0), (1, 0), (0, 1), (1, 1))]
        total = ((terms[0] + terms[1]) + terms[2]) + terms[3]
        if mode == "uint8":
            total = total + tirx.const(0.5, "float32")
            return (total.astype("int32") - 128).astype("int8")
        return total

    out = te.compute(out_shape, element, name="out")
    func = te.create_prim_func([x, ry, wy, rx, wx, out]).without_attr("global_symbol")
    return qkernels.Kernel(func, [rows[0], rows[1], cols[0], cols[1]], ("table",) * 4)


@converter("RESIZE_BILINEAR")
def resize_bilinear(ctx: Context, op: TfOp) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    o = op.options
    align, half = bool(o.AlignCorners()), bool(o.HalfPixelCenters())
    if len(x_t.shape) != 4:
        raise Unsupported("resizing a tensor that is not NHWC")
    _, h, w, _ = x_t.shape
    oh, ow = out_t.shape[1], out_t.shape[2]
    if all_float(x_t, out_t):
        mode = "float32"
    else:
        x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
        if x != out:
            raise Unsupported("resizing with different input and output quantization")
        mode = x.dtype
    axis = _bilinear_axis_int if mode == "int8" else _bilinear_axis_float
    kernel = resize_bilinear_kernel(x_t.shape, out_t.shape, axis(oh, h, align, half),
                                    axis(ow, w, align, half), mode)
    ctx.kernel("resize_bilinear", kernel, [ctx.value(x_t)], out_t,
               out_dtype="float32" if mode == "float32" else "int8")


# ---- space ↔ batch -----------------------------------------------------------------------

def _block_and_pairs(ctx: Context, op: TfOp, what: str) -> tuple[list[int], list[tuple[int, int]]]:
    block = [int(v) for v in ctx.const(ctx.need(op, 1), "the block shape").reshape(-1)]
    pairs = ctx.const(ctx.need(op, 2), what).astype(np.int64).reshape(-1, 2)
    return block, [(int(a), int(b)) for a, b in pairs]


def _check_4d(x_t: TfTensor, block: list[int]) -> None:
    if len(x_t.shape) != 4 or len(block) != 2:
        raise Unsupported("space/batch moves of tensors that are not 4-D with 2 block sizes")


@converter("SPACE_TO_BATCH_ND")
def space_to_batch(ctx: Context, op: TfOp) -> None:
    """Pad (with the output's zero point), then move each block offset to its own batch."""
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    block, pads = _block_and_pairs(ctx, op, "the paddings")
    _check_4d(x_t, block)
    n, h, w, c = x_t.shape
    (pt, pb), (pl, pr) = pads
    fill = 0.0
    if not all_float(x_t, out_t):
        if ctx.qinfo(x_t) != ctx.qinfo(out_t):
            raise Unsupported("different input and output quantization")
        fill = float(ctx.qinfo(out_t).zero)
    bh, bw = block
    hp, wp = h + pt + pb, w + pl + pr
    y = ctx.value(x_t)
    if any((pt, pb, pl, pr)):
        y = ctx.emit(relax.op.nn.pad(y, [0, 0, pt, pb, pl, pr, 0, 0], pad_value=fill))
    y = ctx.emit(relax.op.reshape(y, (n, hp // bh, bh, wp // bw, bw, c)))
    y = ctx.emit(relax.op.permute_dims(y, [2, 4, 0, 1, 3, 5]))
    ctx.emit(relax.op.reshape(y, out_t.shape), out_t)
    if x_t.quant is not None:
        ctx.report.integer.append("space_to_batch_nd")


@converter("BATCH_TO_SPACE_ND")
def batch_to_space(ctx: Context, op: TfOp) -> None:
    """Interleave the batches' pixels back into space, then crop."""
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    block, crops = _block_and_pairs(ctx, op, "the crops")
    _check_4d(x_t, block)
    if not all_float(x_t, out_t) and ctx.qinfo(x_t) != ctx.qinfo(out_t):
        raise Unsupported("different input and output quantization")
    nb, h, w, c = x_t.shape
    bh, bw = block
    n = nb // (bh * bw)
    (ct, cb), (cl, cr) = crops
    y = ctx.emit(relax.op.reshape(ctx.value(x_t), (bh, bw, n, h, w, c)))
    y = ctx.emit(relax.op.permute_dims(y, [2, 3, 0, 4, 1, 5]))
    y = ctx.emit(relax.op.reshape(y, (n, h * bh, w * bw, c)))
    if any((ct, cb, cl, cr)):
        y = ctx.emit(relax.op.strided_slice(y, [1, 2], [ct, cl], [h * bh - cb, w * bw - cr]))
    ctx.set(out_t, y)
    if x_t.quant is not None:
        ctx.report.integer.append("batch_to_space_nd")
