"""The operators that still blocked real int16 and mixed-type TFLite models.

Each converter follows the kernel TensorFlow Lite Micro runs (the microcontroller
reference), bit for bit:

- LEAKY_RELU int16 (TFLM leaky_relu_common.cc, reference_ops::QuantizeLeakyRelu): each
  input minus its zero point times one of two 32-bit multipliers (alpha·s_in/s_out for
  negative values, s_in/s_out otherwise, both in double from the float32 scales), + the
  output zero point, clamped to int16. LiteRT's reference divides in float32, and so
  differs from TFLM by one on a few values of some scales.
- TRANSPOSE_CONV int16 (reference_integer_ops::TransposeConv, 16x8): int16 · int8 summed
  exactly with the int64 bias (an int16 bias is widened, as TFLM does), requantized by the
  64-bit MultiplyByQuantizedMultiplier, clamped to the fused activation's range. Built as
  ops_unary's int8 form is: the input dilated by the strides, a stride-1 convolution with
  the flipped weights (`ops_int16.conv2d_int16`).
- QUANTIZE with an int32 side (TFLM quantize_common.cc: int16/int8 → int32, int32 →
  int16/int8): reference_ops::Requantize with a 32-bit multiplier.
- SOFTMAX int8 → int16 (reference_ops::Softmax with an int16 output, zero point −32768,
  scale 1/65536): the int8 softmax's gemmlowp exp and reciprocal, the result shifted for
  16 output bits.
- CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED with float32 activations and int8 weights
  (TFLite's hybrid kernels): refused with the reason, TFLM refuses hybrid models too.
"""

from __future__ import annotations

import numpy as np
from tvm import tirx

from generator.export.fixedpoint import (
    SOFTMAX_ACCUM_INTEGER_BITS,
    TirArith,
    exp_on_negative_values,
    multiply_by_quantized_multiplier,
    one_over_one_plus_x,
    quantize_multiplier,
    softmax_params,
)
from generator.export.tflite import ops_unary
from generator.export.tflite.convert import (
    CONVERTERS,
    Context,
    NotMine,
    Unsupported,
    converter,
)
from generator.export.tflite.model import TfOp, TfTensor
from generator.export.tflite.ops_int16 import (
    I16_MAX,
    I16_MIN,
    I32,
    Kernel16,
    _act16,
    _call,
    _channel_scales,
    _clamp16,
    _loop,
    _qinfo,
    _seq,
    _statement,
    _sym16,
    _weights16,
    conv2d_int16,
    elementwise,
    reduced_multiplier,
)

_RANGES = {"int8": (-128, 127), "int16": (I16_MIN, I16_MAX),
           "int32": (-(1 << 31), (1 << 31) - 1)}
_F = np.float32


def _quantized(t: TfTensor | None, *dtypes: str) -> bool:
    return t is not None and t.quant is not None and t.dtype in dtypes


def _per_tensor(t: TfTensor) -> tuple[float, int]:
    """(scale, zero point) of a per-tensor quantized tensor of any integer dtype."""
    if t.quant is None or not t.quant.per_tensor:
        raise Unsupported(f"{t.dtype} tensor without per-tensor quantization")
    return float(t.quant.s), int(t.quant.z)


# ---- LEAKY_RELU int16 -----------------------------------------------------------------------

