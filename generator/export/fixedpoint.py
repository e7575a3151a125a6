"""TFLite's integer arithmetic, written once for two back ends.

Quantized TFLite models are defined by the reference kernels' fixed-point arithmetic
(gemmlowp's rounding doubling high multiply, rounding divide by a power of two, the
fixed-point exp and reciprocal of the int8 softmax). Bit-exact results need exactly those
operations. The functions here take an `Arith` back end: `PyArith` evaluates on Python
integers (export-time constants, the tests' reference), `TirArith` builds TIR expressions
that TVM compiles into the integer kernels. Both back ends follow C semantics: int32 values,
int64 products, division truncating toward zero, arithmetic right shifts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def _wrap32(x: int) -> int:
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


def _truncdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class PyArith:
    """Python integers with C's int32/int64 semantics."""

    def select(self, cond: bool, a: int, b: int) -> int:
        return a if cond else b

    def shared(self, value: int) -> int:
        return value

    def srdhm(self, a: int, b: int, b_above_min: bool = False) -> int:
        """Saturating rounding doubling high multiply: the high 32 bits of 2·a·b, rounded."""
        if a == INT32_MIN and b == INT32_MIN:
            return INT32_MAX
        ab = a * b
        nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
        return _truncdiv(ab + nudge, 1 << 31)

    def rounding_half_sum(self, a: int, b: int) -> int:
        """(a + b) / 2, rounded half away from zero."""
        total = a + b
        return _truncdiv(total + (1 if total >= 0 else -1), 2)

    def rdbp(self, x: int, exponent: int) -> int:
        """Rounding divide by 2**exponent, ties away from zero."""
        mask = (1 << exponent) - 1
        remainder = x & mask
        threshold = (mask >> 1) + (1 if x < 0 else 0)
        return (x >> exponent) + (1 if remainder > threshold else 0)

    def shl(self, x: int, exponent: int) -> int:
        return _wrap32(x << exponent)

    def rdbp32(self, x: int, exponent: int) -> int:
        """`rdbp` for an int32 x and an exponent in [0, 31]."""
        return self.rdbp(x, exponent)

    def shl32(self, x: int, exponent: int) -> int:
        """`shl` for an exponent in [0, 31]."""
        return self.shl(x, exponent)

    def ne(self, a: int, b: int) -> bool:
        return a != b

    def eq(self, a: int, b: int) -> bool:
        return a == b


