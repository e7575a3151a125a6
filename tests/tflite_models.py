"""Tiny single-operator int8 (and uint8) TFLite models, built in memory for tests.

Each ``*_model`` function returns the bytes of a ``.tflite`` flatbuffer (schema version 3, file
identifier ``TFL3``): one subgraph holding one operator. Buffer 0 is the empty sentinel, which
graph inputs, outputs and activations point at; every constant tensor (weights, bias, paddings,
shape) has a buffer of its own, 16-byte aligned. Operator codes carry the builtin code in both
``builtin_code`` and ``deprecated_builtin_code`` (capped at 127), version 1.

Tensors are described with :class:`QTensor`. Graph inputs are named ``input``, ``input_1``, ...
and the output ``output``. The builders check that ``out`` has the operator's output shape
(TensorFlow Lite Micro does not, and writes past a too-small output) but write the quantization
they are given: keeping the int8 kernels' constraints is the caller's part (each builder's
docstring lists them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import flatbuffers
import numpy as np
import tflite

SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"
BUFFER_ALIGNMENT = 16

_DTYPES = {"int8": (tflite.TensorType.INT8, np.dtype("<i1")),
           "uint8": (tflite.TensorType.UINT8, np.dtype("<u1")),
           "int32": (tflite.TensorType.INT32, np.dtype("<i4"))}
_PADDINGS = {"SAME": tflite.Padding.SAME, "VALID": tflite.Padding.VALID}
_ACTIVATIONS = {"NONE": tflite.ActivationFunctionType.NONE,
                "RELU": tflite.ActivationFunctionType.RELU,
                "RELU6": tflite.ActivationFunctionType.RELU6}


@dataclass
class QTensor:
    """An int8, uint8 or int32 tensor with its affine quantization.

    ``scale``/``zero_point`` are per-tensor when scalars; a list of scales makes the tensor
    per-channel along ``quantized_dimension`` (a scalar ``zero_point`` is then repeated).
    ``data`` is set for constants only; graph inputs and outputs leave it ``None``.
    """

    shape: tuple[int, ...]
    scale: float | list[float]
    zero_point: int | list[int]
    dtype: str = "int8"
    data: np.ndarray | None = None
    quantized_dimension: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: expected one of {sorted(_DTYPES)}")
        self.shape = tuple(int(d) for d in self.shape)
        scales, zero_points = self.scales, self.zero_points
        if len(zero_points) != len(scales):
            raise ValueError(f"{len(scales)} scales but {len(zero_points)} zero points")
        if len(scales) > 1:
            axis = self.quantized_dimension
            if not 0 <= axis < len(self.shape) or self.shape[axis] != len(scales):
                raise ValueError(f"{len(scales)} scales do not match dimension {axis} "
                                 f"of shape {self.shape}")
        if self.data is not None:
            data = np.asarray(self.data)
            if data.shape != self.shape:
                raise ValueError(f"data shape {data.shape} != tensor shape {self.shape}")
            info = np.iinfo(_DTYPES[self.dtype][1])
            if data.size and (data.min() < info.min or data.max() > info.max):
                raise ValueError(f"data does not fit in {self.dtype}")
            self.data = data.astype(_DTYPES[self.dtype][1])

    @property
    def scales(self) -> list[float]:
        """The scales as a list (one element when per-tensor)."""
        return [float(s) for s in np.atleast_1d(self.scale)]

    @property
    def zero_points(self) -> list[int]:
        """The zero points as a list, as long as :attr:`scales`."""
        zps = [int(z) for z in np.atleast_1d(self.zero_point)]
        n = len(np.atleast_1d(self.scale))
        return zps * n if len(zps) == 1 else zps

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype of the tensor's values."""
        return _DTYPES[self.dtype][1]

    def dequantize(self, values: np.ndarray | None = None) -> np.ndarray:
        """``(values - zero_point) * scale`` in float64 (values default to :attr:`data`)."""
        q = np.asarray(self.data if values is None else values, dtype=np.float64)
        scale, zp = np.asarray(self.scales), np.asarray(self.zero_points, dtype=np.float64)
        if len(scale) > 1:
            bshape = [1] * q.ndim
            bshape[self.quantized_dimension] = len(scale)
            scale, zp = scale.reshape(bshape), zp.reshape(bshape)
        return (q - zp) * scale

    def quantize(self, real: np.ndarray) -> np.ndarray:
        """Per-tensor quantization of float values: round, add the zero point, saturate."""
        if len(self.scales) != 1:
            raise ValueError("quantize() is for per-tensor tensors")
        info = np.iinfo(self.np_dtype)
        q = np.round(np.asarray(real, dtype=np.float64) / self.scales[0]) + self.zero_points[0]
        return np.clip(q, info.min, info.max).astype(self.np_dtype)


# ---- Helpers for tests -------------------------------------------------------------------------


def random_qtensor(rng: np.random.Generator, shape: Sequence[int], scale: float | list[float],
                   zero_point: int | list[int] = 0, dtype: str = "int8",
                   quantized_dimension: int = 0, low: int | None = None,
                   high: int | None = None) -> QTensor:
    """A constant tensor of uniformly random values in [low, high] (default: the dtype's range)."""
    info = np.iinfo(_DTYPES[dtype][1])
    low = info.min if low is None else low
    high = info.max if high is None else high
    data = rng.integers(low, high, size=tuple(shape), endpoint=True, dtype=np.int64)
    return QTensor(tuple(shape), scale, zero_point, dtype, data, quantized_dimension)


def random_input(rng: np.random.Generator, tensor: QTensor) -> np.ndarray:
    """Random values for a graph input of ``tensor``'s shape and dtype."""
    info = np.iinfo(tensor.np_dtype)
    return rng.integers(info.min, info.max, size=tensor.shape, endpoint=True,
                        dtype=np.int64).astype(tensor.np_dtype)


