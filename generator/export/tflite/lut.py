"""Elementwise int8/uint8 operators as 256-entry tables.

An operator of one 8-bit input has at most 256 results, so export evaluates TFLite's
reference arithmetic once per possible input value (in Python, with C's integer semantics:
`fixedpoint.PyArith`) and the kernel looks the result up (`qkernels.lookup`). The table is
indexed by the int8-domain value + 128, which is the file's own value for uint8 inputs.
"""

from __future__ import annotations

import numpy as np

from generator.export.fixedpoint import (
    INT32_MAX,
    PyArith,
    exp_on_negative_values,
    multiply_by_quantized_multiplier,
    one_minus_x_over_one_plus_x,
    one_over_one_plus_x,
    quantize_multiplier,
    round_half_away,
)

SIGMOID_INPUT_INTEGER_BITS = 4  # TFLite's quantized logistic and tanh read the input as Q4.27

_AR = PyArith()


def file_values(dtype: str) -> np.ndarray:
    """The input value (in the file's dtype) each table entry stands for."""
    base = np.arange(256, dtype=np.int64) - 128
    return base + (128 if dtype == "uint8" else 0)


def type_range(dtype: str) -> tuple[int, int]:
    return (0, 255) if dtype == "uint8" else (-128, 127)


def store(values: np.ndarray, dtype: str) -> np.ndarray:
    """Results in the file's dtype → the int8 the kernels carry."""
    return (values - (128 if dtype == "uint8" else 0)).astype(np.int8)


def mbqm(x: int, multiplier: int, shift: int) -> int:
    return multiply_by_quantized_multiplier(_AR, int(x), multiplier, shift)


def requantize(in_dtype: str, in_scale: float, in_zero: int, out_dtype: str, out_scale: float,
               out_zero: int) -> np.ndarray:
    """TFLite's QUANTIZE between integer types: zero_out + x·(in/out scale), rounded as
    MultiplyByQuantizedMultiplier, clamped to the output type."""
    multiplier, shift = quantize_multiplier(float(np.float64(np.float32(in_scale))
                                                  / np.float64(np.float32(out_scale))))
    lo, hi = type_range(out_dtype)
    out = [min(max(out_zero + mbqm(v - in_zero, multiplier, shift), lo), hi)
           for v in file_values(in_dtype)]
    return store(np.array(out, np.int64), out_dtype)


def dequantize(in_dtype: str, scale: float, zero: int) -> np.ndarray:
    """TFLite's DEQUANTIZE: float(scale · (x − zero)), the product in double."""
    scale64 = np.float64(np.float32(scale))
    return (scale64 * (file_values(in_dtype) - zero).astype(np.float64)).astype(np.float32)


def relu_x(in_dtype: str, in_scale: float, in_zero: int, out_dtype: str, out_scale: float,
           out_zero: int, act_min: float, act_max: float | None) -> np.ndarray:
    """TFLite's quantized RELU / RELU6 / RELU_N1_TO_1: requantize, then clamp to the
    activation's limits quantized with the output's parameters."""
    multiplier, shift = quantize_multiplier(float(np.float32(in_scale) / np.float32(out_scale)))
    lo, hi = type_range(out_dtype)
    q_min = max(lo, out_zero + round_half_away(np.float32(act_min) / np.float32(out_scale)))
    q_max = hi if act_max is None else \
        min(hi, out_zero + round_half_away(np.float32(act_max) / np.float32(out_scale)))
    out = [min(max(out_zero + mbqm(v - in_zero, multiplier, shift), q_min), q_max)
           for v in file_values(in_dtype)]
    return store(np.array(out, np.int64), out_dtype)


def leaky_relu(in_dtype: str, in_scale: float, in_zero: int, out_dtype: str,
               out_scale: float, out_zero: int, alpha: float) -> np.ndarray:
    """TFLite's quantized LEAKY_RELU: identity and alpha multipliers (float32 ratios)."""
    s_in, s_out, a = np.float32(in_scale), np.float32(out_scale), np.float32(alpha)
    identity = quantize_multiplier(float(s_in / s_out))
    slope = quantize_multiplier(float(s_in * a / s_out))
    lo, hi = type_range(out_dtype)
    out = []
    for v in file_values(in_dtype):
        x = int(v) - in_zero
        m, s = identity if x >= 0 else slope
        out.append(min(max(out_zero + mbqm(x, m, s), lo), hi))
    return store(np.array(out, np.int64), out_dtype)


