"""Reductions (MEAN, SUM, REDUCE_MAX/MIN, ARG_MAX/MIN), L2_POOL_2D, PRELU,
SQUARED_DIFFERENCE and the int8 LOG_SOFTMAX.

Quantized MEAN and SUM sum the int8 values of each output position in int32 and rescale
the sum once, as TFLite does; which rescaling depends on the kernel TFLite runs:

- MEAN (int8, uint8): reference_ops::QuantizedMeanOrSum, the one path TFLite's reference
  kernels take for every axis set (no 4-D height-width special case any more): the multiplier
  in/out scale, with 1/count folded into it as (multiplier << k) / count, and
  MultiplyByQuantizedMultiplier of sum − zero_in · count.
- SUM uint8: the same arithmetic without the 1/count (compute_sum).
- SUM int8: TFLite's reference kernel returns garbage for int8 SUM, so the int8 form follows
  its builtin (optimized_ops::QuantizedMeanOrSum) kernel: in float32,
  round(sum · s + b) + zero_out with s = in/out scale and b = −zero_in · s · count.

REDUCE_MAX and REDUCE_MIN move values (TFLite requires equal input and output quantization),
so a Relax max or min is exact on the int8-carried values of either 8-bit type.
"""

from __future__ import annotations

import numpy as np

from generator.export import qkernels
from generator.export.fixedpoint import (
    TirArith,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
)
from generator.export.tflite.convert import (
    Context,
    QInfo,
    Unsupported,
    activation_name,
    activation_range,
    all_float,
    converter,
    float_activation,
)
from generator.export.tflite.model import TfOp, TfTensor

SQUARED_DIFFERENCE_LEFT_SHIFT = 7  # TFLite's int8 squared difference shifts inputs by 7 bits


# ---- kernels -----------------------------------------------------------------------------

def reduce_sum_kernel(x_shape: tuple[int, ...], axes: list[int], element, name: str,
                      ) -> qkernels.Kernel:
    """Each int8 sum over `axes` (in int32), passed through `element(ar, total)` → int8. The
    output keeps the reduced dimensions (size 1)."""
    from tvm import te

    x = te.placeholder(x_shape, "int8", "x")
    raxes = {d: te.reduce_axis((0, x_shape[d]), f"r{d}") for d in axes}
    keep_shape = tuple(1 if d in raxes else n for d, n in enumerate(x_shape))

    def at(*idx):
        full = tuple(raxes.get(d, idx[d]) for d in range(len(x_shape)))
        return te.sum(x[full].astype("int32"), axis=list(raxes.values()))

    total = te.compute(keep_shape, at, name="total")
    ar = TirArith()
    out = te.compute(keep_shape, lambda *i: element(ar, total[i]), name=name)
    return qkernels.Kernel(qkernels._func([x, out]), [])


def _round_half_away_f64(value):
    """A float64 TIR value rounded half away from zero (TfLiteRound), still float64."""
    from tvm import tirx

    return tirx.Select(value >= tirx.const(0.0, "float64"),
                       tirx.floor(value + tirx.const(0.5, "float64")),
                       tirx.ceil(value - tirx.const(0.5, "float64")))


# ---- the reductions ----------------------------------------------------------------------

def _axes(ctx: Context, op: TfOp, x_t: TfTensor) -> list[int]:
    """The reduced dimensions: the constant axis input resolved (negative axes, repeats)."""
    raw = ctx.const(ctx.need(op, 1), "the axes").reshape(-1)
    rank = len(x_t.shape)
    axes: list[int] = []
    for a in raw:
        a = int(a)
        if not -rank <= a < rank:
            raise Unsupported(f"axis {a} of a rank-{rank} input")
        if a % rank not in axes:
            axes.append(a % rank)
    return sorted(axes)


def _keep_dims(op: TfOp) -> bool:
    return op.options is not None and bool(op.options.KeepDims())