def random_weights_and_bias(rng: np.random.Generator, weight_shape: Sequence[int],
                            input_scale: float, quantized_dimension: int = 0,
                            per_channel: bool = True,
                            scale_range: tuple[float, float] = (0.002, 0.02),
                            bias_range: int = 1000) -> tuple[QTensor, QTensor]:
    """Random int8 weights (zero point 0) and the matching int32 bias.

    With ``per_channel`` the weights get one scale per entry of ``quantized_dimension`` (0 for
    conv2d/fully connected, 3 for depthwise conv2d); the bias has one value per output channel,
    scale ``input_scale * weight_scale[c]`` and zero point 0, as TFLite's int8 kernels expect.
    Weights span [-127, 127] (TFLite's symmetric int8 weight range).
    """
    channels = int(weight_shape[quantized_dimension])
    if per_channel:
        w_scale: float | list[float] = [float(s) for s in rng.uniform(*scale_range, channels)]
    else:
        w_scale = float(rng.uniform(*scale_range))
    weights = random_qtensor(rng, weight_shape, w_scale, 0, "int8", quantized_dimension,
                             low=-127, high=127)
    b_scale = [input_scale * s for s in weights.scales]
    bias = random_qtensor(rng, (channels,), b_scale if per_channel else b_scale[0], 0, "int32",
                          0, low=-bias_range, high=bias_range)
    return weights, bias


def conv_output_size(size: int, kernel: int, stride: int, padding: str, dilation: int = 1) -> int:
    """The output length of one spatial axis of a TFLite conv or pool ("SAME" or "VALID")."""
    if padding == "SAME":
        return -(-size // stride)
    effective = (kernel - 1) * dilation + 1
    return (size - effective) // stride + 1


def softmax_output(shape: Sequence[int]) -> QTensor:
    """The output quantization TFLite's int8 softmax requires: scale 1/256, zero point -128."""
    return QTensor(tuple(shape), 1.0 / 256.0, -128)


# ---- Flatbuffer assembly -----------------------------------------------------------------------


_Options = Callable[[flatbuffers.Builder], int]


class _Graph:
    """The tensors and buffers of a one-operator subgraph, serialized by :meth:`serialize`."""

    def __init__(self) -> None:
        self.buffers: list[bytes] = [b""]
        # (name, shape, tensor type, buffer index, QTensor or None for unquantized)
        self.tensors: list[tuple[str, tuple[int, ...], int, int, QTensor | None]] = []

    def _buffer(self, data: bytes) -> int:
        self.buffers.append(data)
        return len(self.buffers) - 1

    def add(self, name: str, tensor: QTensor) -> int:
        """A quantized tensor; a constant one (``data`` set) gets its own buffer."""
        buffer = 0
        if tensor.data is not None:
            buffer = self._buffer(np.ascontiguousarray(tensor.data, tensor.np_dtype).tobytes())
        self.tensors.append((name, tensor.shape, _DTYPES[tensor.dtype][0], buffer, tensor))
        return len(self.tensors) - 1

    def add_int32_constant(self, name: str, values: np.ndarray) -> int:
        """An unquantized int32 constant (paddings, shapes)."""
        values = np.asarray(values, dtype="<i4")
        buffer = self._buffer(values.tobytes())
        self.tensors.append((name, values.shape, tflite.TensorType.INT32, buffer, None))
        return len(self.tensors) - 1

    def serialize(self, op: int, inputs: list[int], outputs: list[int], graph_inputs: list[int],
                  graph_outputs: list[int], options_type: int, options: _Options) -> bytes:
        return self.serialize_ops([(op, inputs, outputs, options_type, options)], graph_inputs,
                                  graph_outputs)

    def serialize_ops(self, ops: list[tuple[int, list[int], list[int], int, _Options]],
                      graph_inputs: list[int], graph_outputs: list[int]) -> bytes:
        """The model with `ops` (builtin code, inputs, outputs, options type, options) run
        in order; one operator code per distinct builtin."""
        b = flatbuffers.Builder(1024)
        buffers = [_buffer_table(b, data) for data in self.buffers]
        tensors = [_tensor_table(b, *t) for t in self.tensors]
        codes = list(dict.fromkeys(op[0] for op in ops))
        operators = []
        for op, inputs, outputs, options_type, options in ops:
            options_offset = options(b)
            op_inputs = _int32_vector(b, inputs)
            op_outputs = _int32_vector(b, outputs)
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, codes.index(op))
            tflite.OperatorAddInputs(b, op_inputs)
            tflite.OperatorAddOutputs(b, op_outputs)
            tflite.OperatorAddBuiltinOptionsType(b, options_type)
            tflite.OperatorAddBuiltinOptions(b, options_offset)
            operators.append(tflite.OperatorEnd(b))

        sg_tensors = _offset_vector(b, tensors)
        sg_inputs = _int32_vector(b, graph_inputs)
        sg_outputs = _int32_vector(b, graph_outputs)
        sg_operators = _offset_vector(b, operators)
        sg_name = b.CreateString("main")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, sg_tensors)
        tflite.SubGraphAddInputs(b, sg_inputs)
        tflite.SubGraphAddOutputs(b, sg_outputs)
        tflite.SubGraphAddOperators(b, sg_operators)
        tflite.SubGraphAddName(b, sg_name)
        subgraph = tflite.SubGraphEnd(b)

        opcodes = []
        for op in codes:
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(op, 127))
            tflite.OperatorCodeAddBuiltinCode(b, op)
            tflite.OperatorCodeAddVersion(b, 1)
            opcodes.append(tflite.OperatorCodeEnd(b))

        m_opcodes = _offset_vector(b, opcodes)
        m_subgraphs = _offset_vector(b, [subgraph])
        m_buffers = _offset_vector(b, buffers)
        description = b.CreateString("microtvm-gen test model")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, SCHEMA_VERSION)
        tflite.ModelAddOperatorCodes(b, m_opcodes)
        tflite.ModelAddSubgraphs(b, m_subgraphs)
        tflite.ModelAddDescription(b, description)
        tflite.ModelAddBuffers(b, m_buffers)
        model = tflite.ModelEnd(b)
        b.Finish(model, file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())


