"""Quantized models stay integer: the frontend's dequantize → float op → quantize patterns
become int8 kernels with TFLite's arithmetic.

TVM 0.27's TFLite frontend writes every quantized operator as float math between
`dequantize` and `quantize`. This pass finds those patterns in `main` (before TVM's own
lowering) and replaces each with a call to an integer kernel from `qkernels.py`: weights stay
int8 and biases int32 (constants in flash), activations between kernels stay int8. A fused
activation (`clip` on the quantized result) folds into the kernel's output range. Patterns
it does not recognise keep the float path, and the report says which.

uint8 (asymmetric) models run on the same kernels: values and zero points move by −128
(the same bytes, 1 per element), weights keep a zero point that the kernels subtract, and
the model's uint8 inputs and outputs are shifted at the edges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from generator.accel.api import QuantizedOp
from generator.accel.tir import QOP_ATTR
from generator.export import qkernels
from generator.export.fixedpoint import quantize_multiplier, round_half_away, softmax_params

# int8 operators the frontend already writes in integer form, exact as they are
_INTEGER_AS_IS = ("relax.nn.max_pool2d", "relax.nn.pad", "relax.reshape", "relax.concat")
ADD_LEFT_SHIFT = 20  # TFLite's int8 add: inputs are shifted left by 20 bits before rescaling
UINT8_OFFSET = 128  # a uint8 value or zero point minus this is its int8 counterpart
_AS_IS_DTYPES = ("int8", "uint8")
# as-is operators that give the right int8 values when a uint8 input arrives mapped to int8
_DOMAIN_NEUTRAL = ("relax.nn.max_pool2d", "relax.reshape")


@dataclass
class QuantReport:
    """Which quantized operators became integer kernels and which kept the float path."""

    integer: list[str] = field(default_factory=list)
    fallback: list[tuple[str, str]] = field(default_factory=list)  # (operator, reason)
    constant_bytes: Counter = field(default_factory=Counter)  # weights / bias / requant
    ops: dict[str, QuantizedOp] = field(default_factory=dict)  # kernel name → operator
    # kernel name → that kernel in its "blocks" form (qkernels.with_blocks_forms)
    blocks_forms: dict = field(default_factory=dict)
    # kernel name → its other tilings (qkernels.Tilings; also with_blocks_forms)
    tilings: dict = field(default_factory=dict)

    def kernel_added(self, name: str, kernel: qkernels.Kernel) -> None:
        """Note the other forms of a kernel the module now has under `name`."""
        if kernel.blocks is not None:
            self.blocks_forms[name] = kernel.blocks
        if kernel.tilings is not None:
            self.tilings[name] = kernel.tilings

    def summary(self) -> str:
        def counted(names: list[str]) -> str:
            return ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in Counter(names).items())

        text = f"integer: {counted(self.integer) or 'none'}"
        if self.fallback:
            text += f"; float fallback: {counted([op for op, _ in self.fallback])}"
        return text


class _NoMatch(Exception):
    """This pattern is not (or not fully) an integer operator we can rewrite."""


@dataclass
class _QConst:
    """A quantized constant: integer values and a per-element scale and zero point."""

    q: np.ndarray
    scale: np.ndarray
    zero: np.ndarray

    def apply(self, fn: Callable[[np.ndarray], np.ndarray]) -> _QConst:
        return _QConst(fn(self.q), fn(self.scale), fn(self.zero))


@dataclass(frozen=True)
class _QAct:
    var: object  # the int8 relax.Var (a uint8 one reaches the kernel mapped to int8)
    scale: float
    zero: int  # in the int8 domain


def _int8_offset(dtype: str) -> int:
    """What to subtract from a value or zero point of `dtype` to work in int8."""
    if dtype == "int8":
        return 0
    if dtype == "uint8":
        return UINT8_OFFSET
    raise _NoMatch(f"{dtype} quantization (the integer kernels are int8 and uint8)")


def _op(expr) -> str | None:
    op = getattr(expr, "op", None)
    return getattr(op, "name", None)


def _shape(expr) -> tuple[int, ...]:
    return tuple(int(d) for d in expr.ty.shape)


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _per_channel(full: np.ndarray, axis: int) -> np.ndarray | None:
    """The values along `axis` if `full` is constant along every other axis."""
    line = np.moveaxis(full, axis, 0).reshape(full.shape[axis], -1)
    if not np.all(line == line[:, :1]):
        return None
    return line[:, 0].copy()


class _Graph:
    """main's dataflow bindings: what each variable is bound to, and who uses it."""

    def __init__(self, main) -> None:
        from tvm import relax

        self.bound: dict = {}
        self.order: list = []
        self.uses: Counter = Counter()
        self.users: dict = {}
        for block in main.body.blocks:
            for b in block.bindings:
                self.bound[b.var] = b.value
                self.order.append(b)
                for v in relax.analysis.free_vars(b.value):
                    self.uses[v] += 1
                    self.users[v] = b
        for v in relax.analysis.free_vars(main.body.body):
            self.uses[v] += 1
            self.users[v] = None

    def resolve(self, expr):
        from tvm import relax

        while isinstance(expr, relax.Var) and expr in self.bound:
            expr = self.bound[expr]
        return expr

    def const_int(self, expr) -> np.ndarray:
        """An integer constant, looking through reshape and permute_dims."""
        from tvm.ir.expr import GenericConst

        e = self.resolve(expr)
        if isinstance(e, GenericConst):
            return e.value.numpy()
        name = _op(e)
        if name == "relax.reshape":
            return self.const_int(e.args[0]).reshape(_shape(e))
        if name == "relax.permute_dims":
            return np.transpose(self.const_int(e.args[0]), _axes(e))
        raise _NoMatch("not a constant")

    def qconst(self, expr) -> _QConst:
        """A dequantized constant (weights, biases), through reshape and permute_dims."""
        e = self.resolve(expr)
        name = _op(e)
        if name == "relax.dequantize":
            q = self.const_int(e.args[0])
            full = [_broadcast(self.const_int(a).astype(np.float64), q.shape,
                               int(e.attrs.axis)) for a in e.args[1:3]]
            return _QConst(q, full[0], full[1])
        if name == "relax.reshape":
            shape = _shape(e)
            return self.qconst(e.args[0]).apply(lambda a: a.reshape(shape))
        if name == "relax.permute_dims":
            axes = _axes(e)
            return self.qconst(e.args[0]).apply(lambda a: np.transpose(a, axes))
        raise _NoMatch("weights are not a dequantized constant")

    def qact(self, expr) -> _QAct:
        """A dequantized int8 (or uint8) activation with one scale and zero point."""
        from tvm import relax

        e = self.resolve(expr)
        if _op(e) != "relax.dequantize" or not isinstance(e.args[0], relax.Var):
            raise _NoMatch("input is not a dequantized tensor")
        src = e.args[0]
        if _dtype(src) not in ("int8", "uint8"):
            raise _NoMatch(f"input is {_dtype(src)}, not int8 or uint8")
        try:
            self.const_int(src)
        except _NoMatch:
            pass
        else:
            raise _NoMatch("input is a constant")
        scale, zero = (self.const_int(a).reshape(-1) for a in e.args[1:3])
        if scale.size != 1 or zero.size != 1:
            raise _NoMatch("per-channel activation quantization")
        return _QAct(src, float(scale[0]), int(zero[0]) - _int8_offset(_dtype(src)))


