"""TFLite's `TFLite_Detection_PostProcess` custom operator (the SSD tail) as one kernel.

The kernel follows TFLite's detection_postprocess kernel step by step, in the same float
arithmetic: the box encodings decoded against the anchors (center-size, in double as TFLite
does), then non-maximum suppression, fast (each anchor ranked by its best classes, one
suppression over all anchors) or regular (one suppression per class, the results merged
stably by score). Candidates are taken greedily, the highest score first (ties: the lowest
anchor), without sorting: the same selection as TFLite's stable sort and scan. Several
classes per detection are ordered as TFLite's std::partial_sort (libstdc++'s heap) orders
them, equal scores included. uint8 inputs are dequantized inside; the anchors, a constant,
are dequantized at export (int8 is refused: TFLite's kernel fails on it). Slots past the
detections found are zero (TFLite's fast path leaves them as they were). The scratch arrays
(decoded boxes, per-anchor scores and flags: about 21 bytes an anchor) are local arrays of
the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from generator.export.tflite.convert import (
    Context,
    Unsupported,
    const,
    converter,
)
from generator.export.tflite.model import TfOp, TfTensor

I32, F32, F64 = "int32", "float32", "float64"
MAX_ANCHORS = 1 << 16
# TFLite's default when the options leave detections_per_class out
DEFAULT_DETECTIONS_PER_CLASS = 100


@dataclass(frozen=True)
class Options:
    """The operator's flexbuffer options, as TFLite's kernel reads them."""

    max_detections: int
    max_classes_per_detection: int
    detections_per_class: int
    use_regular_nms: bool
    score_threshold: float  # float32 values
    iou_threshold: float
    num_classes: int
    scales: tuple[float, float, float, float]  # y, x, h, w


def read_options(raw: bytes) -> Options:
    """The options map of the operator's custom options (flexbuffer), or Unsupported."""
    from flatbuffers import flexbuffers

    if not raw:
        raise Unsupported("the operator has no options")
    try:
        root = flexbuffers.GetRoot(bytearray(raw))
        if not root.IsMap:
            raise Unsupported("the options are not a flexbuffer map")
        m = root.AsMap
        values = {str(k): m[str(k)] for k in m.Keys.Value}
    except Unsupported:
        raise
    except Exception as exc:  # a damaged flexbuffer raises anything
        raise Unsupported(f"unreadable options ({type(exc).__name__})") from exc

    def number(key: str, kind: type, default=None):
        ref = values.get(key)
        if ref is None or ref.IsNull:
            if default is None:
                raise Unsupported(f"option '{key}' is missing")
            return default
        if ref.IsBool:
            return kind(ref.AsBool)
        if ref.IsInt:
            return kind(ref.AsInt)
        if ref.IsFloat:
            return kind(ref.AsFloat)
        raise Unsupported(f"option '{key}' is not a number")

    def f32(key: str) -> float:
        return float(np.float32(number(key, float)))

    def i32(key: str, default=None) -> int:
        value = number(key, float, default)
        if not -2**31 <= value < 2**31:
            raise Unsupported(f"option '{key}' is out of range")
        return int(value)

    return Options(
        max_detections=i32("max_detections"),
        max_classes_per_detection=i32("max_classes_per_detection"),
        detections_per_class=i32("detections_per_class", DEFAULT_DETECTIONS_PER_CLASS),
        use_regular_nms=bool(number("use_regular_nms", float, 0.0)),
        score_threshold=f32("nms_score_threshold"),
        iou_threshold=f32("nms_iou_threshold"),
        num_classes=i32("num_classes"),
        scales=(f32("y_scale"), f32("x_scale"), f32("h_scale"), f32("w_scale")))


@dataclass(frozen=True)
class Plan:
    """Everything the kernel is built from: shapes, input forms and options."""

    anchors: int  # N
    box_depth: int  # the encodings' last dimension (≥ 4: keypoints follow)
    columns: int  # class predictions' last dimension (num_classes + background)
    box_zero: int | None  # int8-domain zero point of quantized encodings, None: float32
    class_zero: int | None  # the same for the class predictions
    opts: Options

    @property
    def classes(self) -> int:
        return self.opts.num_classes

    @property
    def label_offset(self) -> int:
        return self.columns - self.opts.num_classes

    @property
    def per_anchor(self) -> int:
        """Classes reported per detection in the fast path."""
        return min(self.opts.max_classes_per_detection, self.opts.num_classes)

    @property
    def slots(self) -> int:
        return self.opts.max_detections * self.opts.max_classes_per_detection