def _logistic_q0(x: int) -> int:
    """gemmlowp's logistic of a Q4.27 value, Q0.31."""
    if x == 0:
        return 1 << 30
    e = exp_on_negative_values(_AR, -abs(x), SIGMOID_INPUT_INTEGER_BITS)
    positive = one_over_one_plus_x(_AR, e)
    return positive if x > 0 else INT32_MAX - positive


def _tanh_q0(x: int) -> int:
    """gemmlowp's tanh of a Q4.27 value, Q0.31."""
    if x == 0:
        return 0
    n = -abs(x)
    e = exp_on_negative_values(_AR, n + n, SIGMOID_INPUT_INTEGER_BITS)
    positive = one_minus_x_over_one_plus_x(_AR, e)
    return positive if x > 0 else -positive


def _sigmoid_input(in_scale: float) -> tuple[int, int, int]:
    """(multiplier, left shift, radius) of TFLite's logistic/tanh input rescaling."""
    bits = SIGMOID_INPUT_INTEGER_BITS
    multiplier, shift = quantize_multiplier(float(np.float32(in_scale)) * (1 << (31 - bits)))
    if shift < 0:
        raise ValueError("input scale too small for the fixed-point logistic")
    radius = int(np.floor(((1 << bits) - 1) * float(1 << (31 - bits)) / (1 << shift)))
    return multiplier, shift, radius


def _saturating_table(in_dtype: str, in_scale: float, in_zero: int, out_dtype: str,
                      inside) -> np.ndarray:
    """The shape LOGISTIC and TANH share: inputs beyond the radius saturate to the type's
    limits, the rest go through `inside(rescaled Q4.27 input, lo, hi)`, clamped."""
    multiplier, shift, radius = _sigmoid_input(in_scale)
    lo, hi = type_range(out_dtype)
    out = []
    for v in file_values(in_dtype):
        x = int(v) - in_zero
        if x <= -radius:
            out.append(lo)
        elif x >= radius:
            out.append(hi)
        else:
            out.append(min(max(inside(mbqm(x, multiplier, shift), lo, hi), lo), hi))
    return store(np.array(out, np.int64), out_dtype)


def logistic(in_dtype: str, in_scale: float, in_zero: int, out_dtype: str) -> np.ndarray:
    """TFLite's quantized LOGISTIC (output scale 1/256, zero point at the type's lowest)."""
    return _saturating_table(in_dtype, in_scale, in_zero, out_dtype,
                             lambda q4, lo, hi: _AR.rdbp(_logistic_q0(q4), 23) + lo)


def tanh(in_dtype: str, in_scale: float, in_zero: int, out_dtype: str) -> np.ndarray:
    """TFLite's quantized TANH (output scale 1/128, zero point at the type's middle)."""
    return _saturating_table(in_dtype, in_scale, in_zero, out_dtype,
                             lambda q4, lo, hi: _AR.rdbp(_tanh_q0(q4), 24) + (lo + hi + 1) // 2)


def concat_rescale(in_dtype: str, in_scale: float, in_zero: int, out_dtype: str,
                   out_scale: float, out_zero: int) -> np.ndarray:
    """TFLite's uint8 CONCATENATION of an input quantized differently from the output: in
    float32, round(x · s + b) + zero_out with s = in_scale · (1 / out_scale), b = −zero_in · s."""
    f = np.float32
    scale = f(f(in_scale) * (f(1.0) / f(out_scale)))
    bias = f(f(-in_zero) * scale)
    lo, hi = type_range(out_dtype)
    out = [min(max(round_half_away(f(f(int(v)) * scale) + bias) + out_zero, lo), hi)
           for v in file_values(in_dtype)]
    return store(np.array(out, np.int64), out_dtype)
