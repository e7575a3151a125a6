"""The quantized parts of an ONNX graph → a Relax `main` of integer kernels.

The graph is walked in its (topological) order. QuantizeLinear of a float tensor becomes a
quantize kernel; a DequantizeLinear only names a quantized tensor (or constant) as float,
and is computed (a dequantize kernel) only where a float value leaves the model. A float
operator whose inputs are all DequantizeLinear outputs and whose output goes only to one
QuantizeLinear is the group ONNX Runtime fuses: it becomes one integer kernel producing
that QuantizeLinear's output. Layout operators (Reshape, Flatten, Transpose, Concat,
MaxPool) run on the integers as they are when input and output share one quantization (as
ONNX Runtime drops their Q/DQ then). An operator nothing here takes is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from generator import hints
from generator.errors import ExportError
from generator.export.onnx_qdq import kernels
from generator.export.onnx_shapes import known_dims
from generator.export.quantize import QuantReport

F32 = np.float32


class Unsupported(Exception):
    """This node (with these inputs or attributes) has no integer conversion."""


@dataclass
class QValue:
    """A quantized activation: its Relax value and quantization."""

    expr: object
    shape: tuple[int, ...]
    dtype: str  # int8 | uint8
    scale: F32
    zero: int


@dataclass
class FValue:
    """A float32 activation (a model input, or a computed float)."""

    expr: object
    shape: tuple[int, ...]


@dataclass
class DqView:
    """A DequantizeLinear output: a quantized activation or constant seen as float."""

    source: QValue | None  # an activation; None for a constant
    data: np.ndarray | None  # the constant's integers
    scale: np.ndarray
    zero: np.ndarray
    axis: int


def graph_inputs(model) -> list:
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class Converter:
    """The Relax graph being built from one ONNX graph."""

    def __init__(self, model, bb) -> None:
        from onnx import numpy_helper

        self.model = model
        self.bb = bb
        self.report = QuantReport()
        self.consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type == "Constant":
                value = _attrs(node).get("value")
                if value is not None:
                    self.consts[node.output[0]] = numpy_helper.to_array(value)
        self.values: dict[str, QValue | FValue | DqView] = {}
        self.consumers: dict[str, list] = {}
        for node in model.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.outputs = {o.name for o in model.graph.output}
        self.done: set[int] = set()  # ids of Q nodes already folded into a kernel

    # ---- values ------------------------------------------------------------------------

    def const(self, name: str, what: str) -> np.ndarray:
        if name not in self.consts:
            raise Unsupported(f"{what} '{name}' is not a constant")
        return self.consts[name]

    def scalar_q(self, node, i_scale: int, i_zero: int) -> tuple[F32, int, str]:
        """A per-tensor (scale, zero point, dtype) of a Q/DQ-like node's inputs."""
        scale = self.const(node.input[i_scale], "scale")
        if scale.size != 1:
            raise Unsupported("a per-channel activation quantization")
        if len(node.input) > i_zero and node.input[i_zero]:
            zero = self.const(node.input[i_zero], "zero point")
            dtype = str(zero.dtype)
            zero_v = int(zero.reshape(-1)[0])
        else:
            dtype, zero_v = "uint8", 0
        if dtype not in ("int8", "uint8"):
            raise Unsupported(f"{dtype} quantization")
        return F32(scale.reshape(-1)[0]), zero_v, dtype

    def dq(self, name: str) -> DqView:
        v = self.values.get(name)
        if not isinstance(v, DqView):
            raise Unsupported(f"input '{name}' is not a DequantizeLinear output")
        return v

    def activation(self, name: str) -> QValue:
        v = self.dq(name)
        if v.source is None:
            raise Unsupported(f"input '{name}' is a constant")
        return QValue(v.source.expr, v.source.shape, v.source.dtype, F32(v.scale.reshape(-1)[0]),
                      int(v.zero.reshape(-1)[0]))

    def kernel(self, kind: str, kernel, args: list, shape, dtype: str):
        from tvm import relax

        gv = self.bb.add_func(kernel.func, f"q_{kind}")
        consts = [relax.const(c) for c in kernel.constants]
        call = relax.call_tir(gv, [*args, *consts], relax.TensorType(tuple(shape), dtype))
        self.report.integer.append(kind)
        roles = {"w": "weights", "bias": "bias", "scale": "requant", "table": "requant"}
        names = [str(p.name) for p in kernel.func.params][len(args):]
        for name, c in zip(names, kernel.constants, strict=False):
            self.report.constant_bytes[roles.get(name.split("_")[0], "weights")] += c.nbytes
        return self.bb.emit(call)

    # ---- the walk ----------------------------------------------------------------------

    def run(self, params: list) -> list:
        for param, inp in zip(params, graph_inputs(self.model), strict=True):
            self.values[inp.name] = FValue(param, tuple(int(d) for d in param.ty.shape))
        for node in self.model.graph.node:
            if id(node) in self.done or node.op_type == "Constant":
                continue
            try:
                self.convert(node)
            except Unsupported as exc:
                raise ExportError(f"operator {node.op_type} '{node.name}': {exc} (the ONNX "
                                  "QDQ importer takes only integer groups it can make "
                                  "bit-exact with ONNX Runtime)") from None
        return [self.result(o.name) for o in self.model.graph.output]

    def result(self, name: str):
        from tvm import relax

        v = self.values.get(name)
        if isinstance(v, DqView) and v.source is not None:
            q = v.source
            k = kernels.dequantize_linear(q.shape, q.dtype, float(v.scale.reshape(-1)[0]),
                                          int(v.zero.reshape(-1)[0]))
            return self.kernel("dequantize", k, [q.expr], q.shape, "float32")
        if isinstance(v, QValue | FValue):
            expr = v.expr
            if not isinstance(expr, relax.Var):
                expr = self.bb.emit(relax.op.add(expr, relax.const(np.zeros((), str(
                    expr.ty.dtype)))))
            return expr
        raise ExportError(f"model output '{name}' is not computed by a supported operator")

    def convert(self, node) -> None:
        op = node.op_type
        if op == "QuantizeLinear":
            return self.quantize(node)
        if op == "DequantizeLinear":
            return self.dequantize(node)
        if op in ("QLinearConv", "QLinearMatMul"):
            return QOPERATORS[op](self, node)
        if op in PASS_THROUGH and (self._quantized_input(node) or self._float_input(node)):
            return self.pass_through(node)
        if op in GROUPS:
            q_node = self._sole_quantize(node)
            return GROUPS[op](self, node, q_node)
        raise Unsupported("no integer conversion")

    def _quantized_input(self, node) -> bool:
        v = self.values.get(node.input[0])
        return isinstance(v, QValue) or (isinstance(v, DqView) and v.source is not None)

    def _float_input(self, node) -> bool:
        return all(isinstance(self.values.get(n), FValue) for n in node.input[:1])

    def _sole_quantize(self, node):
        """The one QuantizeLinear that takes this float op's output (its group's end)."""
        out = node.output[0]
        users = self.consumers.get(out, [])
        if len(node.output) != 1 or out in self.outputs or len(users) != 1 or \
                users[0].op_type != "QuantizeLinear":
            raise Unsupported("its output does not go to exactly one QuantizeLinear (a float "
                              "result between quantized tensors is not supported)")
        return users[0]

    def set_q(self, q_node, expr, shape, dtype: str) -> None:
        scale, zero, qdtype = self.scalar_q(q_node, 1, 2)
        if qdtype != dtype:
            raise Unsupported(f"a {qdtype} QuantizeLinear after a {dtype} kernel")
        self.values[q_node.output[0]] = QValue(expr, tuple(shape), dtype, scale, zero)
        self.done.add(id(q_node))

    def out_q(self, q_node) -> tuple[F32, int, str]:
        return self.scalar_q(q_node, 1, 2)

    # ---- Q and DQ ----------------------------------------------------------------------

    def quantize(self, node) -> None:
        v = self.values.get(node.input[0])
        scale, zero, dtype = self.scalar_q(node, 1, 2)
        if isinstance(v, DqView) and v.source is not None:  # DQ → Q: a requantization
            src = self.activation(node.input[0])
            if (src.scale, src.zero, src.dtype) == (scale, zero, dtype):
                self.values[node.output[0]] = src
                return
            table = _table(src, lambda f: _quantize_np(f, scale, zero, dtype), dtype)
            k = kernels.lookup(src.shape, src.dtype, table)
            expr = self.kernel("requantize", k, [src.expr], src.shape, dtype)
            self.values[node.output[0]] = QValue(expr, src.shape, dtype, scale, zero)
            return
        if not isinstance(v, FValue):
            raise Unsupported("its input is neither a float activation nor dequantized")
        k = kernels.quantize_linear(v.shape, float(scale), zero, dtype)
        expr = self.kernel("quantize", k, [v.expr], v.shape, dtype)
        self.values[node.output[0]] = QValue(expr, v.shape, dtype, scale, zero)

    def dequantize(self, node) -> None:
        name = node.input[0]
        axis = int(_attrs(node).get("axis", 1))
        scale = self.const(node.input[1], "scale").astype(F32)
        zero = (self.const(node.input[2], "zero point") if len(node.input) > 2 and
                node.input[2] else np.zeros(scale.shape, np.uint8))
        if name in self.consts:
            self.values[node.output[0]] = DqView(None, self.consts[name], scale, zero, axis)
            return
        v = self.values.get(name)
        if not isinstance(v, QValue):
            raise Unsupported("its input is not a quantized activation")
        if scale.size != 1 or str(zero.dtype) != v.dtype:
            raise Unsupported("a per-channel or mistyped activation dequantization")
        self.values[node.output[0]] = DqView(v, None, scale, zero, axis)

    # ---- layout operators on quantized tensors ---------------------------------------

    def pass_through(self, node) -> None:
        """Reshape / Flatten / Transpose / Squeeze / Unsqueeze / MaxPool / Concat on the
        integers: ONNX Runtime drops the Q/DQ around them when the quantization is one."""
        from tvm import relax

        op = node.op_type
        names = node.input if op == "Concat" else node.input[:1]
        is_float = self._float_input(node)
        if is_float:  # exact on floats too: before the model's first QuantizeLinear
            ins = [self.values[n] for n in names]
            if not all(isinstance(v, FValue) for v in ins):
                raise Unsupported("float and quantized inputs together")
            ins = [QValue(v.expr, v.shape, "float32", F32(1), 0) for v in ins]
        else:
            ins = [self._int_input(n) for n in names]
        x = ins[0]
        a = _attrs(node)
        if op == "Reshape":
            target = [int(d) for d in self.const(node.input[1], "shape")]
            if a.get("allowzero", 0):
                raise Unsupported("allowzero")
            target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
            shape = _infer_reshape(x.shape, target)
            expr = self.bb.emit(relax.op.reshape(x.expr, shape))
        elif op == "Flatten":
            axis = int(a.get("axis", 1)) % max(len(x.shape), 1)
            shape = (int(np.prod(x.shape[:axis], dtype=np.int64)),
                     int(np.prod(x.shape[axis:], dtype=np.int64)))
            expr = self.bb.emit(relax.op.reshape(x.expr, shape))
        elif op == "Transpose":
            perm = list(a.get("perm", list(range(len(x.shape)))[::-1]))
            shape = tuple(x.shape[p] for p in perm)
            expr = self.bb.emit(relax.op.permute_dims(x.expr, perm))
        elif op == "MaxPool":
            expr, shape = _max_pool(self, x, a, node)
        elif op == "Concat":
            axis = int(a["axis"]) % len(x.shape)
            if any((v.scale, v.zero, v.dtype) != (x.scale, x.zero, x.dtype) for v in ins):
                q_out = self._sole_quantize(node)
                scale, zero, dtype = self.out_q(q_out)
                ins = [self.requantize(v, scale, zero, dtype) for v in ins]
                x = ins[0]
            shape = list(x.shape)
            shape[axis] = sum(v.shape[axis] for v in ins)
            expr = self.bb.emit(relax.op.concat([v.expr for v in ins], axis))
        else:
            raise Unsupported("no integer conversion")
        out = node.output[0]
        if is_float:
            self.values[out] = FValue(expr, tuple(int(d) for d in shape))
            return
        result = QValue(expr, tuple(int(d) for d in shape), x.dtype, x.scale, x.zero)
        users = self.consumers.get(out, [])
        if len(users) == 1 and users[0].op_type == "QuantizeLinear" and out not in self.outputs:
            scale, zero, dtype = self.out_q(users[0])
            if (scale, zero, dtype) != (x.scale, x.zero, x.dtype):
                # ONNX Runtime keeps DQ → op → Q in float: Q(DQ(x)) of the selected values
                # (max picks one, a monotone Q∘DQ commutes with it)
                result = self.requantize(result, scale, zero, dtype)
            self.values[users[0].output[0]] = result
            self.done.add(id(users[0]))
        else:
            self.values[out] = result

    def requantize(self, v: QValue, scale: F32, zero: int, dtype: str) -> QValue:
        """DQ → Q in float32 (what ONNX Runtime computes) as a 256-entry table."""
        if (v.scale, v.zero, v.dtype) == (scale, zero, dtype):
            return v
        table = _table(v, lambda f: _quantize_np(f, scale, zero, dtype), dtype)
        k = kernels.lookup(v.shape, v.dtype, table)
        expr = self.kernel("requantize", k, [v.expr], v.shape, dtype)
        return QValue(expr, v.shape, dtype, scale, zero)

    def _int_input(self, name: str) -> QValue:
        v = self.values.get(name)
        if isinstance(v, QValue):
            return v
        return self.activation(name)