def _reshaped(ctx: Context, expr, shape: tuple[int, ...], out_t: TfTensor) -> None:
    from tvm import relax

    if tuple(shape) != tuple(out_t.shape):
        expr = ctx.emit(relax.op.reshape(expr, out_t.shape))
    ctx.set(out_t, expr)


def _float_reduce(ctx: Context, op: TfOp, fn: str) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    axes = _axes(ctx, op, x_t)
    y = ctx.emit(getattr(relax.op, fn)(ctx.value(x_t), axis=axes, keepdims=True))
    _reshaped(ctx, y, tuple(1 if d in axes else n for d, n in enumerate(x_t.shape)), out_t)


def _mean_element(x: QInfo, out: QInfo, count: int, compute_sum: bool):
    """reference_ops::QuantizedMeanOrSum's rescaling of one int8-domain sum."""
    multiplier, shift = quantize_multiplier(x.scale / out.scale)
    if not compute_sum:
        k = min(count.bit_length() - 1, 32, 31 + shift)
        multiplier = (multiplier << k) // count
        shift -= k
    offset = x.zero * count

    def element(ar, total):
        scaled = multiply_by_quantized_multiplier(ar, total - offset, multiplier, shift)
        return qkernels.clamp_int8(scaled + out.zero, -128, 127)

    return element


def _float_sum_element(x: QInfo, out: QInfo, count: int):
    """optimized_ops::QuantizedMeanOrSum's float32 rescaling of a sum (int8 only)."""
    from tvm import tirx

    f = np.float32
    scale = f(f(x.scale) / f(out.scale))
    bias = f(f(f(-x.zero) * scale) * f(count))

    def f64(value):
        return tirx.Cast("float64", value)

    def element(ar, total):
        # float32 x · s + b, each step rounded to float32 as TFLite's C does: the product
        # and the sum are exact or correctly rounded in float64 and then rounded to float32,
        # so a compiler that fuses a·b + c (FMA) into one rounding has nothing to fuse
        product = tirx.Cast("float32", f64(tirx.Cast("float32", total))
                            * tirx.const(float(scale), "float64"))
        v = tirx.Cast("float32", f64(product) + tirx.const(float(bias), "float64"))
        r = _round_half_away_f64(f64(v))
        r = tirx.max(tirx.min(r, tirx.const(1e9, "float64")), tirx.const(-1e9, "float64"))
        return qkernels.clamp_int8(tirx.Cast("int32", r) + out.zero, -128, 127)

    return element


def _quantized_sum(ctx: Context, op: TfOp, mean: bool) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    if x.dtype != out.dtype:
        raise Unsupported(f"{op.code.lower()} from {x.dtype} to {out.dtype}")
    axes = _axes(ctx, op, x_t)
    count = int(np.prod([x_t.shape[d] for d in axes], dtype=np.int64))
    if count == 0 or not axes:
        raise Unsupported("an empty reduction")
    if mean or x.dtype == "uint8":
        element = _mean_element(x, out, count, compute_sum=not mean)
    else:
        element = _float_sum_element(x, out, count)
    kind = "mean" if mean else "sum"
    kernel = reduce_sum_kernel(x_t.shape, axes, element, kind)
    keep_shape = tuple(1 if d in axes else n for d, n in enumerate(x_t.shape))
    y = ctx.kernel(kind, kernel, [ctx.value(x_t)], out_t, out_shape=keep_shape,
                   set_out=False)
    _reshaped(ctx, y, keep_shape, out_t)


@converter("MEAN", "SUM")
def mean_sum(ctx: Context, op: TfOp) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if all_float(x_t, out_t):
        return _float_reduce(ctx, op, "mean" if op.code == "MEAN" else "sum")
    _quantized_sum(ctx, op, op.code == "MEAN")


@converter("REDUCE_MAX", "REDUCE_MIN")
def reduce_max_min(ctx: Context, op: TfOp) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    fn = "max" if op.code == "REDUCE_MAX" else "min"
    if not all_float(x_t, out_t):
        if ctx.qinfo(x_t) != ctx.qinfo(out_t):
            raise Unsupported("input and output quantized differently")
        ctx.report.integer.append(op.code.lower())
    _float_reduce(ctx, op, fn)


