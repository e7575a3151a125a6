"""TFLite operators → a Relax module whose integer operators are our kernels.

Each builtin operator has a converter (registered with `@converter`), which reads the
operator's tensors and options from `model.py`'s form and emits Relax: a `call_tir` to an
integer kernel from `qkernels.py` where the model is quantized (TFLite's reference
arithmetic, bit for bit), a Relax operator where the arithmetic is exact whatever the dtype
(reshape, transpose, slices, max) or where the model is float. A converter that cannot
take an operator raises `Unsupported` with the reason; the importer names the operator,
its index and its dtypes.

uint8 activations work on the int8 kernels: a uint8 tensor is carried as int8 (value −
128, zero point − 128), shifted at the model's edges (as `quantize.py` does for TVM's
frontend).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from generator.accel.api import QuantizedOp
from generator.accel.tir import QOP_ATTR
from generator.export import qkernels
from generator.export.fixedpoint import round_half_away
from generator.export.quantize import QuantReport
from generator.export.tflite.model import TfModel, TfOp, TfTensor

UINT8_OFFSET = 128
INTEGER_DTYPES = ("int8", "uint8")


class Unsupported(Exception):
    """This operator (with these dtypes or options) has no conversion."""


class NotMine(Unsupported):
    """This converter does not handle these dtypes: another one of the operator may. Its
    reason is shown only when no converter of the operator says more."""


Converter = Callable[["Context", TfOp], None]
# builtin operator → its converters, tried in the order they were registered: one that
# raises Unsupported passes the operator to the next (e.g. float ops in one module, the
# int16 form of the same operator in another)
CONVERTERS: dict[str, list[Converter]] = {}


def converter(*codes: str) -> Callable[[Converter], Converter]:
    """Register a converter for the builtin operators `codes`."""
    def register(fn: Converter) -> Converter:
        for code in codes:
            CONVERTERS.setdefault(code, []).append(fn)
        return fn
    return register


def convert_op(ctx: Context, op: TfOp) -> None:
    """Convert one operator with the first of its converters that takes it, or raise
    Unsupported with every converter's reason."""
    if op.index in ctx.done:
        return
    convs = CONVERTERS.get(op.code)
    if not convs:
        raise Unsupported("no converter for this operator")
    reasons: list[str] = []
    passed: list[str] = []
    for conv in convs:
        try:
            conv(ctx, op)
        except Unsupported as exc:
            bucket = passed if isinstance(exc, NotMine) else reasons
            if str(exc) not in bucket:
                bucket.append(str(exc))
            continue
        if any(o not in ctx.values and o not in ctx.absent for o in op.outputs):
            raise Unsupported("the converter left an output unset")
        for o in op.outputs:
            if o not in ctx.absent:
                _check_shape(ctx.model.tensors[o], ctx.values[o])
        return
    raise Unsupported("; ".join(reasons or passed))


@dataclass(frozen=True)
class QInfo:
    """A quantized activation as the kernels see it: int8 domain scale and zero point."""

    scale: float
    zero: int  # in the int8 domain (a uint8 zero point − 128)
    dtype: str  # the model's dtype: int8 or uint8 (int16 inside `accept_int16`)


# int16 activations reach only the converters that know them: `qinfo` takes an int16
# tensor inside `accept_int16()` (ops_int16's converters, and the layout converters they
# run), so an 8-bit converter never mistakes one for int8
_INT16_ACCEPTED: contextvars.ContextVar[bool] = contextvars.ContextVar("int16_accepted",
                                                                       default=False)


@contextlib.contextmanager
def accept_int16() -> Iterator[None]:
    """Inside the block, `Context.qinfo` takes int16 tensors (zero point as in the file)."""
    token = _INT16_ACCEPTED.set(True)
    try:
        yield
    finally:
        _INT16_ACCEPTED.reset(token)


def int8_offset(dtype: str) -> int:
    if dtype == "int8":
        return 0
    if dtype == "uint8":
        return UINT8_OFFSET
    if dtype == "int16":
        raise Unsupported("int16 tensors quantized differently (no 8-bit table for them)")
    raise Unsupported(f"{dtype} activations")


