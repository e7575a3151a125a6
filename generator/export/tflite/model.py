"""A TFLite flatbuffer read into plain, typed data: tensors, quantization, operators.

Everything here is input: names are kept as the file spells them (decoded leniently: a
missing name is ""), shapes and buffer sizes are checked against each other, and nothing is
interpreted beyond what the schema says. The importer (`convert.py`) works on this form only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from generator.errors import ExportError

MAX_TENSORS = 100_000
MAX_OPERATORS = 100_000
MAX_RANK = 8

# TFLite TensorType value → numpy dtype name (the types a microcontroller model uses)
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool",
           7: "int16", 9: "int8", 10: "float64", 12: "uint64", 15: "uint32", 16: "uint16"}


@dataclass(frozen=True)
class Quant:
    """Affine quantization: real = scale · (q − zero), per tensor or along `axis`."""

    scale: np.ndarray  # float64, one value or one per channel
    zero: np.ndarray  # int64, same length as scale
    axis: int = 0

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    @property
    def s(self) -> float:
        """The one scale of a per-tensor quantization."""
        return float(self.scale.reshape(-1)[0])

    @property
    def z(self) -> int:
        """The one zero point of a per-tensor quantization."""
        return int(self.zero.reshape(-1)[0])


@dataclass
class TfTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = None  # constants only, in `shape`
    quant: Quant | None = None
    variable: bool = False

    @property
    def is_const(self) -> bool:
        return self.data is not None

    def describe(self) -> str:
        q = "" if self.quant is None else (" per-channel" if not self.quant.per_tensor else "")
        return f"{self.dtype}{q}"


@dataclass
class TfOp:
    index: int
    code: str  # builtin operator name ("CONV_2D"), or the custom code of a CUSTOM operator
    version: int
    inputs: tuple[int, ...]  # -1: an optional input left out
    outputs: tuple[int, ...]
    options: object | None = None  # the tflite package's options table, or None
    custom_options: bytes = b""


@dataclass
class TfModel:
    tensors: list[TfTensor]
    ops: list[TfOp]
    inputs: list[int]
    outputs: list[int]
    subgraphs: int = 1
    notes: list[str] = field(default_factory=list)

    def tensor(self, index: int) -> TfTensor:
        return self.tensors[index]


def _builtin_names() -> dict[int, str]:
    import tflite

    return {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


def _options_classes() -> dict[int, type]:
    import tflite

    out = {}
    for name, value in vars(tflite.BuiltinOptions).items():
        cls = getattr(tflite, name, None)
        if not name.startswith("_") and isinstance(cls, type):
            out[value] = cls
    return out


def read_tflite(data: bytes, where: str) -> TfModel:
    """The first subgraph of a TFLite model, or one-line ExportError saying what is wrong."""
    try:
        return _read(data, where)
    except ExportError:
        raise
    except Exception as exc:  # the flatbuffer accessors raise anything on a damaged file
        text = str(exc).strip().splitlines()
        raise ExportError(f"{where}: not a readable TFLite model "
                          f"({text[-1] if text else type(exc).__name__})") from exc


def _read(data: bytes, where: str) -> TfModel:
    import tflite

    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ExportError(f"{where}: not a TFLite model (no 'TFL3' identifier)")
    model = tflite.Model.GetRootAsModel(data, 0)
    if model.SubgraphsLength() < 1:
        raise ExportError(f"{where}: the model has no subgraph")
    sg = model.Subgraphs(0)
    if sg.TensorsLength() > MAX_TENSORS or sg.OperatorsLength() > MAX_OPERATORS:
        raise ExportError(f"{where}: more than {MAX_TENSORS:,} tensors or operators")
    names = _builtin_names()
    codes = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        code = max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))
        name = names.get(code, f"BUILTIN_{code}")
        if name == "CUSTOM":
            name = _text(oc.CustomCode()) or "CUSTOM"
        codes.append((name, int(oc.Version())))
    tensors = [_tensor(model, sg.Tensors(i), i, data, where) for i in range(sg.TensorsLength())]
    classes = _options_classes()
    ops = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        if not 0 <= op.OpcodeIndex() < len(codes):
            raise ExportError(f"{where}: operator #{i} has no operator code")
        code, version = codes[op.OpcodeIndex()]
        ins = tuple(int(x) for x in op.InputsAsNumpy()) if op.InputsLength() else ()
        outs = tuple(int(x) for x in op.OutputsAsNumpy()) if op.OutputsLength() else ()
        for t in (*ins, *outs):
            if not -1 <= t < len(tensors) or (t == -1 and t in outs):
                raise ExportError(f"{where}: operator #{i} ({code}) names tensor {t}, "
                                  f"but the model has {len(tensors)}")
        options = None
        cls = classes.get(op.BuiltinOptionsType())
        table = op.BuiltinOptions()
        if cls is not None and table is not None:
            options = cls()
            options.Init(table.Bytes, table.Pos)
        custom = bytes(op.CustomOptionsAsNumpy()) if op.CustomOptionsLength() else b""
        ops.append(TfOp(i, code, version, ins, outs, options, custom))
    inputs = [int(x) for x in sg.InputsAsNumpy()] if sg.InputsLength() else []
    outputs = [int(x) for x in sg.OutputsAsNumpy()] if sg.OutputsLength() else []
    for t in (*inputs, *outputs):
        if not 0 <= t < len(tensors):
            raise ExportError(f"{where}: the graph's inputs or outputs name tensor {t}, "
                              f"but the model has {len(tensors)}")
    return TfModel(tensors, ops, inputs, outputs, model.SubgraphsLength())


def _text(raw) -> str:
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return str(raw)


def _tensor(model, t, index: int, data: bytes, where: str) -> TfTensor:
    name = _text(t.Name())
    dtype = _DTYPES.get(int(t.Type()), f"type {int(t.Type())}")
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    if len(shape) > MAX_RANK or any(d < 0 for d in shape):
        raise ExportError(f"{where}: tensor #{index} '{name[:60]}' has shape {list(shape)}")
    quant = _quant(t.Quantization(), shape)
    values = None
    if 0 < t.Buffer() < model.BuffersLength():
        values = _buffer(model.Buffers(t.Buffer()), data, dtype, shape, index, name, where)
    return TfTensor(index, name, shape, dtype, values, quant, bool(t.IsVariable()))


def _buffer(buf, data: bytes, dtype: str, shape: tuple[int, ...], index: int, name: str,
            where: str) -> np.ndarray | None:
    offset, size = int(buf.Offset()), int(buf.Size())
    if offset > 1:  # stored after the flatbuffer (models over 2 GB)
        if offset + size > len(data):
            raise ExportError(f"{where}: tensor #{index} '{name[:60]}': its data lies "
                              "outside the file")
        raw = data[offset:offset + size]
    elif buf.DataLength():
        raw = buf.DataAsNumpy().tobytes()
    else:
        return None
    if dtype.startswith("type "):
        raise ExportError(f"{where}: tensor #{index} '{name[:60]}' is of TFLite {dtype}, "
                          "which export does not read")
    np_dtype = np.dtype(dtype).newbyteorder("<")
    count = int(np.prod(shape)) if shape else 1
    if len(raw) != count * np_dtype.itemsize:
        raise ExportError(f"{where}: tensor #{index} '{name[:60]}' has {len(raw)} bytes of "
                          f"data for shape {list(shape)} of {dtype}")
    return np.frombuffer(raw, np_dtype).astype(np.dtype(dtype)).reshape(shape)


def _quant(q, shape: tuple[int, ...]) -> Quant | None:
    if q is None or q.ScaleLength() == 0:
        return None
    scale = q.ScaleAsNumpy().astype(np.float64).reshape(-1)
    zero = (q.ZeroPointAsNumpy().astype(np.int64).reshape(-1) if q.ZeroPointLength()
            else np.zeros(scale.size, np.int64))
    if zero.size == 1 and scale.size > 1:
        zero = np.repeat(zero, scale.size)
    if zero.size != scale.size:
        raise ExportError(f"quantization with {scale.size} scales and {zero.size} zero points")
    axis = int(q.QuantizedDimension())
    if scale.size > 1 and len(shape) == 1 and shape[0] == scale.size:
        axis = 0  # a per-channel bias whose file names the weights' dimension (3 for depthwise)
    if scale.size > 1 and (not 0 <= axis < len(shape) or shape[axis] != scale.size):
        raise ExportError(f"per-channel quantization with {scale.size} scales along "
                          f"dimension {axis} of shape {list(shape)}")
    return Quant(scale, zero, axis)
