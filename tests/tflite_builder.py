"""A general builder of TFLite flatbuffer models for tests, and TFLite's reference kernels.

:class:`ModelBuilder` assembles one subgraph of any builtin (or custom) operators: tensors are
described with :class:`Tensor` (any TFLite dtype the tests need, quantized or not, constant or
not), operators by their ``tflite.BuiltinOperator`` name and their builtin options as a dict of
the options table's fields in snake_case. The options table of an operator is found by
reflection over the ``tflite`` package (``CONV_2D`` -> ``Conv2DOptions``) plus a small table of
the names that do not line up (``MEAN`` -> ``ReducerOptions``).

The model follows the converter's layout: schema version 3, file identifier ``TFL3``, buffer 0
is the empty sentinel (graph inputs, activations and variable tensors point at it), each
constant has a buffer of its own, 16-byte aligned, and each operator code carries its builtin
code in ``builtin_code`` and ``deprecated_builtin_code`` (capped at 127).

:func:`reference` runs a model in TFLite's interpreter with its reference kernels
(``ai_edge_litert``, the ``[test]`` extra), the oracle the compiler's output is compared with.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite

from tests.tflite_models import (
    FILE_IDENTIFIER,
    SCHEMA_VERSION,
    _buffer_table,
    _int32_vector,
    _offset_vector,
)

# dtype name -> (tflite.TensorType, numpy dtype, little endian)
_DTYPES: dict[str, tuple[int, np.dtype]] = {
    "int8": (tflite.TensorType.INT8, np.dtype("<i1")),
    "uint8": (tflite.TensorType.UINT8, np.dtype("<u1")),
    "int16": (tflite.TensorType.INT16, np.dtype("<i2")),
    "uint16": (tflite.TensorType.UINT16, np.dtype("<u2")),
    "int32": (tflite.TensorType.INT32, np.dtype("<i4")),
    "uint32": (tflite.TensorType.UINT32, np.dtype("<u4")),
    "int64": (tflite.TensorType.INT64, np.dtype("<i8")),
    "float16": (tflite.TensorType.FLOAT16, np.dtype("<f2")),
    "float32": (tflite.TensorType.FLOAT32, np.dtype("<f4")),
    "float64": (tflite.TensorType.FLOAT64, np.dtype("<f8")),
    "bool": (tflite.TensorType.BOOL, np.dtype("bool")),
}

DTYPES = tuple(_DTYPES)
"""The dtype names a :class:`Tensor` accepts."""


def np_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a :class:`Tensor` dtype name."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {sorted(_DTYPES)}")
    return _DTYPES[dtype][1]


# ---- Tensors -----------------------------------------------------------------------------------


@dataclass
class Tensor:
    """One tensor of a model.

    ``scale``/``zero_point`` give its affine quantization (``scale=None``: not quantized); a
    list of scales makes it per-channel along ``quantized_dimension`` (a scalar zero point is
    then repeated). ``data`` is set for constants only. ``is_variable`` marks a state tensor
    (SVDF, LSTM): no data, zero at start, updated in place by the operator.
    """

    shape: tuple[int, ...]
    dtype: str = "int8"
    scale: float | list[float] | None = None
    zero_point: int | list[int] | None = None
    quantized_dimension: int = 0
    data: np.ndarray | None = None
    name: str | None = None
    shape_signature: tuple[int, ...] | None = None
    is_variable: bool = False

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        dt = np_dtype(self.dtype)
        if self.shape_signature is not None:
            self.shape_signature = tuple(int(d) for d in self.shape_signature)
            if len(self.shape_signature) != len(self.shape):
                raise ValueError(f"shape_signature {self.shape_signature} and shape "
                                 f"{self.shape} differ in rank")
        if self.scale is None:
            if self.zero_point is not None:
                raise ValueError("zero_point without scale")
        else:
            scales, zero_points = self.scales, self.zero_points
            if len(zero_points) != len(scales):
                raise ValueError(f"{len(scales)} scales but {len(zero_points)} zero points")
            if len(scales) > 1:
                axis = self.quantized_dimension
                if not 0 <= axis < len(self.shape) or self.shape[axis] != len(scales):
                    raise ValueError(f"{len(scales)} scales do not match dimension {axis} "
                                     f"of shape {self.shape}")
        if self.data is not None:
            if self.is_variable:
                raise ValueError("a variable tensor has no data")
            data = np.asarray(self.data)
            if data.shape != self.shape:
                raise ValueError(f"data shape {data.shape} != tensor shape {self.shape}")
            if dt.kind in "iu" and data.size:
                info = np.iinfo(dt)
                if data.min() < info.min or data.max() > info.max:
                    raise ValueError(f"data does not fit in {self.dtype}")
            self.data = np.ascontiguousarray(data.astype(dt))

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype of the tensor's values."""
        return np_dtype(self.dtype)

    @property
    def quantized(self) -> bool:
        """Whether the tensor has quantization parameters."""
        return self.scale is not None

    @property
    def scales(self) -> list[float]:
        """The scales as a list (empty when not quantized)."""
        if self.scale is None:
            return []
        return [float(s) for s in np.atleast_1d(self.scale)]

    @property
    def zero_points(self) -> list[int]:
        """The zero points as a list as long as :attr:`scales` (default 0)."""
        n = len(self.scales)
        zps = [int(z) for z in np.atleast_1d(0 if self.zero_point is None else self.zero_point)]
        return zps * n if len(zps) == 1 else zps


