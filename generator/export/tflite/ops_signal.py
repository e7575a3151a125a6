"""Unquantized integer arithmetic, CAST, and TFLite Micro's signal library operators.

Integer arithmetic (TFLite Micro's reference kernels on unquantized tensors). ADD, SUB,
MUL and DIV on int32, MINIMUM and MAXIMUM on int16, int32 and int64: C integer arithmetic
(a sum or product that overflows wraps, as TFLM's does on every compiler we know), DIV is
C's division (truncation toward zero). The fused activation clamps the result, as TFLM
does for SUB, MUL and DIV; TFLM's int32 ADD ignores it, and so do we. DIV needs a constant
divisor without 0 (undefined) or −1 (INT32_MIN / −1 overflows): a computed divisor is
refused.

CAST between int8, int16, int32, uint32, float32 (and from bool): C's static_cast, so
integers wrap modulo the narrower type, integers round to the nearest float, floats are
truncated toward zero. A float out of the target's range (or NaN) is undefined in C: a
constant one is refused; at run time such a value gives what the target's C compiler
gives, as it does in TFLM.

The signal library (TFLM's signal/ directory: the audio front end) as integer kernels of
TIR statements with the library's arithmetic, step for step (each C type's wrapping and
each shift where the C code has it): SignalWindow, SignalFftAutoScale, SignalRfft (int16:
kiss_fft's fixed-point real FFT, radix 2 and 4 stages, twiddles computed as kiss_fft
computes them), SignalEnergy, SignalFilterBank (uint64 accumulators), SignalFilterBankSquare
Root, SignalFilterBankSpectralSubtraction, SignalPCAN and SignalFilterBankLog. Constants
(window, filter bank tables, the PCAN gain table, twiddles, the log table) go to flash.

State. SignalFilterBankSpectralSubtraction keeps its noise estimate between Invokes in
TFLM. An exported model runs once per call and keeps nothing (as SVDF and the LSTM in
`ops_sequence.py`): every call starts from a zero noise estimate, which is TFLM's state at
the first Invoke after allocation or `reset`. SignalEnergy leaves the bins outside
[start_index, end_index) unwritten in TFLM (the arena's previous bytes); we write 0 there.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from generator.export import qkernels
from generator.export.tflite.convert import (
    Context,
    NotMine,
    Unsupported,
    activation_name,
    const,
    converter,
)
from generator.export.tflite.model import TfOp, TfTensor

I16, I32, I64 = "int16", "int32", "int64"
U32, U64 = "uint32", "uint64"

# ---- integer arithmetic ------------------------------------------------------------------

_BINARY_DTYPES = {"ADD": (I32,), "SUB": (I32,), "MUL": (I32,), "DIV": (I32,),
                  "MINIMUM": (I16, I32, I64), "MAXIMUM": (I16, I32, I64)}
_ACT_RANGE = {"NONE": None, "RELU": (0, None), "RELU6": (0, 6), "RELU_N1_TO_1": (-1, 1)}


def _plain(t: TfTensor) -> bool:
    return t.quant is None


def _broadcast_kernel(a_shape, b_shape, out_shape, dtype: str, element, name: str):
    """out[i] = element(a[i'], b[i'']) with numpy broadcasting (shapes aligned right)."""
    from tvm import te, tirx

    a = te.placeholder(a_shape, dtype, "a")
    b = te.placeholder(b_shape, dtype, "b")

    def at(x, shape, idx):
        idx = idx[len(idx) - len(shape):]
        return x(*(tirx.const(0, I32) if d == 1 else i for d, i in zip(shape, idx,
                                                                     strict=True)))

    out = te.compute(out_shape, lambda *i: element(at(a, a_shape, i), at(b, b_shape, i)),
                     name=name)
    func = te.create_prim_func([a, b, out]).without_attr("global_symbol")
    # opaque to TVM's fusion (fused with a cast, FuseTIR maps one var to two buffers)
    return qkernels.Kernel(func.with_attr("op_pattern", qkernels.OP_PATTERN_OPAQUE), [])


@converter("ADD", "SUB", "MUL", "DIV", "MINIMUM", "MAXIMUM")
def int_binary(ctx: Context, op: TfOp) -> None:
    """Unquantized integer arithmetic as TFLM computes it (the module docstring)."""
    from tvm import tirx

    a_t, b_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    dtype = out_t.dtype
    if not (a_t.dtype == b_t.dtype == dtype and all(map(_plain, (a_t, b_t, out_t)))
            and dtype in (I16, I32, I64)):
        raise NotMine(f"{a_t.describe()} and {b_t.describe()} → {out_t.describe()}")
    if dtype not in _BINARY_DTYPES[op.code]:
        raise Unsupported(f"unquantized {dtype} {op.code} (TFLite Micro's kernel takes "
                          f"{', '.join(_BINARY_DTYPES[op.code])})")
    rank = len(out_t.shape)
    if max(len(a_t.shape), len(b_t.shape)) > rank or (a_t.shape != b_t.shape and rank > 4):
        raise Unsupported(f"broadcasting of shapes {list(a_t.shape)} and {list(b_t.shape)}")
    if op.code == "DIV":
        divisor = ctx.const(b_t, "the divisor (TFLM's division by 0 is undefined)")
        if np.any(divisor == 0) or np.any(divisor == -1):
            raise Unsupported("a divisor of 0 or -1 (undefined in C for some dividends)")
    act = activation_name(op.options)
    if act not in _ACT_RANGE:
        raise Unsupported(f"fused activation {act} on {dtype}")
    limits = None if op.code in ("ADD", "MINIMUM", "MAXIMUM") else _ACT_RANGE[act]

    def element(x, y):
        if op.code == "ADD":
            return x + y
        if op.code == "SUB":
            value = x - y
        elif op.code == "MUL":
            value = x * y
        elif op.code == "DIV":
            value = tirx.truncdiv(x, y)
        elif op.code == "MINIMUM":
            return tirx.min(x, y)
        else:
            return tirx.max(x, y)
        if limits is not None:
            value = tirx.max(value, tirx.const(limits[0], dtype))
            if limits[1] is not None:
                value = tirx.min(value, tirx.const(limits[1], dtype))
        return value

    for shape in (a_t.shape, b_t.shape):
        if any(d not in (1, o) for d, o in zip(shape, out_t.shape[rank - len(shape):],
                                               strict=True)):
            raise Unsupported(f"shapes {list(a_t.shape)} and {list(b_t.shape)} do not "
                              f"broadcast to {list(out_t.shape)}")
    kernel = _broadcast_kernel(tuple(a_t.shape), tuple(b_t.shape), tuple(out_t.shape), dtype,
                               element, op.code.lower())
    ctx.kernel(f"{op.code.lower()}_{dtype}", kernel, [ctx.value(a_t), ctx.value(b_t)], out_t,
               out_dtype=dtype)


_CAST_IN = ("int8", I16, I32, U32, "float32", "bool")
_CAST_OUT = ("int8", I16, I32, U32, "float32")


@converter("CAST")
def cast(ctx: Context, op: TfOp) -> None:
    """TFLM's CAST: C's static_cast element by element."""
    from tvm import relax

    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    src, dst = x_t.dtype, out_t.dtype
    if src not in _CAST_IN or dst not in _CAST_OUT:
        raise Unsupported(f"CAST {src} → {dst} (TFLite Micro casts between "
                          f"{', '.join(_CAST_OUT)}, and from bool)")
    if x_t.shape != out_t.shape and int(np.prod(x_t.shape)) != int(np.prod(out_t.shape)):
        raise Unsupported(f"CAST of {list(x_t.shape)} to {list(out_t.shape)}")
    if x_t.data is not None:
        ctx.set(out_t, const(_cast_constant(x_t.data, dst).reshape(out_t.shape)))
        return
    value = ctx.value(x_t)
    if x_t.shape != out_t.shape:
        value = ctx.emit(relax.op.reshape(value, out_t.shape))
    if src == dst:
        ctx.set(out_t, value)
        return
    ctx.emit(relax.op.astype(value, dst), out_t)
    ctx.report.integer.append("cast")


def _cast_constant(data: np.ndarray, dst: str) -> np.ndarray:
    """static_cast of a constant; a float out of the target's range is refused."""
    if data.dtype.kind == "f" and dst != "float32":
        info = np.iinfo(dst)
        truncated = np.trunc(data.astype(np.float64))
        if not np.all(np.isfinite(truncated)) or truncated.min(initial=0) < info.min or \
                truncated.max(initial=0) > info.max:
            raise Unsupported(f"a constant float out of {dst}'s range (undefined in C)")
        return truncated.astype(dst)
    if dst == "float32":
        return data.astype(np.float32)
    return data.astype(np.int64).astype(dst)  # integers wrap modulo the target's width


# ---- the signal operators: plumbing ------------------------------------------------------

def _options(op: TfOp) -> dict:
    """The operator's flexbuffer options map."""
    from flatbuffers import flexbuffers

    if not op.custom_options:
        raise Unsupported("the operator has no options")
    try:
        value = flexbuffers.GetRoot(bytearray(op.custom_options)).Value
    except Exception as exc:  # a damaged flexbuffer raises anything
        raise Unsupported(f"unreadable options ({type(exc).__name__})") from exc
    if not isinstance(value, dict):
        raise Unsupported("the options are not a flexbuffer map")
    return value


def _int_option(opts: dict, key: str, lo: int, hi: int) -> int:
    value = opts.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unsupported(f"option '{key}' is missing or not an integer")
    if not lo <= value <= hi:
        raise Unsupported(f"option '{key}' = {value} is out of [{lo}, {hi}]")
    return value


def _expect(t: TfTensor, dtype: str, what: str, rank: int | None = 1) -> None:
    if t.dtype != dtype or (rank is not None and len(t.shape) != rank):
        raise Unsupported(f"{what} of {t.describe()} {list(t.shape)} ({dtype}"
                          f"{'' if rank is None else f', rank {rank}'} expected)")


def _size(t: TfTensor) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1


class _Tir:
    """Small builders of TIR statements over flat buffers."""

    def __init__(self) -> None:
        from tvm import tirx

        self.t = tirx
        self.locals: list = []
        self._n = 0

    def c(self, value: int, dtype: str = I32):
        return self.t.const(value, dtype)

    def cast(self, dtype: str, value):
        return value if str(value.ty) == dtype else self.t.Cast(dtype, value)

    def local(self, size: int, dtype: str, name: str):
        buf = self.t.decl_buffer((size,), dtype, f"{name}{len(self.locals)}")
        self.locals.append(buf)
        return buf

    def ld(self, buf, index, dtype: str | None = None):
        index = self.c(index) if isinstance(index, int) else index
        value = self.t.BufferLoad(buf, [index])
        return value if dtype is None else self.cast(dtype, value)

    def st(self, buf, value, index):
        index = self.c(index) if isinstance(index, int) else index
        return self.t.BufferStore(buf, self.cast(str(buf.dtype), value), [index])

    def loop(self, extent, body: Callable):
        self._n += 1
        var = self.t.Var(f"i{self._n}", I32)
        extent = self.c(extent) if isinstance(extent, int) else extent
        return self.t.For(var, self.c(0), extent, self.t.ForKind.SERIAL, body(var))

    def seq(self, *stmts):
        flat = [s for s in stmts if s is not None]
        return flat[0] if len(flat) == 1 else self.t.SeqStmt(flat)

    def when(self, cond, then, otherwise=None):
        return self.t.IfThenElse(cond, then, otherwise)

    def msb(self, value, into, bits: int):
        """into[0] ← TFLM's MostSignificantBit (GCC's form: `bits` for 0, else the index
        of the highest set bit plus 1), of an unsigned value of `bits` bits."""
        dtype = str(value.ty)
        return self.seq(
            self.st(into, self.c(0), 0),
            self.loop(bits, lambda b: self.when(
                self.t.shift_right(value, self.cast(dtype, b)) != self.c(0, dtype),
                self.st(into, b + 1, 0))),
            self.when(value == self.c(0, dtype), self.st(into, self.c(bits), 0)))

    def body(self, stmt):
        return self.seq(*(self.t.AllocBuffer(b) for b in self.locals), stmt)


def _zeros(dtype: str):
    from tvm import tirx

    return lambda i: tirx.const(0, dtype)


def _extern(name: str, ins: list[tuple[int, str]], outs: list[tuple[int, str]],
            build: Callable[[_Tir, list, list], object]):
    """A PrimFunc over flat buffers: `ins` then `outs` (size, dtype), the body from
    `build(tir, in_buffers, out_buffers)`."""
    from tvm import te, tirx

    xs = [te.placeholder((n,), d, f"x{i}") for i, (n, d) in enumerate(ins)]
    in_bufs = [tirx.decl_buffer(x.shape, d, f"x{i}_buf")
               for i, (x, (_, d)) in enumerate(zip(xs, ins, strict=True))]
    shaped = [te.compute((n,), _zeros(d)) for n, d in outs]
    out_bufs = [tirx.decl_buffer(s.shape, d, f"out{i}_buf")
                for i, (s, (_, d)) in enumerate(zip(shaped, outs, strict=True))]

    def body(ins_, outs_):
        tir = _Tir()
        stmt = build(tir, ins_, outs_)
        return tir.body(stmt)

    result = te.extern([s.shape for s in shaped], xs, body, name=name,
                       dtype=[d for _, d in outs], in_buffers=in_bufs, out_buffers=out_bufs)
    if not isinstance(result, list):
        result = [result]
    func = te.create_prim_func([*xs, *result]).without_attr("global_symbol")
    return func.with_attr("op_pattern", qkernels.OP_PATTERN_OPAQUE)


def _call(ctx: Context, kind: str, func, args: list[TfTensor], consts: list[np.ndarray],
          outs: list[TfTensor]) -> None:
    """Call a flat kernel: activations flattened, constants after them, each output
    reshaped to the model's shape."""
    from tvm import relax

    values = []
    for t in args:
        v = ctx.value(t)
        if len(t.shape) != 1:
            v = ctx.emit(relax.op.reshape(v, (_size(t),)))
        values.append(v)
    values += [const(c) for c in consts]
    types = [relax.TensorType((_size(t),), t.dtype) for t in outs]
    gv = ctx.bb.add_func(func, f"signal_{kind}")
    result = ctx.emit(relax.call_tir(gv, values, types if len(types) > 1 else types[0]))
    for i, t in enumerate(outs):
        v = ctx.emit(relax.TupleGetItem(result, i)) if len(outs) > 1 else result
        if len(t.shape) != 1:
            v = ctx.emit(relax.op.reshape(v, t.shape))
        ctx.set(t, v)
    ctx.report.integer.append(kind)
    for c in consts:
        ctx.report.constant_bytes["weights"] += c.nbytes


# ---- SignalWindow ------------------------------------------------------------------------

@converter("SignalWindow")
def window(ctx: Context, op: TfOp) -> None:
    """out = clamp((x · w) >> shift) to int16, the window repeated along the input."""
    x_t, w_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    _expect(x_t, I16, "the input", None)
    _expect(w_t, I16, "the window")
    _expect(out_t, I16, "the output", len(x_t.shape))
    weights = ctx.const(w_t, "the window")
    shift = _int_option(_options(op), "shift", 0, 31)
    n, size = _size(x_t), w_t.shape[0]
    if size == 0 or n % size or _size(out_t) != n:
        raise Unsupported(f"a window of {size} over {n} samples")

    def build(tir: _Tir, ins, outs):
        t = tir.t

        def body(i):
            raw = t.shift_right(tir.ld(ins[0], i, I32) * tir.ld(ins[1], t.truncmod(i, size),
                                                                   I32), tir.c(shift))
            return tir.st(outs[0], t.max(t.min(raw, tir.c(32767)), tir.c(-32768)), i)
        return tir.loop(n, body)

    func = _extern("signal_window", [(n, I16), (size, I16)], [(n, I16)], build)
    _call(ctx, "window", func, [x_t], [weights.astype(np.int16)], [out_t])


# ---- SignalFftAutoScale ------------------------------------------------------------------

@converter("SignalFftAutoScale")
def fft_auto_scale(ctx: Context, op: TfOp) -> None:
    """The input shifted left until its largest magnitude uses 15 bits; the shift too."""
    x_t, out_t, bits_t = ctx.need(op, 0), ctx.out(op, 0), ctx.out(op, 1)
    _expect(x_t, I16, "the input")
    _expect(out_t, I16, "the output")
    _expect(bits_t, I32, "the scale bits", 0)
    n = x_t.shape[0]
    if out_t.shape != x_t.shape:
        raise Unsupported("the output's shape differs from the input's")

    def build(tir: _Tir, ins, outs):
        t = tir.t
        top = tir.local(1, I16, "max")
        m = tir.local(1, I32, "msb")

        def scan(i):
            v = tir.ld(ins[0], i, I32)
            best = tir.ld(top, 0, I32)
            return tir.when(v > best, tir.st(top, v, 0),
                            tir.when(-v > best, tir.st(top, -v, 0)))

        scale = tir.ld(outs[1], 0)
        return tir.seq(
            tir.st(top, tir.c(0), 0),
            tir.loop(n, scan),
            tir.msb(tir.cast(U32, tir.ld(top, 0, I32)), m, 32),
            tir.st(outs[1], t.max(tir.c(15) - tir.ld(m, 0), tir.c(0)), 0),
            tir.loop(n, lambda i: tir.st(
                outs[0], tir.ld(ins[0], i, I32) * t.shift_left(tir.c(1), scale), i)))

    func = _extern("signal_fft_auto_scale", [(n, I16)], [(n, I16), (1, I32)], build)
    _call(ctx, "fft_auto_scale", func, [x_t], [], [out_t, bits_t])


# ---- SignalRfft (kiss_fft, FIXED_POINT 16) -----------------------------------------------

SAMP_MAX = 32767


def _factors(n: int) -> list[tuple[int, int]]:
    """kiss_fft's kf_factor: (radix, remaining length) pairs, powers of 4 first."""
    out, p = [], 4
    floor_sqrt = math.floor(math.sqrt(n))
    while True:
        while n % p:
            p = {4: 2, 2: 3}.get(p, p + 2)
            if p > floor_sqrt:
                p = n
        n //= p
        out.append((p, n))
        if n <= 1:
            return out


def _twiddle(phase: float) -> tuple[int, int]:
    return (math.floor(0.5 + SAMP_MAX * math.cos(phase)),
            math.floor(0.5 + SAMP_MAX * math.sin(phase)))


def _rfft_tables(fft_length: int):
    """The complex FFT's factors, its input order, its twiddles and the real FFT's
    twiddles, as kiss_fftr_alloc computes them."""
    n = fft_length // 2
    factors = _factors(n)
    twiddles = [_twiddle(-2 * math.pi * i / n) for i in range(n)]
    pi = 3.14159265358979323846264338327
    supers = [_twiddle(-pi * ((i + 1) / n + 0.5)) for i in range(n // 2)]
    order = np.zeros(n, np.int32)

    def place(out_at: int, in_at: int, stride: int, level: int) -> None:
        p, m = factors[level]
        for j in range(p):
            if m == 1:
                order[out_at + j] = in_at + j * stride
            else:
                place(out_at + j * m, in_at + j * stride, stride * p, level + 1)

    place(0, 0, 1, 0)
    return (factors, order, np.array(twiddles, np.int16).reshape(-1),
            np.array(supers, np.int16).reshape(-1))


class _Fft:
    """kiss_fft's fixed-point complex arithmetic on an int16 buffer of (re, im) pairs:
    products in int32, sround = (x + 2^14) >> 15, each value stored as int16."""

    def __init__(self, tir: _Tir, tw) -> None:
        self.tir, self.tw = tir, tw

    def re(self, buf, k):
        return self.tir.ld(buf, k * 2, I32)

    def im(self, buf, k):
        return self.tir.ld(buf, k * 2 + 1, I32)

    def sround(self, x):
        t = self.tir.t
        return self.tir.cast(I32, self.tir.cast(I16, t.shift_right(x + self.tir.c(1 << 14),
                                                                   self.tir.c(15))))

    def put(self, buf, k, r, i):
        return self.tir.seq(self.tir.st(buf, r, k * 2), self.tir.st(buf, i, k * 2 + 1))

    def fixdiv(self, buf, k, div: int):
        c = self.tir.c(SAMP_MAX // div)
        return self.tir.seq(self.tir.st(buf, self.sround(self.re(buf, k) * c), k * 2),
                            self.tir.st(buf, self.sround(self.im(buf, k) * c), k * 2 + 1))

    def mul(self, dst, d, src, s, tw_index):
        """dst[d] = src[s] · twiddle[tw_index] (C_MUL)."""
        ar, ai = self.re(src, s), self.im(src, s)
        br, bi = self.re(self.tw, tw_index), self.im(self.tw, tw_index)
        return self.put(dst, d, self.sround(ar * br - ai * bi), self.sround(ar * bi + ai * br))

    def bfly2(self, f, base, k, m: int, fstride: int, s):
        f0, f1 = base + k, base + k + m
        return self.tir.seq(
            self.fixdiv(f, f0, 2), self.fixdiv(f, f1, 2),
            self.mul(s, 0, f, f1, k * fstride),
            self.put(f, f1, self.re(f, f0) - self.re(s, 0), self.im(f, f0) - self.im(s, 0)),
            self.put(f, f0, self.re(f, f0) + self.re(s, 0), self.im(f, f0) + self.im(s, 0)))

    def bfly4(self, f, base, k, m: int, fstride: int, s):
        f0, f1, f2, f3 = (base + k + q * m for q in range(4))
        re, im, put = self.re, self.im, self.put
        return self.tir.seq(
            *(self.fixdiv(f, x, 4) for x in (f0, f1, f2, f3)),
            self.mul(s, 0, f, f1, k * fstride),
            self.mul(s, 1, f, f2, k * (2 * fstride)),
            self.mul(s, 2, f, f3, k * (3 * fstride)),
            put(s, 5, re(f, f0) - re(s, 1), im(f, f0) - im(s, 1)),
            put(f, f0, re(f, f0) + re(s, 1), im(f, f0) + im(s, 1)),
            put(s, 3, re(s, 0) + re(s, 2), im(s, 0) + im(s, 2)),
            put(s, 4, re(s, 0) - re(s, 2), im(s, 0) - im(s, 2)),
            put(f, f2, re(f, f0) - re(s, 3), im(f, f0) - im(s, 3)),
            put(f, f0, re(f, f0) + re(s, 3), im(f, f0) + im(s, 3)),
            put(f, f1, re(s, 5) + im(s, 4), im(s, 5) - re(s, 4)),
            put(f, f3, re(s, 5) - im(s, 4), im(s, 5) + re(s, 4)))


@converter("SignalRfft")
def rfft(ctx: Context, op: TfOp) -> None:
    """int16 real FFT: kiss_fftr with FIXED_POINT 16, the input zero-padded."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    opts = _options(op)
    if opts.get("T") != 7:
        raise Unsupported(f"SignalRfft of TFLite type {opts.get('T')} (int16 only)")
    length = _int_option(opts, "fft_length", 2, 1 << 15)
    _expect(x_t, I16, "the input", None)
    _expect(out_t, I16, "the output", len(x_t.shape))
    if length & (length - 1):
        raise Unsupported(f"fft_length {length} (a power of 2 is supported)")
    width = x_t.shape[-1] if x_t.shape else 1
    half = length // 2
    batches = _size(x_t) // max(width, 1)
    if not 0 < width <= length or out_t.shape[-1] != 2 * (half + 1) or \
            _size(out_t) != batches * 2 * (half + 1):
        raise Unsupported(f"input {list(x_t.shape)} and output {list(out_t.shape)} for "
                          f"fft_length {length}")
    factors, order, twiddles, supers = _rfft_tables(length)
    if any(p not in (2, 4) for p, _ in factors):
        raise Unsupported(f"fft_length {length}")
    out_n = 2 * (half + 1)

    def build(tir: _Tir, ins, outs):
        t = tir.t
        x, order_b, tw_b, sup_b = ins
        out = outs[0]
        f = tir.local(2 * half, I16, "fft")
        s = tir.local(12, I16, "scratch")
        tdc = tir.local(4, I16, "pair")  # fpk, fpnk / tdc
        g = tir.local(4, I16, "pair2")  # f1k, f2k
        tw = tir.local(2, I16, "tw")
        fft = _Fft(tir, tw_b)

        def per_batch(b):
            def sample(j):
                inside = j < tir.c(width)
                load = tir.ld(x, b * width + t.min(j, tir.c(width - 1)), I32)
                return t.Select(inside, load, tir.c(0))

            def leaf(k):
                src = tir.ld(order_b, k)
                return fft.put(f, k, sample(src * 2), sample(src * 2 + 1))

            stages = []
            fstride = 1
            strides = []
            for p, m in factors:
                strides.append((p, m, fstride))
                fstride *= p
            for p, m, fs in reversed(strides):
                bfly = fft.bfly4 if p == 4 else fft.bfly2
                stages.append(tir.loop(fs, lambda blk, p=p, m=m, fs=fs, bfly=bfly: tir.loop(
                    m, lambda k: bfly(f, blk * (p * m), k, m, fs, s))))
            o = b * out_n
            re, im, put = fft.re, fft.im, fft.put

            def post(k0):
                k = k0 + 1
                hk = half - k
                return tir.seq(
                    put(tdc, 0, re(f, k), im(f, k)),
                    put(tdc, 1, re(f, hk), -im(f, hk)),
                    fft.fixdiv(tdc, 0, 2), fft.fixdiv(tdc, 1, 2),
                    put(g, 0, re(tdc, 0) + re(tdc, 1), im(tdc, 0) + im(tdc, 1)),
                    put(g, 1, re(tdc, 0) - re(tdc, 1), im(tdc, 0) - im(tdc, 1)),
                    _mul_super(fft, tir, tw, g, sup_b, k - 1),
                    tir.st(out, t.shift_right(re(g, 0) + re(tw, 0), tir.c(1)), o + 2 * k),
                    tir.st(out, t.shift_right(im(g, 0) + im(tw, 0), tir.c(1)), o + 2 * k + 1),
                    tir.st(out, t.shift_right(re(g, 0) - re(tw, 0), tir.c(1)), o + 2 * hk),
                    tir.st(out, t.shift_right(im(tw, 0) - im(g, 0), tir.c(1)),
                           o + 2 * hk + 1))

            return tir.seq(
                tir.loop(half, leaf), *stages,
                put(tdc, 0, re(f, 0), im(f, 0)), fft.fixdiv(tdc, 0, 2),
                tir.st(out, re(tdc, 0) + im(tdc, 0), o),
                tir.st(out, re(tdc, 0) - im(tdc, 0), o + 2 * half),
                tir.st(out, tir.c(0), o + 2 * half + 1), tir.st(out, tir.c(0), o + 1),
                tir.loop(half // 2, post))

        return tir.loop(batches, per_batch)

    func = _extern("signal_rfft", [(_size(x_t), I16), (half, I32), (twiddles.size, I16),
                                   (max(supers.size, 1), I16)],
                   [(batches * out_n, I16)], build)
    consts = [order.astype(np.int32), twiddles, supers if supers.size else np.zeros(1, I16)]
    _call(ctx, "rfft", func, [x_t], consts, [out_t])


def _mul_super(fft: _Fft, tir: _Tir, dst, src, table, index):
    """dst[0] = src[1] · table[index] (C_MUL with the real FFT's twiddles)."""
    ar, ai = fft.re(src, 1), fft.im(src, 1)
    br, bi = tir.ld(table, index * 2, I32), tir.ld(table, index * 2 + 1, I32)
    return fft.put(dst, 0, fft.sround(ar * br - ai * bi), fft.sround(ar * bi + ai * br))


# ---- SignalEnergy ------------------------------------------------------------------------

@converter("SignalEnergy")
def energy(ctx: Context, op: TfOp) -> None:
    """|bin|² of the complex int16 bins in [start_index, end_index), as uint32."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    _expect(x_t, I16, "the input")
    _expect(out_t, U32, "the output")
    opts = _options(op)
    start = _int_option(opts, "start_index", 0, 1 << 30)
    end = _int_option(opts, "end_index", 0, 1 << 30)
    n = out_t.shape[0]
    if end > min(n, x_t.shape[0] // 2):
        raise Unsupported(f"end_index {end} past the spectrum ({x_t.shape[0] // 2} bins, "
                          f"{n} outputs)")

    def build(tir: _Tir, ins, outs):
        t = tir.t

        def body(i):
            re = tir.ld(ins[0], i * 2, I32)
            im = tir.ld(ins[0], i * 2 + 1, I32)
            value = tir.cast(U32, re * re) + tir.cast(U32, im * im)
            inside = t.And(i >= tir.c(start), i < tir.c(end))
            return tir.st(outs[0], t.Select(inside, value, tir.c(0, U32)), i)
        return tir.loop(n, body)

    func = _extern("signal_energy", [(x_t.shape[0], I16)], [(n, U32)], build)
    _call(ctx, "energy", func, [x_t], [], [out_t])


# ---- SignalFilterBank --------------------------------------------------------------------

@converter("SignalFilterBank")
def filter_bank(ctx: Context, op: TfOp) -> None:
    """Triangular filters over the energy bins, uint64 accumulators (weights and unweights
    of each channel's bins: a bin's unweighted part goes to the next channel)."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    _expect(x_t, U32, "the input")
    _expect(out_t, U64, "the output")
    channels = _int_option(_options(op), "num_channels", 1, 1 << 14)
    tables = []
    for i, what in enumerate(["weights", "unweights", "channel frequency starts",
                              "channel weight starts", "channel widths"], 1):
        t = ctx.need(op, i)
        _expect(t, I16, f"the {what}")
        tables.append(ctx.const(t, f"the {what}").astype(np.int64))
    weights, unweights, freq_starts, weight_starts, widths = tables
    if out_t.shape[0] != channels or any(len(a) < channels + 1 for a in tables[2:]) or \
            len(unweights) != len(weights):
        raise Unsupported(f"{channels} channels with tables of {[len(a) for a in tables]}")
    for c in range(channels + 1):
        fs, ws, width = freq_starts[c], weight_starts[c], widths[c]
        if width < 0 or fs < 0 or ws < 0 or (width and (fs + width > x_t.shape[0] or
                                                        ws + width > len(weights))):
            raise Unsupported(f"channel {c} reads outside the input or the weights")

    def build(tir: _Tir, ins, outs):
        x, w, uw, fsb, wsb, wdb = ins
        acc = tir.local(2, U64, "acc")

        def channel(c):
            fs, ws = tir.ld(fsb, c, I32), tir.ld(wsb, c, I32)

            def tap(j):
                value = tir.cast(U64, tir.ld(x, fs + j))
                return tir.seq(
                    tir.st(acc, tir.ld(acc, 0) + tir.cast(U64, tir.ld(w, ws + j, I64)) * value,
                           0),
                    tir.st(acc, tir.ld(acc, 1) + tir.cast(U64, tir.ld(uw, ws + j, I64))
                           * value, 1))

            return tir.seq(
                tir.loop(tir.ld(wdb, c, I32), tap),
                tir.when(c > tir.c(0), tir.st(outs[0], tir.ld(acc, 0), c - 1)),
                tir.st(acc, tir.ld(acc, 1), 0), tir.st(acc, tir.c(0, U64), 1))

        return tir.seq(tir.st(acc, tir.c(0, U64), 0), tir.st(acc, tir.c(0, U64), 1),
                       tir.loop(channels + 1, channel))

    n = channels + 1
    func = _extern("signal_filter_bank", [(x_t.shape[0], U32), (len(weights), I16),
                                          (len(weights), I16), (n, I16), (n, I16), (n, I16)],
                   [(channels, U64)], build)
    consts = [a.astype(np.int16) for a in (weights, unweights)] + \
        [a[:n].astype(np.int16) for a in tables[2:]]
    _call(ctx, "filter_bank", func, [x_t], consts, [out_t])


# ---- SignalFilterBankSquareRoot ----------------------------------------------------------

def _sqrt(tir: _Tir, value, bits: int, num, res, bit, msb):
    """TFLM's Sqrt32 (bits 32) or Sqrt64's long path (bits 64): res[0] ← the rounded root
    of `value`, with num, res, bit scratch of the same width."""
    t = tir.t
    dtype = str(num.dtype)
    top = bits - 1
    max_bit = t.bitwise_or(tir.c(bits) - tir.ld(msb, 0), tir.c(1))
    one = tir.c(1, dtype)
    limit = tir.c(0xFFFF if bits == 32 else 0xFFFFFFFF, dtype)

    def step(_):
        n, r, b = tir.ld(num, 0), tir.ld(res, 0), tir.ld(bit, 0)
        return tir.seq(
            tir.when(n >= r + b,
                     tir.seq(tir.st(num, n - (r + b), 0),
                             tir.st(res, t.shift_right(r, one) + b, 0)),
                     tir.st(res, t.shift_right(r, one), 0)),
            tir.st(bit, t.shift_right(tir.ld(bit, 0), tir.c(2, dtype)), 0))

    return tir.seq(
        tir.st(num, value, 0), tir.st(res, tir.c(0, dtype), 0),
        tir.msb(value, msb, bits),
        tir.st(bit, t.shift_left(one, tir.cast(dtype, tir.c(top) - max_bit)), 0),
        tir.loop(t.truncdiv(tir.c(top) - max_bit, tir.c(2)) + tir.c(1), step),
        tir.when(t.And(tir.ld(num, 0) > tir.ld(res, 0), tir.ld(res, 0) != limit),
                 tir.st(res, tir.ld(res, 0) + one, 0)))


@converter("SignalFilterBankSquareRoot")
def filter_bank_square_root(ctx: Context, op: TfOp) -> None:
    """out = Sqrt64(x) >> scale_bits (the scale from SignalFftAutoScale)."""
    x_t, bits_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.out(op)
    _expect(x_t, U64, "the input")
    _expect(bits_t, I32, "the scale bits", 0)
    _expect(out_t, U32, "the output")
    n = x_t.shape[0]
    if out_t.shape[0] != n:
        raise Unsupported("the output's length differs from the input's")

    def build(tir: _Tir, ins, outs):
        t = tir.t
        n32, r32, b32 = (tir.local(1, U32, k) for k in ("num", "res", "bit"))
        n64, r64, b64 = (tir.local(1, U64, k) for k in ("num", "res", "bit"))
        msb = tir.local(1, I32, "msb")
        shift = tir.cast(U32, tir.ld(ins[1], 0))

        def body(i):
            v = tir.ld(ins[0], i)
            small = t.shift_right(v, tir.c(32, U64)) == tir.c(0, U64)
            v32 = tir.cast(U32, v)
            root32 = tir.seq(
                tir.when(v32 == tir.c(0, U32), tir.st(r32, tir.c(0, U32), 0),
                         _sqrt(tir, v32, 32, n32, r32, b32, msb)),
                tir.st(outs[0], t.shift_right(tir.cast(U32, tir.cast("uint16", tir.ld(r32, 0))),
                                              shift), i))
            root64 = tir.seq(
                _sqrt(tir, v, 64, n64, r64, b64, msb),
                tir.st(outs[0], t.shift_right(tir.cast(U32, tir.ld(r64, 0)), shift), i))
            return tir.when(small, root32, root64)

        return tir.loop(n, body)

    func = _extern("signal_filter_bank_sqrt", [(n, U64), (1, I32)], [(n, U32)], build)
    _call(ctx, "filter_bank_square_root", func, [x_t, bits_t], [], [out_t])


# ---- SignalFilterBankSpectralSubtraction -------------------------------------------------

@converter("SignalFilterBankSpectralSubtraction")
def spectral_subtraction(ctx: Context, op: TfOp) -> None:
    """Noise subtraction from a zero noise estimate (TFLM's first Invoke): the output and
    the updated estimate."""
    x_t, out_t, noise_t = ctx.need(op, 0), ctx.out(op, 0), ctx.out(op, 1)
    for t, what in ((x_t, "the input"), (out_t, "the output"), (noise_t, "the estimate")):
        _expect(t, U32, what)
    opts = _options(op)
    n = _int_option(opts, "num_channels", 1, 1 << 16)
    if not x_t.shape[0] == out_t.shape[0] == noise_t.shape[0] == n:
        raise Unsupported(f"num_channels {n} with tensors of {x_t.shape[0]} channels")
    big = 2**31 - 1
    smoothing = [_int_option(opts, k, 0, big) for k in ("smoothing", "alternate_smoothing")]
    for key in ("one_minus_smoothing", "alternate_one_minus_smoothing"):
        _int_option(opts, key, 0, big)  # checked; they multiply the zero initial estimate
    floor_mult = _int_option(opts, "min_signal_remaining", 0, big)
    bits = _int_option(opts, "smoothing_bits", 0, 31)
    sub_bits = _int_option(opts, "spectral_subtraction_bits", 0, 63)
    clamping = opts.get("clamping")
    if not isinstance(clamping, bool):
        raise Unsupported("option 'clamping' is missing or not a bool")

    def build(tir: _Tir, ins, outs):
        t = tir.t
        est = tir.local(1, U32, "estimate")

        def body(i):
            x = tir.ld(ins[0], i)
            odd = t.bitwise_and(i, tir.c(1)) == tir.c(1)
            smooth = t.Select(odd, tir.c(smoothing[1], U64), tir.c(smoothing[0], U64))
            up = t.shift_left(x, tir.c(bits, U32))
            noise = tir.cast(U32, t.shift_right(tir.cast(U64, up) * smooth,
                                                tir.c(sub_bits, U64)))
            floor = tir.cast(U32, t.shift_right(tir.cast(U64, x) * tir.c(floor_mult, U64),
                                                tir.c(sub_bits, U64)))
            e = tir.ld(est, 0)
            sub = t.shift_right(up - e, tir.c(bits, U32))
            return tir.seq(
                tir.st(est, noise, 0),
                tir.st(outs[1], noise, i),
                tir.when(e > up, tir.seq(tir.st(est, up, 0),
                                         tir.st(outs[1], up, i) if clamping else None)),
                tir.st(outs[0], t.max(sub, floor), i))

        return tir.loop(n, body)

    func = _extern("signal_spectral_subtraction", [(n, U32)], [(n, U32), (n, U32)], build)
    _call(ctx, "spectral_subtraction", func, [x_t], [], [out_t, noise_t])


# ---- SignalPCAN --------------------------------------------------------------------------

PCAN_SNR_BITS, PCAN_OUTPUT_BITS = 12, 6
PCAN_LUT_SIZE = 4 * 32 - 6 + 3  # the largest index WideDynamicFunction reads, plus 1


@converter("SignalPCAN")
def pcan(ctx: Context, op: TfOp) -> None:
    """Per-channel automatic gain control: gain from the noise estimate through the gain
    table, then the shrink."""
    x_t, noise_t, lut_t, out_t = (ctx.need(op, 0), ctx.need(op, 1), ctx.need(op, 2),
                                  ctx.out(op))
    for t, what in ((x_t, "the input"), (noise_t, "the noise estimate"), (out_t, "the output")):
        _expect(t, U32, what)
    _expect(lut_t, I16, "the gain table")
    lut = ctx.const(lut_t, "the gain table")
    if len(lut) < PCAN_LUT_SIZE:
        raise Unsupported(f"a gain table of {len(lut)} entries ({PCAN_LUT_SIZE} are read)")
    snr_shift = _int_option(_options(op), "snr_shift", 0, 63)
    n = x_t.shape[0]
    if noise_t.shape[0] < n or out_t.shape[0] != n:
        raise Unsupported("the noise estimate or the output is shorter than the input")

    def build(tir: _Tir, ins, outs):
        t = tir.t
        x_b, noise_b, lut_b = ins
        msb = tir.local(1, I32, "msb")
        gain = tir.local(1, I32, "gain")

        def wide(v):
            interval = tir.ld(msb, 0)
            base = interval * tir.c(4) - tir.c(6)
            shifted = t.Select(interval < tir.c(11),
                               t.shift_left(v, tir.cast(U32, tir.c(11) - interval)),
                               t.shift_right(v, tir.cast(U32, interval - tir.c(11))))
            frac = tir.cast(I32, t.bitwise_and(shifted, tir.c(0x3FF, U32)))
            r = t.shift_right(tir.ld(lut_b, base + 2, I32) * frac, tir.c(5))
            r = r + tir.ld(lut_b, base + 1, I32) * tir.c(32)
            r = t.shift_right(r * frac + tir.c(1 << 14), tir.c(15))
            return tir.cast(I32, tir.cast(I16, r + tir.ld(lut_b, base, I32)))

        def body(i):
            v = tir.ld(noise_b, i)
            small = v <= tir.c(2, U32)
            snr = tir.cast(U32, t.shift_right(
                tir.cast(U64, tir.ld(x_b, i)) * tir.cast(U64, tir.cast(U32, tir.ld(gain, 0))),
                tir.c(snr_shift, U64)))
            shrink = t.Select(
                snr < tir.c(2 << PCAN_SNR_BITS, U32),
                t.shift_right(snr * snr, tir.c(2 + 2 * PCAN_SNR_BITS - PCAN_OUTPUT_BITS, U32)),
                t.shift_right(snr, tir.c(PCAN_SNR_BITS - PCAN_OUTPUT_BITS, U32))
                - tir.c(1 << PCAN_OUTPUT_BITS, U32))
            return tir.seq(
                tir.when(small, tir.st(gain, tir.ld(lut_b, t.min(tir.cast(I32, v), tir.c(2)),
                                                    I32), 0),
                         tir.seq(tir.msb(v, msb, 32), tir.st(gain, wide(v), 0))),
                tir.st(outs[0], shrink, i))

        return tir.loop(n, body)

    func = _extern("signal_pcan", [(n, U32), (noise_t.shape[0], U32), (len(lut), I16)],
                   [(n, U32)], build)
    _call(ctx, "pcan", func, [x_t, noise_t], [lut.astype(np.int16)], [out_t])


# ---- SignalFilterBankLog -----------------------------------------------------------------

# TFLM's log2 correction table (signal/src/log.cc): 128 segments and one past the end
LOG_LUT = np.array([
    0, 224, 442, 654, 861, 1063, 1259, 1450, 1636, 1817, 1992, 2163, 2329, 2490, 2646, 2797,
    2944, 3087, 3224, 3358, 3487, 3611, 3732, 3848, 3960, 4068, 4172, 4272, 4368, 4460, 4549,
    4633, 4714, 4791, 4864, 4934, 5001, 5063, 5123, 5178, 5231, 5280, 5326, 5368, 5408, 5444,
    5477, 5507, 5533, 5557, 5578, 5595, 5610, 5622, 5631, 5637, 5640, 5641, 5638, 5633, 5626,
    5615, 5602, 5586, 5568, 5547, 5524, 5498, 5470, 5439, 5406, 5370, 5332, 5291, 5249, 5203,
    5156, 5106, 5054, 5000, 4944, 4885, 4825, 4762, 4697, 4630, 4561, 4490, 4416, 4341, 4264,
    4184, 4103, 4020, 3935, 3848, 3759, 3668, 3575, 3481, 3384, 3286, 3186, 3084, 2981, 2875,
    2768, 2659, 2549, 2437, 2323, 2207, 2090, 1971, 1851, 1729, 1605, 1480, 1353, 1224, 1094,
    963, 830, 695, 559, 421, 282, 142, 0, 0], np.int32)
LOG_COEFF = 45426  # ln(2) in Q16


@converter("SignalFilterBankLog")
def filter_bank_log(ctx: Context, op: TfOp) -> None:
    """out = min(output_scale · ln(x << input_correction_bits), INT16_MAX) in fixed point
    (0 for x << bits ≤ 1)."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    _expect(x_t, U32, "the input")
    _expect(out_t, I16, "the output")
    opts = _options(op)
    correction = _int_option(opts, "input_correction_bits", 0, 31)
    scale = _int_option(opts, "output_scale", -2**31, 2**31 - 1) & 0xFFFFFFFF
    n = x_t.shape[0]
    if out_t.shape[0] != n:
        raise Unsupported("the output's length differs from the input's")

    def build(tir: _Tir, ins, outs):
        t = tir.t
        msb = tir.local(1, I32, "msb")
        frac_b = tir.local(1, I32, "frac")

        def body(i):
            x = t.shift_left(tir.ld(ins[0], i), tir.c(correction, U32))
            integer = tir.ld(msb, 0) - tir.c(1)
            start = tir.cast(I32, tir.cast(I64, x) - t.shift_left(tir.c(1, I64),
                                                                  tir.cast(I64, integer)))
            frac = tir.ld(frac_b, 0)
            seg = t.shift_right(tir.cast(U32, frac), tir.c(9, U32))
            c0 = tir.ld(ins[1], tir.cast(I32, seg))
            c1 = tir.ld(ins[1], tir.cast(I32, seg) + tir.c(1))
            rel = t.shift_right((c1 - c0) * (frac - tir.cast(I32, seg * tir.c(512, U32))),
                                tir.c(16))
            fraction = tir.cast(U32, frac + c0 + rel)
            log2 = t.shift_left(tir.cast(U32, integer), tir.c(16, U32)) + fraction
            loge = tir.cast(U32, t.shift_right(tir.c(LOG_COEFF, U64) * tir.cast(U64, log2)
                                               + tir.c(32768, U64), tir.c(16, U64)))
            scaled = t.shift_right(tir.c(scale, U32) * loge + tir.c(32768, U32),
                                   tir.c(16, U32))
            return tir.when(
                x > tir.c(1, U32),
                tir.seq(
                    tir.msb(x, msb, 32),
                    tir.st(frac_b, start, 0),
                    tir.when(integer < tir.c(16),
                             tir.st(frac_b, t.shift_left(frac, tir.c(16) - integer), 0),
                             tir.st(frac_b, t.shift_right(frac, integer - tir.c(16)), 0)),
                    tir.st(outs[0], tir.cast(I32, t.min(scaled, tir.c(32767, U32))), i)),
                tir.st(outs[0], tir.c(0), i))

        return tir.loop(n, body)

    func = _extern("signal_filter_bank_log", [(n, U32), (len(LOG_LUT), I32)], [(n, I16)],
                   build)
    _call(ctx, "filter_bank_log", func, [x_t], [LOG_LUT], [out_t])
