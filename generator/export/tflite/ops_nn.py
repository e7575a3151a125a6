"""Convolutions, fully connected layers, pools and softmax."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from generator.accel.api import QuantizedOp
from generator.export import qkernels
from generator.export.conv_chain import KIND as CHAIN_KIND
from generator.export.conv_chain import (
    MAX_CHAIN,
    ConvLayer,
    chain_length,
    chainable,
    conv_chain,
)
from generator.export.fixedpoint import softmax_params
from generator.export.quantize import _requant as requantization
from generator.export.quantize import _requant_arrays, _zero_points
from generator.export.rowsplit import is_pointwise, split_row
from generator.export.tflite.convert import (
    UINT8_OFFSET,
    Context,
    Unsupported,
    activation_name,
    activation_range,
    all_float,
    converter,
    float_activation,
    padding,
)
from generator.export.tflite.model import TfOp, TfTensor


def _weights(ctx: Context, t: TfTensor, axis: int) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """int8 values, scales along `axis` (one per output channel, or one), the int8-domain
    weight zero point, and whether the file's weights were uint8."""
    q = ctx.const(t, "the weights")
    if t.quant is None:
        raise Unsupported("weights without quantization")
    if t.dtype == "uint8":
        if np.any(t.quant.zero != t.quant.zero[0]):
            raise Unsupported("uint8 weights with more than one zero point")
        mapped = (q.astype(np.int16) - UINT8_OFFSET).astype(np.int8)
        return mapped, t.quant.scale, int(t.quant.zero[0]) - UINT8_OFFSET, True
    if t.dtype != "int8":
        raise Unsupported(f"{t.dtype} weights")
    if np.any(t.quant.zero != 0):
        raise Unsupported("int8 weights with a nonzero zero point")
    if t.quant.scale.size > 1 and t.quant.axis != axis:
        raise Unsupported(f"weights quantized along dimension {t.quant.axis}")
    return q, t.quant.scale, 0, False


def _bias(ctx: Context, t: TfTensor | None, channels: int) -> np.ndarray:
    if t is None:
        return np.zeros(channels, np.int64)
    b = ctx.const(t, "the bias")
    if t.dtype != "int32":
        raise Unsupported(f"{t.dtype} bias")
    if t.quant is not None and np.any(t.quant.zero != 0):
        raise Unsupported("bias with a nonzero zero point")
    return b.reshape(-1).astype(np.int64)


def _scales(scales: np.ndarray, channels: int) -> np.ndarray:
    return np.repeat(scales, channels) if scales.size == 1 else scales


@dataclass(frozen=True)
class _ConvOp:
    """A CONV_2D or DEPTHWISE_CONV_2D's tensors and geometry, as the file gives them."""

    x_t: TfTensor
    w_t: TfTensor
    b_t: TfTensor | None
    out_t: TfTensor
    depthwise: bool
    strides: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]
    act: str

    @classmethod
    def read(cls, ctx: Context, op: TfOp) -> _ConvOp:
        x_t, w_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
        o = op.options
        strides = (int(o.StrideH()), int(o.StrideW()))
        dilation = (int(o.DilationHFactor()), int(o.DilationWFactor()))
        if len(x_t.shape) != 4 or len(w_t.shape) != 4:
            raise Unsupported("a convolution that is not 2-D NHWC")
        pads = padding(o, (x_t.shape[1], x_t.shape[2]), (w_t.shape[1], w_t.shape[2]),
                       strides, dilation)
        return cls(x_t, w_t, ctx.arg(op, 2), out_t, op.code == "DEPTHWISE_CONV_2D", strides,
                   dilation, pads, activation_name(o))