@converter("ARG_MAX", "ARG_MIN")
def arg_max_min(ctx: Context, op: TfOp) -> None:
    """The index of the largest (smallest) value along the axis, the first on ties as
    TFLite's ArgMinMax: the extreme value, then the least index holding it. (TVM's argmax
    starts from the type's lowest value at index −1, so a row all at int8's −128 gave −1.)
    Order is the same on uint8 values carried as int8."""
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if out_t.dtype not in ("int32", "int64"):
        raise Unsupported(f"{out_t.dtype} indices")
    rank = len(x_t.shape)
    axis = int(ctx.const(ctx.need(op, 1), "the axis").reshape(-1)[0])
    if not -rank <= axis < rank:
        raise Unsupported(f"axis {axis} of a rank-{rank} input")
    axis %= rank
    x = ctx.value(x_t)
    fn = relax.op.max if op.code == "ARG_MAX" else relax.op.min
    extreme = ctx.emit(fn(x, axis=[axis], keepdims=True))
    shape = [1] * rank
    shape[axis] = x_t.shape[axis]
    index = relax.const(np.arange(x_t.shape[axis], dtype=np.int32).reshape(shape))
    beyond = relax.const(np.int32(x_t.shape[axis]))
    candidates = ctx.emit(relax.op.where(relax.op.equal(x, extreme), index, beyond))
    first = ctx.emit(relax.op.min(candidates, axis=[axis]))
    ctx.emit(relax.op.astype(first, out_t.dtype), out_t)
    if x_t.quant is not None:
        ctx.report.integer.append(op.code.lower())


# ---- pools -------------------------------------------------------------------------------

@converter("L2_POOL_2D")
def l2_pool(ctx: Context, op: TfOp) -> None:
    """sqrt of the mean of the squares over each window's in-bounds values (float)."""
    from tvm import relax

    from generator.export.tflite.convert import padding

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if not all_float(x_t, out_t):
        raise Unsupported("TFLite has no quantized L2 pool")
    o = op.options
    pool = (int(o.FilterHeight()), int(o.FilterWidth()))
    strides = (int(o.StrideH()), int(o.StrideW()))
    pads = padding(o, (x_t.shape[1], x_t.shape[2]), pool, strides, (1, 1))
    x = ctx.value(x_t)
    squares = ctx.emit(relax.op.multiply(x, x))
    mean = ctx.emit(relax.op.nn.avg_pool2d(squares, pool, strides, pads, layout="NHWC",
                                           count_include_pad=False))
    y = ctx.emit(relax.op.sqrt(mean))
    ctx.set(out_t, float_activation(ctx, y, activation_name(o)))


# ---- binary operators --------------------------------------------------------------------

@converter("PRELU")
def prelu(ctx: Context, op: TfOp) -> None:
    """TFLite's PRELU: x where x ≥ 0, else alpha · x (alpha broadcast against x). Quantized:
    identity and alpha multipliers (float32 ratios), MultiplyByQuantizedMultiplier each."""
    from tvm import relax

    x_t, a_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    if all_float(x_t, a_t, out_t):
        x, a = ctx.value(x_t), ctx.value(a_t)
        zero = relax.const(np.float32(0))
        y = relax.op.where(relax.op.greater_equal(x, zero), x, relax.op.multiply(x, a))
        ctx.emit(y, out_t)
        return
    x, a, out = ctx.qinfo(x_t), ctx.qinfo(a_t), ctx.qinfo(out_t)
    if not x.dtype == a.dtype == out.dtype:
        raise Unsupported(f"prelu of {x.dtype} with {a.dtype} alpha to {out.dtype}")
    f = np.float32
    identity = quantize_multiplier(float(f(x.scale) / f(out.scale)))
    slope = quantize_multiplier(float(f(f(x.scale) * f(a.scale)) / f(out.scale)))

    def element(ar, vx, va):
        from tvm import tirx

        xv = ar.shared(vx - x.zero)
        pos = multiply_by_quantized_multiplier(ar, xv, *identity)
        neg = multiply_by_quantized_multiplier(ar, ar.shared(xv * (va - a.zero)), *slope)
        value = tirx.Select(xv >= 0, pos, neg)
        return qkernels.clamp_int8(value + out.zero, -128, 127)

    kernel = qkernels.binary(x_t.shape, a_t.shape, out_t.shape, element, "prelu")
    ctx.kernel("prelu", kernel, [ctx.value(x_t), ctx.value(a_t)], out_t)