def _axes(e) -> list[int]:
    axes = e.attrs.axes
    n = len(e.args[0].ty.shape)
    return [int(a) for a in axes] if axes is not None else list(range(n))[::-1]


def _broadcast(values: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    values = values.reshape(-1)
    if values.size == 1:
        return np.full(shape, values[0])
    axis = axis % len(shape)
    view = [1] * len(shape)
    view[axis] = -1
    return np.broadcast_to(values.reshape(view), shape).copy()


def _quant_params(graph: _Graph, call) -> tuple[float, int]:
    """A quantize's scale and zero point (in the int8 domain)."""
    scale, zero = (graph.const_int(a).reshape(-1) for a in call.args[1:3])
    if scale.size != 1 or zero.size != 1:
        raise _NoMatch("per-channel output quantization")
    return float(scale[0]), int(zero[0]) - _int8_offset(_dtype(call))


def _requant(in_scale: float, w_scales: np.ndarray, out_scale: float, zero_out: int,
             act: tuple[int, int], uint8: bool = False) -> qkernels.Requant:
    """TFLite's per-channel (or per-tensor) requantization: in·w/out as multiplier, shift.
    TFLite's uint8 kernels (the legacy per-tensor path) multiply in·w in float32 first."""
    if uint8:
        pairs = [quantize_multiplier(float(np.float32(in_scale) * np.float32(s)) / out_scale)
                 for s in w_scales]
    else:
        pairs = [quantize_multiplier(in_scale * float(s) / out_scale) for s in w_scales]
    if len(pairs) == 1 or all(p == pairs[0] for p in pairs):
        return qkernels.Requant(pairs[0][0], pairs[0][1], zero_out, *act)
    return qkernels.Requant(np.array([p[0] for p in pairs], np.int64),
                            np.array([p[1] for p in pairs], np.int64), zero_out, *act)


@dataclass
class _Rewrite:
    """One integer kernel replacing a pattern: its inputs (original vars) and constants."""

    kind: str
    name: str
    kernel: qkernels.Kernel
    inputs: list
    out_shape: tuple[int, ...]
    op: QuantizedOp | None = None  # what an accelerator plugin sees of it


class _Matcher:
    def __init__(self, graph: _Graph) -> None:
        self.g = graph

    def root(self, value, act: tuple[int, int]) -> _Rewrite | None:
        """The rewrite for a quantize (or pool) binding value, None if it is not one."""
        name = _op(value)
        if name == "relax.quantize":
            _int8_offset(_dtype(value))  # int8 or uint8, or no match
            inner, act = self._float_activation(value, self.g.resolve(value.args[0]), act)
            kind = _op(inner)
            if kind == "relax.add" and self._is_bias_add(inner):
                return self._weighted(value, inner, act)
            if kind in ("relax.nn.conv2d", "relax.matmul"):
                return self._weighted(value, inner, act)
            if kind == "relax.nn.softmax":
                return self._softmax(value, inner)
            if kind == "relax.add":
                return self._add(value, inner, act)
            if kind == "relax.concat":
                return self._concat(value, inner)
            raise _NoMatch(f"no integer kernel for {(kind or 'op').removeprefix('relax.')}")
        if name == "relax.astype" and _dtype(value) in ("int8", "uint8"):
            inner = self.g.resolve(value.args[0])
            if _op(inner) == "relax.nn.avg_pool2d":
                return self._avg_pool(value, inner, act)
        return None

    def _float_activation(self, quant, inner, act: tuple[int, int]):
        """A relu or clip in float before the quantize (the frontend writes add's fused
        activation so) as the integer range TFLite clamps to: zp + round(limit / scale)."""
        name = _op(inner)
        if name not in ("relax.nn.relu", "relax.clip"):
            return inner, act
        scale, zero = _quant_params(self.g, quant)
        limits = [0.0, None] if name == "relax.nn.relu" else \
            [float(v.value) for v in inner.args[1:3]]
        q = [None if f is None else zero + round_half_away(np.float32(f) / np.float32(scale))
             for f in limits]
        lo = act[0] if q[0] is None else max(act[0], q[0])
        hi = act[1] if q[1] is None else min(act[1], q[1])
        return self.g.resolve(inner.args[0]), (lo, hi)

    def _is_bias_add(self, add) -> bool:
        kinds = {_op(self.g.resolve(a)) for a in add.args}
        return bool(kinds & {"relax.nn.conv2d", "relax.matmul"})

    def _weighted(self, quant, inner, act) -> _Rewrite:
        bias = None
        body = inner
        if _op(inner) == "relax.add":
            a, b = inner.args
            if _op(self.g.resolve(a)) not in ("relax.nn.conv2d", "relax.matmul"):
                a, b = b, a
            body = self.g.resolve(a)
            bq = self.g.qconst(b)
            if bq.q.dtype != np.int32 or np.any(bq.zero != 0):
                raise _NoMatch("bias is not int32 with zero point 0")
            bias = bq.q.reshape(-1)
        out_scale, zero_out = _quant_params(self.g, quant)
        if _op(body) == "relax.nn.conv2d":
            return self._conv2d(quant, body, bias, out_scale, zero_out, act)
        return self._dense(quant, body, bias, out_scale, zero_out, act)

    def _weights(self, expr) -> tuple[_QConst, int, bool]:
        """int8 weights with zero point 0, or uint8 weights (one zero point) as int8 values
        and the int8 zero point the kernels subtract; and whether they were uint8."""
        w = self.g.qconst(expr)
        if w.q.dtype == np.uint8:
            if np.any(w.zero != w.zero.flat[0]):
                raise _NoMatch("uint8 weights with more than one zero point")
            mapped = (w.q.astype(np.int16) - UINT8_OFFSET).astype(np.int8)
            return _QConst(mapped, w.scale, w.zero - UINT8_OFFSET), \
                int(w.zero.flat[0]) - UINT8_OFFSET, True
        if w.q.dtype != np.int8 or np.any(w.zero != 0):
            raise _NoMatch("weights are not int8 with zero point 0, nor uint8")
        return w, 0, False

    def _conv2d(self, quant, conv, bias, out_scale, zero_out, act) -> _Rewrite:
        a = conv.attrs
        if a.data_layout != "NHWC" or (a.out_layout or "NHWC") != "NHWC":
            raise _NoMatch(f"conv2d layout {a.data_layout}")
        x = self.g.qact(conv.args[0])
        w, w_zero, w_uint8 = self._weights(conv.args[1])
        layout = str(a.kernel_layout)
        if sorted(layout) != sorted("OIHW"):
            raise _NoMatch(f"kernel layout {layout}")
        w = w.apply(lambda t: np.transpose(t, [layout.index(c) for c in "OHWI"]))
        x_shape, out_shape = _shape(x.var), _shape(quant)
        cin, cout, groups = x_shape[3], out_shape[3], int(a.groups)
        depthwise = groups == cin and groups > 1 and w.q.shape[3] == 1
        if groups != 1 and not depthwise:
            raise _NoMatch(f"grouped conv2d ({groups} groups)")
        scales = _per_channel(w.scale, 0)
        if scales is None:
            raise _NoMatch("weight scales vary inside a channel")
        q = w.q.astype(np.int64)
        sums = (q - w_zero).reshape(cout, -1).sum(axis=1)
        bias = np.zeros(cout, np.int64) if bias is None else bias.astype(np.int64)
        adjusted = bias - x.zero * sums
        weights = np.transpose(q[..., 0], (1, 2, 0)) if depthwise else q
        requant = _requant(x.scale, scales, out_scale, zero_out, act,
                           uint8=w_uint8)
        pads = tuple(int(p) for p in a.padding)
        kernel = qkernels.conv2d_nhwc(
            x_shape, weights, adjusted, out_shape, _pair(a.strides), pads,
            _pair(a.dilation), x.zero, requant, depthwise, w_zero)
        kind = "depthwise_conv2d" if depthwise else "conv2d"
        if w_zero:  # QuantizedOp has no weight zero point: accelerators leave it to us
            return _Rewrite(kind, f"q_{kind}", kernel, [x.var], out_shape)
        op = QuantizedOp(kind, (x_shape,), out_shape, {
            "strides": _pair(a.strides), "padding": pads, "dilation": _pair(a.dilation),
            "depth_multiplier": cout // cin if depthwise else 1, **_zero_points(x, requant)},
            {"weights": weights.astype(np.int8), "bias": bias.astype(np.int32),
             **_requant_arrays(requant, cout)})
        return _Rewrite(kind, f"q_{kind}", kernel, [x.var], out_shape, op)

    def _dense(self, quant, mm, bias, out_scale, zero_out, act) -> _Rewrite:
        x = self.g.qact(mm.args[0])
        w, w_zero, w_uint8 = self._weights(mm.args[1])
        x_shape, out_shape = _shape(x.var), _shape(quant)
        if len(x_shape) != 2 or w.q.ndim != 2 or len(out_shape) != 2:
            raise _NoMatch("matmul that is not [batch, K] x [K, units]")
        scales = _per_channel(w.scale, 1)
        if scales is None:
            raise _NoMatch("weight scales vary inside a unit")
        q = w.q.T.astype(np.int64)  # [units, K]
        bias = np.zeros(q.shape[0], np.int64) if bias is None else bias.astype(np.int64)
        adjusted = bias - x.zero * (q - w_zero).sum(axis=1)
        requant = _requant(x.scale, scales, out_scale, zero_out, act,
                           uint8=w_uint8)
        if w_uint8:  # TFLite's uint8 fully connected rounds once (per-tensor)
            if requant.per_channel:
                raise _NoMatch("uint8 weights with per-channel scales")
            requant = replace(requant, single_rounding=True)
        kernel = qkernels.dense(x_shape[0], q, adjusted, requant, w_zero)
        if w_zero:
            return _Rewrite("dense", "q_dense", kernel, [x.var], out_shape)
        op = QuantizedOp("dense", (x_shape,), out_shape, _zero_points(x, requant),
                         {"weights": q.astype(np.int8), "bias": bias.astype(np.int32),
                          **_requant_arrays(requant, q.shape[0])})
        return _Rewrite("dense", "q_dense", kernel, [x.var], out_shape, op)

    def _softmax(self, quant, sm) -> _Rewrite:
        x = self.g.qact(sm.args[0])
        out_scale, zero_out = _quant_params(self.g, quant)
        shape = _shape(x.var)
        if int(sm.attrs.axis) % len(shape) != len(shape) - 1:
            raise _NoMatch("softmax not over the last axis")
        if out_scale != 1.0 / 256 or zero_out != -128:
            raise _NoMatch("int8 softmax output must have scale 1/256, zero point -128")
        try:
            multiplier, shift, diff_min = softmax_params(x.scale)
        except ValueError as exc:
            raise _NoMatch(str(exc)) from exc
        op = QuantizedOp("softmax", (shape,), shape, {
            "multiplier": multiplier, "shift": shift, "diff_min": diff_min,
            "input_zero_point": x.zero, "output_zero_point": zero_out})
        return _Rewrite("softmax", "q_softmax", qkernels.softmax(shape, multiplier, shift,
                                                                 diff_min), [x.var], shape, op)

    def _add(self, quant, add, act) -> _Rewrite:
        a, b = (self.g.qact(arg) for arg in add.args)
        out_scale, zero_out = _quant_params(self.g, quant)
        twice_max = 2.0 * max(a.scale, b.scale)
        mult_a = quantize_multiplier(a.scale / twice_max)
        mult_b = quantize_multiplier(b.scale / twice_max)
        mult_out = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * out_scale))
        out_shape = _shape(quant)
        kernel = qkernels.add(_shape(a.var), _shape(b.var), out_shape, -a.zero, -b.zero,
                              mult_a, mult_b, mult_out, ADD_LEFT_SHIFT, zero_out, *act)
        op = QuantizedOp("add", (_shape(a.var), _shape(b.var)), out_shape, {
            "input_zero_points": (a.zero, b.zero), "multipliers": (mult_a[0], mult_b[0]),
            "shifts": (mult_a[1], mult_b[1]), "left_shift": ADD_LEFT_SHIFT,
            "output_multiplier": mult_out[0], "output_shift": mult_out[1],
            "output_zero_point": zero_out, "act_min": act[0], "act_max": act[1]})
        return _Rewrite("add", "q_add", kernel, [a.var, b.var], out_shape, op)

    def _concat(self, quant, cat) -> _Rewrite:
        from tvm import relax

        if not isinstance(cat.args[0], relax.Tuple):
            raise _NoMatch("concatenation of a tuple variable")
        parts = [self.g.qact(f) for f in cat.args[0].fields]
        out = _quant_params(self.g, quant)
        if any((p.scale, p.zero) != out for p in parts):
            raise _NoMatch("inputs quantized differently from the output")
        shapes = [_shape(p.var) for p in parts]
        axis = int(cat.attrs.axis) % len(shapes[0])
        return _Rewrite("concatenation", "q_concat", qkernels.concat(shapes, axis),
                        [p.var for p in parts], _shape(quant))

    def _avg_pool(self, cast, pool, act) -> _Rewrite:
        src = self.g.resolve(pool.args[0])
        if _op(src) != "relax.astype" or _dtype(src.args[0]) not in ("int8", "uint8") \
                or _dtype(src.args[0]) != _dtype(cast):
            raise _NoMatch("average pool of something other than an int8 or uint8 tensor")
        offset = _int8_offset(_dtype(cast))
        a = pool.attrs
        if a.layout != "NHWC" or (a.out_layout or "NHWC") != "NHWC" or a.ceil_mode \
                or a.count_include_pad or any(int(d) != 1 for d in a.dilation):
            raise _NoMatch("average pool attributes TFLite does not use")
        x = src.args[0]
        out_shape = _shape(cast)
        pads = tuple(int(p) for p in a.padding)
        kernel = qkernels.avg_pool2d_nhwc(_shape(x), out_shape, _pair(a.pool_size),
                                          _pair(a.strides), pads, *act, offset=offset)
        if offset:  # rounds as TFLite's uint8 pool: not an int8 pool for accelerators
            return _Rewrite("avg_pool2d", "q_avg_pool2d", kernel, [x], out_shape)
        op = QuantizedOp("avg_pool2d", (_shape(x),), out_shape, {
            "pool_size": _pair(a.pool_size), "strides": _pair(a.strides), "padding": pads,
            "act_min": act[0], "act_max": act[1]})
        return _Rewrite("avg_pool2d", "q_avg_pool2d", kernel, [x], out_shape, op)


