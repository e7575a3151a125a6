"""Integer kernels with TFLite's int8 semantics, written in TVM's tensor expression language.

Each builder returns a TIR PrimFunc (its parameters: the int8 activations, then the
constants the caller passes, then the int8 output) and is compiled by the same TVM
pipeline as every other kernel. The arithmetic follows TFLite's reference kernels:
int8 × int8 products accumulated in int32, an int32 bias, requantization by a fixed-point
multiplier and shift (`fixedpoint.py`), the output zero point, then clamping to the fused
activation's range.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
from tvm import te, tirx

from generator.export.fixedpoint import (
    SOFTMAX_ACCUM_INTEGER_BITS,
    TirArith,
    accumulator_bound,
    exp_on_negative_values,
    multiply_by_quantized_multiplier,
    narrow_fits,
    one_over_one_plus_x,
    single_rounding_multiply,
)

# How conv2d kernels are written: "auto" (what export compiles: TIR statements with window
# loops clipped to the input, fastest untuned) or "blocks" (one tensor-expression reduction
# block, padding as a bounds check: what MetaSchedule can tile; `tune` searches this form).
CONV_FORMS = ("auto", "blocks")
_conv_form: contextvars.ContextVar[str] = contextvars.ContextVar("conv_form", default="auto")
# Whether a conv2d built in the "auto" form also carries its "blocks" form (`Kernel.blocks`):
# so one build of a model gives both, for export with tuning records and for `tune`.
_with_blocks: contextvars.ContextVar[bool] = contextvars.ContextVar("with_blocks",
                                                                   default=False)


@contextlib.contextmanager
def conv_form(form: str) -> Iterator[None]:
    """Build conv2d kernels in `form` (one of CONV_FORMS) inside the block."""
    if form not in CONV_FORMS:
        raise ValueError(f"conv form {form!r}")
    token = _conv_form.set(form)
    try:
        yield
    finally:
        _conv_form.reset(token)


@contextlib.contextmanager
def with_blocks_forms(enabled: bool = True) -> Iterator[None]:
    """Inside the block, conv2d kernels whose "blocks" form differs carry it as well."""
    token = _with_blocks.set(enabled)
    try:
        yield
    finally:
        _with_blocks.reset(token)


# Whether kernels that can write over their input are built so (`in_place_kernels`): the
# `--memory small` preset. Such a kernel carries IN_PLACE_ATTR; the memory plan may then
# give its output the bytes of that input, when the input is read by no later call.
_in_place: contextvars.ContextVar[bool] = contextvars.ContextVar("in_place", default=False)
# PrimFunc attribute: a bit mask of the inputs (bit i: input i) whose first byte the output
# may start at, overwriting it
IN_PLACE_ATTR = "mtvg.in_place"


def in_place_enabled() -> bool:
    """Whether kernels are being built to run in place (`in_place_kernels`)."""
    return _in_place.get()


@contextlib.contextmanager
def in_place_kernels(enabled: bool = True) -> Iterator[None]:
    """Inside the block, kernels that can run in place are built to (IN_PLACE_ATTR)."""
    token = _in_place.set(enabled)
    try:
        yield
    finally:
        _in_place.reset(token)


def build_key() -> tuple[str, bool, bool]:
    """What a model's build depends on here: the conv2d form, whether kernels carry
    their "blocks" form too, and whether they are built to run in place."""
    return _conv_form.get(), _with_blocks.get(), _in_place.get()


@dataclass(frozen=True)
class Requant:
    """How an int32 accumulator becomes int8: per-tensor (ints) or per-channel (arrays)."""

    multiplier: int | np.ndarray
    shift: int | np.ndarray
    zero_point: int
    act_min: int = -128
    act_max: int = 127
    single_rounding: bool = False  # per-tensor only: TFLite's uint8 fully connected's form
    narrow: bool = False  # the short output stage (fixedpoint.py) gives the same results

    @property
    def per_channel(self) -> bool:
        return isinstance(self.multiplier, np.ndarray)

    def narrowed(self, bound: np.ndarray) -> Requant:
        """This requantization in the short output stage when `bound` (per output channel, a
        bound on |acc + bias|: `accumulator_bound`) and the shifts allow it."""
        if self.narrow or self.single_rounding or not narrow_fits(self.shift, bound):
            return self
        return replace(self, narrow=True)

    def constants(self) -> list[np.ndarray]:
        if not self.per_channel:
            return []
        return [self.multiplier.astype(np.int32), self.shift.astype(np.int8)]


@dataclass
class Kernel:
    func: tirx.PrimFunc
    constants: list[np.ndarray]  # passed after the activations, in this order
    roles: tuple[str, ...] | None = None  # what each constant is, when not the default
    # The same kernel in the "blocks" form (same parameters and results), where it differs
    # and was asked for (`with_blocks_forms`).
    blocks: tirx.PrimFunc | None = None
    # An int8 buffer of this shape the kernel writes as working memory after its output
    # (its last parameter): the memory plan gives it pool bytes for the call only.
    scratch: tuple[int, ...] | None = None
    # The kernel's other tilings (a clipped conv2d's, asked for with `with_blocks_forms`)
    tilings: Tilings | None = None

    def with_attr(self, key: str, value) -> Kernel:
        """The kernel with a function attribute on each of its forms."""
        blocks = self.blocks.with_attr(key, value) if self.blocks is not None else None
        tilings = self.tilings.with_attr(key, value) if self.tilings is not None else None
        return replace(self, func=self.func.with_attr(key, value), blocks=blocks,
                       tilings=tilings)


    def constant_roles(self) -> list[str]:
        """What each constant is: weights, bias, then requantization parameters (unless
        the kernel says otherwise: tables, scales)."""
        if self.roles is not None:
            return list(self.roles)
        return ["weights", "bias", "requant", "requant"][:len(self.constants)]


# PrimFunc attribute of a conv2d built in another tiling than export's: its name
TILING_ATTR = "mtvg.tiling"


@dataclass(frozen=True)
class Tilings:
    """A clipped conv2d's tilings other than export's own (`conv_tilings`), each built on
    demand with the kernel's parameters, results and attributes (never in place)."""

    choices: tuple[ConvTiling, ...]
    build_func: Callable[[ConvTiling], tirx.PrimFunc]
    attrs: tuple[tuple[str, object], ...] = ()

    def with_attr(self, key: str, value) -> Tilings:
        return replace(self, attrs=(*self.attrs, (key, value)))

    def build(self, tiling: ConvTiling) -> tirx.PrimFunc:
        """The kernel in `tiling` (one of `choices`), TILING_ATTR naming it, as `tune`
        measures it and `export --tuning-records` compiles it (global symbol "main")."""
        if tiling not in self.choices:
            raise ValueError(f"tiling {tiling.name} is not one of this conv's")
        func = self.build_func(tiling)
        for key, value in self.attrs:
            func = func.with_attr(key, value)
        return func.with_attr(TILING_ATTR, tiling.name).with_attr("global_symbol", "main")