def leaky_relu_multipliers(in_scale: float, out_scale: float,
                           alpha: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """TFLM's (alpha, identity) multipliers: in·alpha/out and in/out in double from the
    float32 scales and alpha (an older TFLM divided in float32: 13 of the 65,536 values of
    tflm_seanet_leaky_relu1 differ), then QuantizeMultiplier."""
    s_in, s_out, a = float(_F(in_scale)), float(_F(out_scale)), float(_F(alpha))
    return quantize_multiplier(s_in * a / s_out), quantize_multiplier(s_in / s_out)


@converter("LEAKY_RELU")
def leaky_relu(ctx: Context, op: TfOp) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if not (_quantized(x_t, "int16") and _quantized(out_t, "int16")):
        raise NotMine("not an int16 leaky relu")
    x, out = _qinfo(ctx, x_t), _qinfo(ctx, out_t)
    alpha = float(op.options.Alpha()) if op.options is not None else 0.0  # TFLite's
    if alpha < 0:
        raise Unsupported(f"int16 leaky relu with a negative alpha ({alpha})")
    (m_alpha, s_alpha), (m_id, s_id) = leaky_relu_multipliers(x.scale, out.scale, alpha)

    def element(ar: TirArith, values, _):
        v = ar.shared(values[0] - x.zero)
        neg = multiply_by_quantized_multiplier(ar, v, m_alpha, s_alpha)
        pos = multiply_by_quantized_multiplier(ar, v, m_id, s_id)
        return _clamp16(tirx.Select(v >= 0, pos, neg) + out.zero)

    kernel = elementwise([(x_t.shape, "int16")], x_t.shape, "int16", element, "leaky_relu")
    _call(ctx, "leaky_relu_int16", kernel, [ctx.value(x_t)], out_t, out_dtype="int16")


# ---- TRANSPOSE_CONV int16 -------------------------------------------------------------------

@converter("TRANSPOSE_CONV")
def transpose_conv(ctx: Context, op: TfOp) -> None:
    w_t, x_t, out_t = ctx.need(op, 1), ctx.need(op, 2), ctx.out(op)
    if not (_quantized(x_t, "int16") or _quantized(out_t, "int16")):
        raise NotMine("no int16 activation")
    b_t = ctx.arg(op, 3)
    o = op.options
    if len(x_t.shape) != 4 or len(w_t.shape) != 4:
        raise Unsupported("a transposed convolution that is not 2-D NHWC")
    x, out = _sym16(ctx, x_t, "input"), _sym16(ctx, out_t, "output")
    _, oh, ow, cout = out_t.shape
    cin = x_t.shape[3]
    kh, kw = w_t.shape[1], w_t.shape[2]
    if w_t.shape[3] != cin or w_t.shape[0] != cout:
        raise Unsupported(f"weights of shape {list(w_t.shape)}")
    strides = (int(o.StrideH()), int(o.StrideW()))
    same = int(o.Padding()) == 0
    pads = (ops_unary._transpose_padding(oh, kh, strides[0], same),
            ops_unary._transpose_padding(ow, kw, strides[1], same))
    q, scales = _weights16(ctx, w_t, 0)
    bias = _transpose_bias(ctx, b_t, cout)
    pairs = [reduced_multiplier(*quantize_multiplier(s))
             for s in _channel_scales(x, scales, out, cout)]
    weights = np.ascontiguousarray(q[:, ::-1, ::-1, :])
    # the fused activation's range (an older TFLM computed it with no activation)
    act = _act16(op, out)
    value, shape = ops_unary._dilated(ctx, ctx.value(x_t), x_t.shape, strides, 0.0)
    value, shape, conv_pads = ops_unary._conv_geometry(ctx, value, shape, (oh, ow), (kh, kw),
                                                       pads)
    kernel = conv2d_int16(shape, weights, bias, out_t.shape, (1, 1), conv_pads, (1, 1), False,
                          np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]),
                          act)
    _call(ctx, "transpose_conv2d_int16", kernel, [value], out_t, out_dtype="int16")


def _transpose_bias(ctx: Context, t: TfTensor | None, channels: int) -> np.ndarray:
    if t is None:
        return np.zeros(channels, np.int64)
    b = ctx.const(t, "the bias")
    if t.dtype not in ("int64", "int16"):
        # TFLM reads any other bias as int64 data (garbage for an int32 bias)
        raise Unsupported(f"{t.dtype} bias with int16 activations (int64 expected)")
    return b.reshape(-1).astype(np.int64)


# ---- QUANTIZE with an int32 side ------------------------------------------------------------

_INT32_PAIRS = {("int16", "int32"), ("int8", "int32"), ("int32", "int16"), ("int32", "int8")}


@converter("QUANTIZE")
def quantize_int32(ctx: Context, op: TfOp) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if (x_t.dtype, out_t.dtype) not in _INT32_PAIRS:
        raise NotMine("no int32 side")
    if x_t.is_const:
        raise Unsupported("quantize of a constant")
    (xs, xz), (os_, oz) = _per_tensor(x_t), _per_tensor(out_t)
    # TFLM's Requantize: double(in scale) / double(out scale), a 32-bit multiplier
    multiplier, shift = quantize_multiplier(float(_F(xs)) / float(_F(os_)))
    lo, hi = _RANGES[out_t.dtype]
    wide = out_t.dtype == "int32"

    def element(ar: TirArith, values, _):
        v = values[0] - xz if xz else values[0]
        scaled = multiply_by_quantized_multiplier(ar, ar.shared(v), multiplier, shift)
        if wide:
            return scaled + oz if oz else scaled
        return _clamp16(scaled + oz, lo, hi, out_t.dtype)

    kernel = elementwise([(x_t.shape, x_t.dtype)], x_t.shape, out_t.dtype, element,
                         "requantize")
    _call(ctx, f"requantize_{x_t.dtype}_{out_t.dtype}", kernel, [ctx.value(x_t)], out_t,
          out_dtype=out_t.dtype)


# ---- SOFTMAX int8 → int16 -------------------------------------------------------------------

