"""Elementwise operators: arithmetic, activations, QUANTIZE and DEQUANTIZE."""

from __future__ import annotations

import numpy as np

from generator.accel.api import QuantizedOp
from generator.export import qkernels
from generator.export.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from generator.export.tflite import lut
from generator.export.tflite.convert import (
    Context,
    Unsupported,
    activation_name,
    activation_range,
    all_float,
    const,
    converter,
    float_activation,
    int8_offset,
)
from generator.export.tflite.model import TfOp, TfTensor

ADD_LEFT_SHIFT = 20  # TFLite's int8 add and sub shift both inputs left by 20 bits

_FLOAT_BINARY = {"ADD": "add", "SUB": "subtract", "MUL": "multiply", "DIV": "divide",
                 "MINIMUM": "minimum", "MAXIMUM": "maximum"}


def _binary_float(ctx: Context, op: TfOp, a_t: TfTensor, b_t: TfTensor, out_t: TfTensor):
    from tvm import relax

    a, b = ctx.value(a_t), ctx.value(b_t)
    if op.code == "SQUARED_DIFFERENCE":
        d = ctx.emit(relax.op.subtract(a, b))
        y = ctx.emit(relax.op.multiply(d, d))
    else:
        y = ctx.emit(getattr(relax.op, _FLOAT_BINARY[op.code])(a, b))
    ctx.set(out_t, float_activation(ctx, y, activation_name(op.options)))


@converter("ADD", "SUB")
def add_sub(ctx: Context, op: TfOp) -> None:
    a_t, b_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    if all_float(a_t, b_t, out_t):
        return _binary_float(ctx, op, a_t, b_t, out_t)
    a, b, out = ctx.qinfo(a_t), ctx.qinfo(b_t), ctx.qinfo(out_t)
    act = activation_range(activation_name(op.options), out.scale, out.zero)
    twice_max = 2.0 * max(a.scale, b.scale)
    mult_a = quantize_multiplier(a.scale / twice_max)
    mult_b = quantize_multiplier(b.scale / twice_max)
    mult_out = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * out.scale))
    kernel = qkernels.add(a_t.shape, b_t.shape, out_t.shape, -a.zero, -b.zero, mult_a,
                          mult_b, mult_out, ADD_LEFT_SHIFT, out.zero, *act,
                          subtract=op.code == "SUB")
    qop = None
    if op.code == "ADD":
        qop = QuantizedOp("add", (a_t.shape, b_t.shape), out_t.shape, {
            "input_zero_points": (a.zero, b.zero), "multipliers": (mult_a[0], mult_b[0]),
            "shifts": (mult_a[1], mult_b[1]), "left_shift": ADD_LEFT_SHIFT,
            "output_multiplier": mult_out[0], "output_shift": mult_out[1],
            "output_zero_point": out.zero, "act_min": act[0], "act_max": act[1]})
    ctx.kernel(op.code.lower(), kernel, [ctx.value(a_t), ctx.value(b_t)], out_t, op=qop)


@converter("MUL")
def mul(ctx: Context, op: TfOp) -> None:
    a_t, b_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    if all_float(a_t, b_t, out_t):
        return _binary_float(ctx, op, a_t, b_t, out_t)
    a, b, out = ctx.qinfo(a_t), ctx.qinfo(b_t), ctx.qinfo(out_t)
    lo, hi = activation_range(activation_name(op.options), out.scale, out.zero)
    # mul.cc: the scales multiplied and divided in float32, then widened
    f = np.float32
    multiplier, shift = quantize_multiplier(float(f(f(a.scale) * f(b.scale)) / f(out.scale)))

    def element(ar, va, vb):
        product = ar.shared((va - a.zero) * (vb - b.zero))
        scaled = multiply_by_quantized_multiplier(ar, product, multiplier, shift)
        return qkernels.clamp_int8(scaled + out.zero, lo, hi)

    kernel = qkernels.binary(a_t.shape, b_t.shape, out_t.shape, element, "mul")
    ctx.kernel("mul", kernel, [ctx.value(a_t), ctx.value(b_t)], out_t)


@converter("DIV", "MINIMUM", "MAXIMUM", "SQUARED_DIFFERENCE")
def float_binary(ctx: Context, op: TfOp) -> None:
    a_t, b_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    if all_float(a_t, b_t, out_t):
        return _binary_float(ctx, op, a_t, b_t, out_t)
    if op.code in ("MINIMUM", "MAXIMUM"):
        from tvm import relax

        a, b, out = ctx.qinfo(a_t), ctx.qinfo(b_t), ctx.qinfo(out_t)
        if not (a == b == out):
            raise Unsupported("inputs and output quantized differently")
        fn = relax.op.minimum if op.code == "MINIMUM" else relax.op.maximum
        ctx.emit(fn(ctx.value(a_t), ctx.value(b_t)), out_t)
        ctx.report.integer.append(op.code.lower())
        return
    raise Unsupported("no integer kernel yet")


def _table(ctx: Context, op: TfOp, kind: str, table: np.ndarray) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    out_dtype = "float32" if table.dtype == np.float32 else "int8"
    ctx.kernel(kind, qkernels.lookup(x_t.shape, table), [ctx.value(x_t)], out_t,
               out_dtype=out_dtype)