BLOCK = 4  # output channels a regular conv computes together
TILING_CHANNELS = (1, 2, 4, 8)  # output channels computed together, a tiling may choose
TILING_PIXELS = (1, 2, 3, 4)  # output positions computed together (unpadded regular convs)
TILING_UNROLL = (1, 2, 4, 8, 16)  # input channels per turn of the innermost loop
MAX_TILE_ACCUMULATORS = 16  # pixels × channels: more spill on every 32-bit core we build for


@dataclass(frozen=True)
class ConvTiling:
    """How the clipped conv2d kernel blocks its loops: `pixels` output positions and
    `channels` output channels share each input and weight they load (pixels × channels
    accumulators, meant for registers), `unroll` input channels per turn of the innermost
    loop. `tune` measures each tiling a conv has (`conv_tilings`); export's own is
    `default_tiling` (one position, BLOCK channels, no unrolling)."""

    pixels: int = 1
    channels: int = BLOCK
    unroll: int = 1

    @property
    def name(self) -> str:
        return f"p{self.pixels}c{self.channels}u{self.unroll}"

    @classmethod
    def parse(cls, name: str) -> ConvTiling | None:
        """The tiling `name` spells (as `name` writes it), or None."""
        m = re.fullmatch(r"p(\d{1,2})c(\d{1,2})u(\d{1,2})", name)
        if m is None:
            return None
        tiling = cls(*(int(g) for g in m.groups()))
        known = (tiling.pixels in TILING_PIXELS and tiling.channels in TILING_CHANNELS
                 and tiling.unroll in TILING_UNROLL)
        return tiling if known else None


def default_tiling(cout: int) -> ConvTiling:
    """Export's tiling: BLOCK output channels at once (fewer when cout is not a multiple)."""
    return ConvTiling(1, next(b for b in (BLOCK, 2, 1) if cout % b == 0), 1)


def conv_tilings(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                 out_shape: tuple[int, ...], strides: tuple[int, int],
                 pads: tuple[int, int, int, int], dilation: tuple[int, int], depthwise: bool,
                 weight_zero: int = 0) -> list[ConvTiling]:
    """The tilings a conv2d can be built with, export's own first. Several positions at
    once only for a regular conv without a weight zero point: unpadded, any positions (all
    have the same taps); padded, positions of a row whose window columns are all inside
    the input. Unrolling only for a regular conv, by a divisor of its input channels."""
    cin, cout = x_shape[-1], out_shape[-1]
    if any(pads):
        first, stop = inside_columns(out_shape[2], strides[1], pads[1], w_shape[2],
                                     dilation[1], x_shape[2])
        positions = stop - first
    else:
        positions = out_shape[0] * out_shape[1] * out_shape[2]
    several = not depthwise and not weight_zero
    out = [default_tiling(cout)]
    for channels in TILING_CHANNELS:
        for pixels in TILING_PIXELS if several else (1,):
            for unroll in (1,) if depthwise else TILING_UNROLL:
                tiling = ConvTiling(pixels, channels, unroll)
                if (cout % channels or cin % unroll or pixels > max(positions, 1)
                        or pixels * channels > MAX_TILE_ACCUMULATORS or tiling in out):
                    continue
                out.append(tiling)
    return out
OP_PATTERN_OPAQUE = 8  # TVM's kOpaque: FuseOps leaves the kernel alone


def _clamp_int8(value, lo: int, hi: int):
    return tirx.max(tirx.min(value, tirx.const(hi, "int32")),
                    tirx.const(lo, "int32")).astype("int8")


def requantize(requant: Requant, acc, channel, quant_bufs: list | None = None):
    """An int32 accumulator → the layer's int8 output, as TIR: TFLite's two roundings by a
    per-tensor multiplier and shift, or per channel from `quant_bufs` (the multiplier and
    shift buffers, read at `channel`), then the zero point and the activation's clamp."""
    t = tirx
    if requant.per_channel:
        scale = (t.BufferLoad(quant_bufs[0], [channel]),
                 t.Cast("int32", t.BufferLoad(quant_bufs[1], [channel])))
    else:
        scale = (int(requant.multiplier), int(requant.shift))
    return _output_stage(requant, acc, *scale)


def _output_stage(r: Requant, acc, multiplier, shift):
    """acc · multiplier · 2**shift rounded TFLite's way, plus the zero point, clamped to the
    activation's range (multiplier and shift: ints, or int32 TIR values per channel)."""
    if r.single_rounding:
        scaled = single_rounding_multiply(acc, int(multiplier), int(shift)) + r.zero_point
    elif r.narrow:
        scaled = _narrow_stage(acc, multiplier, shift, r.zero_point)
    else:
        scaled = multiply_by_quantized_multiplier(TirArith(), acc, multiplier, shift) \
            + r.zero_point
    return _clamp_int8(scaled, r.act_min, r.act_max)


def _narrow_stage(acc, multiplier, shift, zero_point: int):
    """`fixedpoint.narrow_requantize` as TIR: one 32×32→64-bit multiply, then int32."""
    t = tirx
    i32, i64 = "int32", "int64"
    m64 = t.const(multiplier, i64) if isinstance(multiplier, int) else t.Cast(i64, multiplier)
    product = t.Cast(i64, acc) * m64 + t.const(1 << 30, i64)
    high = t.Cast(i32, product >> t.const(31, i64))
    if isinstance(shift, int):
        e = t.const(-shift, i32)
        addend = t.const(zero_point * (1 << -shift) + (1 << (-shift - 1)), i32)
        return (high + addend + (high >> t.const(31, i32))) >> e
    # A per-channel shift: the zero point added after the shift (zp · 2^e is a whole multiple
    # of 2^e, so the floor shift takes it out unchanged), sparing its product per output.
    e = t.const(0, i32) - shift
    half = (t.const(1, i32) << e) >> t.const(1, i32)
    return ((high + (high >> t.const(31, i32)) + half) >> e) + t.const(zero_point, i32)


class _Requantizer:
    def __init__(self, requant: Requant, channels: int) -> None:
        self.r = requant
        self.placeholders = []
        if requant.per_channel:
            self.m = te.placeholder((channels,), "int32", "multiplier")
            self.s = te.placeholder((channels,), "int8", "shift")
            self.placeholders = [self.m, self.s]

    def __call__(self, acc, channel):
        r = self.r
        if r.per_channel:
            return _output_stage(r, acc, self.m[channel], self.s[channel].astype("int32"))
        return _output_stage(r, acc, int(r.multiplier), int(r.shift))


def unfolded_bias(weights: np.ndarray, bias: np.ndarray, input_zero: int, depthwise: bool,
                  weight_zero: int = 0) -> np.ndarray:
    """The file's own bias from one with the input zero point folded in (bias − zp·Σ(w −
    zw)), for kernels that subtract the zero point per tap, so that padded taps add
    nothing (TFLite's way). Weights OHWI, or [KH, KW, C] for a depthwise conv."""
    effective = weights.astype(np.int64) - weight_zero
    sums = (effective.sum(axis=(0, 1)) if depthwise
            else effective.reshape(effective.shape[0], -1).sum(axis=1))
    return bias.astype(np.int64) + int(input_zero) * sums