def _zero_points(x: _QAct, requant: qkernels.Requant) -> dict:
    return {"input_zero_point": x.zero, "output_zero_point": requant.zero_point,
            "act_min": requant.act_min, "act_max": requant.act_max}


def _requant_arrays(requant: qkernels.Requant, channels: int) -> dict[str, np.ndarray]:
    """Multiplier and shift per output channel (a per-tensor value repeated)."""
    return {name: np.broadcast_to(np.asarray(v, np.int64), (channels,)).astype(np.int32)
            for name, v in (("multiplier", requant.multiplier), ("shift", requant.shift))}


def _pair(values) -> tuple[int, int]:
    v = [int(x) for x in values]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _clip_range(graph: _Graph, var) -> tuple[object, tuple[int, int]] | None:
    """The clip binding that is `var`'s only user, with its integer range."""
    user = graph.users.get(var)
    if graph.uses[var] != 1 or user is None or _op(user.value) != "relax.clip":
        return None
    if _tensor_dtype(var) not in _AS_IS_DTYPES:  # a float clip (relu6): not a fused range
        return None
    lo, hi = (float(v.value) - _int8_offset(_dtype(var)) for v in user.value.args[1:3])
    return user, (max(-128, int(lo)), min(127, int(hi)))


def _fallback_name(graph: _Graph, value) -> str:
    """The operator a quantize that stays float stands for: through a float relu or clip
    and a bias add to the conv2d or matmul under them (reported as dense)."""
    inner = graph.resolve(value.args[0])
    if _op(inner) in ("relax.nn.relu", "relax.clip"):
        inner = graph.resolve(inner.args[0])
    if _op(inner) == "relax.add":
        for arg in inner.args:
            if _op(graph.resolve(arg)) in ("relax.nn.conv2d", "relax.matmul"):
                inner = graph.resolve(arg)
                break
    name = _op(inner)
    if name == "relax.matmul":
        return "dense"
    if name == "relax.nn.conv2d" and int(inner.attrs.groups) > 1:
        return "depthwise_conv2d"
    return name.removeprefix("relax.nn.").removeprefix("relax.")


