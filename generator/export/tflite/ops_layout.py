"""Operators that move values without arithmetic: exact in every dtype.

Where TFLite lets the output's quantization differ from the input's (CONCATENATION), the
moved values are requantized with a table first."""

from __future__ import annotations

import numpy as np

from generator.export import qkernels
from generator.export.fixedpoint import round_half_away
from generator.export.tflite import lut
from generator.export.tflite.convert import (
    Context,
    Unsupported,
    all_float,
    const,
    converter,
    int8_offset,
)
from generator.export.tflite.model import TfOp, TfTensor


def _same_quant(ctx: Context, a: TfTensor, b: TfTensor) -> bool:
    if all_float(a, b) or a.quant is None or b.quant is None:
        return a.dtype == b.dtype
    return ctx.qinfo(a) == ctx.qinfo(b)


def _moved(ctx: Context, x_t: TfTensor, out_t: TfTensor, expr, rescale=lut.requantize):
    """`expr` (values of x_t) in out_t's quantization: a table where the two differ
    (`rescale` makes it: QUANTIZE's arithmetic unless the operator has its own)."""
    if _same_quant(ctx, x_t, out_t):
        return expr
    if x_t.dtype == "float32" or out_t.dtype == "float32":
        raise Unsupported(f"{x_t.dtype} input with a {out_t.dtype} output")
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    table = rescale(x.dtype, x.scale, x.zero + int8_offset(x.dtype), out.dtype,
                    out.scale, out.zero + int8_offset(out.dtype))
    from tvm import relax

    shape = tuple(int(d) for d in expr.ty.shape) if hasattr(expr, "ty") else x_t.shape
    kernel = qkernels.lookup(shape, table)
    gv = ctx.bb.add_func(kernel.func, "q_requantize")
    ctx.report.integer.append("requantize")
    return ctx.emit(relax.call_tir(gv, [expr, relax.const(table)],
                                   relax.TensorType(shape, "int8")))