class Context:
    """The Relax graph being built: the value of each TFLite tensor so far."""

    def __init__(self, model: TfModel, builder) -> None:
        self.model = model
        self.bb = builder
        self.values: dict[int, object] = {}
        self.report = QuantReport()
        self.done: set[int] = set()  # operators already converted with an earlier one
        self.absent: set[int] = set()  # tensors a fused kernel never writes
        self._readers: dict[int, list[TfOp]] | None = None

    def sole_reader(self, tensor: int) -> TfOp | None:
        """The one operator that reads `tensor`, when exactly one does and the model does
        not return it."""
        if self._readers is None:
            self._readers = {}
            for op in self.model.ops:
                for i in set(op.inputs):
                    self._readers.setdefault(i, []).append(op)
        readers = self._readers.get(tensor, [])
        if len(readers) != 1 or tensor in self.model.outputs:
            return None
        return readers[0]

    def fused(self, first: TfOp, *later: TfOp) -> None:
        """`first`'s conversion did `later`'s too: their intermediate tensors never exist."""
        self.done.update(op.index for op in later)
        for op in (first, *later[:-1]):
            self.absent.update(op.outputs)

    # ---- tensors -------------------------------------------------------------------------

    def tensor(self, index: int) -> TfTensor:
        return self.model.tensors[index]

    def arg(self, op: TfOp, i: int) -> TfTensor | None:
        """Input `i` of `op`, None when absent (left out or -1)."""
        if i >= len(op.inputs) or op.inputs[i] < 0:
            return None
        return self.model.tensors[op.inputs[i]]

    def need(self, op: TfOp, i: int) -> TfTensor:
        t = self.arg(op, i)
        if t is None:
            raise Unsupported(f"input {i} is missing")
        return t

    def out(self, op: TfOp, i: int = 0) -> TfTensor:
        return self.model.tensors[op.outputs[i]]

    def const(self, t: TfTensor, what: str) -> np.ndarray:
        if t.data is None:
            raise Unsupported(f"{what} is not a constant")
        return t.data

    def value(self, t: TfTensor):
        """The Relax expression of a tensor: an activation, or a constant (uint8 carried as
        int8)."""

        if t.index in self.values:
            return self.values[t.index]
        if t.data is None:
            raise Unsupported(f"tensor '{t.name[:40]}' is used before it is computed")
        data = t.data
        if t.dtype == "uint8" and t.quant is not None:
            data = (data.astype(np.int16) - UINT8_OFFSET).astype(np.int8)
        expr = const(data)
        self.values[t.index] = expr
        return expr

    def set(self, t: TfTensor, expr) -> None:
        self.values[t.index] = expr

    def qinfo(self, t: TfTensor) -> QInfo:
        """A per-tensor quantized int8/uint8 activation's parameters (int16 too inside
        `accept_int16`)."""
        int16 = t.dtype == "int16" and _INT16_ACCEPTED.get()
        if t.dtype not in INTEGER_DTYPES and not int16:
            raise Unsupported(f"{t.dtype} tensor where int8 or uint8 was expected")
        if t.quant is None:
            raise Unsupported(f"{t.dtype} tensor without quantization")
        if not t.quant.per_tensor:
            raise Unsupported("per-channel activation quantization")
        return QInfo(t.quant.s, t.quant.z - (0 if int16 else int8_offset(t.dtype)), t.dtype)

    def is_quantized(self, t: TfTensor) -> bool:
        return t.quant is not None and t.dtype in ("int8", "uint8", "int16")

    # ---- emitting ------------------------------------------------------------------------

    def emit(self, expr, out: TfTensor | None = None):
        var = self.bb.emit(expr)
        if out is not None:
            self.set(out, var)
        return var

    def kernel(self, kind: str, kernel: qkernels.Kernel, args: list, out: TfTensor,
               out_shape: tuple[int, ...] | None = None, out_dtype: str = "int8",
               op: QuantizedOp | None = None, set_out: bool = True):
        """A call of an integer kernel: activations `args`, then its constants."""

        if op is not None:
            kernel = kernel.with_attr(QOP_ATTR, len(self.report.ops))
        gv = self.bb.add_func(kernel.func, f"q_{kind}")
        self.report.kernel_added(gv.name_hint, kernel)
        if op is not None:
            self.report.ops[gv.name_hint] = op
        consts = [const(c) for c in kernel.constants]
        shape = out.shape if out_shape is None else out_shape
        written = _output_shape(kernel.func, 2 if kernel.scratch is not None else 1)
        if written is not None and written != tuple(shape):
            raise Unsupported(f"the kernel writes shape {list(written)}, the model declares "
                              f"{list(shape)}")
        call = qkernels.kernel_call(self.bb.emit, gv, [*args, *consts], kernel, shape,
                                    out_dtype)
        self.report.integer.append(kind)
        for role, c in zip(kernel.constant_roles(), kernel.constants, strict=False):
            self.report.constant_bytes[role] += c.nbytes
        var = self.bb.emit(call)
        if set_out:
            self.set(out, var)
        return var