class TirArith:
    """The same operations as TIR expressions on int32 values."""

    def __init__(self, scratch_slots: int = 0) -> None:
        from tvm import tirx

        self.t = tirx
        self._stores: list = []
        self.used = {"int32": 0, "int64": 0}
        self.scratch = {dt: tirx.decl_buffer((max(scratch_slots, 1),), dt, f"fx_{dt}")
                        for dt in self.used} if scratch_slots else {}

    def shared(self, value):
        """`value`, to be used more than once. With scratch slots (statement mode) it is
        stored in a local scratch array and read back, so a chain of fixed-point steps stays
        linear in size (TIR's let-bindings would make TVM's analyzers expand the chain);
        without (expression mode) it is the expression itself, for the short requantization
        chains, which C compilers deduplicate."""
        if not self.scratch or isinstance(value, int) \
                or type(value).__name__ in ("Var", "BufferLoad", "TensorLoad", "IntImm"):
            return value
        dtype = str(value.ty)
        slot = self.used[dtype]
        self.used[dtype] += 1
        buf = self.scratch[dtype]
        if slot >= int(buf.shape[0]):  # counting pass: the caller rebuilds with enough slots
            return self.t.Var(f"fx_{slot}", dtype)
        index = [self.t.const(slot, "int32")]
        self._stores.append(self.t.BufferStore(buf, value, index))
        return self.t.BufferLoad(buf, index)

    def restart(self) -> None:
        """Start numbering scratch slots again (a kernel body built a second time)."""
        self.used = dict.fromkeys(self.used, 0)
        self._stores = []

    def take_stores(self) -> list:
        """The scratch stores recorded since the last call, in order."""
        stores, self._stores = self._stores, []
        return stores

    def _i64(self, v: Any):
        if isinstance(v, int):
            return self.t.const(v, "int64")
        return v if str(getattr(v, "ty", "")) == "int64" else self.t.Cast("int64", v)

    def _i32(self, v: Any):
        return self.t.const(v, "int32") if isinstance(v, int) else v

    def select(self, cond, a, b):
        return self.t.Select(cond, self._i32(a), self._i32(b))

    def srdhm(self, a, b, b_above_min: bool = False):
        t = self.t
        ab = self.shared(self._i64(a) * self._i64(b))
        nudge = t.Select(ab >= t.const(0, "int64"), t.const(1 << 30, "int64"),
                         t.const(1 - (1 << 30), "int64"))
        high = t.Cast("int32", t.truncdiv(ab + nudge, t.const(1 << 31, "int64")))
        if b_above_min or (isinstance(b, int) and b != INT32_MIN):
            return high
        # a·b = 2**62 only for a = b = INT32_MIN (compared in int64: TVM's simplifier would
        # move a constant offset of `a` across an int32 comparison and overflow it)
        both_min = ab == t.const(1 << 62, "int64")
        return t.Select(both_min, t.const(INT32_MAX, "int32"), high)

    def rounding_half_sum(self, a, b: int):
        t = self.t
        total = self.shared(self._i64(a) + t.const(b, "int64"))
        sign = t.Select(total >= t.const(0, "int64"), t.const(1, "int64"), t.const(-1, "int64"))
        return t.Cast("int32", t.truncdiv(total + sign, t.const(2, "int64")))

    def rdbp(self, x, exponent):
        t = self.t
        x64 = self.shared(self._i64(x))
        one = t.const(1, "int64")
        mask = self.shared((one << self._i64(exponent)) - one)
        remainder = x64 & mask
        threshold = (mask >> one) + t.Select(x64 < t.const(0, "int64"), one,
                                              t.const(0, "int64"))
        q = (x64 >> self._i64(exponent)) + t.Select(remainder > threshold, one,
                                                     t.const(0, "int64"))
        return t.Cast("int32", q)

    def shl(self, x, exponent):
        return self.t.Cast("int32", self._i64(x) << self._i64(exponent))

    def rdbp32(self, x, exponent):
        """`rdbp` in int32 arithmetic (a 32-bit core does it in a few instructions, the int64
        form in several times as many): x int32, exponent in [0, 31]."""
        t = self.t
        x = self.shared(self._i32(x))
        if isinstance(exponent, int):
            mask = t.const((1 << exponent) - 1, "int32")
        else:  # 2**e − 1 without shifting a 1 into the sign bit. The clamp tells TVM's
            # bound analysis that the shift is in [0, 31]; unbounded, it folds the rounding away.
            exponent = self.shared(t.min(self._i32(exponent), t.const(31, "int32")))
            mask = self.shared(t.const(INT32_MAX, "int32") >> (t.const(31, "int32") - exponent))
        threshold = (mask >> t.const(1, "int32")) + t.Select(
            x < t.const(0, "int32"), t.const(1, "int32"), t.const(0, "int32"))
        return (x >> self._i32(exponent)) + t.Select((x & mask) > threshold,
                                                     t.const(1, "int32"), t.const(0, "int32"))

    def shl32(self, x, exponent):
        """x · 2**exponent in int32 (exponent in [0, 31]; wraps like TFLite's int32 multiply)."""
        return self._i32(x) << self._i32(exponent)

    def ne(self, a, b):
        return self._i32(a) != self._i32(b)

    def eq(self, a, b):
        return self._i32(a) == self._i32(b)


# ---- requantization ------------------------------------------------------------------------

def round_half_away(x: float) -> int:
    """TfLiteRound: half away from zero (numpy and Python round half to even)."""
    return int(math.copysign(math.floor(abs(float(x)) + 0.5), float(x)))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """A real multiplier as (int32 significand in [2**30, 2**31), power-of-two shift)."""
    if real == 0.0:
        return 0, 0
    significand, shift = math.frexp(real)
    fixed = round_half_away(significand * (1 << 31))
    if fixed == 1 << 31:
        fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return fixed, shift


