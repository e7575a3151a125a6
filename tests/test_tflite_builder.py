"""The general TFLite model builder: one-operator models run in TFLite's reference kernels.

Each case builds a one-operator model in one dtype (float32; int8 activations; int16
activations with zero point 0, int8 weights and int64 bias), runs it with BUILTIN_REF and checks
the outputs' shapes and dtypes, and their values where numpy computes them independently
(quantized outputs within ``tol`` steps of the quantized float result).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import tflite
from flatbuffers import flexbuffers

from tests.tflite_builder import (
    ModelBuilder,
    Tensor,
    dequantize,
    litert_missing,
    op_model,
    options_table,
    quantize,
    random_input,
    reference,
)

_MISSING = litert_missing()
needs_litert = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

F32, I8, I16 = "float32", "int8", "int16"
ALL = (F32, I8, I16)


# ---- Tensor helpers ----------------------------------------------------------------------------


def act(shape: tuple[int, ...], dtype: str, scale: float | None = None,
        zp: int | None = None) -> Tensor:
    """An activation: float32, int8 (default scale 0.05, zero point 3) or int16 (zero point 0)."""
    if dtype == F32:
        return Tensor(shape, F32)
    if dtype == I16:
        return Tensor(shape, I16, scale or 1 / 1024, 0)
    return Tensor(shape, dtype, scale or 0.05, 3 if zp is None else zp)


def like(t: Tensor, shape: tuple[int, ...] | None = None) -> Tensor:
    """A tensor with ``t``'s dtype and quantization (and shape, unless given)."""
    return Tensor(t.shape if shape is None else shape, t.dtype, t.scale, t.zero_point)


def const(data: Any, dtype: str = "int32") -> Tensor:
    data = np.asarray(data)
    return Tensor(data.shape, dtype, data=data)


def weights(rng: np.random.Generator, shape: tuple[int, ...], dtype: str,
            qdim: int = 0) -> Tensor:
    """Float weights, or int8 per-channel weights (zero point 0) for int8/int16 activations."""
    if dtype == F32:
        return Tensor(shape, F32, data=rng.uniform(-1, 1, shape))
    scales = [float(s) for s in rng.uniform(0.005, 0.01, shape[qdim])]
    return Tensor(shape, I8, scales, 0, qdim, rng.integers(-127, 128, shape))


def bias(rng: np.random.Generator, x: Tensor, w: Tensor, n: int) -> Tensor:
    """Float bias, or int32 (int8 activations) / int64 (int16) with scale in * weight scale."""
    if x.dtype == F32:
        return Tensor((n,), F32, data=rng.uniform(-1, 1, n))
    scales = [x.scales[0] * s for s in w.scales]
    return Tensor((n,), "int32" if x.dtype == I8 else "int64", scales, 0,
                  data=rng.integers(-1000, 1001, n))


def real(t: Tensor, values: np.ndarray | None = None) -> np.ndarray:
    """The real values of a tensor (its data by default)."""
    return dequantize(t.data if values is None else values, t)


# ---- Cases -------------------------------------------------------------------------------------


@dataclass
class Case:
    """One operator model; ``expect`` maps the fed inputs to the expected outputs.

    Float expected values for a quantized output are quantized with it and compared within
    ``tol`` steps; others are compared exactly (floats: to 1e-5).
    """

    inputs: list[Tensor | None]
    outputs: list[Tensor]
    options: dict[str, Any] | None = None
    expect: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None
    feed: list[np.ndarray] | None = None
    tol: float = 1
    op: str | None = None
    kw: dict[str, Any] = field(default_factory=dict)
    resolver: str = "BUILTIN_REF"


Builder = Callable[[str, np.random.Generator], Case]
CASES: dict[str, tuple[Builder, tuple[str, ...]]] = {}


def case(name: str, dtypes: tuple[str, ...] = ALL) -> Callable[[Builder], Builder]:
    def register(fn: Builder) -> Builder:
        CASES[name] = (fn, dtypes)
        return fn
    return register


def _binary(op: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
            out_scale: dict[str, float], options: dict[str, Any] | None = None,
            b_shape: tuple[int, ...] = (1, 3, 4, 2)) -> Builder:
    def build(dtype: str, rng: np.random.Generator) -> Case:
        a, b = act((1, 3, 4, 2), dtype), act(b_shape, dtype, zp=-2)
        out = act((1, 3, 4, 2), dtype, out_scale.get(dtype), zp=1)
        opts = dict(options or {})
        if dtype == I16 and op in ("ADD", "SUB"):
            opts["pot_scale_int16"] = False  # general int16 scales, as the converter writes
        return Case([a, b], [out], opts or None,
                    lambda f: [fn(real(a, f[0]), real(b, f[1]))])
    return build


case("ADD")(_binary("ADD", np.add, {I8: 0.1, I16: 1 / 512},
                    {"fused_activation_function": "NONE"}))
case("SUB")(_binary("SUB", np.subtract, {I8: 0.1, I16: 1 / 512}, b_shape=(1, 1, 1, 2)))
case("MUL")(_binary("MUL", np.multiply, {I8: 0.5, I16: 1 / 32}))
case("SQUARED_DIFFERENCE", (F32, I8))(
    _binary("SQUARED_DIFFERENCE", lambda a, b: (a - b) ** 2, {I8: 1.0}))