@converter("CONV_2D", "DEPTHWISE_CONV_2D")
def conv2d(ctx: Context, op: TfOp) -> None:
    c = _ConvOp.read(ctx, op)
    x_t, w_t, b_t, out_t = c.x_t, c.w_t, c.b_t, c.out_t
    depthwise, strides, dilation, pads, act = c.depthwise, c.strides, c.dilation, c.pads, c.act
    if all_float(x_t, w_t, b_t, out_t):
        return _float_conv(ctx, op, x_t, w_t, b_t, out_t, strides, dilation, pads, depthwise,
                           act)
    layer, w_zero, bias = _int8_conv(ctx, op)
    if not w_zero and _conv_chain(ctx, op, layer):
        return
    x = ctx.qinfo(x_t)
    cin, cout = x_t.shape[3], out_t.shape[3]
    weights, adjusted, requant = layer.weights, layer.bias, layer.requant
    kind = "depthwise_conv2d" if depthwise else "conv2d"
    if not depthwise and strides == (1, 1) and not any(pads) \
            and is_pointwise(x_t.shape, w_t.shape, out_t.shape):
        row = split_row()
        if row is not None and 0 < row < x_t.shape[1]:
            return _split_conv(ctx, x_t, out_t, weights, adjusted, requant, x.zero, w_zero,
                               row)
    kernel = qkernels.conv2d_nhwc(x_t.shape, weights, adjusted, out_t.shape, strides, pads,
                                  dilation, x.zero, requant, depthwise, w_zero)
    qop = None
    if not w_zero and x_t.shape[0] == 1:
        qop = QuantizedOp(kind, (x_t.shape,), out_t.shape, {
            "strides": strides, "padding": pads, "dilation": dilation,
            "depth_multiplier": cout // cin if depthwise else 1, **_zero_points(x, requant)},
            {"weights": weights.astype(np.int8), "bias": bias.astype(np.int32),
             **_requant_arrays(requant, cout)})
    ctx.kernel(kind, kernel, [ctx.value(x_t)], out_t, op=qop)


def _int8_conv(ctx: Context, op: TfOp) -> tuple[ConvLayer, int, np.ndarray]:
    """An integer CONV_2D or DEPTHWISE_CONV_2D as our kernels take it: the layer (weights
    as integers, the input zero point folded into the bias), the weight zero point (uint8
    models), the model's own bias."""
    c = _ConvOp.read(ctx, op)
    x_t, w_t, b_t, out_t = c.x_t, c.w_t, c.b_t, c.out_t
    depthwise, strides, dilation, pads = c.depthwise, c.strides, c.dilation, c.pads
    k_hw = (w_t.shape[1], w_t.shape[2])
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    cin, cout = x_t.shape[3], out_t.shape[3]
    if depthwise:
        if w_t.shape[0] != 1 or w_t.shape[3] != cout:
            raise Unsupported(f"depthwise weights of shape {list(w_t.shape)}")
        q, scales, w_zero, w_uint8 = _weights(ctx, w_t, 3)
        groups_ok = cout % cin == 0
        if not groups_ok:
            raise Unsupported("depthwise output channels not a multiple of the input's")
        sums = (q.astype(np.int64) - w_zero).reshape(-1, cout).sum(axis=0)
        weights = q.reshape(k_hw[0], k_hw[1], cout).astype(np.int64)
    else:
        if w_t.shape[3] != cin:
            raise Unsupported(f"grouped convolution ({cin // max(w_t.shape[3], 1)} groups)")
        q, scales, w_zero, w_uint8 = _weights(ctx, w_t, 0)
        sums = (q.astype(np.int64) - w_zero).reshape(cout, -1).sum(axis=1)
        weights = q.astype(np.int64)
    bias = _bias(ctx, b_t, cout)
    requant = requantization(x.scale, _scales(scales, cout), out.scale, out.zero,
                             activation_range(c.act, out.scale, out.zero), uint8=w_uint8)
    layer = ConvLayer(tuple(x_t.shape), weights, bias - x.zero * sums, tuple(out_t.shape),
                      strides, pads, dilation, x.zero, requant, depthwise)
    return layer, w_zero, bias


def _conv_chain(ctx: Context, op: TfOp, first: ConvLayer) -> bool:
    """With `--memory small`, a run of int8 convolutions starting at `op`, each read only
    by the next, becomes one kernel (generator/export/conv_chain.py) that computes them
    row by row, when that needs less RAM than the layers one at a time; the later
    operators are then done. False when no chain applies (the layer is converted alone)."""
    if not qkernels.in_place_enabled():
        return False
    layers, ops = [first], [op]
    while len(layers) < MAX_CHAIN:
        reader = ctx.sole_reader(ops[-1].outputs[0])
        if reader is None or reader.code not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            break
        try:
            layer, w_zero, _ = _int8_conv(ctx, reader)
        except Unsupported:
            break
        if w_zero or not chainable(layers[-1], layer):
            break
        layers.append(layer)
        ops.append(reader)
    n = chain_length(layers, input_ours=ops[0].inputs[0] not in ctx.model.inputs)
    if not n:
        return False
    kernel = conv_chain(layers[:n])
    ctx.kernel(CHAIN_KIND, kernel, [ctx.value(ctx.need(op, 0))], ctx.out(ops[n - 1]))
    ctx.fused(op, *ops[1:n])
    return True


def _split_conv(ctx: Context, x_t: TfTensor, out_t: TfTensor, weights, bias, requant,
                x_zero: int, w_zero: int, row: int) -> None:
    """A pointwise convolution over input rows [0, row) and [row, H), joined
    (generator/export/rowsplit.py: the order of the calls is what a pipeline cuts)."""
    n, h, w, _ = x_t.shape
    x = ctx.value(x_t)
    parts = []
    for start, stop in ((0, row), (row, h)):
        # opaque: FuseOps would fuse the copies back into the convolutions, one call again
        part = qkernels.rows(x_t.shape, start, stop).with_attr(
            "op_pattern", qkernels.OP_PATTERN_OPAQUE)
        shape = (n, stop - start, *x_t.shape[2:])
        parts.append((ctx.kernel("rows", part, [x], out_t, out_shape=shape, set_out=False),
                      stop - start))
    outs = []
    for value, height in parts:
        shape = (n, height, w, out_t.shape[3])
        kernel = qkernels.conv2d_nhwc((n, height, w, x_t.shape[3]), weights, bias, shape,
                                      (1, 1), (0, 0, 0, 0), (1, 1), x_zero, requant, False,
                                      w_zero)
        outs.append((ctx.kernel("conv2d", kernel, [value], out_t, out_shape=shape,
                                set_out=False), shape))
    join = qkernels.concat([shape for _, shape in outs], 1).with_attr(
        "op_pattern", qkernels.OP_PATTERN_OPAQUE)
    ctx.kernel("concat", join, [value for value, _ in outs], out_t)


def _float_conv(ctx: Context, op: TfOp, x_t, w_t, b_t, out_t, strides, dilation, pads,
                depthwise: bool, act: str) -> None:
    from tvm import relax

    w = ctx.const(w_t, "the weights")
    cin = x_t.shape[3]
    if depthwise:  # [1, KH, KW, Cout] → OIHW with groups = Cin
        cout = w_t.shape[3]
        weights = np.transpose(w.reshape(w.shape[1], w.shape[2], cout), (2, 0, 1))[:, None]
        groups = cin
    else:
        weights = np.transpose(w, (0, 3, 1, 2))
        groups = cin // w_t.shape[3]
    y = ctx.emit(relax.op.nn.conv2d(
        ctx.value(x_t), relax.const(np.ascontiguousarray(weights, np.float32)),
        strides=strides, padding=pads, dilation=dilation, groups=groups,
        data_layout="NHWC", kernel_layout="OIHW", out_layout="NHWC"))
    if b_t is not None:
        y = ctx.emit(relax.op.add(y, ctx.value(b_t)))
    ctx.set(out_t, float_activation(ctx, y, act))


@converter("FULLY_CONNECTED")
def fully_connected(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, w_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    b_t = ctx.arg(op, 2)
    o = op.options
    if o is not None and int(o.WeightsFormat()) != 0:
        raise Unsupported("shuffled weights")
    if len(w_t.shape) != 2:
        raise Unsupported(f"weights of shape {list(w_t.shape)}")
    units, depth = w_t.shape
    total = int(np.prod(x_t.shape))
    if total % depth:
        raise Unsupported(f"input of {total} elements for {depth} inputs per unit")
    batch = total // depth
    x = ctx.value(x_t)
    if x_t.shape != (batch, depth):
        x = ctx.emit(relax.op.reshape(x, (batch, depth)))
    act = activation_name(o)
    if all_float(x_t, w_t, b_t, out_t):
        w = ctx.const(w_t, "the weights")
        y = ctx.emit(relax.op.matmul(x, relax.const(np.ascontiguousarray(w.T))))
        if b_t is not None:
            y = ctx.emit(relax.op.add(y, ctx.value(b_t)))
        y = float_activation(ctx, y, act)
    else:
        xi, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
        q, scales, w_zero, w_uint8 = _weights(ctx, w_t, 0)
        q = q.astype(np.int64)
        bias = _bias(ctx, b_t, units)
        adjusted = bias - xi.zero * (q - w_zero).sum(axis=1)
        # per-tensor weights: TFLite multiplies input and weight scales in float32 first
        # (GetQuantizedConvolutionMultipler), per-channel ones in double
        requant = requantization(xi.scale, _scales(scales, units), out.scale, out.zero,
                                 activation_range(act, out.scale, out.zero),
                                 uint8=w_uint8 or scales.size == 1)
        if w_uint8:  # TFLite's uint8 fully connected rounds once (per-tensor)
            if requant.per_channel:
                raise Unsupported("uint8 weights with per-channel scales")
            requant = replace(requant, single_rounding=True)
        kernel = qkernels.dense(batch, q, adjusted, requant, w_zero)
        qop = None
        if not w_zero:
            qop = QuantizedOp("dense", ((batch, depth),), (batch, units),
                              _zero_points(xi, requant),
                              {"weights": q.astype(np.int8), "bias": bias.astype(np.int32),
                               **_requant_arrays(requant, units)})
        y = ctx.kernel("dense", kernel, [x], out_t, out_shape=(batch, units), op=qop,
                       set_out=False)
    if out_t.shape != (batch, units):
        y = ctx.emit(relax.op.reshape(y, out_t.shape))
    ctx.set(out_t, y)


def _pool_geometry(op: TfOp, x_t: TfTensor):
    o = op.options
    pool = (int(o.FilterHeight()), int(o.FilterWidth()))
    strides = (int(o.StrideH()), int(o.StrideW()))
    pads = padding(o, (x_t.shape[1], x_t.shape[2]), pool, strides, (1, 1))
    return pool, strides, pads, activation_name(o)


@converter("AVERAGE_POOL_2D")
def average_pool(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    pool, strides, pads, act = _pool_geometry(op, x_t)
    if all_float(x_t, out_t):
        y = ctx.emit(relax.op.nn.avg_pool2d(ctx.value(x_t), pool, strides, pads,
                                            layout="NHWC", count_include_pad=False))
        ctx.set(out_t, float_activation(ctx, y, act))
        return
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    if (x.scale, x.zero) != (out.scale, out.zero):
        raise Unsupported("average pool with different input and output quantization")
    offset = UINT8_OFFSET if x.dtype == "uint8" else 0
    lo, hi = activation_range(act, out.scale, out.zero)
    kernel = qkernels.avg_pool2d_nhwc(x_t.shape, out_t.shape, pool, strides, pads, lo, hi,
                                      offset=offset)
    qop = None
    if not offset:
        qop = QuantizedOp("avg_pool2d", (x_t.shape,), out_t.shape, {
            "pool_size": pool, "strides": strides, "padding": pads, "act_min": lo,
            "act_max": hi})
    ctx.kernel("avg_pool2d", kernel, [ctx.value(x_t)], out_t, op=qop)


@converter("MAX_POOL_2D")
def max_pool(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    pool, strides, pads, act = _pool_geometry(op, x_t)
    # padded positions never win: the pad value is the dtype's lowest
    y = ctx.emit(relax.op.nn.max_pool2d(ctx.value(x_t), pool, strides, pads, layout="NHWC"))
    if all_float(x_t, out_t):
        ctx.set(out_t, float_activation(ctx, y, act))
        return
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    if (x.scale, x.zero) != (out.scale, out.zero):
        raise Unsupported("max pool with different input and output quantization")
    lo, hi = activation_range(act, out.scale, out.zero)
    if (lo, hi) != (-128, 127):
        y = ctx.emit(relax.op.clip(y, lo, hi))
    ctx.report.integer.append("max_pool2d")
    ctx.set(out_t, y)


@converter("SOFTMAX")
def softmax(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    beta = float(op.options.Beta()) if op.options is not None else 1.0
    if all_float(x_t, out_t):
        x = ctx.value(x_t)
        if beta != 1.0:
            x = ctx.emit(relax.op.multiply(x, relax.const(np.float32(beta))))
        ctx.emit(relax.op.nn.softmax(x, axis=-1), out_t)
        return
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    # uint8 runs the same arithmetic: the differences from the row maximum are the same,
    # and a uint8 output (zero point 0) is the int8 one + 128
    if x.dtype != out.dtype:
        raise Unsupported(f"softmax from {x.dtype} to {out.dtype}")
    if out.scale != 1.0 / 256 or out.zero != -128:
        raise Unsupported("softmax output must have scale 1/256 and the type's lowest value "
                          "as zero point")
    try:
        multiplier, shift, diff_min = softmax_params(x.scale, beta)
    except ValueError as exc:
        raise Unsupported(str(exc)) from exc
    shape = x_t.shape
    qop = None if x.dtype == "uint8" else QuantizedOp("softmax", (shape,), shape, {
        "multiplier": multiplier, "shift": shift, "diff_min": diff_min,
        "input_zero_point": x.zero, "output_zero_point": out.zero})
    ctx.kernel("softmax", qkernels.softmax(shape, multiplier, shift, diff_min),
               [ctx.value(x_t)], out_t, op=qop)
