"""An inverted residual block in one kernel: expand (1x1) → depthwise (kxk) → project (1x1),
row by row, so the expanded tensors never exist whole (`export --memory small`).

MobileNetV2-style blocks expand a thin tensor six times before the depthwise convolution:
the expanded tensor (and the depthwise output) dominate a model's RAM. This kernel keeps
only a ring of `k` expanded rows and one depthwise output row: for each output row it
computes the expanded rows the depthwise window newly needs, the depthwise row from the
ring, then the projected row into the block's output. Each layer's arithmetic is the one
`qkernels._conv2d_clipped` does for it alone (TFLite's reference kernels): the same int32
accumulators, requantization and clamping, so the block's output is the three layers'
bytes. Nothing is computed twice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import te, tirx

from generator.export.qkernels import (
    BLOCK,
    MAX_STAGED_BYTES,
    Kernel,
    Requant,
    _func,
    requantize,
)


@dataclass(frozen=True)
class ConvLayer:
    """One int8 convolution as the TFLite importer computed it (weight zero point 0)."""

    x_shape: tuple[int, ...]
    weights: np.ndarray  # OHWI; depthwise [KH, KW, C]
    bias: np.ndarray  # the model's bias with the input zero point folded in: b − zp·Σw
    out_shape: tuple[int, ...]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]
    input_zero: int
    requant: Requant
    depthwise: bool


def _pointwise(layer: ConvLayer) -> bool:
    return (not layer.depthwise and tuple(layer.weights.shape[1:3]) == (1, 1)
            and tuple(layer.strides) == (1, 1) and not any(layer.pads)
            and tuple(layer.x_shape[1:3]) == tuple(layer.out_shape[1:3]))


def work_bytes(expand: ConvLayer, dw: ConvLayer) -> int:
    """The kernel's working rows: a ring of k expanded rows and one depthwise output row."""
    _, _, w_, ce = expand.out_shape
    return dw.weights.shape[0] * w_ * ce + dw.out_shape[2] * ce


def fusable(expand: ConvLayer, dw: ConvLayer, project: ConvLayer) -> bool:
    """Whether the three layers make a block this kernel computes, and fusing them saves
    RAM: batch 1; 1x1 expand and project (stride 1, no padding); a depthwise of multiplier 1
    without dilation between; per-channel or per-tensor requantization with TFLite's two
    roundings; the block's input, output and working rows together smaller than the
    expanded tensor (a block that does not expand is better off in place, layer by
    layer)."""
    layers = (expand, dw, project)
    if not (all(la.x_shape[0] == 1 and not la.requant.single_rounding for la in layers)
            and _pointwise(expand) and _pointwise(project) and dw.depthwise
            and tuple(dw.dilation) == (1, 1) and dw.weights.shape[2] == dw.x_shape[3]
            and tuple(expand.out_shape) == tuple(dw.x_shape)
            and tuple(dw.out_shape) == tuple(project.x_shape)):
        return False
    size = int(np.prod(expand.x_shape)) + int(np.prod(project.out_shape))
    return size + work_bytes(expand, dw) < int(np.prod(expand.out_shape))


class _Layer:
    """A layer's constants as kernel parameters, and its requantization in TIR."""

    def __init__(self, name: str, layer: ConvLayer, bias: np.ndarray, channels: int) -> None:
        self.layer = layer
        self.r = layer.requant
        shape = layer.weights.shape if layer.depthwise else (channels, layer.x_shape[3])
        self.w_array = layer.weights.reshape(shape).astype(np.int8)
        self.b_array = bias.astype(np.int32)
        self.w = te.placeholder(shape, "int8", f"w_{name}")
        self.b = te.placeholder((channels,), "int32", f"bias_{name}")
        self.placeholders = [self.w, self.b]
        self.constants = [self.w_array, self.b_array]
        if self.r.per_channel:
            self.placeholders += [te.placeholder((channels,), "int32", f"multiplier_{name}"),
                                  te.placeholder((channels,), "int8", f"shift_{name}")]
            self.constants += self.r.constants()

    def requantize(self, bufs: dict, acc, channel):
        """acc (int32) → the layer's int8 output."""
        return requantize(self.r, acc, channel, [bufs[q] for q in self.placeholders[2:]])