@converter("QUANTIZE")
def quantize(ctx: Context, op: TfOp) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    out = ctx.qinfo(out_t)
    offset = int8_offset(out.dtype)
    if x_t.dtype == "float32":
        lo, hi = lut.type_range(out.dtype)
        kernel = qkernels.quantize_float(x_t.shape, out.scale, out.zero + offset, lo, hi,
                                         offset)
        ctx.kernel("quantize", kernel, [ctx.value(x_t)], out_t)
        return
    x = ctx.qinfo(x_t)
    table = lut.requantize(x.dtype, x.scale, x.zero + int8_offset(x.dtype), out.dtype,
                           out.scale, out.zero + offset)
    _table(ctx, op, "requantize", table)


@converter("DEQUANTIZE")
def dequantize(ctx: Context, op: TfOp) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if out_t.dtype != "float32":
        raise Unsupported(f"dequantize to {out_t.dtype}")
    if x_t.is_const:  # float16 or int8 weights made float at load time: a constant

        data = x_t.data.astype(np.float32)
        if x_t.quant is not None and x_t.dtype != "float16":
            if not x_t.quant.per_tensor:
                shape = [1] * len(x_t.shape)
                shape[x_t.quant.axis] = -1
                scale = x_t.quant.scale.reshape(shape)
                zero = x_t.quant.zero.reshape(shape)
            else:
                scale, zero = x_t.quant.scale, x_t.quant.zero
            data = (scale * (x_t.data.astype(np.float64) - zero)).astype(np.float32)
        ctx.set(out_t, const(data.reshape(out_t.shape)))
        return
    x = ctx.qinfo(x_t)
    _table(ctx, op, "dequantize", lut.dequantize(x.dtype, x.scale, x.zero + int8_offset(x.dtype)))


_RELU_LIMITS = {"RELU": (0.0, None), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}


@converter("RELU", "RELU6", "RELU_N1_TO_1")
def relu(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    lo, hi = _RELU_LIMITS[op.code]
    if all_float(x_t, out_t):
        y = ctx.emit(relax.op.nn.relu(ctx.value(x_t))) if hi is None else \
            ctx.emit(relax.op.clip(ctx.value(x_t), lo, hi))
        ctx.set(out_t, y)
        return
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    table = lut.relu_x(x.dtype, x.scale, x.zero + int8_offset(x.dtype), out.dtype, out.scale,
                       out.zero + int8_offset(out.dtype), lo, hi)
    _table(ctx, op, op.code.lower(), table)


@converter("LEAKY_RELU")
def leaky_relu(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    alpha = float(op.options.Alpha())
    if all_float(x_t, out_t):
        ctx.emit(relax.op.nn.leakyrelu(ctx.value(x_t), alpha), out_t)
        return
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    table = lut.leaky_relu(x.dtype, x.scale, x.zero + int8_offset(x.dtype), out.dtype,
                           out.scale, out.zero + int8_offset(out.dtype), alpha)
    _table(ctx, op, "leaky_relu", table)


_FLOAT_UNARY = {"LOGISTIC": "sigmoid", "TANH": "tanh", "ABS": "abs", "RSQRT": "rsqrt",
                "SQRT": "sqrt", "EXP": "exp", "LOG": "log", "NEG": "negative",
                "FLOOR": "floor", "CEIL": "ceil", "SIN": "sin", "COS": "cos"}


_SIGMOID_OUTPUT = {"LOGISTIC": (1.0 / 256, 0), "TANH": (1.0 / 128, 128)}  # uint8 zero


def _sigmoid_table(ctx: Context, op: TfOp) -> None:
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    scale, zero = _SIGMOID_OUTPUT[op.code]
    if x.dtype != out.dtype or out.scale != scale or out.zero != zero - 128:
        raise Unsupported(f"output quantization must be scale {scale}, zero point "
                          f"{zero - 128} (int8) or {zero} (uint8)")
    fn = lut.logistic if op.code == "LOGISTIC" else lut.tanh
    try:
        table = fn(x.dtype, x.scale, x.zero + int8_offset(x.dtype), out.dtype)
    except ValueError as exc:
        raise Unsupported(str(exc)) from exc
    _table(ctx, op, op.code.lower(), table)


@converter(*_FLOAT_UNARY, "HARD_SWISH", "ELU", "LOG_SOFTMAX")
def float_unary(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if op.code in _SIGMOID_OUTPUT and not all_float(x_t, out_t):
        return _sigmoid_table(ctx, op)
    if not all_float(x_t, out_t):
        raise Unsupported("no integer kernel yet")
    x = ctx.value(x_t)
    if op.code == "HARD_SWISH":
        r6 = ctx.emit(relax.op.clip(relax.op.add(x, relax.const(np.float32(3))), 0.0, 6.0))
        y = ctx.emit(relax.op.divide(relax.op.multiply(x, r6), relax.const(np.float32(6))))
    elif op.code == "ELU":
        neg = ctx.emit(relax.op.subtract(relax.op.exp(x), relax.const(np.float32(1))))
        y = ctx.emit(relax.op.where(relax.op.greater(x, relax.const(np.float32(0))), x, neg))
    elif op.code == "LOG_SOFTMAX":
        y = ctx.emit(relax.op.nn.log_softmax(x, axis=-1))
    else:
        y = ctx.emit(getattr(relax.op, _FLOAT_UNARY[op.code])(x))
    ctx.set(out_t, y)