def _minmax(op: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Builder:
    def build(dtype: str, rng: np.random.Generator) -> Case:
        a = act((2, 3, 4), dtype)
        return Case([a, like(a)], [like(a)], None, lambda f: [fn(f[0], f[1])], tol=0)
    return build


case("MINIMUM")(_minmax("MINIMUM", np.minimum))
case("MAXIMUM")(_minmax("MAXIMUM", np.maximum))


def _unary(fn: Callable[[np.ndarray], np.ndarray] | None,
           out: Callable[[str, tuple[int, ...]], Tensor] | None = None,
           shape: tuple[int, ...] = (1, 4, 4, 3), options: dict[str, Any] | None = None,
           feed: Callable[[str, Tensor, np.random.Generator], np.ndarray] | None = None,
           tol: float | dict[str, float] = 1, resolver: str = "BUILTIN_REF") -> Builder:
    """An elementwise operator; ``out`` makes the output tensor (default: like the input)."""
    def build(dtype: str, rng: np.random.Generator) -> Case:
        x = act(shape, dtype)
        y = like(x) if out is None else out(dtype, shape)
        expect = None if fn is None else (lambda f: [fn(real(x, f[0]))])
        return Case([x], [y], options, expect,
                    None if feed is None else [feed(dtype, x, rng)],
                    tol if isinstance(tol, int | float) else tol.get(dtype, 1),
                    resolver=resolver)
    return build


def _positive(dtype: str, x: Tensor, rng: np.random.Generator) -> np.ndarray:
    return quantize(rng.uniform(0.5, 4.0, x.shape), x)


def _fixed(scales: dict[str, tuple[float, int]]) -> Callable[[str, tuple[int, ...]], Tensor]:
    """Outputs with the fixed quantization TFLite's kernels require per dtype."""
    def out(dtype: str, shape: tuple[int, ...]) -> Tensor:
        if dtype == F32:
            return Tensor(shape, F32)
        scale, zp = scales[dtype]
        return Tensor(shape, dtype, scale, zp)
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


case("ABS")(_unary(np.abs))
case("RSQRT")(_unary(lambda x: 1 / np.sqrt(x), _fixed({I8: (1 / 256, -128),
                                                        I16: (1 / 16384, 0)}),
                               feed=_positive,
                       tol={I8: 1, I16: 80}))  # int16: an approximation, ~0.3%
case("RELU")(_unary(lambda x: np.maximum(x, 0), tol=0))
case("RELU6")(_unary(lambda x: np.clip(x, 0, 6), tol=0))
case("RELU_N1_TO_1", (F32, I8))(_unary(lambda x: np.clip(x, -1, 1), tol=0))
case("LEAKY_RELU")(_unary(lambda x: np.where(x > 0, x, 0.2 * x), options={"alpha": 0.2}))
case("HARD_SWISH", (F32, I8))(
    _unary(lambda x: x * np.clip(x + 3, 0, 6) / 6, _fixed({I8: (0.05, -20)})))
# BUILTIN_REF has no ELU kernel: checked with the BUILTIN (optimized) kernels.
case("ELU", (F32, I8))(_unary(lambda x: np.where(x > 0, x, np.expm1(x)), resolver="BUILTIN"))
case("LOGISTIC")(_unary(_sigmoid, _fixed({I8: (1 / 256, -128), I16: (1 / 32768, 0)}),
                        tol=2))
case("TANH")(_unary(np.tanh, _fixed({I8: (1 / 128, 0), I16: (1 / 32768, 0)}), tol=2))
case("SOFTMAX")(_unary(_softmax, _fixed({I8: (1 / 256, -128), I16: (1 / 32768, 0)}),
                       shape=(2, 5), options={"beta": 1.0}, tol={I8: 1, I16: 8}))
case("LOG_SOFTMAX", (F32, I8))(
    _unary(lambda x: np.log(_softmax(x)), _fixed({I8: (16 / 256, 127)}), shape=(2, 5)))


@case("PRELU")
def _prelu(dtype: str, rng: np.random.Generator) -> Case:
    x = act((1, 2, 2, 3), dtype)
    alpha_values = np.array([0.1, 0.25, -0.5])
    if dtype == F32:
        alpha = Tensor((3,), F32, data=alpha_values)
    else:
        alpha = Tensor((3,), I8, 1 / 128, 0, data=np.round(alpha_values * 128))
    return Case([x, alpha], [like(x)], None,
                lambda f: [np.where(real(x, f[0]) > 0, real(x, f[0]),
                                    real(alpha) * real(x, f[0]))])


@case("QUANTIZE", (I8, I16))
def _quantize_case(dtype: str, rng: np.random.Generator) -> Case:
    x = Tensor((2, 6), F32)
    y = act((2, 6), dtype)
    return Case([x], [y], None, lambda f: [f[0].astype(np.float64)])


@case("QUANTIZE_REQUANTIZE", (I8, I16))
def _requantize(dtype: str, rng: np.random.Generator) -> Case:
    x = act((2, 6), dtype)
    y = act((2, 6), I8, 0.08, -5)
    return Case([x], [y], None, lambda f: [real(x, f[0])], op="QUANTIZE")


@case("DEQUANTIZE", (I8, I16))
def _dequantize_case(dtype: str, rng: np.random.Generator) -> Case:
    x = act((2, 6), dtype)
    return Case([x], [Tensor((2, 6), F32)], None, lambda f: [real(x, f[0])])


# ---- Convolutions and fully connected ----------------------------------------------------------


@case("CONV_2D")
def _conv_1x1(dtype: str, rng: np.random.Generator) -> Case:
    x = act((1, 4, 4, 3), dtype)
    w = weights(rng, (2, 1, 1, 3), dtype)
    b = bias(rng, x, w, 2)
    y = act((1, 4, 4, 2), dtype, {F32: None, I8: 0.02, I16: 1 / 2048}[dtype])
    opts = {"padding": "SAME", "stride_w": 1, "stride_h": 1, "fused_activation_function": "NONE"}
    return Case([x, w, b], [y], opts,
                lambda f: [np.einsum("nhwc,oc->nhwo", real(x, f[0]), real(w)[:, 0, 0, :])
                           + real(b)])


@case("CONV_2D_3X3_STRIDE2")
def _conv_3x3(dtype: str, rng: np.random.Generator) -> Case:
    x = act((1, 5, 6, 2), dtype)
    w = weights(rng, (4, 3, 3, 2), dtype)
    y = act((1, 3, 3, 4), dtype, {F32: None, I8: 0.05, I16: 1 / 1024}[dtype])
    opts = {"padding": "SAME", "stride_w": 2, "stride_h": 2, "fused_activation_function": "RELU6"}
    return Case([x, w, bias(rng, x, w, 4)], [y], opts, op="CONV_2D")


@case("DEPTHWISE_CONV_2D")
def _depthwise(dtype: str, rng: np.random.Generator) -> Case:
    x = act((1, 3, 3, 4), dtype)
    w = weights(rng, (1, 3, 3, 4), dtype, qdim=3)
    b = bias(rng, x, w, 4)
    y = act((1, 1, 1, 4), dtype, {F32: None, I8: 0.05, I16: 1 / 1024}[dtype])
    opts = {"padding": "VALID", "stride_w": 1, "stride_h": 1, "depth_multiplier": 1}
    return Case([x, w, b], [y], opts,
                lambda f: [(real(x, f[0]) * real(w)).sum(axis=(1, 2), keepdims=True)
                           + real(b)])


@case("TRANSPOSE_CONV")
def _transpose_conv(dtype: str, rng: np.random.Generator) -> Case:
    x = act((1, 2, 2, 3), dtype)
    w = weights(rng, (2, 2, 2, 3), dtype)  # OHWI
    b = bias(rng, x, w, 2)
    y = act((1, 4, 4, 2), dtype, {F32: None, I8: 0.02, I16: 1 / 2048}[dtype])

    def expect(f: list[np.ndarray]) -> list[np.ndarray]:
        # Stride 2 with a 2x2 kernel: every input pixel writes its own 2x2 block.
        blocks = np.einsum("nijc,oklc->nikjlo", real(x, f[0]), real(w))
        return [blocks.reshape(1, 4, 4, 2) + real(b)]

    return Case([const([1, 4, 4, 2]), w, x, b], [y],
                {"padding": "VALID", "stride_w": 2, "stride_h": 2}, expect, kw={"version": 3})


@case("FULLY_CONNECTED")
def _fully_connected(dtype: str, rng: np.random.Generator) -> Case:
    x = act((1, 2, 5), dtype)
    w = weights(rng, (3, 5), dtype)
    b = bias(rng, x, w, 3)
    y = act((1, 2, 3), dtype, {F32: None, I8: 0.02, I16: 1 / 2048}[dtype])
    return Case([x, w, b], [y], {"keep_num_dims": True},
                lambda f: [real(x, f[0]) @ real(w).T + real(b)])


@case("SVDF", (F32, I8))
def _svdf(dtype: str, rng: np.random.Generator) -> Case:
    """int8: int8 input and feature weights, int16 time weights and state, int32 bias.

    TFLite's integer SVDF refuses any activation but RELU, yet does not apply it: the output
    is only saturated to int8 (as checked here).
    """
    memory, filters, rank = 5, 4, 2
    units = filters // rank
    if dtype == F32:
        x = Tensor((1, 3), F32)
        wf = Tensor((filters, 3), F32, data=rng.uniform(-1, 1, (filters, 3)))
        wt = Tensor((filters, memory), F32, data=rng.uniform(-1, 1, (filters, memory)))
        b = Tensor((units,), F32, data=rng.uniform(-1, 1, units))
        state = Tensor((1, memory * filters), F32, is_variable=True)
        y = Tensor((1, units), F32)
    else:
        x = act((1, 3), I8)
        wf = Tensor((filters, 3), I8, 0.01, 0, data=rng.integers(-127, 128, (filters, 3)))
        wt = Tensor((filters, memory), I16, 1 / 4096, 0,
                    data=rng.integers(-4096, 4097, (filters, memory)))
        state = Tensor((1, memory * filters), I16, 1 / 1024, 0, is_variable=True)
        b = Tensor((units,), "int32", 1 / 1024 / 4096, 0,
                   data=rng.integers(-100000, 100001, units))
        y = act((1, units), I8, 0.1, 0)

    def expect(f: list[np.ndarray]) -> list[np.ndarray]:
        # The state starts at zero: only its newest column (the features) counts.
        features = real(x, f[0]) @ real(wf).T
        if dtype != F32:
            features = real(state, quantize(features, state))
        per_filter = features * real(wt)[:, -1]
        return [per_filter.reshape(1, -1, rank).sum(axis=2) + real(b)]

    activation = "NONE" if dtype == F32 else "RELU"
    return Case([x, wf, wt, b, state], [y],
                {"rank": rank, "fused_activation_function": activation}, expect, tol=2)


@case("UNIDIRECTIONAL_SEQUENCE_LSTM", (F32,))
def _lstm(dtype: str, rng: np.random.Generator) -> Case:
    batch, steps, n_in, n_cell = 1, 3, 2, 4

    def mat(*shape: int) -> Tensor:
        return Tensor(shape, F32, data=rng.uniform(-0.5, 0.5, shape))

    w_in = [mat(n_cell, n_in) for _ in range(4)]       # input, forget, cell, output gates
    w_rec = [mat(n_cell, n_cell) for _ in range(4)]
    gate_bias = [mat(n_cell) for _ in range(4)]
    x = Tensor((batch, steps, n_in), F32)
    h_state = Tensor((batch, n_cell), F32, is_variable=True)
    c_state = Tensor((batch, n_cell), F32, is_variable=True)
    inputs: list[Tensor | None] = [x, *w_in, *w_rec, None, None, None, *gate_bias, None, None,
                                   h_state, c_state, None, None, None, None]

    def expect(f: list[np.ndarray]) -> list[np.ndarray]:
        h, c = np.zeros((batch, n_cell)), np.zeros((batch, n_cell))
        out = []
        for t in range(steps):
            g = [f[0][:, t] @ w_in[k].data.T + h @ w_rec[k].data.T + gate_bias[k].data
                 for k in range(4)]
            c = _sigmoid(g[1]) * c + _sigmoid(g[0]) * np.tanh(g[2])
            h = _sigmoid(g[3]) * np.tanh(c)
            out.append(h)
        return [np.stack(out, axis=1)]

    return Case(inputs, [Tensor((batch, steps, n_cell), F32)],
                {"fused_activation_function": "TANH", "time_major": False}, expect)


# ---- Pooling and reductions --------------------------------------------------------------------


def _pool(op: str, fn: Callable[[np.ndarray], np.ndarray]) -> Builder:
    def build(dtype: str, rng: np.random.Generator) -> Case:
        x = act((1, 4, 6, 2), dtype)
        opts = {"padding": "VALID", "stride_w": 2, "stride_h": 2, "filter_width": 2,
                "filter_height": 2, "fused_activation_function": "NONE"}

        def expect(f: list[np.ndarray]) -> list[np.ndarray]:
            windows = real(x, f[0]).reshape(1, 2, 2, 3, 2, 2).transpose(0, 1, 3, 5, 2, 4)
            return [fn(windows.reshape(1, 2, 3, 2, 4))]

        return Case([x], [like(x, (1, 2, 3, 2))], opts, expect)
    return build


case("AVERAGE_POOL_2D")(_pool("AVERAGE_POOL_2D", lambda w: w.mean(axis=-1)))
case("MAX_POOL_2D")(_pool("MAX_POOL_2D", lambda w: w.max(axis=-1)))
case("L2_POOL_2D", (F32,))(_pool("L2_POOL_2D", lambda w: np.sqrt((w ** 2).mean(axis=-1))))


def _reduce(fn: Callable[..., np.ndarray], out_scale: dict[str, float] | None,
            check_quantized: bool = True) -> Builder:
    """Over axes 1 and 2, keeping them; ``out_scale`` None: the output quantized as the input."""
    def build(dtype: str, rng: np.random.Generator) -> Case:
        x = act((1, 4, 4, 3), dtype)
        y = like(x, (1, 1, 1, 3)) if out_scale is None else act((1, 1, 1, 3), dtype,
                                                                 out_scale.get(dtype), zp=-1)
        check = dtype == F32 or check_quantized
        return Case([x, const([1, 2])], [y], {"keep_dims": True},
                    (lambda f: [fn(real(x, f[0]), axis=(1, 2), keepdims=True)]) if check
                    else None)
    return build


SUM_SCALES = {I8: 0.5, I16: 1 / 64}
case("MEAN")(_reduce(np.mean, {I8: 0.02, I16: 1 / 2048}))
# BUILTIN_REF's quantized SUM is wrong (see test_reference_quantized_sum): shapes only.
case("SUM")(_reduce(np.sum, SUM_SCALES, check_quantized=False))
case("REDUCE_MAX")(_reduce(np.max, None))


@case("ARG_MAX", (F32, I8))
def _arg_max(dtype: str, rng: np.random.Generator) -> Case:
    x = act((1, 5, 3), dtype)
    return Case([x, const([2])], [Tensor((1, 5), "int32")], {"output_type": "INT32"},
                lambda f: [np.argmax(f[0], axis=2).astype(np.int32)], tol=0)


# ---- Data movement: exact on the raw values ----------------------------------------------------


def _move(make: Callable[[Tensor], tuple[list[Tensor | None], list[Tensor], dict | None]],
          fn: Callable[..., list[np.ndarray]] | None, shape: tuple[int, ...] = (1, 4, 4, 2),
          n_inputs: int = 1) -> Builder:
    """An operator that moves values: ``fn`` computes the outputs from the raw inputs."""
    def build(dtype: str, rng: np.random.Generator) -> Case:
        x = act(shape, dtype)
        inputs, outputs, options = make(x)
        return Case(inputs, outputs, options, None if fn is None else lambda f: fn(*f), tol=0)
    return build


case("RESHAPE")(_move(lambda x: ([x, const([2, 16])], [like(x, (2, 16))],
                                 {"new_shape": [2, 16]}),
                      lambda a: [a.reshape(2, 16)]))
case("SQUEEZE")(_move(lambda x: ([x], [like(x, (4, 2))], {"squeeze_dims": [0, 1]}),
                      lambda a: [a.reshape(4, 2)], shape=(1, 1, 4, 2)))
case("EXPAND_DIMS")(_move(lambda x: ([x, const([1])], [like(x, (2, 1, 3))], None),
                          lambda a: [a[:, None]], shape=(2, 3)))
case("SHAPE")(_move(lambda x: ([x], [Tensor((4,), "int32")], {"out_type": "INT32"}),
                    lambda a: [np.array(a.shape, np.int32)]))
case("TRANSPOSE")(_move(lambda x: ([x, const([0, 3, 1, 2])], [like(x, (1, 2, 4, 3))], None),
                        lambda a: [a.transpose(0, 3, 1, 2)], shape=(1, 4, 3, 2)))
case("SLICE")(_move(lambda x: ([x, const([0, 1, 0, 1]), const([1, 2, 3, 1])],
                               [like(x, (1, 2, 3, 1))], None),
                    lambda a: [a[:, 1:3, 0:3, 1:2]]))
case("STRIDED_SLICE")(_move(lambda x: ([x, const([0, 0, 1, 0]), const([1, 4, 4, 2]),
                                        const([1, 2, 2, 1])], [like(x, (1, 2, 2, 2))],
                                       {"begin_mask": 0, "end_mask": 0}),
                            lambda a: [a[:, 0:4:2, 1:4:2, :]]))
case("PAD")(_move(lambda x: ([x, const([[0, 0], [1, 1], [2, 0], [0, 0]])],
                             [like(x, (1, 4, 5, 2))], None),
                  None, shape=(1, 2, 3, 2)))
case("MIRROR_PAD")(_move(lambda x: ([x, const([[0, 0], [1, 1], [2, 0], [0, 0]])],
                                    [like(x, (1, 4, 5, 2))], {"mode": "REFLECT"}),
                         lambda a, *_: [np.pad(a, [(0, 0), (1, 1), (2, 0), (0, 0)],
                                               mode="reflect")], shape=(1, 2, 3, 2)))
case("GATHER")(_move(lambda x: ([x, const([3, 0, 0, 2])], [like(x, (4, 5))], {"axis": 0}),
                     lambda a: [a[[3, 0, 0, 2]]], shape=(4, 5)))
case("SPACE_TO_DEPTH", (F32, I8))(_move(lambda x: ([x], [like(x, (1, 2, 2, 8))], {"block_size": 2}),
                             lambda a: [a.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4, 5)
                                        .reshape(1, 2, 2, 8)]))