@converter("SOFTMAX")
def softmax_int8_int16(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if not (x_t.dtype == "int8" and out_t.dtype == "int16"):
        raise NotMine("not an int8 → int16 softmax")
    (xs, _), (os_, oz) = _per_tensor(x_t), _per_tensor(out_t)
    if oz != I16_MIN or abs(_F(os_) - _F(1.0 / 65536)) > _F(0.001 / 65536):
        raise Unsupported("int8 → int16 softmax output must have scale 1/65536 and zero "
                          "point -32768")
    beta = float(op.options.Beta()) if op.options is not None else 1.0
    try:
        multiplier, shift, diff_min = softmax_params(float(_F(xs)), float(_F(beta)))
    except ValueError as exc:
        raise Unsupported(str(exc)) from exc
    shape = x_t.shape
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    flat = (rows, shape[-1])
    value = ctx.value(x_t)
    if tuple(shape) != flat:
        value = ctx.emit(relax.op.reshape(value, flat))
    y = _call(ctx, "softmax_int8_int16", softmax_int8_int16_kernel(flat, multiplier, shift,
                                                                   diff_min),
              [value], out_t, out_shape=flat, out_dtype="int16", set_out=False)
    if tuple(shape) != flat:
        y = ctx.emit(relax.op.reshape(y, shape))
    ctx.set(out_t, y)


def softmax_int8_int16_kernel(flat: tuple[int, int], multiplier: int, left_shift: int,
                              diff_min: int) -> Kernel16:
    """reference_ops::Softmax of int8 rows into int16: the int8 softmax's fixed-point exp
    of each difference from the row maximum (those below `diff_min` count as 0), times the
    fixed-point reciprocal of their sum, shifted right by (bits over unit + 15), − 32768."""
    t = tirx
    rows, depth = flat

    def build(ar: TirArith, bufs, ob):
        (xb,) = bufs
        r, c, k = t.Var("r", I32), t.Var("c", I32), t.Var("k", I32)
        acc = t.decl_buffer((3,), I32, "acc")
        row_max, total, bits = t.Var("row_max", I32), t.Var("sum_of_exps", I32), \
            t.Var("bits", I32)

        def store(n, v):
            return t.BufferStore(acc, v, [t.const(n, I32)])

        def slot(n):
            return t.BufferLoad(acc, [t.const(n, I32)])

        def x_at():
            return t.Cast(I32, t.BufferLoad(xb, [r, c]))

        def exp_of_diff():
            d = ar.shared(x_at() - row_max)
            rescaled = ar.srdhm(d * (1 << left_shift), multiplier)
            return d, ar.shared(exp_on_negative_values(ar, ar.shared(rescaled)))

        d, e = exp_of_diff()
        term = t.Select(d >= diff_min, ar.rdbp(e, SOFTMAX_ACCUM_INTEGER_BITS),
                        t.const(0, I32))
        sum_step = _seq([*ar.take_stores(), store(1, slot(1) + term)])
        headroom = 32 - bits  # count of leading zeros = TFLM's headroom_plus_one
        shifted = (t.Cast("int64", total) << t.Cast("int64", headroom)) - (1 << 31)
        scale = ar.shared(one_over_one_plus_x(ar, ar.shared(t.Cast(I32, shifted))))
        scale_steps = ar.take_stores()
        d, e = exp_of_diff()
        over_unit = SOFTMAX_ACCUM_INTEGER_BITS - headroom
        value = ar.rdbp(ar.srdhm(scale, e), over_unit + 31 - 16) + I16_MIN
        out_step = _seq([*ar.take_stores(), t.BufferStore(
            ob, t.Select(d >= diff_min, _clamp16(value), t.const(I16_MIN, "int16")), [r, c])])
        row = t.SeqStmt([
            store(0, t.const(-128, I32)),
            _loop(c, depth, store(0, t.max(slot(0), x_at()))),
            t.LetStmt(row_max, slot(0)),
            store(1, t.const(0, I32)),
            _loop(c, depth, sum_step),
            t.LetStmt(total, slot(1)),
            store(2, t.const(0, I32)),  # the sum's bit length
            _loop(k, 32, store(2, slot(2) + t.Select((total >> k) != 0, t.const(1, I32),
                                                     t.const(0, I32)))),
            t.LetStmt(bits, slot(2)),
            *scale_steps,
            _loop(c, depth, out_step),
        ])
        return t.SeqStmt([t.AllocBuffer(acc), _loop(r, rows, row)])

    return _statement([(flat, "int8")], flat, "int16", build, "softmax8to16")


# ---- hybrid operators: refused, as TFLM does ------------------------------------------------

def hybrid(ctx: Context, op: TfOp) -> None:
    """Refuse TFLite's hybrid form of an operator with weights."""
    x_t, w_t = ctx.need(op, 0), ctx.arg(op, 1)
    if not (x_t.dtype == "float32" and w_t is not None and w_t.dtype in ("int8", "uint8")):
        raise NotMine("not a hybrid operator")
    raise Unsupported(f"a hybrid {op.code} (float32 activations, {w_t.dtype} weights: TFLite "
                      "quantizes the input on the fly); TensorFlow Lite Micro refuses hybrid "
                      "models too ('Hybrid models are not supported on TFLite Micro'): "
                      "quantize the model fully (int8 or int16x8 activations)")


# tried first, so that its reason leads the refusal
for _code in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
    CONVERTERS.setdefault(_code, []).insert(0, hybrid)
