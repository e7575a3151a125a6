"""A run of convolutions in one kernel, row by row (`export --memory small`), so the
tensors between them never exist whole.

The early layers of a vision network and the expanding blocks of a MobileNetV2 hold
tensors far larger than their inputs and outputs: these decide a model's RAM. A chain of
convolutions (regular or depthwise, any kernel size, stride, padding and dilation), each
read only by the next, is computed here one output row of its last layer at a time: each
earlier layer computes the rows the next one newly needs into a ring that holds just the
rows still to be read (the "halo" of a patch-based plan, kept instead of recomputed, so no
product is computed twice). The chain's input and output exist whole; everything between
costs its rings.

Each layer's arithmetic is the one `qkernels._conv2d_clipped` does for it alone (TFLite's
reference kernels): the same int32 accumulators over the in-bounds taps, requantization and
clamping, so the chain's output is its layers' bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import te, tirx

from generator.export.fixedpoint import accumulator_bound
from generator.export.qkernels import (
    BLOCK,
    MAX_STAGED_BYTES,
    Kernel,
    Requant,
    _func,
    in_place_form,
    requantize,
    tap_range,
    unfolded_bias,
)

MAX_CHAIN = 16  # layers in one kernel at most: its code and compile time stay small
KIND = "conv_chain"  # the kernel's kind: importers name its functions q_conv_chain, ...


@dataclass(frozen=True)
class ConvLayer:
    """One int8 convolution as the TFLite importer computed it (weight zero point 0)."""

    x_shape: tuple[int, ...]
    weights: np.ndarray  # OHWI; depthwise [KH, KW, C]
    bias: np.ndarray  # the model's bias with the input zero point folded in: b − zp·Σw
    out_shape: tuple[int, ...]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]
    input_zero: int
    requant: Requant
    depthwise: bool

    @property
    def taps(self) -> tuple[int, int]:
        return tuple(self.weights.shape[:2] if self.depthwise else self.weights.shape[1:3])

    def reach(self, rows, tir_min=min, tir_max=max,
              select=lambda cond, a, b: a if cond else b):
        """How many input rows (from the first) its output rows [0, rows) read (the
        arithmetic given as TIR for the kernel, Python's by default)."""
        extent = (self.taps[0] - 1) * self.dilation[0] + 1
        last = (rows - 1) * self.strides[0] - self.pads[0] + extent
        return select(rows > 0, tir_max(tir_min(last, self.x_shape[1]), 0), 0)

    @property
    def in_bytes(self) -> int:
        return int(np.prod(self.x_shape))

    @property
    def out_bytes(self) -> int:
        return int(np.prod(self.out_shape))

    def row_bytes(self) -> int:
        return self.out_shape[2] * self.out_shape[3]


def chainable(a: ConvLayer, b: ConvLayer) -> bool:
    """Whether `b` can follow `a` in a chain: `a`'s output is `b`'s input, batch 1,
    TFLite's two roundings (not the uint8 fully connected's one)."""
    return (tuple(a.out_shape) == tuple(b.x_shape)
            and all(la.x_shape[0] == 1 and not la.requant.single_rounding for la in (a, b)))


def ring_rows(layers: list[ConvLayer]) -> list[int]:
    """Rows in the ring of each layer's output but the last: at each step every layer
    computes the rows the next newly needs, then the next reads them; a ring holds from
    the first row the next layer's step reads to the last row computed."""
    n = len(layers)
    rings = [1] * (n - 1)
    done = [0] * n
    for r in range(layers[-1].out_shape[1]):
        need = [0] * n
        need[-1] = r + 1
        for i in range(n - 2, -1, -1):
            need[i] = layers[i + 1].reach(need[i + 1])
        for i in range(n - 1):
            reader = layers[i + 1]
            if need[i + 1] > done[i + 1]:
                first = max(0, done[i + 1] * reader.strides[0] - reader.pads[0])
                rings[i] = max(rings[i], need[i] - first)
        done = need
    return [min(ring, layer.out_shape[1]) for ring, layer in zip(rings, layers, strict=False)]


def work_bytes(layers: list[ConvLayer]) -> int:
    """The chain's working memory: the rings between its layers."""
    return sum(ring * layer.row_bytes() for ring, layer in zip(ring_rows(layers), layers,
                                                                strict=False))


def _pool_bytes(layers: list[ConvLayer], input_ours: bool) -> int:
    """Pool bytes a run of layers needs at its peak: alone, its output, and its input
    unless the layer writes over it; a chain, its rings and output, and its input. The
    caller's input buffer is not in the pool (`input_ours` False)."""
    first, last = layers[0], layers[-1]
    held = first.in_bytes if input_ours else 0
    if len(layers) > 1:
        return held + work_bytes(layers) + last.out_bytes
    if input_ours and in_place_form(first.x_shape, first.weights.shape, first.out_shape,
                                    first.strides, first.pads, first.depthwise) is not None:
        return max(first.in_bytes, first.out_bytes)
    return held + first.out_bytes


def chain_length(layers: list[ConvLayer], input_ours: bool) -> int:
    """How many of `layers` (each read only by the next) to compute as one chain now, 0 for
    none: the run is cut into single layers and chains so that the most pool bytes any
    piece needs is least (then the fewest layers in chains), and the first piece is the
    answer. `input_ours`: the first layer's input is in the pool, not the caller's."""
    layers = layers[:MAX_CHAIN]
    n = len(layers)
    best: list[tuple[int, int, int]] = [(0, 0, 0)] * (n + 1)  # (peak, chained, first piece)
    for i in range(n - 1, -1, -1):
        options = []
        for j in range(i + 1, n + 1):
            peak = _pool_bytes(layers[i:j], input_ours or i > 0)
            chained = (j - i if j - i > 1 else 0) + best[j][1]
            options.append((max(peak, best[j][0]), chained, j - i))
        best[i] = min(options)
    first = best[0][2]
    return first if first > 1 else 0


class _Layer:
    """A layer's constants as kernel parameters and its rows as TIR."""

    def __init__(self, index: int, layer: ConvLayer) -> None:
        self.i = index
        self.layer = layer
        self.requant = layer.requant.narrowed(
            accumulator_bound(layer.weights, layer.bias, layer.depthwise))
        cout = layer.out_shape[3]
        self.padded = any(layer.pads)
        bias = layer.bias
        self.zero = 0
        if self.padded:  # as the clipped kernel: Σ (x − zp)·w over in-bounds taps + own bias
            self.zero = int(layer.input_zero)
            bias = unfolded_bias(layer.weights, bias, self.zero, layer.depthwise)
        self.block = next(b for b in (BLOCK, 2, 1) if cout % b == 0)
        self.w = te.placeholder(layer.weights.shape, "int8", f"w{index}")
        self.b = te.placeholder((cout,), "int32", f"bias{index}")
        self.placeholders = [self.w, self.b]
        self.constants = [layer.weights.astype(np.int8), bias.astype(np.int32)]
        if layer.requant.per_channel:
            self.placeholders += [te.placeholder((cout,), "int32", f"multiplier{index}"),
                                  te.placeholder((cout,), "int8", f"shift{index}")]
            self.constants += layer.requant.constants()

    def roles(self) -> tuple[str, ...]:
        return ("weights", "bias", "requant", "requant")[:len(self.constants)]

    def rows(self, bufs: dict, acc, lo, hi, load, store):
        """Output rows [lo, hi): `load(h, w, c)` reads the layer's input (in bounds),
        `store(row, col, ch, value)` writes its output."""
        t = tirx
        i32 = "int32"
        la = self.layer
        _, h_, w_, cin = la.x_shape
        _, _, ow_, cout = la.out_shape
        kh_, kw_ = la.taps
        sh, sw = la.strides
        dh, dw = la.dilation
        top, left = la.pads[0], la.pads[1]
        mult = cout // cin if la.depthwise else 1
        block = self.block

        def var(name):
            return t.Var(f"{name}{self.i}", i32)

        def c(value):
            return t.const(value, i32)

        def loop(v, start, extent, body):
            return t.For(v, start, extent, t.ForKind.SERIAL, body)

        row, oj, cb, q = var("row"), var("oj"), var("cb"), var("q")
        rh, rw, rc, xv = var("rh"), var("rw"), var("rc"), var("xv")
        h0, w0 = var("h0"), var("w0")
        h_lo, h_hi, w_lo, w_hi = var("h_lo"), var("h_hi"), var("w_lo"), var("w_hi")

        def x_at(ch):
            value = t.Cast(i32, load(h0 + rh * dh, w0 + rw * dw, ch))
            return value - self.zero if self.zero else value

        def acc_add(slot, term):
            return t.BufferStore(acc, t.BufferLoad(acc, [c(slot)]) + term, [c(slot)])

        if la.depthwise:
            macs = []
            for s in range(block):
                out_c = cb * block + s
                ch = out_c if mult == 1 else t.floordiv(out_c, mult)
                macs.append(acc_add(s, x_at(ch) * t.Cast(
                    i32, t.BufferLoad(bufs[self.w], [rh, rw, out_c]))))
            taps = t.SeqStmt(macs)
        else:
            taps = loop(rc, c(0), c(cin), t.SeqStmt([t.LetStmt(xv, x_at(rc)), *(
                acc_add(s, xv * t.Cast(i32, t.BufferLoad(bufs[self.w],
                                                         [cb * block + s, rh, rw, rc])))
                for s in range(block))]))
        channel = cb * block + q
        quant = [bufs[p] for p in self.placeholders[2:]]
        per_block = t.SeqStmt([
            *(t.BufferStore(acc, t.BufferLoad(bufs[self.b], [cb * block + s]), [c(s)])
              for s in range(block)),
            loop(rh, h_lo, h_hi - h_lo, loop(rw, w_lo, w_hi - w_lo, taps)),
            loop(q, c(0), c(block), store(row, oj, channel, requantize(
                self.requant, t.BufferLoad(acc, [q]), channel, quant)))])
        hl, hh = tap_range(h0, dh, h_, kh_, self.padded)
        wl, wh = tap_range(w0, dw, w_, kw_, self.padded)
        position = t.SeqStmt([
            t.LetStmt(h0, row * sh - top), t.LetStmt(w0, oj * sw - left),
            t.LetStmt(h_lo, hl), t.LetStmt(h_hi, hh), t.LetStmt(w_lo, wl),
            t.LetStmt(w_hi, wh), loop(cb, c(0), c(cout // block), per_block)])
        return loop(row, lo, hi - lo, loop(oj, c(0), c(ow_), position))


def conv_chain(layers: list[ConvLayer]) -> Kernel:
    """The chain's kernel: parameters x, each layer's constants (weights, bias, per-channel
    multiplier and shift), the last layer's output; its rings are a stack array up to
    MAX_STAGED_BYTES, else a scratch output (pool bytes for the call only)."""
    t = tirx
    i32 = "int32"
    n = len(layers)
    rings = ring_rows(layers)
    offsets = [int(v) for v in np.cumsum([0] + [ring * la.row_bytes() for ring, la in
                                                 zip(rings, layers, strict=False)])]
    work_size = max(offsets[-1], 1)
    pooled = work_size > MAX_STAGED_BYTES
    parts = [_Layer(i, la) for i, la in enumerate(layers)]
    x = te.placeholder(layers[0].x_shape, "int8", "x")
    ins = [x, *(p for part in parts for p in part.placeholders)]

    def c(value):
        return t.const(value, i32)

    def reach(layer: ConvLayer, rows):
        return layer.reach(rows, t.min, t.max, lambda cond, a, b: t.Select(cond, a, c(b)))

    def ring_index(i, h, w, ch):
        _, h_, w_, c_ = layers[i].out_shape
        slot = h if rings[i] >= h_ else t.floormod(h, rings[i])
        return [offsets[i] + (slot * w_ + w) * c_ + ch]

    def body(in_bufs, outs):
        bufs = dict(zip(ins, in_bufs, strict=True))
        xb, ob = in_bufs[0], outs[0]
        work = outs[1] if pooled else t.decl_buffer((work_size,), "int8", "work")
        acc = t.decl_buffer((BLOCK,), i32, "acc")
        r = t.Var("r", i32)
        lo = [t.Var(f"lo{i}", i32) for i in range(n)]
        hi = [t.Var(f"hi{i}", i32) for i in range(n)]
        steps = []
        for i, part in enumerate(parts):
            if i == 0:
                def load(h, w, ch):
                    return t.BufferLoad(xb, [0, h, w, ch])
            else:
                def load(h, w, ch, i=i):
                    return t.BufferLoad(work, ring_index(i - 1, h, w, ch))
            if i == n - 1:
                def store(row, col, ch, value):
                    return t.BufferStore(ob, value, [0, row, col, ch])
            else:
                def store(row, col, ch, value, i=i):
                    return t.BufferStore(work, value, ring_index(i, row, col, ch))
            steps.append(part.rows(bufs, acc, lo[i], hi[i], load, store))
        # Each layer's rows this step, from the next layer's. They go through a small
        # array: bound as nested expressions, TVM's simplifier would expand them
        # exponentially in the chain's length.
        spans = t.decl_buffer((2 * n,), i32, "spans")
        bounds = [t.BufferStore(spans, r, [c(2 * n - 2)]),
                  t.BufferStore(spans, r + 1, [c(2 * n - 1)])]
        for i in range(n - 2, -1, -1):
            bounds += [t.BufferStore(spans, reach(layers[i + 1], t.BufferLoad(
                spans, [c(2 * i + 2 + k)])), [c(2 * i + k)]) for k in (0, 1)]
        binds = [t.LetStmt(v, t.BufferLoad(spans, [c(2 * i + k)]))
                 for i in range(n) for k, v in enumerate((lo[i], hi[i]))]
        step = t.SeqStmt([*bounds, *binds, *steps])
        allocs = [t.AllocBuffer(acc), t.AllocBuffer(spans)]
        allocs += [] if pooled else [t.AllocBuffer(work)]
        return t.SeqStmt([*allocs, t.For(r, c(0), c(layers[-1].out_shape[1]),
                                         t.ForKind.SERIAL, step)])

    in_bufs = [t.decl_buffer(v.shape, v.dtype, f"{v.op.name}_buf") for v in ins]
    out_bufs = [t.decl_buffer(layers[-1].out_shape, "int8", "out_buf")]
    if pooled:
        out_bufs.append(t.decl_buffer((work_size,), "int8", "scratch_buf"))
    outs = te.extern([b.shape for b in out_bufs], ins, body, name=KIND,
                     dtype="int8", in_buffers=in_bufs, out_buffers=out_bufs)
    func = _func([*ins, *(outs if isinstance(outs, list) else [outs])])
    return Kernel(func, [c_ for part in parts for c_ in part.constants],
                  roles=tuple(role for part in parts for role in part.roles()),
                  scratch=(work_size,) if pooled else None)