def _channel_params(tensor: Tensor, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point arrays broadcastable against a value of rank ``ndim``."""
    scale = np.asarray(tensor.scales, dtype=np.float64)
    zp = np.asarray(tensor.zero_points, dtype=np.float64)
    if len(scale) > 1:
        bshape = [1] * ndim
        bshape[tensor.quantized_dimension] = len(scale)
        scale, zp = scale.reshape(bshape), zp.reshape(bshape)
    else:
        scale, zp = scale.reshape(()), zp.reshape(())
    return scale, zp


def quantize(x: np.ndarray, tensor: Tensor) -> np.ndarray:
    """Float values as ``tensor``'s dtype: ``round(x / scale) + zero_point``, saturated.

    An unquantized tensor just gets ``x`` cast to its dtype (integers rounded, saturated).
    """
    x = np.asarray(x, dtype=np.float64)
    dt = tensor.np_dtype
    if tensor.quantized:
        scale, zp = _channel_params(tensor, x.ndim)
        x = np.round(x / scale) + zp
    elif dt.kind in "iu":
        x = np.round(x)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        x = np.clip(x, info.min, info.max)
    return x.astype(dt)


def dequantize(q: np.ndarray, tensor: Tensor) -> np.ndarray:
    """``(q - zero_point) * scale`` in float64 (unquantized tensors: just the values)."""
    q = np.asarray(q, dtype=np.float64)
    if not tensor.quantized:
        return q
    scale, zp = _channel_params(tensor, q.ndim)
    return (q - zp) * scale


def random_input(rng: np.random.Generator, tensor: Tensor) -> np.ndarray:
    """Random values of ``tensor``'s shape and dtype.

    Quantized integers span the whole dtype; floats are uniform in [-1, 1); unquantized
    integers (indices, shapes) lie in [0, 10); bools are fair coin flips.
    """
    dt = tensor.np_dtype
    if dt.kind == "b":
        return rng.integers(0, 2, size=tensor.shape).astype(bool)
    if dt.kind == "f":
        return rng.uniform(-1.0, 1.0, size=tensor.shape).astype(dt)
    if tensor.quantized:
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=tensor.shape, endpoint=True,
                            dtype=np.int64).astype(dt)
    return rng.integers(0, 10, size=tensor.shape).astype(dt)


# ---- Options tables by reflection ------------------------------------------------------------


def _norm(name: str) -> str:
    """Operator, table and field names compared without case and underscores."""
    return name.replace("_", "").lower()


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", camel).lower()


# Operators whose options table is not their own name + "Options".
_EXPLICIT_OPTIONS: dict[str, str] = {
    **{op: "ReducerOptions" for op in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD",
                                       "REDUCE_ANY", "REDUCE_ALL")},
    **{op: "Pool2DOptions" for op in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D")},
    "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions",
    "L2_NORMALIZATION": "L2NormOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions",
    "RANDOM_STANDARD_NORMAL": "RandomOptions",
    "RANDOM_UNIFORM": "RandomOptions",
    "MULTINOMIAL": "RandomOptions",
}

# Enum-typed fields (the generated Python code keeps no enum type): (table or "*", field).
_ENUM_FIELDS: dict[tuple[str, str], type] = {
    ("*", "padding"): tflite.Padding,
    ("*", "fusedactivationfunction"): tflite.ActivationFunctionType,
    ("*", "weightsformat"): tflite.FullyConnectedOptionsWeightsFormat,
    ("*", "kerneltype"): tflite.LSTMKernelType,
    ("*", "quantizedbiastype"): tflite.TensorType,
    ("*", "outputtype"): tflite.TensorType,
    ("*", "outtype"): tflite.TensorType,
    ("*", "indatatype"): tflite.TensorType,
    ("*", "outdatatype"): tflite.TensorType,
    ("*", "idxouttype"): tflite.TensorType,
    ("*", "combiner"): tflite.CombinerType,
    ("*", "reducefunction"): tflite.ReduceWindowFunction,
    ("*", "comparisondirection"): tflite.StablehloComparisonDirection,
    ("*", "comparetype"): tflite.StablehloComparisonType,
    ("*", "precisionconfig"): tflite.StablehloPrecisionConfig,
    ("*", "algorithm"): tflite.RngAlgorithm,
    ("MirrorPadOptions", "mode"): tflite.MirrorPadMode,
    ("LSHProjectionOptions", "type"): tflite.LSHProjectionType,
}

# Element type of a vector, from the reader's number_types flags.
_FLAG_DTYPES = {"BoolFlags": "bool", "Uint8Flags": "<u1", "Int8Flags": "<i1",
                "Uint16Flags": "<u2", "Int16Flags": "<i2", "Uint32Flags": "<u4",
                "Int32Flags": "<i4", "Uint64Flags": "<u8", "Int64Flags": "<i8",
                "Float32Flags": "<f4", "Float64Flags": "<f8"}


@dataclass(frozen=True)
class _Field:
    """One field of an options table: how to write it."""

    name: str            # snake_case, for messages
    add: Any             # <Table>Add<Field>(builder, value)
    kind: str            # "scalar", "vector", "string"
    scalar: str = ""     # "bool", "float", "int" (scalars)
    vector_dtype: str = ""  # numpy dtype of the elements (vectors)
    enum: type | None = None


@dataclass(frozen=True)
class _Table:
    """An options table: its union (1 or 2) and type code, and its fields by normalized name."""

    name: str
    union: int           # 1: builtin_options, 2: builtin_options_2
    type_code: int
    fields: dict[str, _Field] = field(default_factory=dict)

    def snake_fields(self) -> list[str]:
        return sorted(f.name for f in self.fields.values())


def _enum_names(enum: type) -> dict[str, int]:
    return {k: v for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int)}


@functools.cache
def _tables() -> dict[str, _Table]:
    """Every options table of the ``tflite`` package, by normalized table name."""
    tables: dict[str, _Table] = {}
    for union, enum in ((1, tflite.BuiltinOptions), (2, tflite.BuiltinOptions2)):
        for name, code in _enum_names(enum).items():
            if code == 0:
                continue
            tables[_norm(name)] = _Table(name, union, code, _reflect_fields(name))
    return tables


def _reflect_fields(table: str) -> dict[str, _Field]:
    """The fields of ``table`` from its generated ``<Table>Add<Field>`` functions."""
    reader = getattr(tflite, table, None)
    fields: dict[str, _Field] = {}
    prefix = f"{table}Add"
    for attr in dir(tflite):
        if not attr.startswith(prefix):
            continue
        camel = attr[len(prefix):]
        add = getattr(tflite, attr)
        names = add.__code__.co_names
        snake = _snake(camel)
        enum = _ENUM_FIELDS.get((table, _norm(camel))) or _ENUM_FIELDS.get(("*", _norm(camel)))
        slot = next((n for n in names if n.startswith("Prepend") and n.endswith("Slot")), "")
        if slot and slot != "PrependUOffsetTRelativeSlot":
            kind = ("bool" if slot == "PrependBoolSlot"
                    else "float" if slot.startswith("PrependFloat") else "int")
            fields[_norm(camel)] = _Field(snake, add, "scalar", scalar=kind, enum=enum)
            continue
        read = getattr(reader, camel, None)
        read_names = read.__code__.co_names if read is not None else ()
        if hasattr(tflite, f"{table}Start{camel}Vector"):
            flags = [n for n in read_names if n in _FLAG_DTYPES]
            if flags:
                fields[_norm(camel)] = _Field(snake, add, "vector",
                                              vector_dtype=_FLAG_DTYPES[flags[0]], enum=enum)
        elif "String" in read_names:
            fields[_norm(camel)] = _Field(snake, add, "string")
        # Fields holding tables or structs are not supported: they stay unknown.
    return fields


def options_table(op_name: str) -> str | None:
    """The name of the builtin options table of operator ``op_name`` (None: it has none)."""
    table = _table_for(op_name)
    return None if table is None else table.name


def _table_for(op_name: str) -> _Table | None:
    tables = _tables()
    explicit = _EXPLICIT_OPTIONS.get(op_name)
    if explicit is not None:
        return tables[_norm(explicit)]
    return tables.get(_norm(op_name) + "options")


def _enum_value(enum: type, value: Any, what: str) -> int:
    if isinstance(value, str):
        names = _enum_names(enum)
        if value.upper() not in names:
            raise ValueError(f"{what}: {value!r} is not one of {sorted(names)}")
        return names[value.upper()]
    return int(value)


def _write_options(b: flatbuffers.Builder, table: _Table, options: dict[str, Any]) -> int:
    """Serialize ``options`` as ``table`` (fields left out keep the schema defaults)."""
    resolved: list[tuple[_Field, Any]] = []
    for key, value in options.items():
        f = table.fields.get(_norm(key))
        if f is None:
            raise ValueError(f"unknown field {key!r} of {table.name} (fields: "
                             f"{', '.join(table.snake_fields()) or 'none'})")
        resolved.append((f, value))
    # Offsets (vectors, strings) are written before the table starts.
    offsets: dict[str, int] = {}
    for f, value in resolved:
        what = f"{table.name}.{f.name}"
        if f.kind == "vector":
            values = list(np.atleast_1d(np.asarray(value, dtype=object)).ravel())
            if f.enum is not None:
                values = [_enum_value(f.enum, v, what) for v in values]
            offsets[f.name] = b.CreateNumpyVector(np.asarray(values, dtype=f.vector_dtype)
                                                  .reshape(-1))
        elif f.kind == "string":
            offsets[f.name] = b.CreateString(str(value))
    start = getattr(tflite, f"{table.name}Start")
    end = getattr(tflite, f"{table.name}End")
    start(b)
    for f, value in resolved:
        what = f"{table.name}.{f.name}"
        if f.kind != "scalar":
            f.add(b, offsets[f.name])
        elif f.enum is not None:
            f.add(b, _enum_value(f.enum, value, what))
        elif isinstance(value, str):
            raise ValueError(f"{what}: a string {value!r} for a non-enum field")
        elif f.scalar == "bool":
            f.add(b, bool(value))
        elif f.scalar == "float":
            f.add(b, float(value))
        else:
            f.add(b, int(value))
    return end(b)


# ---- The model builder -------------------------------------------------------------------------


@dataclass
class _Op:
    code: int                   # index into the operator codes
    inputs: list[int]
    outputs: list[int]
    table: _Table | None
    options: dict[str, Any]
    custom_options: bytes | None
    intermediates: list[int]


class ModelBuilder:
    """One subgraph of tensors and operators, serialized by :meth:`build`."""

    def __init__(self, description: str = "microtvm-gen test model") -> None:
        self.description = description
        self.tensors: list[Tensor] = []
        self.ops: list[_Op] = []
        # (builtin code, custom code, version), in order of first use
        self.op_codes: list[tuple[int, str | None, int]] = []
        self.graph_inputs: list[int] = []
        self.graph_outputs: list[int] = []

    def tensor(self, t: Tensor) -> int:
        """Add a tensor; its index."""
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, name: str, inputs: Sequence[int], outputs: Sequence[int],
           options: dict[str, Any] | None = None, version: int = 1,
           custom_code: str | None = None, custom_options: bytes | None = None,
           intermediates: Sequence[int] = ()) -> None:
        """Add an operator: a ``tflite.BuiltinOperator`` name, or ``"CUSTOM"`` with
        ``custom_code``. Inputs may hold -1 (an absent optional input); ``options`` are the
        fields of the operator's builtin options table by snake_case name."""
        code = getattr(tflite.BuiltinOperator, name, None)
        if not isinstance(code, int) or name.startswith("_"):
            raise ValueError(f"unknown builtin operator {name!r}")
        if (name == "CUSTOM") != (custom_code is not None):
            raise ValueError("custom_code is for (and required by) CUSTOM operators")
        if custom_options is not None and name != "CUSTOM":
            raise ValueError("custom_options are for CUSTOM operators")
        table = None if name == "CUSTOM" else _table_for(name)
        options = dict(options or {})
        if options and table is None:
            raise ValueError(f"{name} has no builtin options table; got {sorted(options)}")
        for i in [*inputs, *outputs, *intermediates]:
            if not -1 <= i < len(self.tensors):
                raise ValueError(f"{name}: tensor index {i} out of range")
        if -1 in [*outputs, *intermediates]:
            raise ValueError(f"{name}: only inputs may be absent (-1)")
        if table is not None:
            # Check the fields now, where the caller can see the error.
            _write_options(flatbuffers.Builder(64), table, options)
        key = (code, custom_code, int(version))
        if key not in self.op_codes:
            self.op_codes.append(key)
        self.ops.append(_Op(self.op_codes.index(key), list(inputs), list(outputs), table,
                            options, custom_options, list(intermediates)))

    def inputs(self, *idx: int) -> None:
        """Set the subgraph inputs."""
        self.graph_inputs = list(idx)

    def outputs(self, *idx: int) -> None:
        """Set the subgraph outputs."""
        self.graph_outputs = list(idx)

    def build(self) -> bytes:
        """The ``.tflite`` flatbuffer."""
        b = flatbuffers.Builder(1024)
        buffer_data: list[bytes] = [b""]
        buffer_of: list[int] = []
        for t in self.tensors:
            if t.data is None:
                buffer_of.append(0)
            else:
                buffer_data.append(t.data.tobytes(order="C"))
                buffer_of.append(len(buffer_data) - 1)
        buffers = [_buffer_table(b, data) for data in buffer_data]
        tensors = [_tensor_table(b, t, f"t{i}" if t.name is None else t.name, buffer_of[i])
                   for i, t in enumerate(self.tensors)]
        operators = [self._operator_table(b, op) for op in self.ops]

        sg_tensors = _offset_vector(b, tensors)
        sg_inputs = _int32_vector(b, self.graph_inputs)
        sg_outputs = _int32_vector(b, self.graph_outputs)
        sg_operators = _offset_vector(b, operators)
        sg_name = b.CreateString("main")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, sg_tensors)
        tflite.SubGraphAddInputs(b, sg_inputs)
        tflite.SubGraphAddOutputs(b, sg_outputs)
        tflite.SubGraphAddOperators(b, sg_operators)
        tflite.SubGraphAddName(b, sg_name)
        subgraph = tflite.SubGraphEnd(b)

        codes = []
        for builtin, custom, version in self.op_codes:
            custom_offset = None if custom is None else b.CreateString(custom)
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(builtin, 127))
            tflite.OperatorCodeAddBuiltinCode(b, builtin)
            if custom_offset is not None:
                tflite.OperatorCodeAddCustomCode(b, custom_offset)
            tflite.OperatorCodeAddVersion(b, version)
            codes.append(tflite.OperatorCodeEnd(b))

        m_codes = _offset_vector(b, codes)
        m_subgraphs = _offset_vector(b, [subgraph])
        m_buffers = _offset_vector(b, buffers)
        description = b.CreateString(self.description)
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, SCHEMA_VERSION)
        tflite.ModelAddOperatorCodes(b, m_codes)
        tflite.ModelAddSubgraphs(b, m_subgraphs)
        tflite.ModelAddDescription(b, description)
        tflite.ModelAddBuffers(b, m_buffers)
        b.Finish(tflite.ModelEnd(b), file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())

    @staticmethod
    def _operator_table(b: flatbuffers.Builder, op: _Op) -> int:
        options = None if op.table is None else _write_options(b, op.table, op.options)
        custom = None
        if op.custom_options is not None:
            custom = b.CreateNumpyVector(np.frombuffer(op.custom_options, dtype=np.uint8))
        inputs = _int32_vector(b, op.inputs)
        outputs = _int32_vector(b, op.outputs)
        intermediates = _int32_vector(b, op.intermediates) if op.intermediates else None
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, op.code)
        tflite.OperatorAddInputs(b, inputs)
        tflite.OperatorAddOutputs(b, outputs)
        if options is not None and op.table is not None:
            if op.table.union == 1:
                tflite.OperatorAddBuiltinOptionsType(b, op.table.type_code)
                tflite.OperatorAddBuiltinOptions(b, options)
            else:
                tflite.OperatorAddBuiltinOptions2Type(b, op.table.type_code)
                tflite.OperatorAddBuiltinOptions2(b, options)
        if custom is not None:
            tflite.OperatorAddCustomOptions(b, custom)
            tflite.OperatorAddCustomOptionsFormat(b, tflite.CustomOptionsFormat.FLEXBUFFERS)
        if intermediates is not None:
            tflite.OperatorAddIntermediates(b, intermediates)
        return tflite.OperatorEnd(b)