case("DEPTH_TO_SPACE", (F32, I8))(_move(lambda x: ([x], [like(x, (1, 4, 4, 2))], {"block_size": 2}),
                             lambda a: [a.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4, 5)
                                        .reshape(1, 4, 4, 2)], shape=(1, 2, 2, 8)))
case("SPACE_TO_BATCH_ND")(_move(lambda x: ([x, const([2, 2]), const([[0, 0], [0, 0]])],
                                           [like(x, (4, 2, 2, 2))], None),
                                lambda a, *_: [a.reshape(1, 2, 2, 2, 2, 2)
                                               .transpose(2, 4, 0, 1, 3, 5)
                                               .reshape(4, 2, 2, 2)]))
case("BATCH_TO_SPACE_ND")(_move(lambda x: ([x, const([2, 2]), const([[0, 0], [0, 0]])],
                                           [like(x, (1, 4, 4, 2))], None),
                                lambda a, *_: [a.reshape(2, 2, 1, 2, 2, 2)
                                               .transpose(2, 3, 0, 4, 1, 5)
                                               .reshape(1, 4, 4, 2)], shape=(4, 2, 2, 2)))
case("RESIZE_NEAREST_NEIGHBOR")(_move(lambda x: ([x, const([4, 6])], [like(x, (1, 4, 6, 2))],
                                                 {"align_corners": False,
                                                  "half_pixel_centers": False}),
                                      lambda a, *_: [a.repeat(2, axis=1).repeat(2, axis=2)],
                                      shape=(1, 2, 3, 2)))