def inside_columns(out_w: int, stride: int, left: int, taps: int, dil: int,
                   in_w: int) -> tuple[int, int]:
    """[first, stop): the output columns whose window's columns are all inside the input
    (first == stop: none)."""
    first = min(-(-left // stride), out_w)
    stop = max(first, min(out_w, (in_w - 1 - (taps - 1) * dil + left) // stride + 1))
    return first, stop


def tap_range(origin, dil: int, size: int, taps: int, padded: bool = True):
    """[lo, hi) as TIR, hi ≥ lo: the taps k with 0 <= origin + k·dil < size (every tap of an
    unpadded conv)."""
    t = tirx
    if not padded:
        return t.const(0, "int32"), t.const(taps, "int32")
    lo = t.max(t.floordiv(-origin + (dil - 1), dil), 0) if dil > 1 else t.max(-origin, 0)
    hi = t.min(t.floordiv(size - origin + (dil - 1), dil), taps) if dil > 1 \
        else t.min(size - origin, taps)
    return lo, t.max(hi, lo)


def _func(tensors) -> tirx.PrimFunc:
    return te.create_prim_func(tensors).without_attr("global_symbol")


def conv2d_nhwc(x_shape: tuple[int, ...], weights: np.ndarray, bias: np.ndarray,
                out_shape: tuple[int, ...], strides: tuple[int, int],
                pads: tuple[int, int, int, int], dilation: tuple[int, int], input_zero: int,
                requant: Requant, depthwise: bool, weight_zero: int = 0) -> Kernel:
    """Conv2d on NHWC int8. Regular weights are OHWI [Cout, KH, KW, Cin]; depthwise weights
    are [KH, KW, Cout] (Cout = Cin · multiplier). The products are x · (w − weight_zero)
    (`weight_zero` is nonzero for uint8 models mapped to int8). `bias` already holds
    bias − input_zero · Σ(w − weight_zero), so padding reads the input zero point."""
    requant = requant.narrowed(accumulator_bound(weights, bias, depthwise, weight_zero))
    in_place = (in_place_form(x_shape, weights.shape, out_shape, strides, pads, depthwise)
                if _in_place.get() else None)
    if (any(pads) or not depthwise or in_place) and _conv_form.get() == "auto":
        kernel = _conv2d_clipped(x_shape, weights, bias, out_shape, strides, pads, dilation,
                                 input_zero, requant, depthwise, weight_zero, in_place)
        if _with_blocks.get():
            choices = conv_tilings(x_shape, weights.shape, out_shape, strides, pads, dilation,
                                   depthwise, weight_zero)[1:]

            def build(tiling: ConvTiling) -> tirx.PrimFunc:
                return _conv2d_clipped(x_shape, weights, bias, out_shape, strides, pads,
                                       dilation, input_zero, requant, depthwise, weight_zero,
                                       None, tiling).func

            kernel.tilings = Tilings(tuple(choices), build) if choices else None
            with conv_form("blocks"):
                kernel.blocks = conv2d_nhwc(x_shape, weights, bias, out_shape, strides, pads,
                                            dilation, input_zero, requant, depthwise,
                                            weight_zero).func
        return kernel
    n_, h_, w_, cin = x_shape
    _, oh_, ow_, cout = out_shape
    x = te.placeholder(x_shape, "int8", "x")
    w = te.placeholder(weights.shape, "int8", "w")
    b = te.placeholder((cout,), "int32", "bias")
    sh, sw = strides
    dh, dw = dilation
    top, left = pads[0], pads[1]
    padded = any(pads)

    if padded:
        # As the clipped form: the file's own bias and Σ (x − zp)·w, padding adding 0; so
        # both forms take the same constants and either can run at the same call.
        bias = unfolded_bias(weights, bias, input_zero, depthwise, weight_zero)

    def x_at(n, h, wi, c):
        value = x[n, h, wi, c].astype("int32")
        if not padded:
            return value
        inside = tirx.all(h >= 0, h < h_, wi >= 0, wi < w_)
        return tirx.if_then_else(inside, value - input_zero, tirx.const(0, "int32"))

    def w_at(*idx):
        value = w[idx].astype("int32")
        return value - weight_zero if weight_zero else value

    if depthwise:
        kh_, kw_, _ = weights.shape
        mult = cout // cin
        rh = te.reduce_axis((0, kh_), "rh")
        rw = te.reduce_axis((0, kw_), "rw")
        acc = te.compute(
            (n_, oh_, ow_, cout),
            lambda n, i, j, c: te.sum(
                x_at(n, i * sh - top + rh * dh, j * sw - left + rw * dw, c // mult)
                * w_at(rh, rw, c), axis=[rh, rw]),
            name="acc")
    else:
        _, kh_, kw_, _ = weights.shape
        rh = te.reduce_axis((0, kh_), "rh")
        rw = te.reduce_axis((0, kw_), "rw")
        rc = te.reduce_axis((0, cin), "rc")
        acc = te.compute(
            (n_, oh_, ow_, cout),
            lambda n, i, j, c: te.sum(
                x_at(n, i * sh - top + rh * dh, j * sw - left + rw * dw, rc)
                * w_at(c, rh, rw, rc), axis=[rh, rw, rc]),
            name="acc")
    rq = _Requantizer(requant, cout)
    # The sum and the bias added in int32 (no overflow: the exporter's bound), kept so:
    # as a plain add, TVM's simplifier widens it to a 64-bit add under the stage's int64
    # multiply (a 64 × 64-bit product per output in C). tirx.reinterpret of int32 as int32
    # prints as nothing.
    out = te.compute(out_shape, lambda n, i, j, c: rq(
        tirx.call_intrin("int32", "tirx.reinterpret", acc[n, i, j, c] + b[c]), c), name="out")
    return Kernel(_func([x, w, b, *rq.placeholders, out]),
                  [weights.astype(np.int8), bias.astype(np.int32), *requant.constants()])


# The most bytes an in-place kernel stages (a C array on the stack): TVM's C codegen puts
# larger local arrays in TVMBackendAllocWorkspace, an arena the project would reserve on
# top of the pool the in-place kernel saves.
MAX_STAGED_BYTES = 1024
MAX_POOLED_SHARE = 4  # a pooled staging buffer is at most 1/4 of the output it stages


@dataclass(frozen=True)
class InPlace:
    """How a conv2d writes its output over its input, both starting at the same byte
    (`pooled`: its staging buffer is a scratch output in the pool, not a stack array).

    "pixels" (a 1x1 conv, stride 1, no padding, the input's rows and columns): each pixel's
    channels go into a buffer, then over the pixel; first pixel first when the output has
    no more channels than the input, last pixel first when it has more, so a pixel's output
    only covers inputs already read. "rows" (batch 1, an output row of at most an input
    row's bytes): output rows go into a ring of `ring` rows; row r goes out once every
    output row that reads the input rows under it has been computed."""

    mode: str  # "pixels" | "rows"
    ring: int = 1
    pooled: bool = False


def flushed_rows(c, out_rows: int, stride: int, top: int, in_row_bytes: int,
                 out_row_bytes: int, tir_min=min, tir_max=max, floordiv=lambda a, b: a // b):
    """The last output row that may be written over the input once output row `c` has been
    computed (-1: none yet): row r covers input rows up to ((r+1)·Ro − 1) // Ri, and input
    row i is last read by output row (i + top) // stride at the latest."""
    last = floordiv(((c + 1) * stride - top) * in_row_bytes, out_row_bytes) - 1
    return tir_max(-1, tir_min(c, last))


def in_place_form(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                   out_shape: tuple[int, ...], strides: tuple[int, int],
                   pads: tuple[int, int, int, int], depthwise: bool) -> InPlace | None:
    """How a conv2d can write over its input (InPlace), or None."""
    if x_shape[0] != 1 or out_shape[0] != 1:
        return None
    _, h_, w_, cin = x_shape
    _, oh_, ow_, cout = out_shape
    if (not depthwise and tuple(w_shape[1:3]) == (1, 1) and not any(pads)
            and tuple(strides) == (1, 1) and (oh_, ow_) == (h_, w_)):
        return InPlace("pixels") if cout <= MAX_STAGED_BYTES else None
    in_row, out_row = w_ * cin, ow_ * cout
    if out_row > in_row:
        return None
    sh, top = strides[0], pads[0]
    ring, done = 1, -1
    for c in range(oh_):
        ring = max(ring, c - done)
        done = oh_ - 1 if c == oh_ - 1 else flushed_rows(c, oh_, sh, top, in_row, out_row)
    staged = ring * out_row
    if staged <= MAX_STAGED_BYTES:
        return InPlace("rows", ring)
    # Larger staging goes in the pool, when it is small next to what it saves (and no
    # "blocks" form must keep the same parameters for tuning).
    if staged * MAX_POOLED_SHARE <= oh_ * out_row and not _with_blocks.get():
        return InPlace("rows", ring, pooled=True)
    return None


def _conv2d_clipped(x_shape: tuple[int, ...], weights: np.ndarray, bias: np.ndarray,
                    out_shape: tuple[int, ...], strides: tuple[int, int],
                    pads: tuple[int, int, int, int], dilation: tuple[int, int],
                    input_zero: int, requant: Requant, depthwise: bool,
                    weight_zero: int = 0, in_place: InPlace | None = None,
                    tiling: ConvTiling | None = None) -> Kernel:
    """A conv2d as TIR statements. Padded, it works TFLite's way: for each output position
    the tap loops run only over the in-bounds taps (their ranges computed once per
    position), so the inner loop has no bounds check; skipped taps would have read the input
    zero point, so the accumulator is TFLite's Σ (x − zp)·w plus the file's own bias.
    Unpadded, every tap is in bounds and the folded bias stands for the zero point.
    BLOCK output channels are computed at once, their accumulators in registers: a regular
    conv loads each input value once for all of them, and both kinds share the tap loops'
    overhead among them.
    A weight zero point (uint8 models) enters as x · (w − zw): a depthwise conv subtracts
    it from each weight; a regular conv sums its input taps once per output position
    (shared by every output channel) and starts each accumulator at bias − zw · Σx.
    `in_place` (see `in_place_form`): the output may start at the input's first byte; each
    result goes into a small buffer first and out once the inputs it covers are read.
    `tiling` (`conv_tilings`; default: `default_tiling`) sets how many output channels
    (BLOCK above) and positions share the loads, and the unrolling of the input channels."""
    t = tirx
    i32 = "int32"
    n_, h_, w_, cin = x_shape
    _, oh_, ow_, cout = out_shape
    kh_, kw_ = weights.shape[:2] if depthwise else weights.shape[1:3]
    padded = any(pads)
    if padded:
        bias = unfolded_bias(weights, bias, input_zero, depthwise, weight_zero)
    else:
        input_zero = 0  # already in the folded bias
    tiling = tiling or default_tiling(cout)
    block, pixels, unroll = tiling.channels, tiling.pixels, tiling.unroll
    if pixels > 1 and (depthwise or weight_zero or in_place):
        raise ValueError(f"tiling {tiling.name}: several positions need a regular conv "
                         "without a weight zero point, written out of place")
    mult = cout // cin
    sh, sw = strides
    dh, dw = dilation
    top, left = pads[0], pads[1]
    x = te.placeholder(x_shape, "int8", "x")
    w = te.placeholder(weights.shape, "int8", "w")
    b = te.placeholder((cout,), "int32", "bias")
    rq = _Requantizer(requant, cout)

    def loop(var, start, extent, body):
        return t.For(var, start, extent, t.ForKind.SERIAL, body)

    def body(ins, outs):
        xb, wb, bb, *qb = ins

        def regular_macs(origins: list, lv: dict | None = None):
            """The input-channel loop of a regular conv's tap, for the positions at
            `origins` (their rows' and columns' first input), `unroll` channels a turn: each
            input value loaded once for the block's channels, each weight once for the
            positions. `lv`: the loop variables (c, rh, rw, rc) when not the kernel's own."""
            own = lv is None  # the kernel's own loop: its own value variable
            lv = lv or {"c": c, "rh": rh, "rw": rw, "rc": rc}
            several = len(origins) > 1 or unroll > 1 or not own
            stmts = []
            for u in range(unroll):
                ch = lv["rc"] * unroll + u if unroll > 1 else lv["rc"]
                values = [t.Var(f"xv{u}_{q}", i32) for q in range(len(origins))] \
                    if several else [xv]
                stmts += [t.LetStmt(v, x_tap(ch, o, (lv["rh"], lv["rw"])))
                          for v, o in zip(values, origins, strict=True)]
                for q in range(block):
                    weight = t.Cast(i32, t.BufferLoad(
                        wb, [lv["c"] * block + q, lv["rh"], lv["rw"], ch]))
                    if len(origins) > 1:
                        wv = t.Var(f"wv{u}_{q}", i32)
                        stmts.append(t.LetStmt(wv, weight))
                        weight = wv
                    for p, v in enumerate(values):
                        slot = t.const(p * block + q, i32)
                        stmts.append(t.BufferStore(acc, t.BufferLoad(acc, [slot]) + v * weight,
                                                   [slot]))
            return loop(lv["rc"], zero, t.const(cin // unroll, i32), t.SeqStmt(stmts))

        def group(places: list, rows_taps: tuple):
            """The outputs at `places` ((row, column) expressions), their accumulators
            together, `block` channels at a time: row taps [lo, hi) shared, every column tap
            in bounds (its loop written out when a tap has one turn of channels)."""
            lv = {name: t.Var(f"{name}_g", i32) for name in ("c", "rh", "rw", "rc")}
            idx = [(t.Var(f"i{q}", i32), t.Var(f"j{q}", i32)) for q in range(len(places))]
            lets = [t.LetStmt(var, value) for pair in zip(idx, places, strict=True)
                    for var, value in zip(*pair, strict=True)]
            origins = [(iq * sh - top, jq * sw - left) for iq, jq in idx]
            if cin == unroll:  # one turn: the column taps written out
                columns = _seq([regular_macs(origins, {
                    **lv, "rw": t.const(r, i32), "rc": t.Var(f"rc{r}_g", i32)})
                    for r in range(kw_)])
            else:
                columns = loop(lv["rw"], zero, t.const(kw_, i32), regular_macs(origins, lv))
            lo, hi = rows_taps
            taps = loop(lv["rh"], lo, hi - lo, columns)
            stores = []  # per channel: its scale loaded once for the positions
            for q in range(block):
                channel = lv["c"] * block + q
                scale = []
                if requant.per_channel:
                    scale = [t.Var(f"m{q}", i32), t.Var(f"s{q}", i32)]
                    stores += [t.LetStmt(scale[0], t.BufferLoad(qb[0], [channel])),
                               t.LetStmt(scale[1], t.Cast(i32, t.BufferLoad(qb[1],
                                                                            [channel])))]
                for p, (iq, jq) in enumerate(idx):
                    value = t.BufferLoad(acc, [t.const(p * block + q, i32)])
                    result = (_output_stage(requant, value, *scale) if scale
                              else requantize(requant, value, channel, qb))
                    stores.append(t.BufferStore(ob, result, [n, iq, jq, channel]))
            inits = [t.BufferStore(acc, start(q, lv["c"]), [t.const(p * block + q, i32)])
                     for p in range(len(places)) for q in range(block)]
            return t.SeqStmt([*lets, loop(lv["c"], zero, t.const(cout // block, i32),
                                          t.SeqStmt([*inits, taps, *stores]))])

        def positions_at_once(single):
            """A regular conv, `pixels` output positions at a time. Unpadded: all positions
            in order (the last group may have fewer). Padded: per row, the positions whose
            window columns are all inside the input in groups, the others one at a time
            (`single()`: the statements of the position at (i, j), as export's kernel)."""
            if not padded:
                total = oh_ * ow_
                p0 = t.Var("p0", i32)

                def flat(first, count: int):
                    return group([(t.floordiv(first + q, ow_), t.floormod(first + q, ow_))
                                  for q in range(count)],
                                 (zero, t.const(kh_, i32)))

                groups = [loop(p0, zero, t.const(total // pixels, i32), flat(p0 * pixels, pixels))]
                if total % pixels:
                    groups.append(flat(t.const(total - total % pixels, i32), total % pixels))
                return loop(n, zero, t.const(n_, i32), _seq(groups))
            first, stop = inside_columns(ow_, sw, left, kw_, dw, w_)
            g, jx = t.Var("g", i32), t.Var("jx", i32)
            row0, row_lo, row_hi = (t.Var(v, i32) for v in ("row0", "row_lo", "row_hi"))
            lo, hi = tap_range(row0, dh, h_, kh_, True)

            def columns(start_j, count: int):
                return group([(i, start_j + q) for q in range(count)], (row_lo, row_hi))

            inside = stop - first
            row = [t.LetStmt(row0, i * sh - top), t.LetStmt(row_lo, lo), t.LetStmt(row_hi, hi)]
            border = first + ow_ - stop  # the columns before `first` and from `stop`
            if border:
                row.append(loop(jx, zero, t.const(border, i32), t.SeqStmt([t.LetStmt(
                    j, jx + t.Select(jx < first, zero, t.const(stop - first, i32))),
                    single()])))
            if inside // pixels:
                row.append(loop(g, zero, t.const(inside // pixels, i32),
                                columns(first + g * pixels, pixels)))
            if inside % pixels:
                row.append(columns(t.const(stop - inside % pixels, i32), inside % pixels))
            return loop(n, zero, t.const(n_, i32), loop(i, zero, t.const(oh_, i32),
                                                        t.SeqStmt(row)))

        ob = outs[0]
        pooled = in_place is not None and in_place.pooled
        stage = outs[1] if pooled else staged
        local = [t.AllocBuffer(staged)] if in_place is not None and not pooled else []
        n, i, j, c = (t.Var(v, i32) for v in ("n", "i", "j", "c"))
        rh, rw, rc = (t.Var(v, i32) for v in ("rh", "rw", "rc"))
        h0, w0 = t.Var("h0", i32), t.Var("w0", i32)
        h_lo, h_hi, w_lo, w_hi = (t.Var(v, i32) for v in ("h_lo", "h_hi", "w_lo", "w_hi"))
        acc = t.decl_buffer((pixels * block,), i32, "acc")
        zero = t.const(0, i32)
        xv, k = t.Var("xv", i32), t.Var("k", i32)

        def x_tap(ch, origin=(h0, w0), taps=(rh, rw)):
            value = t.Cast(i32, t.BufferLoad(xb, [n, origin[0] + taps[0] * dh,
                                                  origin[1] + taps[1] * dw, ch]))
            return value - input_zero if input_zero else value

        def w_tap(*idx):
            value = t.Cast(i32, t.BufferLoad(wb, list(idx)))
            return value - weight_zero if weight_zero else value

        if depthwise:  # c counts blocks of output channels
            macs = []
            for q in range(block):
                out_c = c * block + q
                ch = out_c if mult == 1 else t.floordiv(out_c, mult)
                macs.append(t.BufferStore(acc, t.BufferLoad(acc, [t.const(q, i32)]) + x_tap(
                    ch) * w_tap(rh, rw, out_c), [t.const(q, i32)]))
            taps = loop(rh, h_lo, h_hi - h_lo, loop(rw, w_lo, w_hi - w_lo, _seq(macs)))
        else:
            taps = loop(rh, h_lo, h_hi - h_lo, loop(rw, w_lo, w_hi - w_lo,
                                                     regular_macs([(h0, w0)])))
        channel = c * block + k if block > 1 else c
        slot = k if block > 1 else zero
        result = requantize(requant, t.BufferLoad(acc, [slot]), channel, qb)
        if in_place is None:
            store = t.BufferStore(ob, result, [n, i, j, channel])
        elif in_place.mode == "rows":
            store = t.BufferStore(stage, result, [t.floormod(i, in_place.ring), j, channel])
        else:
            store = t.BufferStore(stage, result, [channel])
        x_sum = t.Var("x_sum", i32)
        tap_sums = []  # Σx over the position's taps, for a regular conv's weight zero point
        if weight_zero and not depthwise:
            tap_sums = [
                t.BufferStore(acc, zero, [zero]),
                loop(rh, h_lo, h_hi - h_lo, loop(rw, w_lo, w_hi - w_lo, loop(
                    rc, zero, t.const(cin, i32),
                    t.BufferStore(acc, t.BufferLoad(acc, [zero]) + x_tap(rc), [zero])))),
            ]

        def start(q, channels=c):
            value = t.BufferLoad(bb, [channels * block + q])
            return value - x_sum * weight_zero if tap_sums else value

        per_channel = t.SeqStmt([
            *(t.BufferStore(acc, start(q), [t.const(q, i32)]) for q in range(block)),
            taps,
            loop(k, zero, t.const(block, i32), store) if block > 1 else store,
        ])
        hl, hh = tap_range(h0, dh, h_, kh_, padded)
        wl, wh = tap_range(w0, dw, w_, kw_, padded)
        ranges = [
            t.LetStmt(h0, i * sh - top), t.LetStmt(w0, j * sw - left),
            t.LetStmt(h_lo, hl), t.LetStmt(h_hi, hh),
            t.LetStmt(w_lo, wl), t.LetStmt(w_hi, wh),
            *tap_sums,
            *([t.LetStmt(x_sum, t.BufferLoad(acc, [zero]))] if tap_sums else [])]
        blocks = cout // block
        if in_place is not None and in_place.mode == "rows":
            def rows_out(first, stop):
                """Output rows [first, stop) from the ring over the input."""
                r, cj, cc = t.Var("r", i32), t.Var("cj", i32), t.Var("cc", i32)
                return loop(r, first, stop - first, loop(cj, zero, t.const(ow_, i32), loop(
                    cc, zero, t.const(cout, i32), t.BufferStore(ob, t.BufferLoad(stage, [
                        t.floormod(r, in_place.ring), cj, cc]), [n, r, cj, cc]))))

            def done(row):
                return flushed_rows(row, oh_, sh, top, w_ * cin, ow_ * cout, t.min, t.max,
                                    t.floordiv)

            last = flushed_rows(oh_ - 1, oh_, sh, top, w_ * cin, ow_ * cout)
            row = t.SeqStmt([
                loop(j, zero, t.const(ow_, i32), t.SeqStmt(
                    [*ranges, loop(c, zero, t.const(blocks, i32), per_channel)])),
                rows_out(done(i - 1) + 1, done(i) + 1)])
            nest = loop(n, zero, t.const(n_, i32), _seq([
                loop(i, zero, t.const(oh_, i32), row),
                *([rows_out(t.const(last + 1, i32), t.const(oh_, i32))] if last < oh_ - 1
                  else [])]))
            return t.SeqStmt([t.AllocBuffer(acc), *local, nest])
        position = [*ranges, loop(c, zero, t.const(blocks, i32), per_channel)]
        if pixels > 1:
            return t.SeqStmt([t.AllocBuffer(acc),
                              positions_at_once(lambda: t.SeqStmt(position))])
        rows, cols = i, j
        if in_place is not None:  # a pixel's channels, then over the pixel's input
            cc = t.Var("cc", i32)
            position.append(loop(cc, zero, t.const(cout, i32), t.BufferStore(
                ob, t.BufferLoad(stage, [cc]), [n, i, j, cc])))
            if cout > cin:  # last pixel first: its outputs only cover inputs already read
                rows, cols = t.Var("ri", i32), t.Var("rj", i32)
                position = [t.LetStmt(i, oh_ - 1 - rows), t.LetStmt(j, ow_ - 1 - cols),
                            *position]
        nest = loop(n, zero, t.const(n_, i32), loop(rows, zero, t.const(oh_, i32), loop(
            cols, zero, t.const(ow_, i32), t.SeqStmt(position))))
        return t.SeqStmt([t.AllocBuffer(acc), *local, nest])

    staged_shape = ((in_place.ring, ow_, cout) if in_place and in_place.mode == "rows"
                    else (cout,))
    staged = t.decl_buffer(staged_shape, "int8", "staged")
    ins = [x, w, b, *rq.placeholders]
    in_bufs = [t.decl_buffer(v.shape, v.dtype, f"{v.op.name}_buf") for v in ins]
    out_bufs = [t.decl_buffer(out_shape, "int8", "out_buf")]
    scratch = staged_shape if in_place and in_place.pooled else None
    if scratch is not None:
        out_bufs.append(t.decl_buffer(scratch, "int8", "scratch_buf"))
    outs = te.extern([b_.shape for b_ in out_bufs], ins, body, name="conv", dtype="int8",
                     in_buffers=in_bufs, out_buffers=out_bufs)
    func = _func([*ins, *(outs if isinstance(outs, list) else [outs])])
    if in_place:  # the output may be the bytes of input 0: no no-alias promise
        func = func.with_attr("tir.noalias", False).with_attr(IN_PLACE_ATTR, 1)
    return Kernel(func,
                  [weights.astype(np.int8), bias.astype(np.int32), *requant.constants()],
                  scratch=scratch)


def kernel_call(emit, gv, args: list, kernel: Kernel, shape, dtype: str = "int8"):
    """The Relax call of `kernel` (added as `gv`) on `args`: its output, of `shape`. A
    kernel with a scratch output is called for both (`emit` binds that call) and the
    output taken from the pair."""
    from tvm import relax

    out = relax.TensorType(tuple(shape), dtype)
    if kernel.scratch is None:
        return relax.call_tir(gv, args, out)
    pair = emit(relax.call_tir(gv, args, [out, relax.TensorType(kernel.scratch, "int8")]))
    return relax.TupleGetItem(pair, 0)


def dense(batch: int, weights: np.ndarray, bias: np.ndarray, requant: Requant,
          weight_zero: int = 0) -> Kernel:
    """[batch, K] int8 · (weights [U, K] int8 − weight_zero)ᵀ + bias → [batch, U] int8 (bias
    holds bias − input_zero · Σ(w − weight_zero)). A weight zero point (uint8 models) is
    applied as − weight_zero · Σx, the row's sum computed once for all units."""
    units, depth = weights.shape
    requant = requant.narrowed(accumulator_bound(weights, bias, False, weight_zero))
    x = te.placeholder((batch, depth), "int8", "x")
    w = te.placeholder((units, depth), "int8", "w")
    b = te.placeholder((units,), "int32", "bias")
    k = te.reduce_axis((0, depth), "k")
    acc = te.compute((batch, units), lambda i, u: te.sum(
        x[i, k].astype("int32") * w[u, k].astype("int32"), axis=k), name="acc")
    rq = _Requantizer(requant, units)
    if weight_zero:
        ks = te.reduce_axis((0, depth), "ks")
        x_sum = te.compute((batch,), lambda i: te.sum(x[i, ks].astype("int32"), axis=ks),
                           name="x_sum")
        out = te.compute((batch, units), lambda i, u: rq(
            acc[i, u] + b[u] - x_sum[i] * weight_zero, u), name="out")
    else:
        out = te.compute((batch, units), lambda i, u: rq(acc[i, u] + b[u], u), name="out")
    return Kernel(_func([x, w, b, *rq.placeholders, out]),
                  [weights.astype(np.int8), bias.astype(np.int32), *requant.constants()])


def avg_pool2d_nhwc(x_shape: tuple[int, ...], out_shape: tuple[int, ...],
                    pool: tuple[int, int], strides: tuple[int, int],
                    pads: tuple[int, int, int, int], act_min: int, act_max: int,
                    offset: int = 0) -> Kernel:
    """TFLite's int8 average pool: the sum of the window's in-bounds values divided by their
    count, rounded half away from zero (input and output share their quantization).
    With `offset` (128: a uint8 pool on values mapped to int8) it rounds as TFLite's uint8
    pool does, half up on the unmapped sum: (Σ + offset · count + count / 2) / count − offset."""
    _, h_, w_, _ = x_shape
    x = te.placeholder(x_shape, "int8", "x")
    ph, pw = pool
    sh, sw = strides
    top, left = pads[0], pads[1]
    rh = te.reduce_axis((0, ph), "rh")
    rw = te.reduce_axis((0, pw), "rw")

    def x_at(n, h, wi, c):
        value = x[n, h, wi, c].astype("int32")
        if not any(pads):
            return value
        inside = tirx.all(h >= 0, h < h_, wi >= 0, wi < w_)
        return tirx.if_then_else(inside, value, tirx.const(0, "int32"))

    total = te.compute(out_shape, lambda n, i, j, c: te.sum(
        x_at(n, i * sh - top + rh, j * sw - left + rw, c), axis=[rh, rw]), name="total")

    def count(i, j):
        h0, w0 = i * sh - top, j * sw - left
        hs = tirx.max(h0, 0)
        he = tirx.min(h0 + ph, h_)
        ws = tirx.max(w0, 0)
        we = tirx.min(w0 + pw, w_)
        return (he - hs) * (we - ws)

    def average(n, i, j, c):
        acc = total[n, i, j, c]
        cnt = count(i, j) if any(pads) else tirx.const(ph * pw, "int32")
        half = tirx.truncdiv(cnt, 2)
        if offset:
            rounded = tirx.truncdiv(acc + cnt * offset + half, cnt) - offset
        else:
            rounded = tirx.Select(acc > 0, tirx.truncdiv(acc + half, cnt),
                                  tirx.truncdiv(acc - half, cnt))
        return _clamp_int8(rounded, act_min, act_max)

    out = te.compute(out_shape, average, name="out")
    return Kernel(_func([x, out]), [])


def shift_domain(shape: tuple[int, ...], src: str, dst: str) -> Kernel:
    """uint8 ↔ int8 with the same real values: x − 128 or x + 128 (zero points move by 128),
    at the edges of a uint8 model whose kernels work on int8."""
    if {src, dst} != {"uint8", "int8"}:
        raise ValueError(f"no domain shift from {src} to {dst}")
    x = te.placeholder(shape, src, "x")
    delta = -128 if src == "uint8" else 128
    out = te.compute(shape, lambda *i: (x[i].astype("int32") + delta).astype(dst), name="out")
    # opaque to TVM's fusion: fused with a reshape, FuseTIR maps one var to two buffers
    return Kernel(_func([x, out]).with_attr("op_pattern", OP_PATTERN_OPAQUE), [])


def add(a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...],
        a_offset: int, b_offset: int, a_mult: tuple[int, int], b_mult: tuple[int, int],
        out_mult: tuple[int, int], left_shift: int, zero_out: int, act_min: int,
        act_max: int, subtract: bool = False) -> Kernel:
    """TFLite's int8 add (numpy broadcasting): both inputs shifted left, rescaled to a
    common scale, summed (or, for SUB, the second taken from the first: TFLite subtracts
    the rescaled values, which rounds ties unlike adding a negated multiplier), and
    rescaled to the output."""

    def index(shape, idx):
        lead = len(idx) - len(shape)
        return [tirx.const(0, "int32") if d == 1 else i
                for d, i in zip(shape, idx[lead:], strict=True)]

    def element(ar: TirArith, bufs, idx):
        a, b = bufs

        def scaled(buf, shape, offset, mult):
            v = (tirx.Cast("int32", tirx.BufferLoad(buf, index(shape, idx))) + offset) \
                * (1 << left_shift)
            return ar.shared(multiply_by_quantized_multiplier(ar, ar.shared(v), *mult))

        first = scaled(a, a_shape, a_offset, a_mult)
        second = scaled(b, b_shape, b_offset, b_mult)
        total = ar.shared(first - second if subtract else first + second)
        out = multiply_by_quantized_multiplier(ar, total, out_mult[0], out_mult[1])
        return _clamp_int8(out + zero_out, act_min, act_max)

    kernel = _pointwise([a_shape, b_shape], out_shape, element, "sub" if subtract else "add")
    # Each element is read and written at the same index: the output may overwrite an input
    # of its own shape (not a broadcast one).
    over = sum(1 << i for i, shape in enumerate((a_shape, b_shape))
               if tuple(shape) == tuple(out_shape))
    if _in_place.get() and over:
        kernel = kernel.with_attr("tir.noalias", False).with_attr(IN_PLACE_ATTR, over)
    return kernel


def _pointwise(in_shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], element,
               name: str) -> Kernel:
    """An elementwise int8 kernel as TIR statements: one loop nest over the output, each
    element's fixed-point steps in the scratch array (`_statement_kernel`)."""
    t = tirx

    def build(ar: TirArith, ins, out):
        idx = [t.Var(f"i{d}", "int32") for d in range(len(out_shape))]
        value = element(ar, ins, idx)
        stmt = _seq([*ar.take_stores(), t.BufferStore(out, value, idx)])
        for var, extent in reversed(list(zip(idx, out_shape, strict=True))):
            stmt = t.For(var, t.const(0, "int32"), t.const(extent, "int32"),
                         t.ForKind.SERIAL, stmt)
        return stmt

    return _statement_kernel(in_shapes, out_shape, build, name)


def _statement_kernel(in_shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], build,
                      name: str) -> Kernel:
    """An int8 kernel whose body `build(ar, in_buffers, out_buffer)` writes as TIR statements,
    keeping each fixed-point step in a local scratch array (`TirArith.shared`): a long
    expression with shared parts, or a let-chain, grows too large for TVM's simplifier.
    A first pass of `build` counts the scratch slots."""
    t = tirx

    def body(ar: TirArith, ins, out):
        ar.restart()
        stmt = build(ar, ins, out)
        return _seq([*(t.AllocBuffer(b) for b in ar.scratch.values()), stmt])

    counting = TirArith(scratch_slots=1)
    body(counting, [t.decl_buffer(s, "int8") for s in in_shapes],
         t.decl_buffer(out_shape, "int8"))
    ar = TirArith(scratch_slots=max(counting.used.values()))
    xs = [te.placeholder(s, "int8", f"x{i}") for i, s in enumerate(in_shapes)]
    in_bufs = [t.decl_buffer(x.shape, "int8", f"x{i}_buf") for i, x in enumerate(xs)]
    out_tensor = te.compute(out_shape, lambda *i: t.const(0, "int8"))  # only for its shape
    out_buf = t.decl_buffer(out_tensor.shape, "int8", "out_buf")
    out = te.extern(out_tensor.shape, xs, lambda ins, outs: body(ar, ins, outs[0]),
                    name=name, dtype="int8", in_buffers=in_bufs, out_buffers=[out_buf])
    return Kernel(_func([*xs, out]), [])


def rows(shape: tuple[int, ...], start: int, stop: int) -> Kernel:
    """Rows [start, stop) of axis 1 of an int8 tensor (a copy: rows of NHWC with batch 1 are
    contiguous, so this is one block of bytes)."""
    x = te.placeholder(shape, "int8", "x")
    out_shape = (shape[0], stop - start, *shape[2:])
    out = te.compute(out_shape, lambda n, h, *rest: x[(n, h + start, *rest)], name="out")
    return Kernel(_func([x, out]), [])


def concat(shapes: list[tuple[int, ...]], axis: int) -> Kernel:
    """int8 tensors joined along `axis` (they share the output's quantization, as TFLite
    requires, so this is a copy)."""
    inputs = [te.placeholder(shape, "int8", f"x{i}") for i, shape in enumerate(shapes)]
    starts = np.cumsum([0] + [s[axis] for s in shapes])
    out_shape = list(shapes[0])
    out_shape[axis] = int(starts[-1])

    def body(*idx):
        value = None
        for x, start, end in reversed(list(zip(inputs, starts[:-1], starts[1:], strict=True))):
            local = list(idx)
            local[axis] = idx[axis] - int(start)
            load = x[tuple(local)]
            value = load if value is None else tirx.Select(idx[axis] < int(end), load, value)
        return value

    out = te.compute(tuple(out_shape), body, name="out")
    return Kernel(_func([*inputs, out]), [])


def softmax(shape: tuple[int, ...], input_multiplier: int, input_left_shift: int,
            diff_min: int) -> Kernel:
    """TFLite's int8 softmax over the last axis (output scale 1/256, zero point −128):
    gemmlowp's fixed-point exp of each difference from the row maximum, times the
    fixed-point reciprocal of their sum. Written as TIR statements, one row at a time,
    every fixed-point step kept in a local scratch array."""
    return _statement_kernel([shape], shape, lambda ar, ins, out: _softmax_body(
        ar, shape, input_multiplier, input_left_shift, diff_min, ins[0], out), "softmax")


def _seq(stmts: list):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def row_index(shape: tuple[int, ...], r, c) -> list:
    """The index of element `c` of row `r` of a tensor whose last axis is the row."""
    t = tirx
    idx, rest = [], r
    for d in reversed(shape[:-1]):
        idx.append(t.truncmod(rest, d) if d > 1 else t.const(0, "int32"))
        rest = t.truncdiv(rest, d)
    return [*reversed(idx), c]


def serial_loop(var, extent: int, body):
    """for (var = 0; var < extent; ++var) body, as a TIR statement."""
    return tirx.For(var, tirx.const(0, "int32"), tirx.const(extent, "int32"),
                    tirx.ForKind.SERIAL, body)


def _softmax_body(ar: TirArith, shape, input_multiplier: int, input_left_shift: int,
                  diff_min: int, xb, ob):
    t = tirx
    depth = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    i32 = "int32"

    def index(r, c):
        return row_index(shape, r, c)

    loop = serial_loop
    acc = t.decl_buffer((3,), i32, "acc")
    r, c, k = t.Var("r", i32), t.Var("c", i32), t.Var("k", i32)
    row_max, total = t.Var("row_max", i32), t.Var("sum_of_exps", i32)

    def store(slot, value):
        return t.BufferStore(acc, value, [t.const(slot, i32)])

    def slot(n):
        return t.BufferLoad(acc, [t.const(n, i32)])

    def exp_of_diff():
        d = ar.shared(t.Cast(i32, t.BufferLoad(xb, index(r, c))) - row_max)
        rescaled = ar.srdhm(d * (1 << input_left_shift), input_multiplier)
        return d, ar.shared(exp_on_negative_values(ar, ar.shared(rescaled)))

    d, e = exp_of_diff()
    term = t.Select(d >= diff_min, ar.rdbp(e, SOFTMAX_ACCUM_INTEGER_BITS), t.const(0, i32))
    sum_step = _seq([*ar.take_stores(), store(1, slot(1) + term)])
    bits = t.Var("bits", i32)
    headroom = 32 - bits
    shifted = (t.Cast("int64", total) << t.Cast("int64", headroom)) - (1 << 31)
    scale = ar.shared(one_over_one_plus_x(ar, ar.shared(t.Cast(i32, shifted))))
    scale_steps = ar.take_stores()
    d, e = exp_of_diff()
    over_unit = SOFTMAX_ACCUM_INTEGER_BITS - headroom
    value = ar.rdbp(ar.srdhm(scale, e), over_unit + 31 - 8) - 128
    out_step = _seq([*ar.take_stores(), t.BufferStore(
        ob, t.Select(d >= diff_min, _clamp_int8(value, -128, 127), t.const(-128, "int8")),
        index(r, c))])
    row = t.SeqStmt([
        store(0, t.const(-128, i32)),
        loop(c, depth, store(0, t.max(slot(0), t.Cast(i32, t.BufferLoad(xb, index(r, c)))))),
        t.LetStmt(row_max, slot(0)),
        store(1, t.const(0, i32)),
        loop(c, depth, sum_step),
        t.LetStmt(total, slot(1)),
        store(2, t.const(0, i32)),  # the sum's bit length: 32 − count leading zeros
        loop(k, 32, store(2, slot(2) + t.Select((total >> k) != 0, t.const(1, i32),
                                                t.const(0, i32)))),
        t.LetStmt(bits, slot(2)),
        *scale_steps,
        loop(c, depth, out_step),
    ])
    return t.SeqStmt([t.AllocBuffer(acc), loop(r, rows, row)])


def lookup(shape: tuple[int, ...], table: np.ndarray) -> Kernel:
    """An elementwise function of an int8 input as a 256-entry table (int8 or float32),
    indexed by x + 128: the table holds the reference kernel's exact result for every
    input value, computed at export (`tflite/lut.py`)."""
    if table.shape != (256,):
        raise ValueError(f"table of shape {table.shape}")
    dtype = str(table.dtype)
    x = te.placeholder(shape, "int8", "x")
    t = te.placeholder((256,), dtype, "table")
    out = te.compute(shape, lambda *i: t[x[i].astype("int32") + 128], name="out")
    return Kernel(_func([x, t, out]), [table], ("table",))


def binary(a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...],
           element, name: str) -> Kernel:
    """An elementwise int8 kernel of two inputs with numpy broadcasting: `element(ar, a, b)`
    gets both int32 values and returns the int8 result."""

    def index(shape, idx):
        lead = len(idx) - len(shape)
        return [tirx.const(0, "int32") if d == 1 else i
                for d, i in zip(shape, idx[lead:], strict=True)]

    def at(ar: TirArith, bufs, idx):
        a, b = bufs
        va = ar.shared(tirx.Cast("int32", tirx.BufferLoad(a, index(a_shape, idx))))
        vb = ar.shared(tirx.Cast("int32", tirx.BufferLoad(b, index(b_shape, idx))))
        return element(ar, va, vb)

    return _pointwise([a_shape, b_shape], out_shape, at, name)


def clamp_int8(value, lo: int, hi: int):
    """An int32 TIR value clamped to [lo, hi] and cast to int8."""
    return _clamp_int8(value, lo, hi)


def quantize_float(shape: tuple[int, ...], scale: float, zero: int, lo: int, hi: int,
                   offset: int = 0) -> Kernel:
    """TFLite's AffineQuantize of float32 values: round(x / scale) (in double, half away
    from zero) + zero, clamped to [lo, hi]; minus `offset` (128 for a uint8 result carried
    as int8). The scale is a float64 constant array, not a literal in the C (TVM prints
    float literals with 7 significant digits), and the rounded value is clamped in double to
    small integers before the cast to int32."""
    x = te.placeholder(shape, "float32", "x")
    s = te.placeholder((1,), "float64", "scale")

    def element(*i):
        v = x[i].astype("float64") / s[0]
        r = tirx.Select(v >= 0, tirx.floor(v + 0.5), tirx.ceil(v - 0.5))
        r = tirx.max(tirx.min(r, tirx.const(hi - zero, "float64")),
                     tirx.const(lo - zero, "float64"))
        return (r.astype("int32") + (zero - offset)).astype("int8")

    out = te.compute(shape, element, name="out")
    # opaque to TVM's fusion: fused with a reshape, FuseTIR mixes up the buffers
    return Kernel(_func([x, s, out]).with_attr("op_pattern", OP_PATTERN_OPAQUE),
                  [np.array([scale], np.float64)], ("requant",))