def _infer_reshape(shape: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    total = int(np.prod(shape, dtype=np.int64))
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
        target = [total // known if d == -1 else d for d in target]
    return tuple(int(d) for d in target)


def _pads2d(a: dict, in_hw: tuple[int, int], k_hw: tuple[int, int], strides, dilations,
            ceil: bool = False) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from pads / auto_pad."""
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        p = list(a.get("pads", [0, 0, 0, 0]))
        return p[0], p[1], p[2], p[3]
    if auto == "VALID":
        return 0, 0, 0, 0
    out = []
    for size, k, s, d in zip(in_hw, k_hw, strides, dilations, strict=True):
        eff = (k - 1) * d + 1
        o = (size + s - 1) // s
        total = max((o - 1) * s + eff - size, 0)
        out.append((total // 2, total - total // 2) if auto == "SAME_UPPER"
                   else (total - total // 2, total // 2))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def _max_pool(cv: Converter, x: QValue, a: dict, node):
    from tvm import relax

    if len(x.shape) != 4:
        raise Unsupported("a pool that is not 2-D")
    if len(node.output) > 1 and node.output[1]:
        raise Unsupported("MaxPool's indices output")
    k = tuple(a["kernel_shape"])
    strides = tuple(a.get("strides", [1, 1]))
    dil = tuple(a.get("dilations", [1, 1]))
    pads = _pads2d(a, x.shape[2:], k, strides, dil)
    ceil = bool(a.get("ceil_mode", 0))
    expr = cv.bb.emit(relax.op.nn.max_pool2d(x.expr, k, strides, pads, dil, ceil_mode=ceil))
    shape = tuple(int(d) for d in expr.ty.shape)
    return expr, shape


def _quantize_np(f: np.ndarray, scale: F32, zero: int, dtype: str) -> np.ndarray:
    lo, hi = kernels.dtype_range(dtype)
    v = np.clip(f.astype(F32) / F32(scale), F32(lo - zero), F32(hi - zero))
    return (np.rint(v).astype(np.int32) + zero).astype(dtype)


def _table(src: QValue, fn, dtype: str) -> np.ndarray:
    """fn of every value of src's type, dequantized in float32 (indexed as kernels.lookup)."""
    q = np.arange(-128, 128) if src.dtype == "int8" else np.arange(256)
    f = (q - src.zero).astype(F32) * F32(src.scale)
    return np.ascontiguousarray(fn(f).astype(dtype))


# ---- the fused groups: DQ inputs → float op → Q ---------------------------------------

def _weights(cv: Converter, name: str, channels: int, axis: int) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """int8 weights and their scales, one per output channel."""
    w = cv.dq(name)
    if w.source is not None or w.data is None:
        raise Unsupported("weights that are not a constant")
    if w.data.dtype != np.int8:
        raise Unsupported(f"{w.data.dtype} weights")
    if np.any(w.zero != 0):
        raise Unsupported("weights with a nonzero zero point")
    scales = w.scale.reshape(-1)
    if scales.size == 1:
        scales = np.repeat(scales, channels)
    elif scales.size != channels or w.axis % w.data.ndim != axis:
        raise Unsupported("weights quantized along another axis")
    return w.data, scales.astype(F32)


def _bias(cv: Converter, node, i: int, channels: int) -> np.ndarray:
    if len(node.input) <= i or not node.input[i]:
        return np.zeros(channels, np.int32)
    b = cv.dq(node.input[i])
    if b.data is None or b.data.dtype != np.int32 or np.any(b.zero != 0):
        raise Unsupported("a bias that is not a dequantized int32 constant")
    return b.data.reshape(-1).astype(np.int32)


def _out_scales(x_scale: F32, w_scales: np.ndarray, y_scale: F32) -> np.ndarray:
    """ONNX Runtime's requantization scale: x_scale · w_scale / y_scale in float32."""
    return (F32(x_scale) * w_scales.astype(F32)) / F32(y_scale)


def _conv(cv: Converter, x: QValue, w: np.ndarray, w_scales: np.ndarray, bias: np.ndarray,
          a: dict, y: tuple[F32, int, str]):
    if len(x.shape) != 4 or w.ndim != 4:
        raise Unsupported("a convolution that is not 2-D")
    y_scale, y_zero, y_dtype = y
    if y_dtype != x.dtype:
        raise Unsupported("input and output of different types")
    groups = int(a.get("group", 1))
    strides = tuple(a.get("strides", [1, 1]))
    dil = tuple(a.get("dilations", [1, 1]))
    k = tuple(w.shape[2:])
    pads = _pads2d(a, x.shape[2:], k, strides, dil)
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    if cin != w.shape[1] * groups or cout % groups:
        raise Unsupported("weights that do not match the input's channels")
    oh = (h + pads[0] + pads[2] - ((k[0] - 1) * dil[0] + 1)) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - ((k[1] - 1) * dil[1] + 1)) // strides[1] + 1
    out_shape = (n, cout, oh, ow)
    scales = _out_scales(x.scale, w_scales, y_scale)
    kern = kernels.conv2d_nchw(x.shape, x.dtype, x.zero, w, bias, scales, out_shape, y_zero,
                               y_dtype, strides, pads, dil, groups)
    kind = "depthwise_conv2d" if groups == cin and groups > 1 else "conv2d"
    return cv.kernel(kind, kern, [x.expr], out_shape, y_dtype), out_shape


def conv_group(cv: Converter, node, q_node) -> None:
    x = cv.activation(node.input[0])
    w_data = cv.dq(node.input[1]).data
    if w_data is None:
        raise Unsupported("weights that are not a constant")
    w, w_scales = _weights(cv, node.input[1], w_data.shape[0], 0)
    bias = _bias(cv, node, 2, w.shape[0])
    y = cv.out_q(q_node)
    expr, shape = _conv(cv, x, w, w_scales, bias, _attrs(node), y)
    cv.set_q(q_node, expr, shape, y[2])


def _dense(cv: Converter, x: QValue, w: np.ndarray, w_scales: np.ndarray, bias: np.ndarray,
           y: tuple[F32, int, str]):
    y_scale, y_zero, y_dtype = y
    if y_dtype != x.dtype:
        raise Unsupported("input and output of different types")
    if len(x.shape) != 2:
        raise Unsupported(f"a {len(x.shape)}-D input (2-D only)")
    if x.shape[1] != w.shape[0]:
        raise Unsupported("weights that do not match the input")
    scales = _out_scales(x.scale, w_scales, y_scale)
    kern = kernels.dense(x.shape, x.dtype, x.zero, w, bias, scales, y_zero, y_dtype)
    shape = (x.shape[0], w.shape[1])
    return cv.kernel("dense", kern, [x.expr], shape, y_dtype), shape


def gemm_group(cv: Converter, node, q_node) -> None:
    a = _attrs(node)
    if a.get("transA", 0) or float(a.get("alpha", 1.0)) != 1.0 or \
            float(a.get("beta", 1.0)) != 1.0:
        raise Unsupported("transA, alpha or beta other than the defaults")
    x = cv.activation(node.input[0])
    data = cv.dq(node.input[1]).data
    if data is None:
        raise Unsupported("weights that are not a constant")
    trans = bool(a.get("transB", 0))
    units = data.shape[0] if trans else data.shape[1]
    w, w_scales = _weights(cv, node.input[1], units, 0 if trans else 1)
    w = w.T if trans else w
    bias = _bias(cv, node, 2, units)
    y = cv.out_q(q_node)
    expr, shape = _dense(cv, x, np.ascontiguousarray(w), w_scales, bias, y)
    cv.set_q(q_node, expr, shape, y[2])


def matmul_group(cv: Converter, node, q_node) -> None:
    x = cv.activation(node.input[0])
    data = cv.dq(node.input[1]).data
    if data is None or data.ndim != 2:
        raise Unsupported("a second input that is not a 2-D constant")
    w, w_scales = _weights(cv, node.input[1], data.shape[1], 1)
    y = cv.out_q(q_node)
    expr, shape = _dense(cv, x, w, w_scales, np.zeros(w.shape[1], np.int32), y)
    cv.set_q(q_node, expr, shape, y[2])


def global_average_pool_group(cv: Converter, node, q_node) -> None:
    x = cv.activation(node.input[0])
    y_scale, y_zero, y_dtype = cv.out_q(q_node)
    if len(x.shape) != 4 or y_dtype != x.dtype:
        raise Unsupported("a pool that is not 2-D, or of two types")
    size = x.shape[2] * x.shape[3]
    scale = F32(x.scale) / (F32(y_scale) * F32(size))
    kern = kernels.global_average_pool(x.shape, x.dtype, x.zero, float(scale), y_zero)
    shape = (x.shape[0], x.shape[1], 1, 1)
    cv.set_q(q_node, cv.kernel("global_avg_pool2d", kern, [x.expr], shape, y_dtype), shape,
             y_dtype)


def unary_group(cv: Converter, node, q_node) -> None:
    """DQ → Relu / Clip → Q: ONNX Runtime computes it in float32 (or drops a Relu the
    output's saturation already does); as a 256-entry table of that float computation."""
    x = cv.activation(node.input[0])
    y_scale, y_zero, y_dtype = cv.out_q(q_node)
    if node.op_type == "Relu":
        def fn(f):
            return np.maximum(f, F32(0))
    else:
        a = _attrs(node)
        lo = a.get("min", -np.inf)
        hi = a.get("max", np.inf)
        if len(node.input) > 1 and node.input[1]:
            lo = cv.const(node.input[1], "min").reshape(-1)[0]
        if len(node.input) > 2 and node.input[2]:
            hi = cv.const(node.input[2], "max").reshape(-1)[0]

        def fn(f):
            return np.minimum(np.maximum(f, F32(lo)), F32(hi))
    table = _table(x, lambda f: _quantize_np(fn(f), y_scale, y_zero, y_dtype), y_dtype)
    kern = kernels.lookup(x.shape, x.dtype, table)
    expr = cv.kernel(node.op_type.lower(), kern, [x.expr], x.shape, y_dtype)
    cv.set_q(q_node, expr, x.shape, y_dtype)


GROUPS = {
    "Conv": conv_group,
    "Gemm": gemm_group,
    "MatMul": matmul_group,
    "GlobalAveragePool": global_average_pool_group,
    "Relu": unary_group,
    "Clip": unary_group,
}
PASS_THROUGH = ("Reshape", "Flatten", "Transpose", "MaxPool", "Concat")


# ---- QOperator format ----------------------------------------------------------------

def _qop_activation(cv: Converter, node, i: int) -> QValue:
    v = cv.values.get(node.input[i])
    if not isinstance(v, QValue):
        raise Unsupported("its input is not a quantized activation")
    scale, zero, dtype = cv.scalar_q(node, i + 1, i + 2)
    return QValue(v.expr, v.shape, dtype, scale, zero)


def _qop_weights(cv: Converter, node, i: int, channels: int) -> tuple[np.ndarray, np.ndarray]:
    w = cv.const(node.input[i], "weights")
    if w.dtype != np.int8:
        raise Unsupported(f"{w.dtype} weights")
    if np.any(cv.const(node.input[i + 2], "weight zero point") != 0):
        raise Unsupported("weights with a nonzero zero point")
    scales = cv.const(node.input[i + 1], "weight scale").reshape(-1).astype(F32)
    if scales.size == 1:
        scales = np.repeat(scales, channels)
    return w, scales


def qlinear_conv(cv: Converter, node) -> None:
    x = _qop_activation(cv, node, 0)
    w_data = cv.const(node.input[3], "weights")
    w, w_scales = _qop_weights(cv, node, 3, w_data.shape[0])
    bias = (cv.const(node.input[8], "bias").astype(np.int32)
            if len(node.input) > 8 and node.input[8] else np.zeros(w.shape[0], np.int32))
    y = cv.scalar_q(node, 6, 7)
    expr, shape = _conv(cv, x, w, w_scales, bias, _attrs(node), y)
    cv.values[node.output[0]] = QValue(expr, shape, y[2], y[0], y[1])


def qlinear_matmul(cv: Converter, node) -> None:
    x = _qop_activation(cv, node, 0)
    w_data = cv.const(node.input[3], "weights")
    if w_data.ndim != 2:
        raise Unsupported("a second input that is not a 2-D constant")
    w, w_scales = _qop_weights(cv, node, 3, w_data.shape[1])
    y = cv.scalar_q(node, 6, 7)
    expr, shape = _dense(cv, x, w, w_scales, np.zeros(w.shape[1], np.int32), y)
    cv.values[node.output[0]] = QValue(expr, shape, y[2], y[0], y[1])


QOPERATORS = {"QLinearConv": qlinear_conv, "QLinearMatMul": qlinear_matmul}


# ---- the module ----------------------------------------------------------------------

def build(model, where: str, shapes: dict[str, tuple[int, ...]],
          param_names: list[str] | None) -> tuple[object, QuantReport]:
    """The Relax module (main: float inputs → outputs) and what became integer."""
    from tvm import relax

    bb = relax.BlockBuilder()
    params = []
    for n, inp in enumerate(graph_inputs(model)):
        tt = inp.type.tensor_type
        if tt.elem_type != 1:
            raise ExportError(f"{where}: input '{inp.name}' is not float32")
        dims = tt.shape.dim
        if inp.name in shapes:
            shape = tuple(shapes[inp.name])
        elif all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            shape = tuple(d.dim_value for d in dims)
        else:
            raise ExportError(f"{where}: input '{inp.name}' has a dynamic shape",
                              hint=hints.input_shape(inp.name, known_dims(dims)))
        name = param_names[n] if param_names else inp.name
        params.append(relax.Var(name, relax.TensorType(shape, "float32")))
    cv = Converter(model, bb)
    with bb.function("main", params):
        with bb.dataflow():
            try:
                results = cv.run(params)
            except ExportError as exc:
                raise ExportError(f"{where}: {exc}") from None
            outs = [bb.emit_output(r) for r in results]
        bb.emit_func_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
    mod = relax.transform.DeadCodeElimination()(bb.get())
    return mod, cv.report