def _layout(ctx: Context, op: TfOp, make) -> None:
    """out = make(input value), requantized where the output's quantization differs."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    y = ctx.emit(make(ctx.value(x_t)))
    ctx.set(out_t, _moved(ctx, x_t, out_t, y))
    if x_t.quant is not None:
        ctx.report.integer.append(op.code.lower())


@converter("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def reshape(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    out_t = ctx.out(op)
    _layout(ctx, op, lambda x: relax.op.reshape(x, out_t.shape))


@converter("TRANSPOSE")
def transpose(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    perm = [int(p) for p in ctx.const(ctx.need(op, 1), "the permutation").reshape(-1)]
    _layout(ctx, op, lambda x: relax.op.permute_dims(x, perm))


@converter("CONCATENATION")
def concatenation(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    out_t = ctx.out(op)
    parts = [ctx.need(op, i) for i in range(len(op.inputs))]
    axis = int(op.options.Axis()) % len(out_t.shape)
    if op.options is not None and int(op.options.FusedActivationFunction()) != 0:
        raise Unsupported("concatenation with a fused activation")
    values = [_moved(ctx, p, out_t, ctx.value(p), lut.concat_rescale) for p in parts]
    if out_t.quant is not None:
        shapes = [p.shape for p in parts]
        ctx.kernel("concat", qkernels.concat(shapes, axis), values, out_t)
        ctx.report.integer[-1] = "concatenation"
        return
    ctx.emit(relax.op.concat(values, axis=axis), out_t)


def _paddings(ctx: Context, op: TfOp) -> list[tuple[int, int]]:
    p = ctx.const(ctx.need(op, 1), "the paddings").astype(np.int64)
    return [(int(a), int(b)) for a, b in p.reshape(-1, 2)]


@converter("PAD", "PADV2")
def pad(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    widths = [v for pair in _paddings(ctx, op) for v in pair]
    value = 0.0
    if op.code == "PADV2" and ctx.arg(op, 2) is not None:
        c = ctx.need(op, 2)
        value = float(ctx.const(c, "the pad value").reshape(-1)[0])
        if c.dtype == "uint8" and c.quant is not None:
            value -= 128
    elif x_t.quant is not None:
        value = float(ctx.qinfo(x_t).zero)
    if x_t.quant is not None and op.code == "PAD" and not _same_quant(ctx, x_t, out_t):
        raise Unsupported("pad with different input and output quantization")
    _layout(ctx, op, lambda x: relax.op.nn.pad(x, widths, pad_value=value))


@converter("MIRROR_PAD")
def mirror_pad(ctx: Context, op: TfOp) -> None:
    """REFLECT (the edge not repeated) or SYMMETRIC (repeated): each padded axis gathers
    its source indices."""
    from tvm import relax

    x_t = ctx.need(op, 0)
    mode = "reflect" if int(op.options.Mode()) == 0 else "symmetric"
    pairs = _paddings(ctx, op)

    def make(x):
        for axis, (before, after) in enumerate(pairs):
            if before or after:
                idx = np.pad(np.arange(x_t.shape[axis]), (before, after), mode=mode)
                x = relax.op.take(x, relax.const(idx.astype(np.int32)), axis=axis)
        return x

    _layout(ctx, op, make)


@converter("SLICE")
def slice_(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t = ctx.need(op, 0)
    begin = [int(v) for v in ctx.const(ctx.need(op, 1), "begin").reshape(-1)]
    size = [int(v) for v in ctx.const(ctx.need(op, 2), "size").reshape(-1)]
    end = [d if s == -1 else b + s for b, s, d in zip(begin, size, x_t.shape, strict=True)]
    axes = list(range(len(begin)))
    _layout(ctx, op, lambda x: relax.op.strided_slice(x, axes, begin, end))


def _slice_indices(size: int, begin: int, end: int, stride: int, begin_masked: bool,
                   end_masked: bool, shrink: bool) -> list[int]:
    """The indices TFLite's strided slice reads along one axis (StartForAxis and
    StopForAxis: masks, negative indices counted from the end, clamping)."""
    if size == 0:
        return []
    if begin_masked:
        begin = -(1 << 31) if stride > 0 else (1 << 31) - 1
    if begin < 0:
        begin += size
    begin = min(max(begin, 0), size) if stride > 0 else min(max(begin, -1), size - 1)
    if shrink:
        return [begin]
    if end_masked:
        end = (1 << 31) - 1 if stride > 0 else -(1 << 31)
    if end < 0:
        end += size
    end = min(max(end, 0), size) if stride > 0 else min(max(end, -1), size - 1)
    return list(range(begin, end, stride))


@converter("STRIDED_SLICE")
def strided_slice(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    o = op.options
    if int(o.EllipsisMask()) or int(o.NewAxisMask()):
        raise Unsupported("ellipsis or new-axis masks")
    if hasattr(o, "Offset") and bool(o.Offset()):
        raise Unsupported("strided slice with offset")
    begin = [int(v) for v in ctx.const(ctx.need(op, 1), "begin").reshape(-1)]
    end = [int(v) for v in ctx.const(ctx.need(op, 2), "end").reshape(-1)]
    strides = [int(v) for v in ctx.const(ctx.need(op, 3), "strides").reshape(-1)]
    if len(begin) > len(x_t.shape) or 0 in strides:
        raise Unsupported("strided slice of more axes than the input has, or stride 0")
    picks = []
    for i, size in enumerate(x_t.shape):
        if i >= len(begin):
            picks.append(list(range(size)))
            continue
        picks.append(_slice_indices(size, begin[i], end[i], strides[i],
                                    bool(int(o.BeginMask()) >> i & 1),
                                    bool(int(o.EndMask()) >> i & 1),
                                    bool(int(o.ShrinkAxisMask()) >> i & 1)))

    def make(x):
        for axis, idx in enumerate(picks):
            size = x_t.shape[axis]
            if idx == list(range(size)):
                continue
            step = idx[1] - idx[0] if len(idx) > 1 else 1
            if idx and step > 0 and idx == list(range(idx[0], idx[-1] + 1, step)):
                x = relax.op.strided_slice(x, [axis], [idx[0]], [idx[-1] + 1], [step])
            else:
                x = relax.op.take(x, relax.const(np.array(idx, np.int32)), axis=axis)
        return relax.op.reshape(x, out_t.shape)

    _layout(ctx, op, make)


@converter("GATHER")
def gather(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t = ctx.need(op, 0)
    idx_t = ctx.need(op, 1)
    axis = int(op.options.Axis()) % len(x_t.shape)
    if int(op.options.BatchDims()):
        raise Unsupported("batch_dims")
    indices = ctx.value(idx_t)
    _layout(ctx, op, lambda x: relax.op.take(x, indices, axis=axis))


@converter("SPLIT", "SPLIT_V")
def split(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    if op.code == "SPLIT":
        x_t = ctx.need(op, 1)
        axis = int(ctx.const(ctx.need(op, 0), "the axis").reshape(-1)[0])
    else:
        x_t = ctx.need(op, 0)
        axis = int(ctx.const(ctx.need(op, 2), "the axis").reshape(-1)[0])
    axis %= len(x_t.shape)
    starts = np.cumsum([0] + [ctx.out(op, i).shape[axis] for i in range(len(op.outputs))])
    x = ctx.value(x_t)
    for i in range(len(op.outputs)):
        out_t = ctx.out(op, i)
        y = ctx.emit(relax.op.strided_slice(x, [axis], [int(starts[i])], [int(starts[i + 1])]))
        ctx.set(out_t, _moved(ctx, x_t, out_t, y))


@converter("PACK")
def pack(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    out_t = ctx.out(op)
    axis = int(op.options.Axis()) % len(out_t.shape)
    parts = []
    for i in range(len(op.inputs)):
        p = ctx.need(op, i)
        shape = list(p.shape)
        shape.insert(axis, 1)
        v = ctx.emit(relax.op.reshape(ctx.value(p), shape))
        parts.append(_moved(ctx, p, out_t, v))
    ctx.emit(relax.op.concat(parts, axis=axis), out_t)


@converter("UNPACK")
def unpack(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t = ctx.need(op, 0)
    axis = int(op.options.Axis()) % len(x_t.shape)
    x = ctx.value(x_t)
    for i in range(len(op.outputs)):
        out_t = ctx.out(op, i)
        y = ctx.emit(relax.op.strided_slice(x, [axis], [i], [i + 1]))
        y = ctx.emit(relax.op.reshape(y, out_t.shape))
        ctx.set(out_t, _moved(ctx, x_t, out_t, y))


@converter("SPACE_TO_DEPTH", "DEPTH_TO_SPACE")
def space_depth(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    b = int(op.options.BlockSize())
    n, h, w, c = x_t.shape

    def make(x):
        if op.code == "SPACE_TO_DEPTH":
            y = relax.op.reshape(x, (n, h // b, b, w // b, b, c))
            y = relax.op.permute_dims(y, [0, 1, 3, 2, 4, 5])
        else:
            y = relax.op.reshape(x, (n, h, w, b, b, c // (b * b)))
            y = relax.op.permute_dims(y, [0, 1, 3, 2, 4, 5])
        return relax.op.reshape(y, out_t.shape)

    _layout(ctx, op, make)


@converter("RESIZE_NEAREST_NEIGHBOR")
def resize_nearest(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    o = op.options
    n, h, w, c = x_t.shape
    oh, ow = out_t.shape[1], out_t.shape[2]
    align, half = bool(o.AlignCorners()), bool(o.HalfPixelCenters())

    def source(out_size: int, in_size: int) -> list[int]:
        """TFLite's GetNearestNeighbor: float32 scale and offset, TfLiteRound (half away
        from zero) with align_corners, floor otherwise."""
        f = np.float32
        scale = f(in_size - 1) / f(out_size - 1) if align and out_size > 1 else \
            f(in_size) / f(out_size)
        offset = f(0.5) if half else f(0.0)
        idx = []
        for i in range(out_size):
            v = f(f(f(i) + offset) * scale)
            v = round_half_away(v) if align else int(np.floor(v))
            idx.append(min(max(int(v), 0), in_size - 1))
        return idx

    rows = relax.const(np.array(source(oh, h), np.int32))
    cols = relax.const(np.array(source(ow, w), np.int32))
    _layout(ctx, op, lambda x: relax.op.take(relax.op.take(x, rows, axis=1), cols, axis=2))


@converter("SHAPE")
def shape(ctx: Context, op: TfOp) -> None:

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    # bound to a variable: a model output that is a bare constant fails in the importer
    ctx.emit(const(np.array(x_t.shape, dtype=out_t.dtype)), out_t)
