"""int16x8 models (issue 24): 16-bit activations, 8-bit weights.

TFLite's 16x8 quantization keeps activations in int16 with zero point 0 and weights in
int8 (symmetric, per channel for convolutions), with int64 biases. Each converter here
follows the int16 kernel TFLite's BUILTIN_REF resolver runs, bit for bit:

- CONV_2D, DEPTHWISE_CONV_2D (reference_integer_ops conv.h / depthwise_conv.h): int16 · int8
  summed exactly with the int64 bias, requantized by the 64-bit MultiplyByQuantizedMultiplier
  (the multiplier rounded to 16 bits, one rounding), clamped to int16 or the activation.
- FULLY_CONNECTED (reference_integer_ops fully_connected.h, LiteRT 2.x): the sum requantized
  in double, round(acc · s_in·s_w/s_out), half away from zero.
- ADD, SUB: the general path (both inputs shifted left 15, rescaled, summed, rescaled), or
  with `pot_scale_int16` and power-of-two scales the path without multipliers (one input
  divided by a power of two, a saturating sum). MUL: (a·b) by a 32-bit multiplier.
- AVERAGE_POOL_2D / MAX_POOL_2D: as the int8 pools, in int16.
- SOFTMAX: TFLite's 513-entry exp and 1/(1+x) tables with linear interpolation (made at
  export with TFLite's LUTPopulate arithmetic), the reciprocal of the row's sum from the
  second table.
- LOGISTIC, TANH (reference_integer_ops logistic.h / tanh.h): the 256-entry sigmoid table
  interpolated on the rescaled input.
- RELU, RELU6, QUANTIZE, DEQUANTIZE: their int16 forms; the layout operators run their
  usual converters with int16 tensors accepted (`accept_int16`).

Everything else with an int16 activation is refused here, not passed to the 8-bit
converters (`Context.qinfo` refuses int16 outside `accept_int16`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tvm import te, tirx

from generator.export import qkernels
from generator.export.fixedpoint import (
    TirArith,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    round_half_away,
)
from generator.export.tflite import ops_layout
from generator.export.tflite.convert import (
    Context,
    NotMine,
    QInfo,
    Unsupported,
    accept_int16,
    activation_name,
    activation_range,
    converter,
    padding,
)
from generator.export.tflite.model import TfOp, TfTensor

I16_MIN, I16_MAX = -32768, 32767
I32, I64 = "int32", "int64"
ADD_LEFT_SHIFT_16 = 15  # TFLite's general int16 add/sub shift both inputs left by 15 bits

# TFLite's sigmoid(i/24) in 0.16 fixed point (kernels/internal/common.h), shared by the int16
# logistic and tanh: tanh(x) = 2·sigmoid(2x) − 1
SIGMOID_TABLE = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149,
    40794, 41432, 42064, 42688, 43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369,
    47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409, 51865, 52311, 52745, 53169,
    53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370,
    60565, 60753, 60935, 61110, 61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302,
    62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186, 63279, 63368, 63454, 63536,
    63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786,
    64816, 64845, 64873, 64900, 64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079,
    65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234, 65246, 65258,
    65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433,
    65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474,
    65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491, 65493, 65495, 65497, 65498,
    65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522,
    65523, 65523, 65524, 65524, 65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528,
    65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530, 65530, 65530, 65531, 65531,
    65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534,
    65534, 65534, 65534, 65535], dtype=np.uint16)


# ---- which operators are ours ---------------------------------------------------------------

def _int16_activations(ctx: Context, op: TfOp) -> bool:
    return any(i >= 0 and ctx.tensor(i).dtype == "int16" and ctx.tensor(i).quant is not None
               for i in (*op.inputs, *op.outputs))


def _mine(ctx: Context, op: TfOp) -> None:
    if not _int16_activations(ctx, op):
        raise NotMine("no int16 activation")


def _qinfo(ctx: Context, t: TfTensor) -> QInfo:
    with accept_int16():
        return ctx.qinfo(t)


def _sym16(ctx: Context, t: TfTensor, what: str = "activation") -> QInfo:
    """An int16 activation's parameters; TFLite's int16 kernels require zero point 0."""
    if t.dtype != "int16":
        raise Unsupported(f"{t.dtype} {what} in an int16 operator")
    q = _qinfo(ctx, t)
    if q.zero != 0:
        raise Unsupported(f"int16 {what} with zero point {q.zero} (TFLite requires 0)")
    return q


def _act16(op: TfOp, out: QInfo) -> tuple[int, int]:
    return activation_range(activation_name(op.options), out.scale, out.zero, I16_MIN, I16_MAX)


def _f32(x: float) -> float:
    return float(np.float32(x))


# ---- kernels --------------------------------------------------------------------------------

@dataclass
class Kernel16(qkernels.Kernel):
    """An int16 kernel; `roles` names its constants for the size report."""

    roles: tuple[str, ...] = ()

    def constant_roles(self) -> list[str]:
        return list(self.roles) if self.roles else super().constant_roles()


def _prim(tensors) -> tirx.PrimFunc:
    return te.create_prim_func(tensors).without_attr("global_symbol")


def _seq(stmts: list):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _loop(var, extent: int, body):
    return tirx.For(var, tirx.const(0, I32), tirx.const(extent, I32), tirx.ForKind.SERIAL, body)


def _clamp16(value, lo: int = I16_MIN, hi: int = I16_MAX, dtype: str = "int16"):
    """An int32 value clamped to [lo, hi] and cast to `dtype`."""
    return tirx.max(tirx.min(value, tirx.const(hi, I32)), tirx.const(lo, I32)).astype(dtype)


def _statement(inputs: list[tuple[tuple[int, ...], str]], out_shape: tuple[int, ...],
               out_dtype: str, build: Callable, name: str, constants=(),
               roles: tuple[str, ...] = ()) -> Kernel16:
    """A kernel written as TIR statements by `build(ar, in_buffers, out_buffer)`, each
    fixed-point step in a local scratch array (`TirArith.shared`); a first pass counts the
    slots. `inputs` are (shape, dtype): the activations, then the constants."""
    t = tirx

    def body(ar: TirArith, ins, out):
        ar.restart()
        stmt = build(ar, ins, out)
        return _seq([*(t.AllocBuffer(b) for b in ar.scratch.values()), stmt])

    counting = TirArith(scratch_slots=1)
    body(counting, [t.decl_buffer(s, d) for s, d in inputs], t.decl_buffer(out_shape, out_dtype))
    ar = TirArith(scratch_slots=max(counting.used.values()))
    xs = [te.placeholder(s, d, f"x{i}") for i, (s, d) in enumerate(inputs)]
    # the buffers share the placeholders' shape objects (te.extern checks identity)
    in_bufs = [t.decl_buffer(x.shape, d, f"x{i}_buf") for i, (x, (_, d)) in
               enumerate(zip(xs, inputs, strict=True))]
    shaped = te.compute(out_shape, lambda *i: t.const(0, out_dtype))  # only for its shape
    out_buf = t.decl_buffer(shaped.shape, out_dtype, "out_buf")
    out = te.extern(shaped.shape, xs, lambda ins, outs: body(ar, ins, outs[0]), name=name,
                    dtype=out_dtype, in_buffers=in_bufs, out_buffers=[out_buf])
    return Kernel16(_prim([*xs, out]), list(constants), tuple(roles))


def _broadcast_index(shape: tuple[int, ...], idx: list) -> list:
    lead = len(idx) - len(shape)
    return [tirx.const(0, I32) if d == 1 else i for d, i in zip(shape, idx[lead:], strict=True)]


def elementwise(inputs: list[tuple[tuple[int, ...], str]], out_shape: tuple[int, ...],
                out_dtype: str, element: Callable, name: str, tables=()) -> Kernel16:
    """An elementwise kernel with numpy broadcasting: `element(ar, values, table_buffers)`
    gets each input's value as int32 and returns the output value."""
    t = tirx
    specs = [*inputs, *((tuple(c.shape), str(c.dtype)) for c in tables)]

    def build(ar: TirArith, bufs, out):
        idx = [t.Var(f"i{d}", I32) for d in range(len(out_shape))]
        values = [ar.shared(t.Cast(I32, t.BufferLoad(b, _broadcast_index(shape, idx))))
                  for b, (shape, _) in zip(bufs, inputs, strict=False)]
        value = element(ar, values, bufs[len(inputs):])
        stmt = _seq([*ar.take_stores(), t.BufferStore(out, value, idx)])
        for var, extent in reversed(list(zip(idx, out_shape, strict=True))):
            stmt = _loop(var, extent, stmt)
        return stmt

    return _statement(specs, out_shape, out_dtype, build, name, tables,
                      ("table",) * len(tables))