def _input_form(ctx: Context, t: TfTensor, what: str) -> int | None:
    """None for float32, else the int8-domain zero point of a uint8 tensor."""
    if t.dtype == "float32" and t.quant is None:
        return None
    if t.dtype == "uint8" and t.quant is not None:
        return ctx.qinfo(t).zero
    raise Unsupported(f"{what} of {t.describe()} (TFLite's kernel takes float32 or uint8)")


def _anchors(t: TfTensor, box_quantized: bool, n: int) -> np.ndarray:
    """The anchors (y, x, h, w) as float32, dequantized as TFLite does."""
    if t.data is None:
        raise Unsupported("the anchors are not a constant")
    if t.shape != (n, 4):
        raise Unsupported(f"anchors of shape {list(t.shape)} for {n} boxes")
    if box_quantized:  # TFLite reads them as uint8 with their own parameters
        if t.dtype != "uint8" or t.quant is None or not t.quant.per_tensor:
            raise Unsupported(f"{t.describe()} anchors with uint8 box encodings")
        zero, scale = np.float32(t.quant.z), np.float32(t.quant.s)
        values = (t.data.astype(np.float32) - zero) * scale
    else:
        if t.dtype != "float32":
            raise Unsupported(f"{t.describe()} anchors with float32 box encodings")
        values = t.data.astype(np.float32)
    if np.any(values[:, 2:] < 0) or not np.all(np.isfinite(values)):
        raise Unsupported("anchors with a negative or non-finite size (TFLite rejects "
                          "the boxes they decode to)")
    return np.ascontiguousarray(values, np.float32)


def plan(ctx: Context, op: TfOp) -> tuple[Plan, np.ndarray]:
    """Check the operator against what TFLite's kernel accepts."""
    if len(op.inputs) != 3 or len(op.outputs) != 4:
        raise Unsupported(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs "
                          "(3 and 4 expected)")
    opts = read_options(op.custom_options)
    boxes, scores = ctx.need(op, 0), ctx.need(op, 1)
    if len(boxes.shape) != 3 or boxes.shape[0] != 1 or boxes.shape[2] < 4:
        raise Unsupported(f"box encodings of shape {list(boxes.shape)} ([1, N, ≥4] expected)")
    n = boxes.shape[1]
    if not 1 <= n <= MAX_ANCHORS:
        raise Unsupported(f"{n} anchors")
    if len(scores.shape) != 3 or scores.shape[:2] != (1, n):
        raise Unsupported(f"class predictions of shape {list(scores.shape)} for {n} boxes")
    columns = scores.shape[2]
    if opts.num_classes < 1 or columns - opts.num_classes not in (0, 1):
        raise Unsupported(f"num_classes {opts.num_classes} with {columns} score columns")
    if opts.max_detections < 1 or opts.max_classes_per_detection < 1:
        raise Unsupported("max_detections and max_classes_per_detection must be positive")
    if opts.use_regular_nms and opts.detections_per_class < 1:
        raise Unsupported("detections_per_class must be positive")
    if not 0.0 < opts.iou_threshold <= 1.0:
        raise Unsupported(f"nms_iou_threshold {opts.iou_threshold} (TFLite requires (0, 1])")
    if any(s == 0.0 for s in opts.scales):
        raise Unsupported("a zero box scale")
    box_zero = _input_form(ctx, boxes, "box encodings")
    class_zero = _input_form(ctx, scores, "class predictions")
    anchors = _anchors(ctx.need(op, 2), box_zero is not None, n)
    p = Plan(n, boxes.shape[2], columns, box_zero, class_zero, opts)
    shapes = [(1, p.slots, 4), (1, p.slots), (1, p.slots), (1,)]
    for i, want in enumerate(shapes):
        out = ctx.out(op, i)
        if out.dtype != "float32" or out.quant is not None or out.shape != want:
            raise Unsupported(f"output {i} of {out.describe()} {list(out.shape)} "
                              f"(float32 {list(want)} expected)")
    return p, anchors


def _params(p: Plan, boxes: TfTensor, scores: TfTensor) -> np.ndarray:
    """The kernel's float constants, float32 values held as float64 (C literals would
    round them): y, x, h, w scales, box and class scales, score and IoU thresholds."""
    def scale(t: TfTensor) -> float:
        return float(np.float32(t.quant.s)) if t.quant is not None else 1.0

    o = p.opts
    return np.array([*o.scales, scale(boxes), scale(scores), o.score_threshold,
                     o.iou_threshold], np.float64)