def multiply_by_quantized_multiplier(ar, x, multiplier, shift: int):
    """x · multiplier · 2**shift with TFLite's two roundings (shift may be a TIR value)."""
    if isinstance(shift, int):
        left, right = max(shift, 0), max(-shift, 0)
        shifted = ar.shl32(x, left) if left else x
        return ar.rdbp32(ar.srdhm(shifted, multiplier), right) if right else \
            ar.srdhm(shifted, multiplier)
    from tvm import tirx

    zero = tirx.const(0, "int32")
    left = tirx.max(shift, zero)
    right = tirx.max(zero - shift, zero)
    # a quantized multiplier lies in [0, 2**31): the INT32_MIN·INT32_MIN case cannot occur
    return ar.rdbp32(ar.srdhm(ar.shl32(x, left), multiplier, b_above_min=True), right)


# ---- the short output stage -----------------------------------------------------------------
# TFLite's two roundings plus the output zero point, in int32 arithmetic and one 32×32→64-bit
# multiply, when a layer's right shifts e = −shift all lie in [1, 22] and every accumulator's
# magnitude stays below 2**30 (`narrow_fits`):
#   h = (acc·M + 2**30) >> 31          the rounding doubling high multiply. For a product
#                                      ≥ 0 TFLite truncates the same sum; for one < 0 it
#                                      truncates (acc·M + 1 − 2**30) / 2**31 toward zero,
#                                      which is the same floor (write acc·M + 2**30 as
#                                      q·2**31 + r, 0 ≤ r < 2**31: the nudged sum is
#                                      (q − 1)·2**31 + r + 1 with 1 ≤ r + 1 ≤ 2**31).
#   (h + zp·2**e + 2**(e−1) − [h < 0]) >> e
#                                      the rounding divide (ties away from zero) plus zp: with
#                                      h = q·2**e + r, TFLite adds 1 to q when
#                                      r ≥ 2**(e−1) + [h < 0], which is this floor.
# |h| ≤ |acc| < 2**30, |zp|·2**e ≤ 2**29 and 2**(e−1) ≤ 2**21: the sum stays within int32.
NARROW_SHIFTS = (-22, -1)
NARROW_ACC_BOUND = 1 << 30


def accumulator_bound(weights: np.ndarray, bias: np.ndarray, depthwise: bool,
                      weight_zero: int = 0) -> np.ndarray:
    """Per output channel, a bound on |acc + bias| of a conv or dense layer: `bias` with the
    input zero point folded in (bias − zp·Σw), so the accumulator is Σ x·(w − weight_zero)
    over int8 inputs (padding reads the zero point, itself an int8), at most
    128·Σ|w − weight_zero|. Weights OHWI / [units, depth], or [KH, KW, C] when depthwise."""
    w = np.abs(weights.astype(np.int64) - int(weight_zero))
    sums = w.sum(axis=(0, 1)) if depthwise else w.reshape(w.shape[0], -1).sum(axis=1)
    return np.abs(bias.astype(np.int64)) + 128 * sums


def narrow_fits(shift, bound: np.ndarray) -> bool:
    """Whether the short output stage gives TFLite's results for these shifts (an int or
    one per channel) and accumulator bounds."""
    shifts = np.asarray(shift, np.int64)
    return bool(shifts.size and (shifts >= NARROW_SHIFTS[0]).all()
                and (shifts <= NARROW_SHIFTS[1]).all()
                and (np.asarray(bound, np.int64) < NARROW_ACC_BOUND).all())


def narrow_requantize(acc: int, multiplier: int, shift: int, zero_point: int) -> int:
    """The short output stage on Python integers (before the activation's clamp)."""
    e = -shift
    h = (acc * multiplier + (1 << 30)) >> 31
    return (h + zero_point * (1 << e) + ((1 << e) >> 1) + (h >> 31)) >> e


def single_rounding_multiply(x, multiplier: int, shift: int):
    """x · multiplier · 2**(shift − 31) rounded once, half up, in int64: the form TFLite's
    uint8 fully connected gives (its int8 kernels and uint8 convolutions round twice).
    `x` is a Python int or an int32 TIR value."""
    total = 31 - shift
    if not 0 < total < 63:
        raise ValueError(f"shift {shift} out of range")
    if isinstance(x, int):
        return (x * multiplier + (1 << (total - 1))) >> total
    from tvm import tirx

    i64 = "int64"
    product = tirx.Cast(i64, x) * tirx.const(multiplier, i64) + tirx.const(1 << (total - 1), i64)
    return tirx.Cast("int32", product >> tirx.const(total, i64))