def inverted_residual(expand: ConvLayer, dw: ConvLayer, project: ConvLayer) -> Kernel:
    """The fused kernel: parameters x, the expand's, the depthwise's and the project's
    constants (weights, bias, per-channel multiplier and shift), the output; its working
    rows are a stack array up to MAX_STAGED_BYTES, else a scratch output (pool bytes)."""
    t = tirx
    i32 = "int32"
    _, h_, w_, cin = expand.x_shape
    ce = expand.out_shape[3]
    _, oh_, ow_, _ = dw.out_shape
    cout = project.out_shape[3]
    kh_, kw_ = dw.weights.shape[:2]
    sh, sw = dw.strides
    top, left = dw.pads[0], dw.pads[1]
    dw_bias, dw_zero = dw.bias.astype(np.int64), 0
    if any(dw.pads):  # as the clipped kernel: Σ (x − zp)·w over in-bounds taps + own bias
        dw_zero = dw.input_zero
        dw_bias = dw_bias + int(dw_zero) * dw.weights.astype(np.int64).sum(axis=(0, 1))
    e = _Layer("expand", expand, expand.bias, ce)
    d = _Layer("dw", dw, dw_bias, ce)
    p = _Layer("project", project, project.bias, cout)
    x = te.placeholder(expand.x_shape, "int8", "x")
    ins = [x, *e.placeholders, *d.placeholders, *p.placeholders]
    ring_bytes = kh_ * w_ * ce
    work_size = work_bytes(expand, dw)
    pooled = work_size > MAX_STAGED_BYTES
    be = next(b for b in (BLOCK, 2, 1) if ce % b == 0)
    bp = next(b for b in (BLOCK, 2, 1) if cout % b == 0)

    def loop(var, start, extent, body):
        return t.For(var, start, extent, t.ForKind.SERIAL, body)

    def c(value):
        return t.const(value, i32)

    def body(in_bufs, outs):
        bufs = dict(zip(ins, in_bufs, strict=True))
        xb, ob = in_bufs[0], outs[0]
        work = outs[1] if pooled else t.decl_buffer((work_size,), "int8", "work")
        acc = t.decl_buffer((BLOCK,), i32, "acc")
        r = t.Var("r", i32)

        def ring(row, col, ch):
            return (t.floormod(row, kh_) * w_ + col) * ce + ch

        def mac_block(block, start, count, term):
            """acc[0:block] = start(q); acc[q] += term(q, k) for k < count."""
            k = t.Var("k", i32)
            return t.SeqStmt([
                *(t.BufferStore(acc, start(q), [c(q)]) for q in range(block)),
                loop(k, c(0), count, t.SeqStmt([
                    t.BufferStore(acc, t.BufferLoad(acc, [c(q)]) + term(q, k), [c(q)])
                    for q in range(block)]))])

        def store_block(block, first, put):
            q = t.Var("q", i32)
            return loop(q, c(0), c(block), put(first + q, t.BufferLoad(acc, [q])))

        # Expanded rows [start, stop) the depthwise window of row r newly reaches.
        def reach(row):
            return t.max(c(0), t.min(c(h_), row * sh - top + kh_))

        er, ej, eb = (t.Var(v, i32) for v in ("er", "ej", "eb"))
        first_new = t.Select(r > 0, reach(r - 1), c(0))
        expand_rows = loop(er, first_new, reach(r) - first_new, loop(ej, c(0), c(w_), loop(
            eb, c(0), c(ce // be), t.SeqStmt([
                mac_block(be, lambda q: t.BufferLoad(bufs[e.b], [eb * be + q]), c(cin),
                          lambda q, k: t.Cast(i32, t.BufferLoad(xb, [0, er, ej, k])) * t.Cast(
                              i32, t.BufferLoad(bufs[e.w], [eb * be + q, k]))),
                store_block(be, eb * be, lambda ch, v: t.BufferStore(
                    work, e.requantize(bufs, v, ch), [ring(er, ej, ch)]))]))))

        dj, db = t.Var("dj", i32), t.Var("db", i32)
        rh, rw = t.Var("rh", i32), t.Var("rw", i32)
        h0, w0 = t.Var("h0", i32), t.Var("w0", i32)
        h_lo, h_hi, w_lo, w_hi = (t.Var(v, i32) for v in ("h_lo", "h_hi", "w_lo", "w_hi"))

        def dw_tap(q):
            ch = db * be + q
            value = t.Cast(i32, t.BufferLoad(work, [ring(h0 + rh, w0 + rw, ch)]))
            value = value - dw_zero if dw_zero else value
            return value * t.Cast(i32, t.BufferLoad(bufs[d.w], [rh, rw, ch]))

        dw_block = t.SeqStmt([
            *(t.BufferStore(acc, t.BufferLoad(bufs[d.b], [db * be + q]), [c(q)])
              for q in range(be)),
            loop(rh, h_lo, h_hi - h_lo, loop(rw, w_lo, w_hi - w_lo, t.SeqStmt([
                t.BufferStore(acc, t.BufferLoad(acc, [c(q)]) + dw_tap(q), [c(q)])
                for q in range(be)]))),
            store_block(be, db * be, lambda ch, v: t.BufferStore(
                work, d.requantize(bufs, v, ch), [ring_bytes + dj * ce + ch]))])
        dw_row = loop(dj, c(0), c(ow_), t.SeqStmt([
            t.LetStmt(h0, r * sh - top), t.LetStmt(w0, dj * sw - left),
            t.LetStmt(h_lo, t.max(-h0, c(0))), t.LetStmt(h_hi, t.max(t.min(h_ - h0, kh_),
                                                                     t.max(-h0, c(0)))),
            t.LetStmt(w_lo, t.max(-w0, c(0))), t.LetStmt(w_hi, t.max(t.min(w_ - w0, kw_),
                                                                     t.max(-w0, c(0)))),
            loop(db, c(0), c(ce // be), dw_block)]))

        pj, pb = t.Var("pj", i32), t.Var("pb", i32)
        project_row = loop(pj, c(0), c(ow_), loop(pb, c(0), c(cout // bp), t.SeqStmt([
            mac_block(bp, lambda q: t.BufferLoad(bufs[p.b], [pb * bp + q]), c(ce),
                      lambda q, k: t.Cast(i32, t.BufferLoad(
                          work, [ring_bytes + pj * ce + k])) * t.Cast(
                              i32, t.BufferLoad(bufs[p.w], [pb * bp + q, k]))),
            store_block(bp, pb * bp, lambda ch, v: t.BufferStore(
                ob, p.requantize(bufs, v, ch), [0, r, pj, ch]))])))
        allocs = [t.AllocBuffer(acc)] + ([] if pooled else [t.AllocBuffer(work)])
        return t.SeqStmt([*allocs, loop(r, c(0), c(oh_), t.SeqStmt(
            [expand_rows, dw_row, project_row]))])

    in_bufs = [t.decl_buffer(v.shape, v.dtype, f"{v.op.name}_buf") for v in ins]
    out_bufs = [t.decl_buffer(project.out_shape, "int8", "out_buf")]
    if pooled:
        out_bufs.append(t.decl_buffer((work_size,), "int8", "scratch_buf"))
    outs = te.extern([b.shape for b in out_bufs], ins, body, name="inverted_residual",
                     dtype="int8", in_buffers=in_bufs, out_buffers=out_bufs)
    func = _func([*ins, *(outs if isinstance(outs, list) else [outs])])
    roles = tuple(role for layer in (e, d, p) for role in
                  ("weights", "bias", "requant", "requant")[:len(layer.constants)])
    return Kernel(func, [*e.constants, *d.constants, *p.constants], roles=roles,
                  scratch=(work_size,) if pooled else None)