def _int32_vector(b: flatbuffers.Builder, values: Sequence[int]) -> int:
    return b.CreateNumpyVector(np.asarray(values, dtype="<i4").reshape(-1))


def _offset_vector(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _buffer_table(b: flatbuffers.Builder, data: bytes) -> int:
    data_offset = None
    if data:
        # Constant data is read in place by TFLite (Micro): align it as the converter does.
        b.StartVector(1, len(data), BUFFER_ALIGNMENT)
        b.head = b.head - len(data)  # the bytes at once (one Prepend each is slow)
        b.Bytes[b.head:b.head + len(data)] = data
        data_offset = b.EndVector()
    tflite.BufferStart(b)
    if data_offset is not None:
        tflite.BufferAddData(b, data_offset)
    return tflite.BufferEnd(b)


def _tensor_table(b: flatbuffers.Builder, name: str, shape: tuple[int, ...], tensor_type: int,
                  buffer: int, q: QTensor | None) -> int:
    name_offset = b.CreateString(name)
    shape_offset = _int32_vector(b, shape)
    quant = None
    if q is not None:
        scales = b.CreateNumpyVector(np.asarray(q.scales, dtype="<f4"))
        zero_points = b.CreateNumpyVector(np.asarray(q.zero_points, dtype="<i8"))
        tflite.QuantizationParametersStart(b)
        tflite.QuantizationParametersAddScale(b, scales)
        tflite.QuantizationParametersAddZeroPoint(b, zero_points)
        tflite.QuantizationParametersAddQuantizedDimension(b, q.quantized_dimension)
        quant = tflite.QuantizationParametersEnd(b)
    tflite.TensorStart(b)
    tflite.TensorAddShape(b, shape_offset)
    tflite.TensorAddType(b, tensor_type)
    tflite.TensorAddBuffer(b, buffer)
    tflite.TensorAddName(b, name_offset)
    if quant is not None:
        tflite.TensorAddQuantization(b, quant)
    return tflite.TensorEnd(b)


def _padding(padding: str) -> int:
    if padding not in _PADDINGS:
        raise ValueError(f"padding {padding!r}: expected one of {sorted(_PADDINGS)}")
    return _PADDINGS[padding]


def _activation(activation: str) -> int:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: expected one of {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[activation]


def _require_constant(tensor: QTensor, what: str) -> None:
    if tensor.data is None:
        raise ValueError(f"{what} must be a constant (data set)")


def _expect_shape(out: QTensor, expected: Sequence[int], what: str) -> None:
    if tuple(out.shape) != tuple(int(d) for d in expected):
        raise ValueError(f"{what}: output shape {out.shape}, expected {tuple(expected)}")


def _conv_shape(inp: QTensor, kernel: Sequence[int], channels: int, stride: Sequence[int],
                padding: str, dilation: Sequence[int] = (1, 1)) -> tuple[int, ...]:
    if len(inp.shape) != 4:
        raise ValueError(f"input shape {inp.shape}: expected NHWC")
    return (inp.shape[0],
            conv_output_size(inp.shape[1], kernel[0], stride[0], padding, dilation[0]),
            conv_output_size(inp.shape[2], kernel[1], stride[1], padding, dilation[1]),
            channels)


def _input_names(count: int) -> list[str]:
    return ["input" if i == 0 else f"input_{i}" for i in range(count)]


# ---- Models ------------------------------------------------------------------------------------


def conv2d_model(inp: QTensor, weights: QTensor, bias: QTensor, out: QTensor,
                 stride: tuple[int, int] = (1, 1), padding: str = "SAME",
                 activation: str = "NONE", dilation: tuple[int, int] = (1, 1)) -> bytes:
    """CONV_2D on an NHWC input with OHWI weights ``[O, KH, KW, I]`` and int32 bias ``[O]``.

    int8 constraints (TFLite Micro): weight zero points 0, per-tensor or per-channel along
    dimension 0; bias int32 with scale ``input_scale * weight_scale[c]`` and zero point 0;
    TFLite Micro does not check the weight zero point: it computes as if it were 0.
    """
    _require_constant(weights, "conv2d weights")
    _require_constant(bias, "conv2d bias")
    o, kh, kw, i = weights.shape
    if len(inp.shape) != 4 or inp.shape[3] != i or bias.shape != (o,):
        raise ValueError(f"conv2d: input {inp.shape}, weights {weights.shape} (OHWI) and "
                         f"bias {bias.shape} do not agree")
    _expect_shape(out, _conv_shape(inp, (kh, kw), o, stride, padding, dilation), "conv2d")
    g = _Graph()
    x, w, bi, y = (g.add("input", inp), g.add("weights", weights), g.add("bias", bias),
                   g.add("output", out))
    pad, act = _padding(padding), _activation(activation)

    def options(b: flatbuffers.Builder) -> int:
        tflite.Conv2DOptionsStart(b)
        tflite.Conv2DOptionsAddPadding(b, pad)
        tflite.Conv2DOptionsAddStrideH(b, stride[0])
        tflite.Conv2DOptionsAddStrideW(b, stride[1])
        tflite.Conv2DOptionsAddDilationHFactor(b, dilation[0])
        tflite.Conv2DOptionsAddDilationWFactor(b, dilation[1])
        tflite.Conv2DOptionsAddFusedActivationFunction(b, act)
        return tflite.Conv2DOptionsEnd(b)

    return g.serialize(tflite.BuiltinOperator.CONV_2D, [x, w, bi], [y], [x], [y],
                       tflite.BuiltinOptions.Conv2DOptions, options)


def depthwise_conv2d_model(inp: QTensor, weights: QTensor, bias: QTensor, out: QTensor,
                           stride: tuple[int, int] = (1, 1), padding: str = "SAME",
                           activation: str = "NONE", depth_multiplier: int = 1,
                           dilation: tuple[int, int] = (1, 1)) -> bytes:
    """DEPTHWISE_CONV_2D: NHWC input ``[N, H, W, C]``, weights ``[1, KH, KW, C * mult]``.

    int8 constraints (TFLite Micro): weight zero points 0, per-channel along dimension 3
    (``quantized_dimension=3``); bias int32 ``[C * mult]``, scale ``input_scale *
    weight_scale[c]``, zero point 0; ``out.shape[3] == C * depth_multiplier``.
    """
    _require_constant(weights, "depthwise weights")
    _require_constant(bias, "depthwise bias")
    _, kh, kw, oc = weights.shape
    if (len(inp.shape) != 4 or weights.shape[0] != 1 or oc != inp.shape[3] * depth_multiplier
            or bias.shape != (oc,)):
        raise ValueError(f"depthwise_conv2d: input {inp.shape}, weights {weights.shape} "
                         f"([1, KH, KW, C*mult]), multiplier {depth_multiplier} and bias "
                         f"{bias.shape} do not agree")
    _expect_shape(out, _conv_shape(inp, (kh, kw), oc, stride, padding, dilation),
                  "depthwise_conv2d")
    g = _Graph()
    x, w, bi, y = (g.add("input", inp), g.add("weights", weights), g.add("bias", bias),
                   g.add("output", out))
    pad, act = _padding(padding), _activation(activation)

    def options(b: flatbuffers.Builder) -> int:
        tflite.DepthwiseConv2DOptionsStart(b)
        tflite.DepthwiseConv2DOptionsAddPadding(b, pad)
        tflite.DepthwiseConv2DOptionsAddStrideH(b, stride[0])
        tflite.DepthwiseConv2DOptionsAddStrideW(b, stride[1])
        tflite.DepthwiseConv2DOptionsAddDepthMultiplier(b, depth_multiplier)
        tflite.DepthwiseConv2DOptionsAddDilationHFactor(b, dilation[0])
        tflite.DepthwiseConv2DOptionsAddDilationWFactor(b, dilation[1])
        tflite.DepthwiseConv2DOptionsAddFusedActivationFunction(b, act)
        return tflite.DepthwiseConv2DOptionsEnd(b)

    return g.serialize(tflite.BuiltinOperator.DEPTHWISE_CONV_2D, [x, w, bi], [y], [x], [y],
                       tflite.BuiltinOptions.DepthwiseConv2DOptions, options)


def fully_connected_model(inp: QTensor, weights: QTensor, bias: QTensor, out: QTensor,
                          activation: str = "NONE") -> bytes:
    """FULLY_CONNECTED: input ``[batch, in]``, weights ``[units, in]``, output ``[batch, units]``.

    An input of higher rank is flattened to ``[size // in, in]``. int8 constraints (TFLite
    Micro): weight zero point 0, per-tensor (per-channel along dimension 0 also runs); bias int32
    ``[units]`` with scale ``input_scale * weight_scale`` and zero point 0.
    """
    _require_constant(weights, "fully connected weights")
    _require_constant(bias, "fully connected bias")
    units, depth = weights.shape
    size = int(np.prod(inp.shape))
    if size % depth or bias.shape != (units,):
        raise ValueError(f"fully_connected: input {inp.shape}, weights {weights.shape} and bias "
                         f"{bias.shape} do not agree")
    _expect_shape(out, (size // depth, units), "fully_connected")
    g = _Graph()
    x, w, bi, y = (g.add("input", inp), g.add("weights", weights), g.add("bias", bias),
                   g.add("output", out))
    act = _activation(activation)

    def options(b: flatbuffers.Builder) -> int:
        tflite.FullyConnectedOptionsStart(b)
        tflite.FullyConnectedOptionsAddFusedActivationFunction(b, act)
        return tflite.FullyConnectedOptionsEnd(b)

    return g.serialize(tflite.BuiltinOperator.FULLY_CONNECTED, [x, w, bi], [y], [x], [y],
                       tflite.BuiltinOptions.FullyConnectedOptions, options)


def add_model(a: QTensor, b: QTensor, out: QTensor, activation: str = "NONE") -> bytes:
    """ADD of two graph inputs (``input``, ``input_1``), numpy-broadcasting their shapes.

    Each of ``a``, ``b``, ``out`` has its own per-tensor quantization; TFLite Micro rescales.
    A constant ``b`` (``data`` set) becomes a weight instead of the second graph input.
    """
    _expect_shape(out, np.broadcast_shapes(a.shape, b.shape), "add")
    g = _Graph()
    x0 = g.add("input", a)
    x1 = g.add("input_1" if b.data is None else "constant", b)
    y = g.add("output", out)
    act = _activation(activation)
    graph_inputs = [x0] if b.data is not None else [x0, x1]

    def options(fb: flatbuffers.Builder) -> int:
        tflite.AddOptionsStart(fb)
        tflite.AddOptionsAddFusedActivationFunction(fb, act)
        return tflite.AddOptionsEnd(fb)

    return g.serialize(tflite.BuiltinOperator.ADD, [x0, x1], [y], graph_inputs, [y],
                       tflite.BuiltinOptions.AddOptions, options)


def _pool_model(op: int, inp: QTensor, out: QTensor, filter: tuple[int, int],
                stride: tuple[int, int], padding: str, activation: str) -> bytes:
    _expect_shape(out, _conv_shape(inp, filter, inp.shape[-1], stride, padding), "pool")
    g = _Graph()
    x, y = g.add("input", inp), g.add("output", out)
    pad, act = _padding(padding), _activation(activation)

    def options(b: flatbuffers.Builder) -> int:
        tflite.Pool2DOptionsStart(b)
        tflite.Pool2DOptionsAddPadding(b, pad)
        tflite.Pool2DOptionsAddStrideH(b, stride[0])
        tflite.Pool2DOptionsAddStrideW(b, stride[1])
        tflite.Pool2DOptionsAddFilterHeight(b, filter[0])
        tflite.Pool2DOptionsAddFilterWidth(b, filter[1])
        tflite.Pool2DOptionsAddFusedActivationFunction(b, act)
        return tflite.Pool2DOptionsEnd(b)

    return g.serialize(op, [x], [y], [x], [y], tflite.BuiltinOptions.Pool2DOptions, options)


def avg_pool_model(inp: QTensor, out: QTensor, filter: tuple[int, int] = (2, 2),
                   stride: tuple[int, int] = (2, 2), padding: str = "VALID",
                   activation: str = "NONE") -> bytes:
    """AVERAGE_POOL_2D on NHWC. int8: ``out`` must have the input's scale and zero point
    (TFLite Micro refuses others: it averages raw values; SAME borders are not counted)."""
    return _pool_model(tflite.BuiltinOperator.AVERAGE_POOL_2D, inp, out, filter, stride,
                       padding, activation)


def max_pool_model(inp: QTensor, out: QTensor, filter: tuple[int, int] = (2, 2),
                   stride: tuple[int, int] = (2, 2), padding: str = "VALID",
                   activation: str = "NONE") -> bytes:
    """MAX_POOL_2D on NHWC. int8: ``out`` must have the input's scale and zero point (TFLite
    Micro refuses others)."""
    return _pool_model(tflite.BuiltinOperator.MAX_POOL_2D, inp, out, filter, stride,
                       padding, activation)


def pad_model(inp: QTensor, out: QTensor, paddings: Sequence[tuple[int, int]]) -> bytes:
    """PAD with ``paddings`` ``[(before, after)] * rank`` as an int32 ``[rank, 2]`` constant.

    int8: give ``out`` the input's scale and zero point. TFLite Micro does not check: it copies
    raw values and fills with the output zero point; TVM's converter requires them equal.
    """
    pads = np.asarray(paddings, dtype=np.int32)
    if pads.shape != (len(inp.shape), 2) or (pads < 0).any():
        raise ValueError(f"paddings {paddings!r}: expected {len(inp.shape)} (before, after) pairs")
    _expect_shape(out, np.asarray(inp.shape) + pads.sum(axis=1), "pad")
    g = _Graph()
    x, p, y = g.add("input", inp), g.add_int32_constant("paddings", pads), g.add("output", out)

    def options(b: flatbuffers.Builder) -> int:
        tflite.PadOptionsStart(b)
        return tflite.PadOptionsEnd(b)

    return g.serialize(tflite.BuiltinOperator.PAD, [x, p], [y], [x], [y],
                       tflite.BuiltinOptions.PadOptions, options)


def concat_model(inputs: Sequence[QTensor], out: QTensor, axis: int) -> bytes:
    """CONCATENATION of graph inputs ``input``, ``input_1``, ... along ``axis``.

    ``axis`` may be negative. int8: every input must have the output's scale and zero point
    (TFLite Micro refuses others; it copies without rescaling).
    """
    if not inputs:
        raise ValueError("concat_model needs at least one input")
    rank = len(out.shape)
    expected = list(inputs[0].shape)
    expected[axis % rank] = sum(t.shape[axis % rank] for t in inputs)
    _expect_shape(out, expected, "concat")
    g = _Graph()
    xs = [g.add(name, t) for name, t in zip(_input_names(len(inputs)), inputs, strict=True)]
    y = g.add("output", out)

    def options(b: flatbuffers.Builder) -> int:
        tflite.ConcatenationOptionsStart(b)
        tflite.ConcatenationOptionsAddAxis(b, axis)
        tflite.ConcatenationOptionsAddFusedActivationFunction(b, _ACTIVATIONS["NONE"])
        return tflite.ConcatenationOptionsEnd(b)

    return g.serialize(tflite.BuiltinOperator.CONCATENATION, xs, [y], xs, [y],
                       tflite.BuiltinOptions.ConcatenationOptions, options)


def softmax_model(inp: QTensor, out: QTensor, beta: float = 1.0) -> bytes:
    """SOFTMAX over the last axis. int8: ``out`` must have scale 1/256 and zero point -128
    (TFLite Micro refuses anything else; see :func:`softmax_output`)."""
    _expect_shape(out, inp.shape, "softmax")
    g = _Graph()
    x, y = g.add("input", inp), g.add("output", out)

    def options(b: flatbuffers.Builder) -> int:
        tflite.SoftmaxOptionsStart(b)
        tflite.SoftmaxOptionsAddBeta(b, beta)
        return tflite.SoftmaxOptionsEnd(b)

    return g.serialize(tflite.BuiltinOperator.SOFTMAX, [x], [y], [x], [y],
                       tflite.BuiltinOptions.SoftmaxOptions, options)


def reshape_model(inp: QTensor, out: QTensor, new_shape: Sequence[int]) -> bytes:
    """RESHAPE, with ``new_shape`` both as an int32 shape constant (input 1) and in
    ReshapeOptions (one entry may be -1). int8: give ``out`` the input's quantization (TFLite
    Micro copies bytes and does not check)."""
    shape = np.asarray(new_shape, dtype=np.int32).reshape(-1)
    _expect_shape(out, np.empty(inp.shape, dtype=np.int8).reshape(shape.tolist()).shape, "reshape")
    g = _Graph()
    x, s, y = g.add("input", inp), g.add_int32_constant("shape", shape), g.add("output", out)

    def options(b: flatbuffers.Builder) -> int:
        vec = _int32_vector(b, shape)
        tflite.ReshapeOptionsStart(b)
        tflite.ReshapeOptionsAddNewShape(b, vec)
        return tflite.ReshapeOptionsEnd(b)

    return g.serialize(tflite.BuiltinOperator.RESHAPE, [x, s], [y], [x], [y],
                       tflite.BuiltinOptions.ReshapeOptions, options)


def resnet_model(rng: np.random.Generator, size: int = 16, widths: Sequence[int] = (8, 16, 32),
                 classes: int = 10) -> tuple[bytes, QTensor]:
    """A ResNet-8-like int8 stack (MLPerf Tiny's image classifier, scaled down): a 3×3 conv,
    then per width a residual block (3×3 conv + RELU, 3×3 conv, ADD of the shortcut + RELU;
    a block that halves the size has stride 2 and a 1×1 strided conv on the shortcut), then
    a global average pool, RESHAPE, FULLY_CONNECTED and SOFTMAX. Every 3×3 conv is SAME-padded.
    Activations after a RELU have zero point −128. Scales follow an estimate of each
    tensor's RMS (about 40 units from the zero point), so values spread over the int8 range
    instead of saturating or dying out. Returns the model and its input tensor."""
    g = _Graph()
    ops: list[tuple[int, list[int], list[int], int, _Options]] = []
    inp = QTensor((1, size, size, 3), 0.02, -1)
    x_id = g.add("input", inp)
    count = [0]
    rms: dict[int, float] = {x_id: 74.0}  # RMS of (q − zero point), in int8 units

    def name(kind: str) -> str:
        count[0] += 1
        return f"{kind}_{count[0]}"

    def conv(x: QTensor, xi: int, channels: int, kernel: int, stride: int,
             activation: str) -> tuple[QTensor, int]:
        weights, bias = random_weights_and_bias(
            rng, (channels, kernel, kernel, x.shape[3]), x.scales[0],
            scale_range=(0.004, 0.008), bias_range=2000)
        fan_in = kernel * kernel * x.shape[3]
        spread = rms[xi] * x.scales[0] * 0.006 * 73.0 * np.sqrt(fan_in)  # real RMS
        hw = -(-x.shape[1] // stride)
        out = QTensor((1, hw, hw, channels),
                      float(spread / (60.0 if activation == "RELU" else 40.0)),
                      -128 if activation == "RELU" else 0)
        wi, bi, yi = g.add(name("w"), weights), g.add(name("b"), bias), g.add(name("conv"), out)
        rms[yi] = 42.0 if activation == "RELU" else 40.0
        pad, act = _padding("SAME"), _activation(activation)

        def options(b: flatbuffers.Builder) -> int:
            tflite.Conv2DOptionsStart(b)
            tflite.Conv2DOptionsAddPadding(b, pad)
            tflite.Conv2DOptionsAddStrideH(b, stride)
            tflite.Conv2DOptionsAddStrideW(b, stride)
            tflite.Conv2DOptionsAddDilationHFactor(b, 1)
            tflite.Conv2DOptionsAddDilationWFactor(b, 1)
            tflite.Conv2DOptionsAddFusedActivationFunction(b, act)
            return tflite.Conv2DOptionsEnd(b)

        ops.append((tflite.BuiltinOperator.CONV_2D, [xi, wi, bi], [yi],
                    tflite.BuiltinOptions.Conv2DOptions, options))
        return out, yi

    def add(a: tuple[QTensor, int], b: tuple[QTensor, int]) -> tuple[QTensor, int]:
        spread = np.hypot(rms[a[1]] * a[0].scales[0], rms[b[1]] * b[0].scales[0])
        out = QTensor(a[0].shape, float(spread / 60.0), -128)
        yi = g.add(name("add"), out)
        rms[yi] = 42.0
        act = _activation("RELU")

        def options(fb: flatbuffers.Builder) -> int:
            tflite.AddOptionsStart(fb)
            tflite.AddOptionsAddFusedActivationFunction(fb, act)
            return tflite.AddOptionsEnd(fb)

        ops.append((tflite.BuiltinOperator.ADD, [a[1], b[1]], [yi],
                    tflite.BuiltinOptions.AddOptions, options))
        return out, yi

    h = conv(inp, x_id, widths[0], 3, 1, "RELU")
    for k, width in enumerate(widths):
        stride = 1 if k == 0 else 2
        y = conv(h[0], h[1], width, 3, stride, "RELU")
        y = conv(y[0], y[1], width, 3, 1, "NONE")
        shortcut = h if stride == 1 else conv(h[0], h[1], width, 1, stride, "NONE")
        h = add(y, shortcut)

    side, width = h[0].shape[1], h[0].shape[3]
    pooled = QTensor((1, 1, 1, width), h[0].scales[0], h[0].zero_points[0])
    pi = g.add(name("pool"), pooled)

    def pool_options(b: flatbuffers.Builder) -> int:
        tflite.Pool2DOptionsStart(b)
        tflite.Pool2DOptionsAddPadding(b, _padding("VALID"))
        tflite.Pool2DOptionsAddStrideW(b, side)
        tflite.Pool2DOptionsAddStrideH(b, side)
        tflite.Pool2DOptionsAddFilterWidth(b, side)
        tflite.Pool2DOptionsAddFilterHeight(b, side)
        tflite.Pool2DOptionsAddFusedActivationFunction(b, _activation("NONE"))
        return tflite.Pool2DOptionsEnd(b)

    ops.append((tflite.BuiltinOperator.AVERAGE_POOL_2D, [h[1]], [pi],
                tflite.BuiltinOptions.Pool2DOptions, pool_options))
    flat_shape = np.asarray([1, width], dtype=np.int32)
    flat = QTensor((1, width), pooled.scales[0], pooled.zero_points[0])
    si, fi = g.add_int32_constant(name("shape"), flat_shape), g.add(name("flat"), flat)

    def reshape_options(b: flatbuffers.Builder) -> int:
        vec = _int32_vector(b, flat_shape)
        tflite.ReshapeOptionsStart(b)
        tflite.ReshapeOptionsAddNewShape(b, vec)
        return tflite.ReshapeOptionsEnd(b)

    ops.append((tflite.BuiltinOperator.RESHAPE, [pi, si], [fi],
                tflite.BuiltinOptions.ReshapeOptions, reshape_options))
    w_scale = 2.0 / (pooled.scales[0] * 42.0 * 73.0 * np.sqrt(width))  # logits' RMS ≈ 2
    weights, bias = random_weights_and_bias(rng, (classes, width), pooled.scales[0],
                                            per_channel=False, bias_range=0,
                                            scale_range=(0.8 * w_scale, 1.2 * w_scale))
    logits = QTensor((1, classes), 8.0 / 127.0, 0)
    wi, bi, li = g.add(name("w"), weights), g.add(name("b"), bias), g.add(name("fc"), logits)

    def fc_options(b: flatbuffers.Builder) -> int:
        tflite.FullyConnectedOptionsStart(b)
        tflite.FullyConnectedOptionsAddFusedActivationFunction(b, _activation("NONE"))
        return tflite.FullyConnectedOptionsEnd(b)

    ops.append((tflite.BuiltinOperator.FULLY_CONNECTED, [fi, wi, bi], [li],
                tflite.BuiltinOptions.FullyConnectedOptions, fc_options))
    probs = softmax_output((1, classes))
    yi = g.add("output", probs)

    def softmax_options(b: flatbuffers.Builder) -> int:
        tflite.SoftmaxOptionsStart(b)
        tflite.SoftmaxOptionsAddBeta(b, 1.0)
        return tflite.SoftmaxOptionsEnd(b)

    ops.append((tflite.BuiltinOperator.SOFTMAX, [li], [yi],
                tflite.BuiltinOptions.SoftmaxOptions, softmax_options))
    return g.serialize_ops(ops, [x_id], [yi]), inp


def person_model(rng: np.random.Generator, size: int = 20, channels: int = 1,
                 widths: Sequence[int] = (8, 16), classes: int = 3, dtype: str = "uint8"
                 ) -> tuple[bytes, QTensor]:
    """A person-detection / MobileNet-v1-style uint8 model (TFLite's asymmetric uint8
    quantization): a 3×3 stride-2 SAME conv, then per width a 3×3 SAME depthwise conv and a
    1×1 conv (the first depthwise has stride 2 when the input allows), all RELU6 with
    TFLite's uint8 RELU6 range (scale 6/255, zero point 0); a global AVERAGE_POOL_2D,
    RESHAPE, FULLY_CONNECTED and SOFTMAX (uint8: scale 1/256, zero point 0).
    Weights are uint8, per-tensor, with zero points away from 0 and 128; biases int32 with
    scale input_scale · weight_scale. The input has a nonzero zero point. Weight scales
    follow an estimate of each layer's spread (outputs' RMS about 2.5 of the RELU6's 6).
    ``dtype="int8"`` gives the int8 twin: zero points 128 lower, int8 weights in
    [-127, 127] with zero point 0 (to compare the two paths' costs)."""
    if dtype not in ("uint8", "int8"):
        raise ValueError(f"dtype {dtype!r}: expected uint8 or int8")
    shift = 0 if dtype == "uint8" else 128  # int8 zero points are the uint8 ones − 128
    g = _Graph()
    ops: list[tuple[int, list[int], list[int], int, _Options]] = []
    inp = QTensor((1, size, size, channels), 1.0 / 128, 120 - shift, dtype)
    x_id = g.add("input", inp)
    count = [0]
    relu6 = _activation("RELU6")

    def name(kind: str) -> str:
        count[0] += 1
        return f"{kind}_{count[0]}"

    def weights_and_bias(shape: Sequence[int], x: QTensor, fan_in: int, x_rms: float
                         ) -> tuple[QTensor, QTensor]:
        w_scale = float(2.5 / (x_rms * 74.0 * np.sqrt(fan_in)) * rng.uniform(0.8, 1.2))
        zero = int(rng.integers(90, 166))
        if dtype == "uint8":
            weights = random_qtensor(rng, shape, w_scale, zero, "uint8")
        else:
            weights = random_qtensor(rng, shape, w_scale, 0, "int8", low=-127, high=127)
        b_scale = x.scales[0] * w_scale
        bias = random_qtensor(rng, (shape[0] if shape[0] != 1 else shape[3],), b_scale, 0,
                              "int32", low=-int(0.5 / b_scale), high=int(0.5 / b_scale))
        return weights, bias

    def conv(x: tuple[QTensor, int], out_c: int, kernel: int, stride: int, depthwise: bool,
             x_rms: float) -> tuple[QTensor, int]:
        t, xi = x
        in_c = t.shape[3]
        if depthwise:
            weights, bias = weights_and_bias((1, kernel, kernel, in_c), t, kernel * kernel,
                                             x_rms)
        else:
            weights, bias = weights_and_bias((out_c, kernel, kernel, in_c), t,
                                             kernel * kernel * in_c, x_rms)
        hw = conv_output_size(t.shape[1], kernel, stride, "SAME")
        out = QTensor((1, hw, hw, in_c if depthwise else out_c), 6.0 / 255, -shift, dtype)
        wi, bi, yi = g.add(name("w"), weights), g.add(name("b"), bias), g.add(name("conv"), out)
        pad = _padding("SAME")

        def options(b: flatbuffers.Builder) -> int:
            if depthwise:
                tflite.DepthwiseConv2DOptionsStart(b)
                tflite.DepthwiseConv2DOptionsAddPadding(b, pad)
                tflite.DepthwiseConv2DOptionsAddStrideH(b, stride)
                tflite.DepthwiseConv2DOptionsAddStrideW(b, stride)
                tflite.DepthwiseConv2DOptionsAddDepthMultiplier(b, 1)
                tflite.DepthwiseConv2DOptionsAddDilationHFactor(b, 1)
                tflite.DepthwiseConv2DOptionsAddDilationWFactor(b, 1)
                tflite.DepthwiseConv2DOptionsAddFusedActivationFunction(b, relu6)
                return tflite.DepthwiseConv2DOptionsEnd(b)
            tflite.Conv2DOptionsStart(b)
            tflite.Conv2DOptionsAddPadding(b, pad)
            tflite.Conv2DOptionsAddStrideH(b, stride)
            tflite.Conv2DOptionsAddStrideW(b, stride)
            tflite.Conv2DOptionsAddDilationHFactor(b, 1)
            tflite.Conv2DOptionsAddDilationWFactor(b, 1)
            tflite.Conv2DOptionsAddFusedActivationFunction(b, relu6)
            return tflite.Conv2DOptionsEnd(b)

        if depthwise:
            ops.append((tflite.BuiltinOperator.DEPTHWISE_CONV_2D, [xi, wi, bi], [yi],
                        tflite.BuiltinOptions.DepthwiseConv2DOptions, options))
        else:
            ops.append((tflite.BuiltinOperator.CONV_2D, [xi, wi, bi], [yi],
                        tflite.BuiltinOptions.Conv2DOptions, options))
        return out, yi

    act_rms = 2.5  # of a RELU6 output, in real units
    h = conv((inp, x_id), widths[0], 3, 2, False, 0.6)
    for k, width in enumerate(widths):
        stride = 2 if k == 0 and h[0].shape[1] >= 6 else 1
        h = conv(h, 0, 3, stride, True, act_rms)
        h = conv(h, width, 1, 1, False, act_rms)

    side, width = h[0].shape[1], h[0].shape[3]
    pooled = QTensor((1, 1, 1, width), h[0].scales[0], h[0].zero_points[0], dtype)
    pi = g.add(name("pool"), pooled)

    def pool_options(b: flatbuffers.Builder) -> int:
        tflite.Pool2DOptionsStart(b)
        tflite.Pool2DOptionsAddPadding(b, _padding("VALID"))
        tflite.Pool2DOptionsAddStrideW(b, side)
        tflite.Pool2DOptionsAddStrideH(b, side)
        tflite.Pool2DOptionsAddFilterWidth(b, side)
        tflite.Pool2DOptionsAddFilterHeight(b, side)
        tflite.Pool2DOptionsAddFusedActivationFunction(b, _activation("NONE"))
        return tflite.Pool2DOptionsEnd(b)

    ops.append((tflite.BuiltinOperator.AVERAGE_POOL_2D, [h[1]], [pi],
                tflite.BuiltinOptions.Pool2DOptions, pool_options))
    flat_shape = np.asarray([1, width], dtype=np.int32)
    flat = QTensor((1, width), pooled.scales[0], pooled.zero_points[0], dtype)
    si, fi = g.add_int32_constant(name("shape"), flat_shape), g.add(name("flat"), flat)

    def reshape_options(b: flatbuffers.Builder) -> int:
        vec = _int32_vector(b, flat_shape)
        tflite.ReshapeOptionsStart(b)
        tflite.ReshapeOptionsAddNewShape(b, vec)
        return tflite.ReshapeOptionsEnd(b)

    ops.append((tflite.BuiltinOperator.RESHAPE, [pi, si], [fi],
                tflite.BuiltinOptions.ReshapeOptions, reshape_options))
    weights, bias = weights_and_bias((classes, width), flat, width, act_rms)
    logits = QTensor((1, classes), 8.0 / 255, 118 - shift, dtype)
    wi, bi, li = g.add(name("w"), weights), g.add(name("b"), bias), g.add(name("fc"), logits)

    def fc_options(b: flatbuffers.Builder) -> int:
        tflite.FullyConnectedOptionsStart(b)
        tflite.FullyConnectedOptionsAddFusedActivationFunction(b, _activation("NONE"))
        return tflite.FullyConnectedOptionsEnd(b)

    ops.append((tflite.BuiltinOperator.FULLY_CONNECTED, [fi, wi, bi], [li],
                tflite.BuiltinOptions.FullyConnectedOptions, fc_options))
    probs = QTensor((1, classes), 1.0 / 256, -shift, dtype)
    yi = g.add("output", probs)

    def softmax_options(b: flatbuffers.Builder) -> int:
        tflite.SoftmaxOptionsStart(b)
        tflite.SoftmaxOptionsAddBeta(b, 1.0)
        return tflite.SoftmaxOptionsEnd(b)

    ops.append((tflite.BuiltinOperator.SOFTMAX, [li], [yi],
                tflite.BuiltinOptions.SoftmaxOptions, softmax_options))
    return g.serialize_ops(ops, [x_id], [yi]), inp