case("RESIZE_BILINEAR")(_move(lambda x: ([x, const([4, 6])], [like(x, (1, 4, 6, 2))],
                                         {"half_pixel_centers": True}), None,
                              shape=(1, 2, 3, 2)))


@case("PADV2")
def _padv2(dtype: str, rng: np.random.Generator) -> Case:
    x = act((1, 2, 3, 2), dtype)
    value = quantize(np.array(0.5), x).reshape(())
    fill = Tensor((), dtype, x.scale, x.zero_point, data=value)
    pads = [(0, 0), (1, 0), (0, 2), (0, 0)]
    return Case([x, const(pads), fill], [like(x, (1, 3, 5, 2))], None,
                lambda f: [np.pad(f[0], pads, constant_values=value)], tol=0)


@case("CONCATENATION")
def _concatenation(dtype: str, rng: np.random.Generator) -> Case:
    a, b = act((1, 2, 2, 3), dtype), act((1, 2, 2, 1), dtype)
    return Case([a, like(b)], [like(a, (1, 2, 2, 4))],
                {"axis": 3, "fused_activation_function": "NONE"},
                lambda f: [np.concatenate(f, axis=3)], tol=0)


@case("PACK")
def _pack(dtype: str, rng: np.random.Generator) -> Case:
    a = act((2, 3), dtype)
    return Case([a, like(a), like(a)], [like(a, (2, 3, 3))], {"axis": 1, "values_count": 3},
                lambda f: [np.stack(f, axis=1)], tol=0)