@converter("SQUARED_DIFFERENCE")
def squared_difference(ctx: Context, op: TfOp) -> None:
    """TFLite's int8 SQUARED_DIFFERENCE: both inputs shifted left by 7 bits and rescaled to
    half the larger scale, their difference squared and rescaled to the output."""
    a_t, b_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    a, b, out = ctx.qinfo(a_t), ctx.qinfo(b_t), ctx.qinfo(out_t)
    if not a.dtype == b.dtype == out.dtype == "int8":
        raise Unsupported("TFLite's quantized squared difference is int8 only")
    shift = SQUARED_DIFFERENCE_LEFT_SHIFT
    twice_max = 2.0 * max(a.scale, b.scale)
    mult_a = quantize_multiplier(a.scale / twice_max)
    mult_b = quantize_multiplier(b.scale / twice_max)
    mult_out = quantize_multiplier(twice_max * twice_max / ((1 << 2 * shift) * out.scale))
    if max(mult_a[1], mult_b[1], mult_out[1]) > 0:
        raise Unsupported("output scale too small for TFLite's squared difference")
    lo, hi = activation_range(activation_name(op.options), out.scale, out.zero)

    def element(ar, va, vb):
        sa = multiply_by_quantized_multiplier(ar, (va - a.zero) * (1 << shift), *mult_a)
        sb = multiply_by_quantized_multiplier(ar, (vb - b.zero) * (1 << shift), *mult_b)
        diff = ar.shared(ar.shared(sa) - ar.shared(sb))
        scaled = multiply_by_quantized_multiplier(ar, ar.shared(diff * diff), *mult_out)
        return qkernels.clamp_int8(scaled + out.zero, lo, hi)

    kernel = qkernels.binary(a_t.shape, b_t.shape, out_t.shape, element, "squared_difference")
    ctx.kernel("squared_difference", kernel, [ctx.value(a_t), ctx.value(b_t)], out_t)



# ---- int8 LOG_SOFTMAX ----------------------------------------------------------------------

LOG_SOFTMAX_OUTPUT = (16.0 / 256, 127)  # TFLite's int8 log softmax output: [-16, 0) in 8 bits
_LOG_INPUT_BITS = 12  # the sum of exps is Q12.19
_LOG_ACCUM_BITS = 6  # log_x_for_x_greater_than_or_equal_to_1<5>'s accumulator: Q6.25
# gemmlowp's Q0.31 constants of the fixed-point log: log 2, 2^-1/4, 2^-1/2 and its minimax
# rational approximation's coefficients
_LOG_2, _SQRT_SQRT_HALF, _SQRT_HALF = 1488522236, 1805811301, 1518500250
_ALPHA_N, _ALPHA_D, _ALPHA_I, _ALPHA_F = 117049297, 127690142, 1057819769, 638450708


def log_softmax_params(input_scale: float) -> tuple[int, int, int, int, int]:
    """(input multiplier, left shift, reverse multiplier, reverse shift (≤ 0), diff_min) of
    TFLite's int8 log softmax (PreprocessLogSoftmaxScalingExp, beta 1)."""
    from generator.export.fixedpoint import softmax_params

    multiplier, shift, diff_min = softmax_params(input_scale)
    reverse, reverse_shift = quantize_multiplier((1 << (31 - shift)) / multiplier)
    if reverse_shift > 0:
        raise ValueError("log softmax reverse scaling greater than one")
    return multiplier, shift, reverse, reverse_shift, diff_min