def _tensor_dtype(expr) -> str | None:
    try:
        return _dtype(expr)
    except (AttributeError, TypeError, ValueError):
        return None


def integer_rewrite(mod, tag_ops: bool = False) -> tuple[object, QuantReport]:
    """`mod` with every recognised quantized pattern replaced by an integer kernel.

    With `tag_ops`, every kernel is its own function (an attribute keeps identical ones
    apart) and `report.ops` maps its name to the operator, for accelerator patterns."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    report = QuantReport()
    if "main" not in [gv.name_hint for gv in mod.functions]:
        return mod, report
    graph = _Graph(mod["main"])
    matcher = _Matcher(graph)
    plans: dict = {}  # the binding value to replace → its rewrite
    for binding in graph.order:
        clip = _clip_range(graph, binding.var)
        act = clip[1] if clip else (-128, 127)
        try:
            rewrite = matcher.root(binding.value, act)
        except _NoMatch as exc:
            if _op(graph.resolve(binding.value.args[0])) is None:
                # a float tensor (a model input) quantized: float by nature
                report.fallback.append(("quantize", "quantizes a float input"))
            else:
                report.fallback.append((_fallback_name(graph, binding.value), str(exc)))
            continue
        if rewrite is None:
            if _op(binding.value) in _INTEGER_AS_IS and _dtype(binding.value) in _AS_IS_DTYPES:
                report.integer.append(_op(binding.value).removeprefix("relax.nn.")
                                      .removeprefix("relax."))
            continue
        plans[clip[0].value if clip else binding.value] = rewrite
        report.integer.append(rewrite.kind)
        for role, c in zip(rewrite.kernel.constant_roles(), rewrite.kernel.constants,
                           strict=True):
            report.constant_bytes[role] += c.nbytes
    if not plans:
        return mod, report
    # uint8 tensors the rewrite turns into int8 ones (x − 128) that main returns: shifted back
    uint8_outputs = {graph.bound[v] for v in graph.bound
                     if graph.users.get(v, 0) is None and _tensor_dtype(v) == "uint8"}
    shifted: dict = {}  # (var, dtype) → the var shifted to that dtype

    @mutator
    class Rewriter(PyExprMutator):
        def shift(self, expr, dtype: str, emit: bool = True):
            """`expr` (uint8 ↔ int8) moved by 128 into `dtype`, emitted once per var."""
            key = (expr, dtype)
            if key in shifted:
                return shifted[key]
            kernel = qkernels.shift_domain(_shape(expr), _dtype(expr), dtype)
            gv = self.builder_.add_func(kernel.func, f"q_to_{dtype}")
            call = relax.call_tir(gv, [expr], relax.TensorType(_shape(expr), dtype))
            if not emit:
                return call
            shifted[key] = self.builder_.emit(call)
            return shifted[key]

        def visit_call_(self, op):
            rewrite = plans.get(op)
            if rewrite is not None:
                new = self.integer_call(rewrite)
            else:
                new = super().visit_call_(op)
                if _op(op) not in _DOMAIN_NEUTRAL:
                    new = self.uint8_args(op, new)
            if op in uint8_outputs:
                new = self.builder_.normalize(new)
                if _tensor_dtype(new) == "int8":
                    return self.shift(self.builder_.emit(new), "uint8", emit=False)
            return new

        def integer_call(self, rewrite: _Rewrite):
            kernel = rewrite.kernel
            if tag_ops and rewrite.op is not None:
                kernel = kernel.with_attr(QOP_ATTR, len(report.ops))
            gv = self.builder_.add_func(kernel.func, rewrite.name)
            report.kernel_added(gv.name_hint, kernel)
            if tag_ops and rewrite.op is not None:
                report.ops[gv.name_hint] = rewrite.op
            args = [self.visit_expr(v) for v in rewrite.inputs]
            args = [self.shift(a, "int8") if _tensor_dtype(a) == "uint8" else a for a in args]
            args += [relax.const(c) for c in rewrite.kernel.constants]
            return qkernels.kernel_call(self.builder_.emit, gv, args, rewrite.kernel,
                                        rewrite.out_shape)

        def uint8_args(self, op, new):
            """`new` with each argument that was uint8 and now is int8 shifted back: an
            operator the rewrite kept (a float fallback's dequantize, a pad) sees uint8."""
            def fix(old_arg, new_arg):
                if isinstance(new_arg, relax.Tuple) and isinstance(old_arg, relax.Tuple):
                    return relax.Tuple([fix(o, n) for o, n in zip(
                        old_arg.fields, new_arg.fields, strict=True)])
                if _tensor_dtype(old_arg) == "uint8" and _tensor_dtype(new_arg) == "int8":
                    return self.shift(new_arg, "uint8")
                return new_arg

            if not isinstance(new, relax.Call) or len(new.args) != len(op.args):
                return new
            args = [fix(o, n) for o, n in zip(op.args, new.args, strict=True)]
            if all(a.same_as(n) for a, n in zip(args, new.args, strict=True)):
                return new
            return relax.Call(new.op, args, new.attrs, new.ty_args)

    rewriter = Rewriter(mod)
    new_main = rewriter.visit_expr(mod["main"])
    out = rewriter.builder_.get()
    out["main"] = new_main
    out = relax.transform.DeadCodeElimination()(out)
    return out, report