def reduced_multiplier(multiplier: int, shift: int) -> tuple[int, int]:
    """TFLite's 64-bit MultiplyByQuantizedMultiplier as (16-bit multiplier, right shift):
    x · m16 + 2**(s − 1), shifted right by s."""
    m16 = (multiplier + (1 << 15)) >> 16 if multiplier < 0x7FFF0000 else 0x7FFF
    return m16, 15 - shift


def _round_half_away_f64(v):
    """C's round() of a float64 TIR value, exactly (no v + 0.5)."""
    a = tirx.Select(v < tirx.const(0.0, "float64"), -v, v)
    r = tirx.floor(a)
    r = r + tirx.Select(a - r >= tirx.const(0.5, "float64"), tirx.const(1.0, "float64"),
                        tirx.const(0.0, "float64"))
    return tirx.Select(v < tirx.const(0.0, "float64"), -r, r)


def _double_to_int16(v, lo: int, hi: int):
    """A float64 TIR value rounded half away from zero, clamped to [lo, hi], as int16."""
    r = _round_half_away_f64(v)
    r = tirx.max(tirx.min(r, tirx.const(float(hi), "float64")), tirx.const(float(lo), "float64"))
    return r.astype("int16")


def conv2d_int16(x_shape: tuple[int, ...], weights: np.ndarray, bias: np.ndarray,
                 out_shape: tuple[int, ...], strides: tuple[int, int],
                 pads: tuple[int, int, int, int], dilation: tuple[int, int], depthwise: bool,
                 multipliers: np.ndarray, shifts: np.ndarray, act: tuple[int, int]) -> Kernel16:
    """Conv2d on NHWC int16 (zero point 0, so padding adds 0). Regular weights are OHWI
    [Cout, KH, KW, Cin], depthwise [KH, KW, Cout]. The sum is exact (int32 where it cannot
    overflow, else int64), plus the int64 bias, times the per-channel 16-bit multiplier
    with one rounding right shift (`reduced_multiplier`), cast to int32, clamped."""
    _, h_, w_, cin = x_shape
    cout = out_shape[3]
    kh_, kw_ = weights.shape[:2] if depthwise else weights.shape[1:3]
    taps = kh_ * kw_ * (1 if depthwise else cin)
    acc_t = I32 if taps < 512 else I64  # |x·w| <= 2**22
    x = te.placeholder(x_shape, "int16", "x")
    w = te.placeholder(weights.shape, "int8", "w")
    b = te.placeholder((cout,), I64, "bias")
    m = te.placeholder((cout,), I32, "multiplier")
    s = te.placeholder((cout,), I32, "shift")
    sh, sw = strides
    dh, dw = dilation
    top, left = pads[0], pads[1]
    padded = any(pads)

    def x_at(n, h, wi, c):
        value = x[n, h, wi, c].astype(acc_t)
        if not padded:
            return value
        inside = tirx.all(h >= 0, h < h_, wi >= 0, wi < w_)
        return tirx.if_then_else(inside, value, tirx.const(0, acc_t))

    rh = te.reduce_axis((0, kh_), "rh")
    rw = te.reduce_axis((0, kw_), "rw")
    if depthwise:
        mult = cout // cin
        acc = te.compute(out_shape, lambda n, i, j, c: te.sum(
            x_at(n, i * sh - top + rh * dh, j * sw - left + rw * dw, c // mult)
            * w[rh, rw, c].astype(acc_t), axis=[rh, rw]), name="acc")
    else:
        rc = te.reduce_axis((0, cin), "rc")
        acc = te.compute(out_shape, lambda n, i, j, c: te.sum(
            x_at(n, i * sh - top + rh * dh, j * sw - left + rw * dw, rc)
            * w[c, rh, rw, rc].astype(acc_t), axis=[rh, rw, rc]), name="acc")

    def requantize(n, i, j, c):
        total = acc[n, i, j, c].astype(I64) + b[c]
        shift = s[c].astype(I64)
        one = tirx.const(1, I64)
        scaled = (total * m[c].astype(I64) + (one << (shift - one))) >> shift
        return _clamp16(scaled.astype(I32), *act)

    out = te.compute(out_shape, requantize, name="out")
    return Kernel16(_prim([x, w, b, m, s, out]),
                    [weights.astype(np.int8), bias.astype(np.int64),
                     multipliers.astype(np.int32), shifts.astype(np.int32)],
                    ("weights", "bias", "requant", "requant"))


def dense_int16(batch: int, weights: np.ndarray, bias: np.ndarray, scales: np.ndarray,
                act: tuple[int, int]) -> Kernel16:
    """[batch, K] int16 · ([U, K] int8)ᵀ + int64 bias, requantized as LiteRT's reference
    int16 fully connected does: round(float64(acc) · scale[u]) half away from zero."""
    units, depth = weights.shape
    acc_t = I32 if depth < 512 else I64
    x = te.placeholder((batch, depth), "int16", "x")
    w = te.placeholder((units, depth), "int8", "w")
    b = te.placeholder((units,), I64, "bias")
    sc = te.placeholder((units,), "float64", "scale")
    k = te.reduce_axis((0, depth), "k")
    acc = te.compute((batch, units), lambda i, u: te.sum(
        x[i, k].astype(acc_t) * w[u, k].astype(acc_t), axis=k), name="acc")
    out = te.compute((batch, units), lambda i, u: _double_to_int16(
        (acc[i, u].astype(I64) + b[u]).astype("float64") * sc[u], *act), name="out")
    return Kernel16(_prim([x, w, b, sc, out]),
                    [weights.astype(np.int8), bias.astype(np.int64), scales.astype(np.float64)],
                    ("weights", "bias", "requant"))


def avg_pool2d_int16(x_shape: tuple[int, ...], out_shape: tuple[int, ...],
                     pool: tuple[int, int], strides: tuple[int, int],
                     pads: tuple[int, int, int, int], act: tuple[int, int]) -> Kernel16:
    """TFLite's int16 average pool: the in-bounds values' int32 sum divided by their count,
    rounded half away from zero."""
    _, h_, w_, _ = x_shape
    x = te.placeholder(x_shape, "int16", "x")
    ph, pw = pool
    sh, sw = strides
    top, left = pads[0], pads[1]
    rh = te.reduce_axis((0, ph), "rh")
    rw = te.reduce_axis((0, pw), "rw")

    def x_at(n, h, wi, c):
        value = x[n, h, wi, c].astype(I32)
        if not any(pads):
            return value
        return tirx.if_then_else(tirx.all(h >= 0, h < h_, wi >= 0, wi < w_), value,
                                 tirx.const(0, I32))

    total = te.compute(out_shape, lambda n, i, j, c: te.sum(
        x_at(n, i * sh - top + rh, j * sw - left + rw, c), axis=[rh, rw]), name="total")

    def average(n, i, j, c):
        h0, w0 = i * sh - top, j * sw - left
        count = ((tirx.min(h0 + ph, h_) - tirx.max(h0, 0))
                 * (tirx.min(w0 + pw, w_) - tirx.max(w0, 0)))
        acc = total[n, i, j, c]
        half = tirx.truncdiv(count, 2)
        rounded = tirx.Select(acc > 0, tirx.truncdiv(acc + half, count),
                              tirx.truncdiv(acc - half, count))
        return _clamp16(rounded, *act)

    out = te.compute(out_shape, average, name="out")
    return Kernel16(_prim([x, out]), [])


# ---- softmax --------------------------------------------------------------------------------

def lut_int16(transform: Callable[[float], float], input_scale: float, input_zero: int,
              output_scale: float, output_zero: int) -> np.ndarray:
    """TFLite's LUTPopulate for int16 in double: 512 samples of `transform` over the input
    range, each biased by half its midpoint interpolation error, and the last value."""
    def rnd(v: float) -> float:
        return float(round_half_away(v))

    in_min = input_scale * (I16_MIN - input_zero)
    in_max = input_scale * (I16_MAX - input_zero)
    out_min = output_scale * (I16_MIN - output_zero)
    out_max = output_scale * (I16_MAX - output_zero)
    steps = 512
    step = (in_max - in_min) / steps
    half_step = step / 2
    inv = float(I16_MAX - I16_MIN + 1) / (out_max - out_min)
    table = np.zeros(steps + 1, np.int16)
    for i in range(steps):
        val = transform(in_min + i * step)
        mid = transform(in_min + i * step + half_step)
        nxt = transform(in_min + (i + 1) * step)
        sample = rnd(val * inv)
        interp = rnd((nxt * inv + rnd(val * inv)) / 2)
        bias = rnd((interp - rnd(mid * inv)) / 2)
        table[i] = int(min(max(sample - bias, I16_MIN), I16_MAX))
    table[steps] = int(min(max(rnd(transform(in_max) * inv), I16_MIN), I16_MAX))
    return table


def softmax_tables() -> tuple[np.ndarray, np.ndarray]:
    """The exp table over [-10, 0] and the 1/(1+x) table over [0, 1] (TFLite's softmax)."""
    span = I16_MAX - I16_MIN
    exp = lut_int16(math.exp, 10.0 / span, I16_MAX, 2.0 / span, 0)
    recip = lut_int16(lambda v: 1.0 / (1.0 + v), 1.0 / span, I16_MIN, 2.0 / span, 0)
    return exp, recip


def _lut_lookup(value, table):
    """TFLite's LUTLookup of an int16 value (as int32) in a 513-entry table."""
    t = tirx
    index = (value >> 7) + 256
    offset = value & 0x7F
    base = t.Cast(I32, t.BufferLoad(table, [index]))
    nxt = t.Cast(I32, t.BufferLoad(table, [index + 1]))
    slope = t.Cast(I32, t.Cast("int16", nxt - base))
    return t.Cast(I32, t.Cast("int16", base + ((slope * offset + 64) >> 7)))


def softmax_int16(shape: tuple[int, ...], multiplier: int, shift: int) -> Kernel16:
    """TFLite's SoftmaxInt16 over the last axis: exp of each (x − row max) rescaled to
    [-65535, 0] ~ [-10, 0] from the exp table, the row's sum normalized to [1, 2) for the
    reciprocal table, each exp times the reciprocal with one rounding shift. The exps are
    kept in the output row meanwhile, as TFLite does."""
    exp_table, recip_table = softmax_tables()
    depth = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    flat = (rows, depth)
    t = tirx

    def build(ar: TirArith, bufs, ob):
        xb, eb, rb = bufs
        r, c, k = t.Var("r", I32), t.Var("c", I32), t.Var("k", I32)
        acc = t.decl_buffer((3,), I32, "acc")

        def store(n, value):
            return t.BufferStore(acc, value, [t.const(n, I32)])

        def slot(n):
            return t.BufferLoad(acc, [t.const(n, I32)])

        def x_at():
            return t.Cast(I32, t.BufferLoad(xb, [r, c]))

        diff = ar.shared(x_at() - slot(0))
        scaled = ar.shared(multiply_by_quantized_multiplier(ar, diff, multiplier, shift))
        sym = t.max(t.min(scaled + 32767, t.const(I16_MAX, I32)), t.const(I16_MIN, I32))
        e = ar.shared(_lut_lookup(ar.shared(sym), eb))
        exp_step = _seq([*ar.take_stores(), t.BufferStore(ob, t.Cast("int16", e), [r, c]),
                         store(1, slot(1) + e)])
        total, clz = t.Var("sum_of_exps", I32), t.Var("headroom_plus_one", I32)
        shifted = t.Cast(I32, ((t.Cast(I64, total) << t.Cast(I64, clz - 1))
                               + t.const(1 << 13, I64)) >> t.const(14, I64))
        sym_sum = t.max(t.min(shifted - ((1 << 15) + (1 << 16)), t.const(I16_MAX, I32)),
                        t.const(I16_MIN, I32))
        recip = t.Var("reciprocal", I32)
        recip_value = _lut_lookup(ar.shared(sym_sum), rb)
        recip_stores = ar.take_stores()
        right = 31 - clz
        scaled_out = (t.Cast(I64, t.Cast(I32, t.BufferLoad(ob, [r, c]))) * t.Cast(I64, recip)
                      + (t.const(1, I64) << t.Cast(I64, right - 1))) >> t.Cast(I64, right)
        out_step = t.BufferStore(ob, _clamp16(t.Cast(I32, scaled_out), 0, I16_MAX), [r, c])
        row = t.SeqStmt([
            store(0, t.const(I16_MIN, I32)),
            _loop(c, depth, store(0, t.max(slot(0), x_at()))),
            store(1, t.const(0, I32)),
            _loop(c, depth, exp_step),
            t.LetStmt(total, slot(1)),
            store(2, t.const(0, I32)),  # the sum's bit length; leading zeros = 32 − it
            _loop(k, 32, store(2, slot(2) + t.Select((total >> k) != 0, t.const(1, I32),
                                                     t.const(0, I32)))),
            t.LetStmt(clz, 32 - slot(2)),
            *recip_stores,
            t.LetStmt(recip, recip_value),
            _loop(c, depth, out_step),
        ])
        return t.SeqStmt([t.AllocBuffer(acc), _loop(r, rows, row)])

    kernel = _statement([(flat, "int16"), ((513,), "int16"), ((513,), "int16")], flat,
                        "int16", build, "softmax16", [exp_table, recip_table],
                        ("table", "table"))
    return kernel


# ---- logistic and tanh ------------------------------------------------------------------------

def checked_log2(x: float) -> tuple[bool, int]:
    """TFLite's CheckedLog2 in float32: (x is a power of two within 1e-3, rounded log2)."""
    f = np.float32
    x_log2 = f(np.log(f(x))) * (f(1.0) / f(np.log(f(2.0))))
    rounded = round_half_away(float(x_log2))
    return bool(abs(f(x_log2 - f(rounded))) < f(1e-3)), rounded


def sigmoid_input(scale: float, tanh: bool) -> tuple[int, int]:
    """(multiplier, right shift) of TFLite's int16 logistic/tanh input rescaling to 3·2**12
    per unit: a power-of-two scale multiplies by 3 << shift, another by a multiplier in
    (2**14, 2**15] then rounds a right shift."""
    pot, log2 = checked_log2(scale)
    left_shift = 12 + log2
    pot = pot and (left_shift in ((0, 1) if tanh else (0,)))
    if pot:
        return 3 << left_shift, 0
    multiplier = _f32(scale) * 4096.0 * 3.0
    left_shift = 0
    while multiplier <= 32767.0 / 2.0 and left_shift <= 30:
        left_shift += 1
        multiplier *= 2.0
    return int(multiplier), left_shift


def _sigmoid_element(multiplier: int, shift: int, tanh: bool):
    t = tirx
    frac = 8 if tanh else 9

    def element(ar: TirArith, values, tables):
        (x,), (table,) = values, tables
        rounding = (1 << (shift - 1)) if shift > 0 else 0
        v = ar.shared((x * multiplier + rounding) >> shift)
        a = ar.shared(t.abs(v))
        high = ar.shared(a >> frac)
        index = t.min(high, t.const(254, I32))  # in bounds; saturated below
        ua = ar.shared(t.Cast(I32, t.BufferLoad(table, [index])))
        ub = t.Cast(I32, t.BufferLoad(table, [index + 1]))
        interp = (ua << frac) + (a & ((1 << frac) - 1)) * (ub - ua)
        top = (0xFFFF << 8) if tanh else (0x7FFF << 10)
        result = ar.shared(t.Select(high >= 255, t.const(top, I32), interp))
        if tanh:
            out = t.Select(v >= 0, result - (1 << 23) + (1 << 7),
                           (1 << 23) + (1 << 7) - 1 - result) >> 8
        else:
            out = t.Select(v >= 0, result + (1 << 9), (1 << 25) - result + (1 << 9) - 1) >> 10
        return t.Cast("int16", out)

    return element


# ---- converters -------------------------------------------------------------------------------

def _call(ctx: Context, kind: str, kernel: Kernel16, args: list, out_t: TfTensor,
          out_dtype: str = "int16", out_shape: tuple[int, ...] | None = None,
          set_out: bool = True):
    """`Context.kernel`, with each constant keeping its dtype (relax.const alone makes
    int64 int32 and float64 float32)."""
    from tvm import relax

    gv = ctx.bb.add_func(kernel.func, f"q_{kind}")
    consts = [relax.const(c, str(c.dtype)) for c in kernel.constants]
    shape = out_t.shape if out_shape is None else out_shape
    var = ctx.bb.emit(relax.call_tir(gv, [*args, *consts], relax.TensorType(shape, out_dtype)))
    ctx.report.integer.append(kind)
    for role, c in zip(kernel.constant_roles(), kernel.constants, strict=False):
        ctx.report.constant_bytes[role] += c.nbytes
    if set_out:
        ctx.set(out_t, var)
    return var


def _weights16(ctx: Context, t: TfTensor, axis: int) -> tuple[np.ndarray, np.ndarray]:
    q = ctx.const(t, "the weights")
    if t.dtype != "int8" or t.quant is None:
        raise Unsupported(f"{t.dtype} weights with int16 activations (int8 expected)")
    if np.any(t.quant.zero != 0):
        raise Unsupported("int8 weights with a nonzero zero point")
    if t.quant.scale.size > 1 and t.quant.axis != axis:
        raise Unsupported(f"weights quantized along dimension {t.quant.axis}")
    return q, t.quant.scale


def _bias64(ctx: Context, t: TfTensor | None, channels: int, allow_int32: bool) -> np.ndarray:
    if t is None:
        return np.zeros(channels, np.int64)
    b = ctx.const(t, "the bias")
    if t.dtype != "int64" and not (allow_int32 and t.dtype == "int32"):
        raise Unsupported(f"{t.dtype} bias with int16 activations (int64 expected)")
    return b.reshape(-1).astype(np.int64)


def _channel_scales(x: QInfo, w_scales: np.ndarray, out: QInfo, channels: int) -> list[float]:
    """TFLite's effective scale per output channel: in · w / out, in double."""
    scales = np.broadcast_to(w_scales.reshape(-1), (channels,)) if w_scales.size == 1 \
        else w_scales
    return [float(x.scale) * float(s) / float(out.scale) for s in scales]


@converter("CONV_2D", "DEPTHWISE_CONV_2D")
def conv2d(ctx: Context, op: TfOp) -> None:
    _mine(ctx, op)
    x_t, w_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    o = op.options
    depthwise = op.code == "DEPTHWISE_CONV_2D"
    if len(x_t.shape) != 4 or len(w_t.shape) != 4:
        raise Unsupported("a convolution that is not 2-D NHWC")
    x, out = _sym16(ctx, x_t, "input"), _sym16(ctx, out_t, "output")
    strides = (int(o.StrideH()), int(o.StrideW()))
    dilation = (int(o.DilationHFactor()), int(o.DilationWFactor()))
    k_hw = (w_t.shape[1], w_t.shape[2])
    pads = padding(o, (x_t.shape[1], x_t.shape[2]), k_hw, strides, dilation)
    cin, cout = x_t.shape[3], out_t.shape[3]
    if depthwise:
        if w_t.shape[0] != 1 or w_t.shape[3] != cout or cout % cin:
            raise Unsupported(f"depthwise weights of shape {list(w_t.shape)}")
        q, scales = _weights16(ctx, w_t, 3)
        weights = q.reshape(k_hw[0], k_hw[1], cout)
    else:
        if w_t.shape[3] != cin:
            raise Unsupported(f"grouped convolution ({cin // max(w_t.shape[3], 1)} groups)")
        q, scales = _weights16(ctx, w_t, 0)
        weights = q
    # an int32 bias takes TFLite's other int16 path, which we do not reproduce
    bias = _bias64(ctx, ctx.arg(op, 2), cout, allow_int32=False)
    pairs = [reduced_multiplier(*quantize_multiplier(s))
             for s in _channel_scales(x, scales, out, cout)]
    kernel = conv2d_int16(x_t.shape, weights, bias, out_t.shape, strides, pads, dilation,
                          depthwise, np.array([p[0] for p in pairs]),
                          np.array([p[1] for p in pairs]), _act16(op, out))
    kind = "depthwise_conv2d_int16" if depthwise else "conv2d_int16"
    _call(ctx, kind, kernel, [ctx.value(x_t)], out_t, out_dtype="int16")


@converter("FULLY_CONNECTED")
def fully_connected(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    _mine(ctx, op)
    x_t, w_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    o = op.options
    if o is not None and int(o.WeightsFormat()) != 0:
        raise Unsupported("shuffled weights")
    if len(w_t.shape) != 2:
        raise Unsupported(f"weights of shape {list(w_t.shape)}")
    xi, out = _sym16(ctx, x_t, "input"), _sym16(ctx, out_t, "output")
    units, depth = w_t.shape
    total = int(np.prod(x_t.shape))
    if total % depth:
        raise Unsupported(f"input of {total} elements for {depth} inputs per unit")
    batch = total // depth
    q, scales = _weights16(ctx, w_t, 0)
    # with an int32 bias BUILTIN_REF's int16 result is not the documented arithmetic
    bias = _bias64(ctx, ctx.arg(op, 2), units, allow_int32=False)
    x = ctx.value(x_t)
    if x_t.shape != (batch, depth):
        x = ctx.emit(relax.op.reshape(x, (batch, depth)))
    kernel = dense_int16(batch, q, bias, np.array(_channel_scales(xi, scales, out, units)),
                         _act16(op, out))
    y = _call(ctx, "dense_int16", kernel, [x], out_t, out_shape=(batch, units),
                   out_dtype="int16", set_out=False)
    if out_t.shape != (batch, units):
        y = ctx.emit(relax.op.reshape(y, out_t.shape))
    ctx.set(out_t, y)


def _same_pool_quant(x: QInfo, out: QInfo) -> None:
    if (x.scale, x.zero) != (out.scale, out.zero):
        raise Unsupported("pool with different input and output quantization")


@converter("AVERAGE_POOL_2D")
def average_pool(ctx: Context, op: TfOp) -> None:
    _mine(ctx, op)
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    x, out = _sym16(ctx, x_t), _sym16(ctx, out_t)
    _same_pool_quant(x, out)
    o = op.options
    pool = (int(o.FilterHeight()), int(o.FilterWidth()))
    strides = (int(o.StrideH()), int(o.StrideW()))
    pads = padding(o, (x_t.shape[1], x_t.shape[2]), pool, strides, (1, 1))
    kernel = avg_pool2d_int16(x_t.shape, out_t.shape, pool, strides, pads, _act16(op, out))
    _call(ctx, "avg_pool2d_int16", kernel, [ctx.value(x_t)], out_t, out_dtype="int16")


@converter("MAX_POOL_2D")
def max_pool(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    _mine(ctx, op)
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    x, out = _sym16(ctx, x_t), _sym16(ctx, out_t)
    _same_pool_quant(x, out)
    o = op.options
    pool = (int(o.FilterHeight()), int(o.FilterWidth()))
    strides = (int(o.StrideH()), int(o.StrideW()))
    pads = padding(o, (x_t.shape[1], x_t.shape[2]), pool, strides, (1, 1))
    # padded positions never win: the pad value is int16's lowest
    y = ctx.emit(relax.op.nn.max_pool2d(ctx.value(x_t), pool, strides, pads, layout="NHWC"))
    lo, hi = _act16(op, out)
    if (lo, hi) != (I16_MIN, I16_MAX):
        y = ctx.emit(relax.op.clip(y, lo, hi))
    ctx.report.integer.append("max_pool2d_int16")
    ctx.set(out_t, y)


@converter("SOFTMAX")
def softmax(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    _mine(ctx, op)
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    x, out = _sym16(ctx, x_t, "input"), _sym16(ctx, out_t, "output")
    if abs(_f32(out.scale) - 1.0 / 32768) > 0.001 / 32768:
        raise Unsupported("int16 softmax output must have scale 1/32768")
    beta = _f32(op.options.Beta()) if op.options is not None else 1.0
    # float32 scale · float32 beta (a float product), then in double
    rescale = float(np.float32(x.scale) * np.float32(beta)) / (10.0 / 65535.0)
    multiplier, shift = quantize_multiplier(rescale)
    shape = x_t.shape
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    value = ctx.value(x_t)
    flat = (rows, shape[-1])
    if tuple(shape) != flat:
        value = ctx.emit(relax.op.reshape(value, flat))
    y = _call(ctx, "softmax_int16", softmax_int16(shape, multiplier, shift), [value], out_t,
                   out_shape=flat, out_dtype="int16", set_out=False)
    if tuple(shape) != flat:
        y = ctx.emit(relax.op.reshape(y, shape))
    ctx.set(out_t, y)


@converter("LOGISTIC", "TANH")
def sigmoid(ctx: Context, op: TfOp) -> None:
    _mine(ctx, op)
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    x, out = _sym16(ctx, x_t, "input"), _sym16(ctx, out_t, "output")
    tanh = op.code == "TANH"
    pot, log2 = checked_log2(out.scale)
    if not pot or log2 != -15:
        raise Unsupported(f"int16 {op.code.lower()} output must have scale 1/32768")
    multiplier, shift = sigmoid_input(x.scale, tanh)
    if 32768 * multiplier + (1 << max(shift - 1, 0)) >= 1 << 31:
        raise Unsupported("input scale too large for the int16 table's 32-bit rescaling")
    table = SIGMOID_TABLE
    kernel = elementwise([(x_t.shape, "int16")], x_t.shape, "int16",
                         _sigmoid_element(multiplier, shift, tanh), op.code.lower(), [table])
    _call(ctx, f"{op.code.lower()}_int16", kernel, [ctx.value(x_t)], out_t, out_dtype="int16")


@converter("ADD", "SUB")
def add_sub(ctx: Context, op: TfOp) -> None:
    _mine(ctx, op)
    a_t, b_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    a, b, out = (_sym16(ctx, t) for t in (a_t, b_t, out_t))
    lo, hi = _act16(op, out)
    sub = op.code == "SUB"
    pot_option = op.options is None or bool(op.options.PotScaleInt16())
    logs = [checked_log2(q.scale) for q in (a, b, out)]
    if pot_option and all(p for p, _ in logs):
        return _add_sub_pot(ctx, op, a_t, b_t, out_t, [lg for _, lg in logs], (lo, hi))
    twice_max = 2.0 * max(_f32(a.scale), _f32(b.scale))
    mult_a = quantize_multiplier(_f32(a.scale) / twice_max)
    mult_b = quantize_multiplier(_f32(b.scale) / twice_max)
    mult_out = quantize_multiplier(twice_max / _f32((1 << ADD_LEFT_SHIFT_16)
                                                    * np.float32(out.scale)))
    if mult_out[1] > 0:
        raise Unsupported("output scale too small for the int16 add (multiplier above one)")

    def element(ar: TirArith, values, _):
        va, vb = values
        sa = ar.shared(multiply_by_quantized_multiplier(
            ar, ar.shared(va * (1 << ADD_LEFT_SHIFT_16)), *mult_a))
        sb = ar.shared(multiply_by_quantized_multiplier(
            ar, ar.shared(vb * (1 << ADD_LEFT_SHIFT_16)), *mult_b))
        raw = ar.shared(sa - sb if sub else sa + sb)
        return _clamp16(multiply_by_quantized_multiplier(ar, raw, *mult_out), lo, hi)

    kernel = elementwise([(a_t.shape, "int16"), (b_t.shape, "int16")], out_t.shape, "int16",
                         element, op.code.lower())
    _call(ctx, f"{op.code.lower()}_int16", kernel, [ctx.value(a_t), ctx.value(b_t)], out_t,
               out_dtype="int16")


def _add_sub_pot(ctx: Context, op: TfOp, a_t: TfTensor, b_t: TfTensor, out_t: TfTensor,
                 logs: list[int], act: tuple[int, int]) -> None:
    """TFLite's int16 add/sub for power-of-two scales: the input with the smaller scale
    divided by a power of two (rounding), a saturating sum or difference."""
    shift_a, shift_b = logs[0] - logs[2], logs[1] - logs[2]
    if not (shift_a == 0 or shift_b == 0) or shift_a > 0 or shift_b > 0:
        raise Unsupported("power-of-two int16 add/sub whose output scale is not the larger "
                          "input scale (TFLite refuses it)")
    if op.code == "ADD" and a_t.shape != b_t.shape:
        raise Unsupported("power-of-two int16 add with broadcasting (TFLite has none)")
    sub = op.code == "SUB"

    def element(ar: TirArith, values, _):
        va, vb = values
        ra = ar.rdbp32(va, -shift_a) if shift_a else va
        rb = ar.rdbp32(vb, -shift_b) if shift_b else vb
        return _clamp16(ra - rb if sub else ra + rb, *act)

    kernel = elementwise([(a_t.shape, "int16"), (b_t.shape, "int16")], out_t.shape, "int16",
                         element, op.code.lower())
    _call(ctx, f"{op.code.lower()}_int16", kernel, [ctx.value(a_t), ctx.value(b_t)], out_t,
               out_dtype="int16")


@converter("MUL")
def mul(ctx: Context, op: TfOp) -> None:
    _mine(ctx, op)
    a_t, b_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    a, b, out = (_sym16(ctx, t) for t in (a_t, b_t, out_t))
    lo, hi = _act16(op, out)
    # TFLite: in1.scale · in2.scale / out.scale in float32, then QuantizeMultiplier
    f = np.float32
    multiplier, shift = quantize_multiplier(float(f(a.scale) * f(b.scale) / f(out.scale)))

    def element(ar: TirArith, values, _):
        va, vb = values
        product = ar.shared(va * vb)
        return _clamp16(multiply_by_quantized_multiplier(ar, product, multiplier, shift),
                        lo, hi)

    kernel = elementwise([(a_t.shape, "int16"), (b_t.shape, "int16")], out_t.shape, "int16",
                         element, "mul")
    _call(ctx, "mul_int16", kernel, [ctx.value(a_t), ctx.value(b_t)], out_t, out_dtype="int16")


_RELU_LIMITS = {"RELU": None, "RELU6": 6.0}


@converter("RELU", "RELU6", "RELU_N1_TO_1")
def relu(ctx: Context, op: TfOp) -> None:
    _mine(ctx, op)
    if op.code not in _RELU_LIMITS:
        raise Unsupported(f"{op.code} has no int16 kernel in TFLite")
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    x, out = _sym16(ctx, x_t), _sym16(ctx, out_t)
    f = np.float32
    multiplier, shift = quantize_multiplier(float(f(x.scale) / f(out.scale)))
    lo = max(I16_MIN, round_half_away(f(0.0) / f(out.scale)))
    top = _RELU_LIMITS[op.code]
    hi = I16_MAX if top is None else min(I16_MAX, round_half_away(f(top) / f(out.scale)))

    def element(ar: TirArith, values, _):
        return _clamp16(multiply_by_quantized_multiplier(ar, values[0], multiplier, shift),
                        lo, hi)

    kernel = elementwise([(x_t.shape, "int16")], x_t.shape, "int16", element, "relu")
    _call(ctx, f"{op.code.lower()}_int16", kernel, [ctx.value(x_t)], out_t, out_dtype="int16")


_TYPE_RANGE = {"int8": (-128, 127), "int16": (I16_MIN, I16_MAX)}


@converter("QUANTIZE")
def quantize(ctx: Context, op: TfOp) -> None:
    _mine(ctx, op)
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if x_t.dtype not in ("float32", "int8", "int16") or out_t.dtype not in ("int8", "int16"):
        raise Unsupported(f"quantize from {x_t.dtype} to {out_t.dtype} with int16")
    out = _qinfo(ctx, out_t)
    lo, hi = _TYPE_RANGE[out_t.dtype]
    if x_t.dtype == "float32":
        kernel = quantize_float16(x_t.shape, out.scale, out.zero, lo, hi)
        _call(ctx, "quantize_int16", kernel, [ctx.value(x_t)], out_t, out_dtype="int16")
        return
    x = _qinfo(ctx, x_t)
    # TFLite's Requantize: double(in scale) / double(out scale), a 32-bit multiplier
    multiplier, shift = quantize_multiplier(_f32(x.scale) / _f32(out.scale))

    def element(ar: TirArith, values, _):
        scaled = multiply_by_quantized_multiplier(ar, ar.shared(values[0] - x.zero),
                                                  multiplier, shift)
        return _clamp16(scaled + out.zero, lo, hi, out_t.dtype)

    kernel = elementwise([(x_t.shape, x_t.dtype)], x_t.shape, out_t.dtype, element,
                         "requantize")
    _call(ctx, "requantize_int16", kernel, [ctx.value(x_t)], out_t, out_dtype=out_t.dtype)


def quantize_float16(shape: tuple[int, ...], scale: float, zero: int, lo: int,
                     hi: int) -> Kernel16:
    """TFLite's AffineQuantize to int16: round(x / scale) in double, half away from zero,
    + zero, clamped. The scale is a float64 constant array: TVM's C printer writes float
    literals with 7 digits."""
    x = te.placeholder(shape, "float32", "x")
    sc = te.placeholder((1,), "float64", "scale")
    f64 = "float64"

    def element(*i):
        r = _round_half_away_f64(x[i].astype(f64) / sc[0])
        r = tirx.max(tirx.min(r, tirx.const(float(hi - zero), f64)),
                     tirx.const(float(lo - zero), f64))
        return (r.astype(I32) + zero).astype("int16")

    out = te.compute(shape, element, name="out")
    return Kernel16(_prim([x, sc, out]), [np.array([_f32(scale)], np.float64)], ("requant",))


@converter("DEQUANTIZE")
def dequantize(ctx: Context, op: TfOp) -> None:
    _mine(ctx, op)
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if out_t.dtype != "float32" or x_t.dtype != "int16" or x_t.is_const:
        raise Unsupported(f"dequantize from {x_t.dtype} to {out_t.dtype}")
    x = _qinfo(ctx, x_t)
    xp = te.placeholder(x_t.shape, "int16", "x")
    sc = te.placeholder((1,), "float64", "scale")  # an array: C literals have 7 digits
    out = te.compute(x_t.shape, lambda *i: (sc[0] * (xp[i].astype(I32) - x.zero).astype(
        "float64")).astype("float32"), name="out")
    kernel = Kernel16(_prim([xp, sc, out]), [np.array([_f32(x.scale)], np.float64)],
                      ("requant",))
    _call(ctx, "dequantize_int16", kernel, [ctx.value(x_t)], out_t, out_dtype="float32")


# ---- layout operators: their converters, with int16 tensors accepted ---------------------

_LAYOUT = {
    ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"): ops_layout.reshape,
    ("TRANSPOSE",): ops_layout.transpose,
    ("PAD", "PADV2"): ops_layout.pad,
    ("MIRROR_PAD",): ops_layout.mirror_pad,
    ("SLICE",): ops_layout.slice_,
    ("STRIDED_SLICE",): ops_layout.strided_slice,
    ("GATHER",): ops_layout.gather,
    ("SPLIT", "SPLIT_V"): ops_layout.split,
    ("PACK",): ops_layout.pack,
    ("UNPACK",): ops_layout.unpack,
    ("SPACE_TO_DEPTH", "DEPTH_TO_SPACE"): ops_layout.space_depth,
    ("RESIZE_NEAREST_NEIGHBOR",): ops_layout.resize_nearest,
}


def _layout_converter(fn: Callable[[Context, TfOp], None]):
    def convert(ctx: Context, op: TfOp) -> None:
        _mine(ctx, op)
        with accept_int16():
            fn(ctx, op)

    convert.__name__ = f"{fn.__name__}_int16"
    convert.__doc__ = f"`ops_layout.{fn.__name__}` with int16 tensors accepted."
    return convert


for _codes, _fn in _LAYOUT.items():
    converter(*_codes)(_layout_converter(_fn))


@converter("CONCATENATION")
def concatenation(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    _mine(ctx, op)
    out_t = ctx.out(op)
    out = _sym16(ctx, out_t, "output")
    if op.options is not None and int(op.options.FusedActivationFunction()) != 0:
        raise Unsupported("concatenation with a fused activation")
    parts = [ctx.need(op, i) for i in range(len(op.inputs))]
    for p in parts:
        if _sym16(ctx, p, "input") != out:
            raise Unsupported("int16 inputs quantized differently from the output")
    axis = int(op.options.Axis()) % len(out_t.shape)
    ctx.emit(relax.op.concat([ctx.value(p) for p in parts], axis=axis), out_t)
    ctx.report.integer.append("concatenation")