def _bit_length(ar, x):
    """The bit length of a positive int32 TIR value (32 − count leading zeros)."""
    from tvm import tirx

    one, zero = tirx.const(1, "int32"), tirx.const(0, "int32")
    total = zero
    for k in range(31):
        total = total + tirx.Select(x >= tirx.const(1 << k, "int32"), one, zero)
    return ar.shared(total)


def _saturate(value64):
    """An int64 TIR value clamped to int32."""
    from tvm import tirx

    i64 = "int64"
    clamped = tirx.max(tirx.min(value64, tirx.const(2 ** 31 - 1, i64)), tirx.const(-2 ** 31, i64))
    return tirx.Cast("int32", clamped)


def _shl_saturating(ar, x, exponent):
    """gemmlowp's saturating x · 2**exponent for 0 ≤ exponent ≤ 31 (a TIR value)."""
    from tvm import tirx

    i64 = "int64"
    return ar.shared(_saturate(tirx.Cast(i64, x) << tirx.Cast(i64, exponent)))


def log_q5(ar, z):
    """gemmlowp's log_x_for_x_greater_than_or_equal_to_1<5> of a Q12.19 TIR value z ≥ 1,
    as TFLite writes it: z normalized two ways (by its own headroom and by that of z·√½),
    the better-conditioned one's rational approximation of log, plus its power of two · log 2;
    the result Q5.26."""
    from tvm import tirx

    from generator.export.fixedpoint import one_over_one_plus_x, saturating_shl

    i64 = "int64"
    quarter = (1 << 29) >> _LOG_ACCUM_BITS  # 1/4 in Q6.25
    z = ar.shared(z)
    headroom_a = ar.shared(32 - _bit_length(ar, z))
    r_a = _shl_saturating(ar, z, headroom_a - 1)
    r_a = saturating_shl(ar, ar.shared(ar.srdhm(r_a, _SQRT_HALF)), 1)
    za_adj = _saturate(tirx.Cast(i64, (_LOG_INPUT_BITS - headroom_a) << (31 - _LOG_ACCUM_BITS))
                       + tirx.const(quarter, i64))
    zb = ar.shared(ar.srdhm(z, _SQRT_HALF))
    headroom_b = ar.shared(32 - _bit_length(ar, zb) - 1)
    r_b = _shl_saturating(ar, z, headroom_b)
    zb_adj = _saturate(tirx.Cast(i64, (_LOG_INPUT_BITS - headroom_b) << (31 - _LOG_ACCUM_BITS))
                       - tirx.const(quarter, i64))
    r = ar.shared(tirx.min(r_a, r_b))
    adj = ar.shared(tirx.max(za_adj, zb_adj))
    p = ar.shared(ar.rounding_half_sum(r, _SQRT_SQRT_HALF))
    q = ar.shared(r - _SQRT_SQRT_HALF)  # stored before doubling: TVM would fold 2·constant
    q = ar.shared(q + q)
    square = ar.shared(ar.srdhm(q, q))
    num = ar.shared(ar.srdhm(q, r) + ar.srdhm(ar.shared(ar.srdhm(q, square)), _ALPHA_N))
    inner = ar.shared(_ALPHA_I + q + ar.srdhm(_ALPHA_D, square))
    denominator = ar.shared(ar.srdhm(p, inner) + ar.srdhm(_ALPHA_F, q))
    reciprocal = ar.shared(one_over_one_plus_x(ar, denominator))
    num_scaled = ar.shared(ar.rdbp(num, _LOG_ACCUM_BITS))
    total = ar.shared(ar.srdhm(adj, _LOG_2) + ar.srdhm(num_scaled, reciprocal))
    return saturating_shl(ar, total, 1)