def _tensor_table(b: flatbuffers.Builder, t: Tensor, name: str, buffer: int) -> int:
    name_offset = b.CreateString(name)
    shape = _int32_vector(b, t.shape)
    signature = None if t.shape_signature is None else _int32_vector(b, t.shape_signature)
    quant = None
    if t.quantized:
        scales = b.CreateNumpyVector(np.asarray(t.scales, dtype="<f4"))
        zero_points = b.CreateNumpyVector(np.asarray(t.zero_points, dtype="<i8"))
        tflite.QuantizationParametersStart(b)
        tflite.QuantizationParametersAddScale(b, scales)
        tflite.QuantizationParametersAddZeroPoint(b, zero_points)
        tflite.QuantizationParametersAddQuantizedDimension(b, t.quantized_dimension)
        quant = tflite.QuantizationParametersEnd(b)
    tflite.TensorStart(b)
    tflite.TensorAddShape(b, shape)
    tflite.TensorAddType(b, _DTYPES[t.dtype][0])
    tflite.TensorAddBuffer(b, buffer)
    tflite.TensorAddName(b, name_offset)
    if quant is not None:
        tflite.TensorAddQuantization(b, quant)
    if t.is_variable:
        tflite.TensorAddIsVariable(b, True)
    if signature is not None:
        tflite.TensorAddShapeSignature(b, signature)
    return tflite.TensorEnd(b)