def _output_shape(func, from_end: int = 1) -> tuple[int, ...] | None:
    """The shape of a kernel's output (its last parameter, or the one before a scratch
    output), when static."""
    try:
        return tuple(int(d) for d in func.params[-from_end].shape)
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _check_shape(t: TfTensor, expr) -> None:
    """The model's declared shape of an output against what the converter computed: a
    model whose shapes do not add up is refused, not run with a wrong output."""
    ty = getattr(expr, "ty", None) or getattr(expr, "struct_info", None)
    shape = getattr(ty, "shape", None)
    if shape is None:
        return
    try:
        computed = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        return
    if computed != t.shape:
        raise Unsupported(f"the model declares output '{t.name[:40]}' as {list(t.shape)}, "
                          f"the operator computes {list(computed)}")


# ---- helpers shared by the converters ----------------------------------------------------

def const(array: np.ndarray):
    """A Relax constant of exactly `array`'s dtype (relax.const alone narrows int64 to int32
    and float64 to float32)."""
    from tvm import relax

    array = np.ascontiguousarray(array)
    return relax.const(array, str(array.dtype))


ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH",
               5: "SIGN_BIT", 6: "SIGMOID"}


def activation_name(options) -> str:
    if options is None or not hasattr(options, "FusedActivationFunction"):
        return "NONE"
    return ACTIVATIONS.get(int(options.FusedActivationFunction()), "unknown")


def activation_range(act: str, scale: float, zero: int, lo: int = -128,
                     hi: int = 127) -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized: the fused activation's limits quantized
    (zero + round(limit / scale), in float32), within the type's range."""
    def q(limit: float) -> int:
        return zero + round_half_away(np.float32(limit) / np.float32(scale))

    if act == "NONE":
        return lo, hi
    if act == "RELU":
        return max(lo, zero), hi
    if act == "RELU6":
        return max(lo, zero), min(hi, q(6.0))
    if act == "RELU_N1_TO_1":
        return max(lo, q(-1.0)), min(hi, q(1.0))
    raise Unsupported(f"fused activation {act}")


def float_activation(ctx: Context, expr, act: str):
    """A fused activation applied to a float result."""
    from tvm import relax

    if act == "NONE":
        return expr
    if act == "RELU":
        return ctx.emit(relax.op.nn.relu(expr))
    if act == "RELU6":
        return ctx.emit(relax.op.clip(expr, 0.0, 6.0))
    if act == "RELU_N1_TO_1":
        return ctx.emit(relax.op.clip(expr, -1.0, 1.0))
    if act == "TANH":
        return ctx.emit(relax.op.tanh(expr))
    if act == "SIGMOID":
        return ctx.emit(relax.op.sigmoid(expr))
    raise Unsupported(f"fused activation {act}")


def same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite's SAME padding (before, after) for one dimension."""
    effective = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def padding(options, in_hw: tuple[int, int], k_hw: tuple[int, int],
            strides: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) for an options table with Padding()."""
    if int(options.Padding()) == 1:  # VALID
        return 0, 0, 0, 0
    top, bottom = same_padding(in_hw[0], k_hw[0], strides[0], dilation[0])
    left, right = same_padding(in_hw[1], k_hw[1], strides[1], dilation[1])
    return top, left, bottom, right


def all_float(*tensors: TfTensor | None) -> bool:
    return all(t is None or (t.dtype == "float32" and t.quant is None) for t in tensors)