def log_softmax_kernel(shape: tuple[int, ...], input_scale: float) -> qkernels.Kernel:
    """TFLite's reference_integer_ops::LogSoftmax over the last axis, one row at a time:
    the fixed-point exp of each difference from the row maximum summed in Q12.19, its
    fixed-point log, and each output (difference − log) in Q4 with zero point 127."""
    from tvm import tirx as t

    from generator.export.fixedpoint import INT32_MIN, exp_on_negative_values

    multiplier, shift, reverse, reverse_shift, diff_min = log_softmax_params(input_scale)
    depth = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    i32 = "int32"

    def index(r, c):
        return qkernels.row_index(shape, r, c)

    loop = qkernels.serial_loop

    def build(ar, ins, ob):
        xb = ins[0]
        acc = t.decl_buffer((3,), i32, "acc")
        r, c = t.Var("r", i32), t.Var("c", i32)
        row_max, total = t.Var("row_max", i32), t.Var("sum_of_exps", i32)
        log_sum, adjusted = t.Var("log_sum", i32), t.Var("adjusted_diff_min", i32)

        def store(slot, value):
            return t.BufferStore(acc, value, [t.const(slot, i32)])

        def slot(n):
            return t.BufferLoad(acc, [t.const(n, i32)])

        def diff():
            return ar.shared(t.Cast(i32, t.BufferLoad(xb, index(r, c))) - row_max)

        def in_q5(d):
            return ar.shared(ar.srdhm(d * (1 << shift), multiplier))

        d = diff()
        term = t.Select(d >= diff_min, ar.rdbp(exp_on_negative_values(ar, in_q5(d)),
                                               _LOG_INPUT_BITS), t.const(0, i32))
        sum_step = qkernels._seq([*ar.take_stores(), store(1, slot(1) + term)])
        log_value = log_q5(ar, total)
        log_steps = [*ar.take_stores(), store(2, log_value)]
        floor = multiply_by_quantized_multiplier(ar, ar.shared(log_sum + INT32_MIN), reverse,
                                                 reverse_shift)
        adjusted_value = t.max(t.const(diff_min - 1, i32), floor)
        adjust_steps = [*ar.take_stores(), store(0, adjusted_value)]
        d = diff()
        delta = t.Cast("int64", in_q5(d)) - t.Cast("int64", log_sum)
        value = ar.rdbp(delta, 31 - 5 - 4) + LOG_SOFTMAX_OUTPUT[1]
        out_step = qkernels._seq([*ar.take_stores(), t.BufferStore(
            ob, t.Select(d > adjusted, qkernels.clamp_int8(value, -128, 127),
                         t.const(-128, "int8")), index(r, c))])
        row = t.SeqStmt([
            store(0, t.const(-128, i32)),
            loop(c, depth, store(0, t.max(slot(0), t.Cast(i32, t.BufferLoad(xb, index(r, c)))))),
            t.LetStmt(row_max, slot(0)),
            store(1, t.const(0, i32)),
            loop(c, depth, sum_step),
            t.LetStmt(total, slot(1)),
            *log_steps,
            t.LetStmt(log_sum, slot(2)),
            *adjust_steps,
            t.LetStmt(adjusted, slot(0)),
            loop(c, depth, out_step),
        ])
        return t.SeqStmt([t.AllocBuffer(acc), loop(r, rows, row)])

    return qkernels._statement_kernel([shape], shape, build, "log_softmax")


@converter("LOG_SOFTMAX")
def log_softmax(ctx: Context, op: TfOp) -> None:
    """int8 LOG_SOFTMAX (float is ops_elementwise's); TFLite fixes the output's quantization
    at scale 16/256, zero point 127."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    if x.dtype != "int8" or out.dtype != "int8":
        raise Unsupported("quantized log softmax is int8 only here")
    if (out.scale, out.zero) != LOG_SOFTMAX_OUTPUT:
        raise Unsupported("log softmax output must have scale 16/256 and zero point 127")
    try:
        kernel = log_softmax_kernel(x_t.shape, x.scale)
    except ValueError as exc:
        raise Unsupported(str(exc)) from exc
    ctx.kernel("log_softmax", kernel, [ctx.value(x_t)], out_t)