@converter("TFLite_Detection_PostProcess")
def detection_postprocess(ctx: Context, op: TfOp) -> None:
    from tvm import relax

    p, anchors = plan(ctx, op)
    boxes, scores = ctx.need(op, 0), ctx.need(op, 1)
    params = _params(p, boxes, scores)
    func = build_kernel(p)
    gv = ctx.bb.add_func(func, "detection_postprocess")
    outs = [ctx.out(op, i) for i in range(4)]
    call = relax.call_tir(gv, [ctx.value(boxes), ctx.value(scores), const(anchors),
                               const(params)],
                          [relax.TensorType(t.shape, "float32") for t in outs])
    result = ctx.emit(call)
    for i, t in enumerate(outs):
        ctx.emit(relax.TupleGetItem(result, i), t)
    ctx.report.constant_bytes["weights"] += anchors.nbytes
    ctx.report.constant_bytes["requant"] += params.nbytes


# ---- the kernel --------------------------------------------------------------------------

class _Writer:
    """TIR statements of the kernel: loops, conditions and small scratch arrays."""

    def __init__(self, p: Plan, ins, outs) -> None:
        from tvm import tirx

        self.t = tirx
        self.p = p
        self.box, self.cls, self.anchor, self.prm = ins
        self.out_boxes, self.out_classes, self.out_scores, self.out_num = outs
        n, d = p.anchors, p.opts.max_detections
        buf = tirx.decl_buffer
        self.decoded = buf((n * 4,), F32, "decoded")  # ymin, xmin, ymax, xmax per anchor
        self.active = buf((n,), "int8", "active")
        self.fs = buf((8,), F32, "fs")  # float scratch
        self.st = buf((4,), I32, "st")  # int state: best, count, found, position
        self.buffers = [self.decoded, self.active, self.fs, self.st]
        if p.opts.use_regular_nms:
            self.res_score = buf((d,), F32, "res_score")
            self.res_anchor = buf((d,), I32, "res_anchor")
            self.res_class = buf((d,), I32, "res_class")
            self.buffers += [self.res_score, self.res_anchor, self.res_class]
        else:
            self.max_score = buf((n,), F32, "max_score")
            self.best_class = buf((n * p.per_anchor,), I32, "best_class")
            self.selected = buf((d,), I32, "selected")
            self.order = buf((p.classes,), I32, "order")  # an anchor's classes, heap order
            self.hs = buf((6,), I32, "hs")  # heap state: hole, child, top, value, parent
            self.buffers += [self.max_score, self.best_class, self.selected, self.order,
                             self.hs]
        self._vars = 0

    # ---- small builders ------------------------------------------------------------------

    def i(self, v: int):
        return self.t.const(v, I32)

    def var(self, name: str):
        self._vars += 1
        return self.t.Var(f"{name}{self._vars}", I32)

    def loop(self, extent, body_of):
        var = self.var("i")
        extent = self.i(extent) if isinstance(extent, int) else extent
        return self.t.For(var, self.i(0), extent, self.t.ForKind.SERIAL, body_of(var))

    def seq(self, *stmts):
        flat = [s for s in stmts if s is not None]
        return flat[0] if len(flat) == 1 else self.t.SeqStmt(flat)

    def when(self, cond, then, otherwise=None):
        return self.t.IfThenElse(cond, then, otherwise)

    def load(self, buf, index):
        return self.t.BufferLoad(buf, [self.i(index) if isinstance(index, int) else index])

    def store(self, buf, value, index):
        return self.t.BufferStore(buf, value, [self.i(index) if isinstance(index, int)
                                               else index])

    def param(self, k: int, dtype: str = F32):
        value = self.load(self.prm, k)
        return value if dtype == F64 else self.t.Cast(dtype, value)

    def f32(self, v: float):
        return self.t.const(v, F32)

    # ---- the inputs as float32 -----------------------------------------------------------

    def _dequant(self, value, zero: int | None, k: int):
        if zero is None:
            return value
        t = self.t
        return t.Cast(F32, t.Cast(I32, value) - self.i(zero)) * self.param(k)

    def score(self, anchor, column):
        """The dequantized class prediction of `anchor` at score `column`."""
        v = self.t.BufferLoad(self.cls, [self.i(0), anchor, column])
        return self._dequant(v, self.p.class_zero, 5)

    def class_score(self, anchor, cls):
        return self.score(anchor, cls + self.i(self.p.label_offset))

    def dec(self, anchor, k: int):
        return self.load(self.decoded, anchor * 4 + k)

    # ---- the steps -----------------------------------------------------------------------

    def decode(self):
        """Center-size encodings → corners, in double as TFLite computes them."""
        t = self.t

        def body(r):
            def enc(k):
                v = t.BufferLoad(self.box, [self.i(0), r, self.i(k)])
                return t.Cast(F64, self._dequant(v, self.p.box_zero, 4))

            def anc(k):
                return t.Cast(F64, t.BufferLoad(self.anchor, [r, self.i(k)]))

            fs = self.fs
            # centers: encoding / scale · anchor size + anchor center
            yc = t.Cast(F32, enc(0) / self.param(0, F64) * anc(2) + anc(0))
            xc = t.Cast(F32, enc(1) / self.param(1, F64) * anc(3) + anc(1))
            half = t.const(0.5, F64)
            hh = t.Cast(F32, half * t.exp(enc(2) / self.param(2, F64)) * anc(2))
            hw = t.Cast(F32, half * t.exp(enc(3) / self.param(3, F64)) * anc(3))
            f = [self.load(fs, k) for k in range(4)]
            return self.seq(
                self.store(fs, yc, 0), self.store(fs, xc, 1), self.store(fs, hh, 2),
                self.store(fs, hw, 3),
                self.store(self.decoded, f[0] - f[2], r * 4),
                self.store(self.decoded, f[1] - f[3], r * 4 + 1),
                self.store(self.decoded, f[0] + f[2], r * 4 + 2),
                self.store(self.decoded, f[1] + f[3], r * 4 + 3))

        return self.loop(self.p.anchors, body)

    def suppress(self, best):
        """Deactivate every active anchor whose box overlaps `best`'s by more than the IoU
        threshold (TFLite's ComputeIntersectionOverUnion, float32)."""
        t, fs = self.t, self.fs

        def body(j):
            def area(a):
                return (self.dec(a, 2) - self.dec(a, 0)) * (self.dec(a, 3) - self.dec(a, 1))

            zero = self.f32(0.0)
            ih = t.max(t.min(self.dec(best, 2), self.dec(j, 2))
                       - t.max(self.dec(best, 0), self.dec(j, 0)), zero)
            iw = t.max(t.min(self.dec(best, 3), self.dec(j, 3))
                       - t.max(self.dec(best, 1), self.dec(j, 1)), zero)
            ai, aj, inter = (self.load(fs, k) for k in (4, 5, 6))
            iou = t.Select(t.Or(ai <= zero, aj <= zero), zero,
                           inter / (ai + aj - inter))
            return self.when(
                self.load(self.active, j) != t.const(0, "int8"),
                self.seq(self.store(fs, area(best), 4), self.store(fs, area(j), 5),
                         self.store(fs, ih * iw, 6),
                         self.when(iou > self.param(7),
                                   self.store(self.active, t.const(0, "int8"), j))))

        return self.loop(self.p.anchors, body)

    def pick(self, score_of):
        """st[0] ← the active anchor of the highest score, the lowest on ties (−1: none)."""
        t, st = self.t, self.st
        best = self.load(st, 0)

        def body(r):
            better = t.Or(best < self.i(0), score_of(r) > score_of(t.max(best, self.i(0))))
            return self.when(self.load(self.active, r) != t.const(0, "int8"),
                             self.when(better, self.store(st, r, 0)))

        return self.seq(self.store(st, self.i(-1), 0), self.loop(self.p.anchors, body))

    def activate(self, score_of):
        """Every anchor whose score reaches the threshold starts active."""
        t = self.t
        return self.loop(self.p.anchors, lambda r: self.store(
            self.active, t.Select(score_of(r) >= self.param(6), t.const(1, "int8"),
                                  t.const(0, "int8")), r))

    def clear_outputs(self):
        t, slots = self.t, self.p.slots
        zero = self.f32(0.0)
        return self.seq(
            self.loop(slots * 4, lambda k: t.BufferStore(
                self.out_boxes, zero, [self.i(0), t.truncdiv(k, 4), t.truncmod(k, 4)])),
            self.loop(slots, lambda k: self.seq(
                t.BufferStore(self.out_classes, zero, [self.i(0), k]),
                t.BufferStore(self.out_scores, zero, [self.i(0), k]))))

    def write(self, slot, anchor, cls, score):
        t = self.t
        return self.seq(
            *(t.BufferStore(self.out_boxes, self.dec(anchor, k), [self.i(0), slot, self.i(k)])
              for k in range(4)),
            t.BufferStore(self.out_classes, t.Cast(F32, cls), [self.i(0), slot]),
            t.BufferStore(self.out_scores, score, [self.i(0), slot]))

    # ---- std::partial_sort of an anchor's classes ----------------------------------------

    def partial_sort(self, r, k: int):
        """self.order ← the classes of anchor `r` as libstdc++'s std::partial_sort leaves
        them with TFLite's comparison (a higher score first), the first `k` sorted: a heap
        of the first k, each later class that beats the heap's top swapped in, then the
        heap sorted. The order of equal scores is the heap's, so it is built the same way."""
        a, n = self.order, self.p.classes

        def beats(i, j):  # the comparison: class i's score above class j's
            return self.class_score(r, i) > self.class_score(r, j)

        def item(i):
            return self.load(a, i)

        def parents(extent_k):
            return (extent_k - 2) // 2 + 1

        make_heap = self.loop(parents(k), lambda j: self.adjust(
            self.i((k - 2) // 2) - j, self.i(k), item(self.i((k - 2) // 2) - j), [], beats))
        select = self.loop(n - k, lambda j: self.when(
            beats(item(j + k), item(0)),
            self.adjust(self.i(0), self.i(k), item(j + k),
                        [self.store(a, item(0), j + k)], beats)))
        sort = self.loop(k - 1, lambda j: self.adjust(
            self.i(0), self.i(k - 1) - j, item(self.i(k - 1) - j),
            [self.store(a, item(0), self.i(k - 1) - j)], beats))
        return self.seq(self.loop(n, lambda c: self.store(a, c, c)), make_heap,
                        select if n > k else None, sort)

    def adjust(self, hole, length, value, then: list, beats):
        """libstdc++'s __adjust_heap on self.order: `value` (read first, then the `then`
        statements run) sifted down from `hole` in a heap of `length`."""
        t, a, hs = self.t, self.order, self.hs
        h, c, top, v, par = (self.load(hs, k) for k in range(5))

        def item(i):
            return self.load(a, i)

        two = self.i(2)
        down = t.While(c < t.truncdiv(length - 1, two), self.seq(
            self.store(hs, (c + 1) * two, 1),
            self.when(beats(item(c), item(c - 1)), self.store(hs, c - 1, 1)),
            self.store(a, item(c), h), self.store(hs, c, 0)))
        last_child = self.when(
            t.And(t.truncmod(length, two) == self.i(0), c == t.truncdiv(length - 2, two)),
            self.seq(self.store(hs, (c + 1) * two, 1), self.store(a, item(c - 1), h),
                     self.store(hs, c - 1, 0)))
        up = t.While(t.And(h > top, beats(item(par), v)), self.seq(
            self.store(a, item(par), h), self.store(hs, par, 0),
            self.store(hs, t.truncdiv(h - 1, two), 4)))
        return self.seq(
            self.store(hs, value, 3), *then,
            self.store(hs, hole, 0), self.store(hs, hole, 1), self.store(hs, hole, 2),
            down, last_child, self.store(hs, t.truncdiv(h - 1, two), 4), up,
            self.store(a, v, h))

    # ---- the two suppressions ------------------------------------------------------------

    def fast(self):
        """Per anchor its best classes; one suppression over the anchors' best scores."""
        t, p, st = self.t, self.p, self.st
        k = p.per_anchor

        def rank_classes(r):
            if k == 1:  # the first class of the highest score (TFLite's ArgMaxVector)
                best = self.load(st, 0)
                return self.seq(
                    self.store(st, self.i(0), 0),
                    self.loop(p.classes, lambda c: self.when(
                        self.class_score(r, c) > self.class_score(r, best),
                        self.store(st, c, 0))),
                    self.store(self.best_class, best, r),
                    self.store(self.max_score, self.class_score(r, best), r))
            # std::partial_sort's order (libstdc++: a heap), which TFLite's kernel uses
            return self.seq(self.partial_sort(r, k),
                            self.loop(k, lambda col: self.store(
                                self.best_class, self.load(self.order, col), r * k + col)),
                            self.store(self.max_score,
                                       self.class_score(r, self.load(self.order, 0)), r))

        def score_of(r):
            return self.load(self.max_score, r)

        best, count = self.load(st, 0), self.load(st, 1)
        select = self.loop(p.opts.max_detections, lambda _: self.seq(
            self.pick(score_of),
            self.when(best >= self.i(0), self.seq(
                self.store(self.selected, best, count), self.store(st, count + 1, 1),
                self.store(self.active, t.const(0, "int8"), best),
                self.suppress(best)))))

        def output(slot):
            anchor = self.load(self.selected, slot)
            mcpd = p.opts.max_classes_per_detection

            def column(col):
                cls = self.load(self.best_class, anchor * k + col)
                return self.write(slot * mcpd + col, anchor, cls, self.class_score(anchor, cls))

            return self.when(slot < count, self.loop(k, column))

        return self.seq(self.loop(p.anchors, rank_classes), self.activate(score_of),
                        self.store(st, self.i(0), 1), select,
                        self.loop(p.opts.max_detections, output)), count

    def regular(self):
        """A suppression per class, each selection merged into the top max_detections by
        score: after every entry of an equal score already there (a stable merge)."""
        t, p, st = self.t, self.p, self.st
        d = p.opts.max_detections
        per_class = min(p.opts.detections_per_class, d)
        best, found, pos = self.load(st, 0), self.load(st, 2), self.load(st, 3)

        def insert(c):
            score = self.class_score(best, c)
            top = t.min(found, self.i(d - 1))  # the last entry kept after the insertion

            def shift(j):
                at = top - j
                return self.seq(*(self.store(b, self.load(b, at - 1), at)
                                  for b in (self.res_score, self.res_anchor, self.res_class)))

            return self.seq(
                self.store(st, self.i(0), 3),
                self.loop(found, lambda j: self.when(self.load(self.res_score, j) >= score,
                                                     self.store(st, pos + 1, 3))),
                self.when(pos < self.i(d), self.seq(
                    self.loop(t.max(top - pos, self.i(0)), shift),
                    self.store(self.res_score, score, pos),
                    self.store(self.res_anchor, best, pos),
                    self.store(self.res_class, c, pos),
                    self.store(st, t.min(found + 1, self.i(d)), 2))))

        def per_class_nms(c):
            def score_of(r):
                return self.class_score(r, c)

            return self.seq(
                self.activate(score_of),
                self.loop(per_class, lambda _: self.seq(
                    self.pick(score_of),
                    self.when(best >= self.i(0), self.seq(
                        insert(c), self.store(self.active, t.const(0, "int8"), best),
                        self.suppress(best))))))

        def output(slot):
            return self.when(slot < found, self.write(
                slot, self.load(self.res_anchor, slot), self.load(self.res_class, slot),
                self.load(self.res_score, slot)))

        return self.seq(self.store(st, self.i(0), 2), self.loop(p.classes, per_class_nms),
                        self.loop(d, output)), found

    def body(self):
        t = self.t
        nms, count = self.regular() if self.p.opts.use_regular_nms else self.fast()
        stmt = self.seq(self.clear_outputs(), self.decode(), nms,
                        t.BufferStore(self.out_num, t.Cast(F32, count), [self.i(0)]))
        return self.seq(*(t.AllocBuffer(b) for b in self.buffers), stmt)


def build_kernel(p: Plan):
    """The kernel's PrimFunc: (encodings, class predictions, anchors [N, 4] float32,
    parameters [8] float64) → boxes, classes, scores, number of detections."""
    from tvm import te, tirx

    t = tirx
    box_dtype = F32 if p.box_zero is None else "int8"
    cls_dtype = F32 if p.class_zero is None else "int8"
    specs = [((1, p.anchors, p.box_depth), box_dtype), ((1, p.anchors, p.columns), cls_dtype),
             ((p.anchors, 4), F32), ((8,), F64)]
    xs = [te.placeholder(s, d, f"x{i}") for i, (s, d) in enumerate(specs)]
    in_bufs = [t.decl_buffer(x.shape, d, f"x{i}_buf")
               for i, (x, (_, d)) in enumerate(zip(xs, specs, strict=True))]
    out_shapes = [(1, p.slots, 4), (1, p.slots), (1, p.slots), (1,)]
    shaped = [te.compute(s, lambda *i: t.const(0, F32)) for s in out_shapes]
    out_bufs = [t.decl_buffer(s.shape, F32, f"out{i}_buf") for i, s in enumerate(shaped)]
    outs = te.extern([s.shape for s in shaped], xs,
                     lambda ins, outs: _Writer(p, ins, outs).body(),
                     name="detection_postprocess", dtype=[F32] * 4, in_buffers=in_bufs,
                     out_buffers=out_bufs)
    return te.create_prim_func([*xs, *outs]).without_attr("global_symbol")