def op_model(name: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor],
             options: dict[str, Any] | None = None, **kw: Any) -> bytes:
    """A model of one operator.

    Inputs with ``data`` are constants, variable tensors are state, ``None`` is an absent
    optional input, and the rest, in order, are the graph inputs; ``outputs`` are the graph
    outputs. ``kw`` goes to :meth:`ModelBuilder.op` (``version``, ``custom_code``, ...).
    """
    m = ModelBuilder()
    graph_inputs = []
    idx = []
    for t in inputs:
        if t is None:
            idx.append(-1)
            continue
        i = m.tensor(t)
        idx.append(i)
        if t.data is None and not t.is_variable:
            graph_inputs.append(i)
    out = [m.tensor(t) for t in outputs]
    m.op(name, idx, out, options, **kw)
    m.inputs(*graph_inputs)
    m.outputs(*out)
    return m.build()


# ---- TFLite's reference kernels ----------------------------------------------------------------


def litert_missing() -> str | None:
    """Why :func:`reference` cannot run here (None: it can)."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: F401
    except Exception as e:  # ImportError, or a shared library that fails to load
        return f"ai_edge_litert is not usable ({type(e).__name__}: {e})".splitlines()[0]
    return None


def reference(model: bytes, inputs: Sequence[np.ndarray],
              op_resolver: str = "BUILTIN_REF") -> list[np.ndarray]:
    """Run ``model`` in TFLite's interpreter with its reference kernels (BUILTIN_REF).

    ``inputs`` are in subgraph order; an input whose shape differs from the model's is
    resized first (dynamic shapes). Returns every subgraph output, in order.
    ``op_resolver="BUILTIN"`` picks the optimized kernels instead (for operators that have
    no reference kernel, such as ELU).
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_content=bytes(model), num_threads=1,
                         experimental_op_resolver_type=OpResolverType[op_resolver])
    details = interp.get_input_details()
    if len(details) != len(inputs):
        raise ValueError(f"the model has {len(details)} inputs, got {len(inputs)}")
    resized = False
    for d, x in zip(details, inputs, strict=True):
        if tuple(d["shape"]) != np.shape(x):
            interp.resize_tensor_input(d["index"], list(np.shape(x)), strict=False)
            resized = True
    interp.allocate_tensors()
    if resized:
        details = interp.get_input_details()
    for d, x in zip(details, inputs, strict=True):
        interp.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
    interp.invoke()
    return [np.array(interp.get_tensor(d["index"])) for d in interp.get_output_details()]