def saturating_shl(ar, x, exponent: int):
    """gemmlowp's SaturatingRoundingMultiplyByPOT for a positive exponent."""
    threshold = (1 << (31 - exponent)) - 1
    x = ar.shared(x)
    return ar.select(x > threshold, INT32_MAX,
                     ar.select(x < -threshold, INT32_MIN, ar.shl(x, exponent)))


# ---- the int8 softmax's fixed-point exp and reciprocal ------------------------------------

SOFTMAX_DIFF_INTEGER_BITS = 5
SOFTMAX_ACCUM_INTEGER_BITS = 12

_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def _exp_quarter_interval(ar, a):
    """exp(a) for a in [-1/4, 0): a Taylor expansion around -1/8 (Q0.31 in and out)."""
    constant_term = 1895147668  # exp(-1/8)
    one_third = 715827883
    x = ar.shared(a + (1 << 28))
    x2 = ar.shared(ar.srdhm(x, x))
    x3 = ar.srdhm(x2, x)
    x4 = ar.srdhm(x2, x2)
    x4_over_4 = ar.rdbp(x4, 2)
    poly = ar.rdbp(ar.srdhm(x4_over_4 + x3, one_third) + x2, 1)
    return constant_term + ar.srdhm(constant_term, x + poly)


def exp_on_negative_values(ar, a, integer_bits: int = SOFTMAX_DIFF_INTEGER_BITS):
    """exp(a) for a ≤ 0 given with `integer_bits` integer bits (softmax: Q5.26); the result
    is Q0.31."""
    frac_bits = 31 - integer_bits
    quarter = 1 << (frac_bits - 2)
    a = ar.shared(a)
    a_mod_minus_quarter = ar.shared((a & (quarter - 1)) - quarter)
    result = _exp_quarter_interval(ar, saturating_shl(ar, a_mod_minus_quarter, integer_bits))
    result = ar.shared(result)
    remainder = ar.shared(a_mod_minus_quarter - a)
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = 1 << (frac_bits + exponent)
            result = ar.shared(ar.select(ar.ne(remainder & bit, 0), ar.srdhm(result, multiplier),
                                         result))
    return ar.select(ar.eq(a, 0), INT32_MAX, result)


def one_over_one_plus_x(ar, a):
    """1 / (1 + a) for a in [0, 1) given in Q0.31; the result is Q0.31 (Newton-Raphson)."""
    half_denominator = ar.shared(ar.rounding_half_sum(a, INT32_MAX))
    x = ar.shared(1515870810 + ar.srdhm(half_denominator, -1010580540))  # 48/17 − 32/17·d
    for _ in range(3):
        one_minus = ar.shared((1 << 29) - ar.srdhm(half_denominator, x))
        x = ar.shared(x + saturating_shl(ar, ar.shared(ar.srdhm(x, one_minus)), 2))
    return saturating_shl(ar, x, 1)


def one_minus_x_over_one_plus_x(ar, a):
    """(1 − a) / (1 + a) for a in [0, 1) given in Q0.31; the result is Q0.31 (gemmlowp's
    Newton-Raphson, as `one_over_one_plus_x`)."""
    half_denominator = ar.shared(ar.rounding_half_sum(a, INT32_MAX))
    x = ar.shared(1515870810 + ar.srdhm(half_denominator, -1010580540))
    for _ in range(3):
        one_minus = ar.shared((1 << 29) - ar.srdhm(half_denominator, x))
        x = ar.shared(x + saturating_shl(ar, ar.shared(ar.srdhm(x, one_minus)), 2))
    return saturating_shl(ar, x - (1 << 29), 2)


def softmax_params(input_scale: float, beta: float = 1.0) -> tuple[int, int, int]:
    """(input multiplier, left shift, diff_min) of TFLite's int8 softmax."""
    real = min(beta * input_scale * (1 << (31 - SOFTMAX_DIFF_INTEGER_BITS)), (1 << 31) - 1.0)
    multiplier, shift = quantize_multiplier(real)
    if shift < 0:  # TFLite asserts a multiplier greater than one here
        raise ValueError("softmax input scale too small for the fixed-point path")
    radius = math.floor(((1 << SOFTMAX_DIFF_INTEGER_BITS) - 1)
                        * (1 << (31 - SOFTMAX_DIFF_INTEGER_BITS)) / (1 << shift))
    return multiplier, shift, -radius
