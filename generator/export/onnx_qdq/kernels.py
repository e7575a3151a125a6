"""Integer kernels with ONNX Runtime's CPU arithmetic (TVM tensor expressions, NCHW).

ONNX Runtime's fused quantized kernels (QLinearConv, QGemm, QLinearMatMul,
QLinearGlobalAveragePool) accumulate exactly in int32 and requantize with MLAS's
`MlasRequantizeOutput`: the accumulator converted to float32, multiplied by a float32 scale,
clamped to the output type's range less the zero point, rounded half to even, plus the zero
point. QuantizeLinear divides by the scale in float32, rounds half to even and saturates;
DequantizeLinear is (q − zero point) · scale in float32.

Rounding half to even is written with exact float32 steps (the clamped value is below 2⁸):
truncate, take the fraction (exact), and step away from zero when it is over one half, or
exactly one half and the truncated value is odd. Float constants other than small integers
and 0.5 are never immediates in the kernels: TVM's C code prints a float literal with seven
significant digits, so scales reach the kernels as float32 constant arrays.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from generator.export.qkernels import OP_PATTERN_OPAQUE, Kernel


def dtype_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _func(tensors) -> tirx.PrimFunc:
    # opaque to TVM's fusion: fused with a reshape, FuseTIR maps one var to two buffers
    return te.create_prim_func(tensors).without_attr("global_symbol").with_attr(
        "op_pattern", OP_PATTERN_OPAQUE)


def round_saturate(value, zero: int, dtype: str, lo: int | None = None, hi: int | None = None):
    """A float32 TIR value clamped to [lo − zero, hi − zero], rounded half to even, plus
    `zero`, as `dtype` (lo, hi: the type's range unless given)."""
    tlo, thi = dtype_range(dtype)
    lo = tlo if lo is None else lo
    hi = thi if hi is None else hi
    f32 = "float32"
    v = tirx.min(tirx.max(value, tirx.const(float(lo - zero), f32)),
                 tirx.const(float(hi - zero), f32))
    return (round_half_even(v) + zero).astype(dtype)


def round_half_even(v):
    """A float32 TIR value of magnitude below 2²³ rounded to the nearest int32, ties to
    even (what MLAS's float → int conversions give)."""
    f32 = "float32"
    t = v.astype("int32")  # toward zero
    frac = v - t.astype(f32)  # exact
    half = tirx.const(0.5, f32)
    odd = tirx.truncmod(t, 2) != 0
    up = tirx.any(frac > half, tirx.all(frac == half, odd))
    down = tirx.any(frac < -half, tirx.all(frac == -half, odd))
    return tirx.Select(up, t + 1, tirx.Select(down, t - 1, t))


def requantize(acc, scale, zero: int, dtype: str):
    """MlasRequantizeOutput of one int32 accumulator with a float32 scale."""
    return round_saturate(acc.astype("float32") * scale, zero, dtype)


def quantize_linear(shape: tuple[int, ...], scale: float, zero: int, dtype: str) -> Kernel:
    """float32 → dtype: saturate(round_half_even(x / scale) + zero)."""
    x = te.placeholder(shape, "float32", "x")
    s = te.placeholder((1,), "float32", "scale")
    out = te.compute(shape, lambda *i: round_saturate(x[i] / s[0], zero, dtype), name="out")
    return Kernel(_func([x, s, out]), [np.array([scale], np.float32)])


def dequantize_linear(shape: tuple[int, ...], dtype: str, scale: float, zero: int) -> Kernel:
    """dtype → float32: (q − zero) · scale."""
    x = te.placeholder(shape, dtype, "x")
    s = te.placeholder((1,), "float32", "scale")
    out = te.compute(shape, lambda *i: (x[i].astype("int32") - zero).astype("float32") * s[0],
                     name="out")
    return Kernel(_func([x, s, out]), [np.array([scale], np.float32)])


def conv2d_nchw(x_shape: tuple[int, ...], x_dtype: str, x_zero: int, weights: np.ndarray,
                bias: np.ndarray, scales: np.ndarray, out_shape: tuple[int, ...], out_zero: int,
                out_dtype: str, strides: tuple[int, int], pads: tuple[int, int, int, int],
                dilations: tuple[int, int], groups: int) -> Kernel:
    """QLinearConv: Σ (x − x_zero) · w over the window (padding adds 0) + bias, in int32,
    requantized per output channel. Weights are int8 OIHW [Cout, Cin/groups, KH, KW]."""
    _, _, h_, w_ = x_shape
    cout, cin_g, kh_, kw_ = weights.shape
    cout_g = cout // groups
    x = te.placeholder(x_shape, x_dtype, "x")
    w = te.placeholder(weights.shape, "int8", "w")
    b = te.placeholder((cout,), "int32", "bias")
    s = te.placeholder((cout,), "float32", "scale")
    sh, sw = strides
    dh, dw = dilations
    top, left = pads[0], pads[1]
    padded = any(pads)
    rc = te.reduce_axis((0, cin_g), "rc")
    rh = te.reduce_axis((0, kh_), "rh")
    rw = te.reduce_axis((0, kw_), "rw")

    def x_at(n, c, h, wi):
        value = x[n, c, h, wi].astype("int32") - x_zero
        if not padded:
            return value
        inside = tirx.all(h >= 0, h < h_, wi >= 0, wi < w_)
        return tirx.if_then_else(inside, value, tirx.const(0, "int32"))

    def channel(o, c):
        return c if groups == 1 else (o // cout_g) * cin_g + c

    acc = te.compute(out_shape, lambda n, o, i, j: te.sum(
        x_at(n, channel(o, rc), i * sh - top + rh * dh, j * sw - left + rw * dw)
        * w[o, rc, rh, rw].astype("int32"), axis=[rc, rh, rw]), name="acc")
    out = te.compute(out_shape, lambda n, o, i, j: requantize(
        acc[n, o, i, j] + b[o], s[o], out_zero, out_dtype), name="out")
    return Kernel(_func([x, w, b, s, out]),
                  [weights.astype(np.int8), bias.astype(np.int32), scales.astype(np.float32)])


def dense(x_shape: tuple[int, int], x_dtype: str, x_zero: int, weights: np.ndarray,
          bias: np.ndarray, scales: np.ndarray, out_zero: int, out_dtype: str) -> Kernel:
    """QGemm / QLinearMatMul with constant weights [K, N] (int8): Σ (x − x_zero) · w + bias
    in int32, requantized per output column."""
    rows, depth = x_shape
    units = weights.shape[1]
    x = te.placeholder(x_shape, x_dtype, "x")
    w = te.placeholder(weights.shape, "int8", "w")
    b = te.placeholder((units,), "int32", "bias")
    s = te.placeholder((units,), "float32", "scale")
    k = te.reduce_axis((0, depth), "k")
    acc = te.compute((rows, units), lambda i, u: te.sum(
        (x[i, k].astype("int32") - x_zero) * w[k, u].astype("int32"), axis=k), name="acc")
    out = te.compute((rows, units), lambda i, u: requantize(
        acc[i, u] + b[u], s[u], out_zero, out_dtype), name="out")
    return Kernel(_func([x, w, b, s, out]),
                  [weights.astype(np.int8), bias.astype(np.int32), scales.astype(np.float32)])


def global_average_pool(x_shape: tuple[int, ...], dtype: str, x_zero: int, scale: float,
                        out_zero: int) -> Kernel:
    """QLinearGlobalAveragePool: Σx − x_zero · HW in int32, requantized by the float32
    scale x_scale / (y_scale · HW) (computed by the caller)."""
    n_, c_, h_, w_ = x_shape
    x = te.placeholder(x_shape, dtype, "x")
    rh = te.reduce_axis((0, h_), "rh")
    rw = te.reduce_axis((0, w_), "rw")
    total = te.compute((n_, c_), lambda n, c: te.sum(x[n, c, rh, rw].astype("int32"),
                                                    axis=[rh, rw]), name="total")
    s = te.placeholder((1,), "float32", "scale")
    out = te.compute((n_, c_, 1, 1), lambda n, c, i, j: requantize(
        total[n, c] - x_zero * h_ * w_, s[0], out_zero, dtype), name="out")
    return Kernel(_func([x, s, out]), [np.array([scale], np.float32)])


def lookup(shape: tuple[int, ...], dtype: str, table: np.ndarray) -> Kernel:
    """An elementwise function of an 8-bit input as a 256-entry table (indexed by the input's
    byte read unsigned: x + 128 for int8)."""
    out_dtype = str(table.dtype)
    x = te.placeholder(shape, dtype, "x")
    t = te.placeholder((256,), out_dtype, "table")
    offset = 128 if dtype == "int8" else 0
    out = te.compute(shape, lambda *i: t[x[i].astype("int32") + offset], name="out")
    return Kernel(_func([x, t, out]), [table])