@case("UNPACK")
def _unpack(dtype: str, rng: np.random.Generator) -> Case:
    a = act((2, 3, 4), dtype)
    return Case([a], [like(a, (2, 4))] * 3, {"num": 3, "axis": 1},
                lambda f: [f[0][:, i] for i in range(3)], tol=0)


@case("SPLIT")
def _split(dtype: str, rng: np.random.Generator) -> Case:
    a = act((2, 6), dtype)
    return Case([const(1), a],
                [like(a, (2, 2))] * 3, {"num_splits": 3},
                lambda f: np.split(f[0], 3, axis=1), tol=0)


@case("SPLIT_V")
def _split_v(dtype: str, rng: np.random.Generator) -> Case:
    a = act((5, 2), dtype)
    return Case([a, const([1, 3, 1]), const(0)], [like(a, (1, 2)), like(a, (3, 2)),
                                                  like(a, (1, 2))],
                {"num_splits": 3}, lambda f: np.split(f[0], [1, 4], axis=0), tol=0)


@case("CUSTOM_DETECTION_POSTPROCESS", (F32,))
def _detection_postprocess(dtype: str, rng: np.random.Generator) -> Case:
    anchors = np.array([[0.25, 0.25, 0.5, 0.5], [0.75, 0.75, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0]])
    boxes = Tensor((1, 3, 4), F32)
    scores = Tensor((1, 3, 3), F32)  # background + 2 classes
    options = bytes(flexbuffers.Dumps({
        "max_detections": 2, "max_classes_per_detection": 1, "detections_per_class": 2,
        "use_regular_nms": False, "nms_score_threshold": 0.3, "nms_iou_threshold": 0.5,
        "num_classes": 2, "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0}))
    feed = [np.zeros((1, 3, 4), np.float32),
            np.array([[[0.0, 0.9, 0.1], [0.0, 0.2, 0.8], [0.0, 0.1, 0.1]]], np.float32)]

    def expect(f: list[np.ndarray]) -> list[np.ndarray]:
        # Zero encodings decode to the anchors themselves (ymin, xmin, ymax, xmax).
        y, x, h, w = anchors[:2].T
        return [np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=1)[None],
                np.array([[0.0, 1.0]]), np.array([[0.9, 0.8]]), np.array([2.0])]

    return Case([boxes, scores, Tensor((3, 4), F32, data=anchors)],
                [Tensor((1, 2, 4), F32), Tensor((1, 2), F32), Tensor((1, 2), F32),
                 Tensor((1,), F32)], None, expect, feed=feed, op="CUSTOM",
                kw={"custom_code": "TFLite_Detection_PostProcess", "custom_options": options})


# ---- Running the cases -------------------------------------------------------------------------


PARAMS = [(name, dtype) for name, (_, dtypes) in CASES.items() for dtype in dtypes]


def _compare(got: np.ndarray, want: np.ndarray, out: Tensor, tol: float, what: str) -> None:
    want = np.asarray(want)
    if out.quantized and want.dtype.kind == "f":
        want = quantize(want, out)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=what)
        return
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max(initial=0) <= tol, f"{what}: off by up to {diff.max()} (tolerance {tol})"


@needs_litert
@pytest.mark.parametrize(("name", "dtype"), PARAMS, ids=[f"{n}-{d}" for n, d in PARAMS])
def test_operator_in_reference_kernels(name: str, dtype: str) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{name}-{dtype}".encode()))
    c = CASES[name][0](dtype, rng)
    model = op_model(c.op or name, c.inputs, c.outputs, c.options, **c.kw)
    graph_inputs = [t for t in c.inputs if t is not None and t.data is None and not t.is_variable]
    feed = c.feed if c.feed is not None else [random_input(rng, t) for t in graph_inputs]
    got = reference(model, feed, op_resolver=c.resolver)
    assert len(got) == len(c.outputs)
    for i, (g, t) in enumerate(zip(got, c.outputs, strict=True)):
        assert g.shape == t.shape, f"output {i}: shape {g.shape}, expected {t.shape}"
        assert g.dtype == t.np_dtype, f"output {i}: dtype {g.dtype}, expected {t.np_dtype}"
    if c.expect is not None:
        for i, (g, want, t) in enumerate(zip(got, c.expect(feed), c.outputs, strict=True)):
            _compare(g, want, t, c.tol, f"{name} {dtype} output {i}")


def test_cases_cover_the_required_operators() -> None:
    ops = {(CASES[n][0](d, np.random.default_rng(0)).op or n) for n, d in PARAMS}
    assert len(ops) >= 25


# ---- The builder itself ------------------------------------------------------------------------


def _read(model: bytes) -> tflite.Model:
    return tflite.Model.GetRootAsModel(model, 0)


@pytest.mark.parametrize("name", ["1", "onnx::Conv_5", "", "ünïcode/x:0"])
def test_tensor_names_round_trip(name: str) -> None:
    model = op_model("RELU", [Tensor((1, 4), F32, name=name)], [Tensor((1, 4), F32)])
    sg = _read(model).Subgraphs(0)
    assert sg.Tensors(0).Name().decode() == name
    assert sg.Tensors(1).Name().decode() == "t1"
    assert model[4:8] == b"TFL3"


@needs_litert
def test_empty_and_numeric_names_run() -> None:
    model = op_model("RELU", [Tensor((1, 4), F32, name="")], [Tensor((1, 4), F32, name="1")])
    x = np.array([[-1, 2, -3, 4]], np.float32)
    np.testing.assert_array_equal(reference(model, [x])[0], np.maximum(x, 0))


def test_unknown_option_field_names_field_and_table() -> None:
    with pytest.raises(ValueError, match=r"'strides'.*Conv2DOptions"):
        op_model("CONV_2D", [Tensor((1, 2, 2, 1), F32)], [Tensor((1, 2, 2, 1), F32)],
                 {"strides": 2})
    with pytest.raises(ValueError, match="LOGISTIC has no builtin options"):
        op_model("LOGISTIC", [Tensor((4,), F32)], [Tensor((4,), F32)], {"beta": 1.0})
    with pytest.raises(ValueError, match="padding"):
        op_model("MAX_POOL_2D", [Tensor((1, 2, 2, 1), F32)], [Tensor((1, 1, 1, 1), F32)],
                 {"padding": "FULL"})
    with pytest.raises(ValueError, match="unknown builtin operator"):
        op_model("CONV2D", [Tensor((4,), F32)], [Tensor((4,), F32)])


@pytest.mark.parametrize(("op", "table"), [
    ("CONV_2D", "Conv2DOptions"), ("DEPTHWISE_CONV_2D", "DepthwiseConv2DOptions"),
    ("FULLY_CONNECTED", "FullyConnectedOptions"), ("MEAN", "ReducerOptions"),
    ("SUM", "ReducerOptions"), ("REDUCE_MAX", "ReducerOptions"), ("SPLIT_V", "SplitVOptions"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", "UnidirectionalSequenceLSTMOptions"),
    ("SVDF", "SVDFOptions"), ("LEAKY_RELU", "LeakyReluOptions"), ("MAX_POOL_2D", "Pool2DOptions"),
    ("MINIMUM", "MaximumMinimumOptions"), ("PADV2", "PadV2Options"),
    ("BATCH_TO_SPACE_ND", "BatchToSpaceNDOptions"), ("TRANSPOSE_CONV", "TransposeConvOptions"),
    ("ARG_MAX", "ArgMaxOptions"), ("STABLEHLO_COMPOSITE", "StableHLOCompositeOptions"),
    ("LOGISTIC", None), ("RSQRT", None), ("PRELU", None), ("CUSTOM", None)])
def test_options_table_found_by_name(op: str, table: str | None) -> None:
    assert options_table(op) == table


def test_options_written_and_defaults_kept() -> None:
    model = op_model("CONV_2D", [Tensor((1, 4, 4, 1), F32),
                                 Tensor((1, 1, 1, 1), F32, data=np.ones((1, 1, 1, 1)))],
                     [Tensor((1, 2, 2, 1), F32)],
                     {"padding": "VALID", "stride_w": 2, "stride_h": 2,
                      "fused_activation_function": "RELU6"})
    op = _read(model).Subgraphs(0).Operators(0)
    assert op.BuiltinOptionsType() == tflite.BuiltinOptions.Conv2DOptions
    opts = tflite.Conv2DOptions()
    opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    assert (opts.Padding(), opts.StrideW(), opts.StrideH()) == (tflite.Padding.VALID, 2, 2)
    assert opts.FusedActivationFunction() == tflite.ActivationFunctionType.RELU6
    assert (opts.DilationWFactor(), opts.DilationHFactor()) == (1, 1)  # schema defaults
    model = op_model("RESHAPE", [Tensor((2, 3), F32)], [Tensor((3, 2), F32)],
                     {"new_shape": [3, 2]})
    op = _read(model).Subgraphs(0).Operators(0)
    opts = tflite.ReshapeOptions()
    opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    assert list(opts.NewShapeAsNumpy()) == [3, 2]


def test_layout_buffers_codes_and_absent_inputs() -> None:
    m = ModelBuilder()
    x = m.tensor(Tensor((1, 3), I16, 0.01, 0, shape_signature=(-1, 3)))
    w = m.tensor(Tensor((2, 3), I8, [0.1, 0.2], 0, data=np.arange(6).reshape(2, 3)))
    y = m.tensor(Tensor((1, 2), I16, 0.05, 0))
    z = m.tensor(Tensor((1, 2), F32))
    m.op("FULLY_CONNECTED", [x, w, -1], [y])
    m.op("CUMSUM", [y, m.tensor(Tensor((), "int32", data=np.array(1)))], [z],
         {"exclusive": False, "reverse": False})
    m.inputs(x)
    m.outputs(z)
    model = m.build()
    root = _read(model)
    assert root.Version() == 3 and root.BuffersLength() == 3
    assert root.Buffers(0).DataLength() == 0
    data = root.Buffers(1).DataAsNumpy()
    assert data.ctypes.data % 16 == (np.frombuffer(model, np.uint8).ctypes.data % 16)
    assert bytes(data) == np.arange(6, dtype=np.int8).tobytes()
    codes = [(root.OperatorCodes(i).BuiltinCode(), root.OperatorCodes(i).DeprecatedBuiltinCode())
             for i in range(root.OperatorCodesLength())]
    assert codes == [(tflite.BuiltinOperator.FULLY_CONNECTED, 9), (128, 127)]
    sg = root.Subgraphs(0)
    assert list(sg.Operators(0).InputsAsNumpy()) == [0, 1, -1]
    assert list(sg.Tensors(0).ShapeSignatureAsNumpy()) == [-1, 3]
    q = sg.Tensors(1).Quantization()
    assert list(q.ScaleAsNumpy()) == pytest.approx([0.1, 0.2])
    assert sg.Tensors(1).Type() == tflite.TensorType.INT8


def test_quantize_helpers() -> None:
    t = Tensor((2, 2), I8, [0.5, 0.25], 0, quantized_dimension=1)
    q = quantize(np.array([[1.0, 1.0], [100.0, -0.26]]), t)
    np.testing.assert_array_equal(q, [[2, 4], [127, -1]])
    np.testing.assert_allclose(dequantize(q, t), [[1.0, 1.0], [63.5, -0.25]])
    rng = np.random.default_rng(0)
    assert random_input(rng, Tensor((3,), "bool")).dtype == np.bool_
    assert random_input(rng, Tensor((3,), I16, 0.1, 0)).dtype == np.int16
    with pytest.raises(ValueError, match="does not fit"):
        Tensor((1,), I8, 1.0, 0, data=np.array([200]))


@needs_litert
def test_small_multi_operator_model() -> None:
    """CONV_2D (int8) -> RELU -> RESHAPE in one subgraph, checked against float math."""
    rng = np.random.default_rng(7)
    m = ModelBuilder()
    xt = act((1, 2, 2, 3), I8)
    wt = weights(rng, (4, 1, 1, 3), I8)
    bt = bias(rng, xt, wt, 4)
    yt = act((1, 2, 2, 4), I8, 0.02, 0)
    x, w, b, y = m.tensor(xt), m.tensor(wt), m.tensor(bt), m.tensor(yt)
    r = m.tensor(like(yt))
    out = m.tensor(like(yt, (4, 4)))
    m.op("CONV_2D", [x, w, b], [y], {"padding": "SAME", "stride_w": 1, "stride_h": 1})
    m.op("RELU", [y], [r])
    m.op("RESHAPE", [r, m.tensor(const([4, 4]))], [out], {"new_shape": [4, 4]})
    m.inputs(x)
    m.outputs(out)
    feed = random_input(rng, xt)
    got = reference(m.build(), [feed])[0]
    conv = np.einsum("nhwc,oc->nhwo", real(xt, feed), real(wt)[:, 0, 0, :]) + real(bt)
    want = quantize(np.maximum(conv, 0).reshape(4, 4), yt)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


@needs_litert
@pytest.mark.xfail(reason="TFLite's BUILTIN_REF quantized SUM disagrees with numpy and with "
                          "its BUILTIN (optimized) kernel", strict=False)
@pytest.mark.parametrize("dtype", [I8, I16])
def test_reference_quantized_sum(dtype: str) -> None:
    rng = np.random.default_rng(1)
    c = _reduce(np.sum, SUM_SCALES)(dtype, rng)
    feed = [random_input(rng, c.inputs[0])]
    got = reference(op_model("SUM", c.inputs, c.outputs, c.options), feed)[0]
    assert c.expect is not None
    _compare(got, c.expect(feed)[0], c.outputs[0], 1, f"SUM {dtype}")
