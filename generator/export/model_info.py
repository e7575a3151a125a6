"""What `microtvm-gen info MODEL.tflite|.onnx` reports about a model file, before export.

For a TFLite model: its inputs and outputs (with the C names export gives them), every
operator with its dtypes and whether our importer takes it (`tflite.survey`), and the lower
bound of activation RAM counted as export's planner counts it. For an ONNX model: inputs,
outputs, and every node with whether TVM's Relax ONNX frontend has a converter for it.
Names from the file are data: shown escaped, never interpreted.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from generator import hints
from generator.cnames import c_identifiers
from generator.errors import ExportError, MtgError

MODEL_SUFFIXES = {".tflite": "tflite", ".onnx": "onnx"}
MAX_SHOWN_NAME = 80  # characters of a name in the text report (the JSON keeps it whole)
# ONNX operators of the quantized form (QDQ and QLinear* nodes).
_ONNX_QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


def is_model_file(path: Path) -> bool:
    """Whether `info` reads `path` as a model (by its suffix) rather than an MLF archive."""
    return path.suffix.lower() in MODEL_SUFFIXES


@dataclass
class ModelTensor:
    """One graph input or output."""

    name: str
    c_name: str  # what export names its struct member and size macro (generator.cnames)
    dtype: str
    shape: list[int | str]  # a str: a dynamic ONNX dimension (its dim_param or "?")
    quantization: dict | None = None  # {"scale": [...], "zero_point": [...], "axis": n}


@dataclass
class ModelOperator:
    """One operator (TFLite) or node (ONNX) and whether export takes it."""

    index: int
    op: str  # TFLite builtin name or ONNX op_type
    dtypes: str  # "int8 → int8"
    status: str  # TFLite: integer | float | unsupported; ONNX: supported | quantized | unsupported
    reason: str = ""
    name: str = ""  # ONNX node name


@dataclass
class ModelInfo:
    """Everything `info` says about a model file."""

    path: str
    format: str  # "tflite" | "onnx"
    inputs: list[ModelTensor]
    outputs: list[ModelTensor]
    operators: list[ModelOperator]
    # TFLite: the largest total size of activation tensors alive at once (export's planner's
    # rule: 16-byte aligned, graph inputs and outputs excluded); None for ONNX.
    activation_lower_bound_bytes: int | None = None
    opset: int | None = None  # ONNX: the default domain's opset
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many operators have each status, in a fixed order."""
        found = Counter(op.status for op in self.operators)
        order = ["integer", "float", "supported", "quantized", "unknown", "unsupported"]
        return {s: found[s] for s in [*order, *sorted(set(found) - set(order))] if found[s]}

    def summary(self) -> str:
        """'41 operators: 39 integer, 2 unsupported (TRANSPOSE_CONV #12, ...)'."""
        what = "operator" if self.format == "tflite" else "node"
        count = len(self.operators)
        parts = [f"{n} {s}" for s, n in self.counts().items()]
        text = f"{count} {what}{'' if count == 1 else 's'}" + (f": {', '.join(parts)}"
                                                                if parts else "")
        bad = [op for op in self.operators if op.status == "unsupported"]
        if bad:
            listed = ", ".join(f"{shown(op.op, 40)} #{op.index}" for op in bad[:8])
            text += f" ({listed}{', ...' if len(bad) > 8 else ''})"
        return text

    def to_json(self) -> dict:
        data = asdict(self)
        data["summary"] = self.summary()
        data["counts"] = self.counts()
        data["next_step"] = next_step(self.path)
        return data


def shown(text: str, limit: int = MAX_SHOWN_NAME) -> str:
    """A name from the file as text to print: control and other unprintable characters
    escaped, long names cut."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[:limit - 3] + "..."


def next_step(path: str) -> str:
    import shlex

    return f"microtvm-gen export {shlex.quote(path)} -o model.tar"


def model_info(path: Path) -> ModelInfo:
    """The report for a .tflite or .onnx file; ExportError (one line) when it cannot be read."""
    kind = MODEL_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ExportError(f"{path}: unknown model type '{path.suffix}' "
                          f"(info reads {', '.join(sorted(MODEL_SUFFIXES))} models)")
    if not path.is_file():
        raise ExportError(f"{path}: no such file")
    return _tflite_info(path) if kind == "tflite" else _onnx_info(path)


# ---- TFLite -------------------------------------------------------------------------------


def _tflite_info(path: Path) -> ModelInfo:
    from generator.export import tflite
    from generator.export.frontend import quiet_native_stderr

    try:
        model = tflite.read_model(path, {})
    except OSError as exc:
        raise ExportError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    names = [model.tensors[i].name for i in (*model.inputs, *model.outputs)]
    c_names = c_identifiers(names)
    io = [_tflite_tensor(model.tensors[i], c) for i, c in
          zip([*model.inputs, *model.outputs], c_names, strict=True)]
    notes = list(model.notes)
    if model.subgraphs > 1:
        notes.append(f"the model has {model.subgraphs} subgraphs; export reads the first")
    notes += _io_name_notes(names[:len(model.inputs)], names[len(model.inputs):])
    try:
        with quiet_native_stderr():
            statuses = tflite.survey(model)
        operators = [ModelOperator(s.index, s.code, s.dtypes, s.status, s.reason)
                     for s in statuses]
    except MtgError as exc:
        notes.append(f"the importer cannot take this model: {exc.one_line()}")
        operators = _unsurveyed(model, "the importer stopped before this operator")
    except Exception as exc:  # a failure of the survey itself: report it, list the operators
        reason = f"the survey failed ({type(exc).__name__}: {_last_line(exc)})"
        notes.append(reason)
        operators = _unsurveyed(model, reason)
    if any(op.status == "unsupported" for op in operators):
        if tflite.is_float_model(model):
            notes.append("a float model with an operator our importer lacks: export tries "
                         "TVM's TFLite frontend for the whole model instead")
        else:
            notes.append("export refuses this model until the unsupported operators are "
                         "supported (docs/operators.md)")
    return ModelInfo(str(path), "tflite", io[:len(model.inputs)], io[len(model.inputs):],
                     operators, tflite_activation_lower_bound(model), None, notes)


def _unsurveyed(model, reason: str) -> list[ModelOperator]:
    from generator.export.tflite import _dtypes

    return [ModelOperator(op.index, op.code, _dtypes(model, op), "unknown", reason)
            for op in model.ops]


def _tflite_tensor(t, c_name: str) -> ModelTensor:
    quant = None
    if t.quant is not None:
        quant = {"scale": [float(s) for s in t.quant.scale.reshape(-1)],
                 "zero_point": [int(z) for z in t.quant.zero.reshape(-1)],
                 "axis": int(t.quant.axis)}
    return ModelTensor(t.name, c_name, t.dtype, list(t.shape), quant)


def tflite_activation_lower_bound(model) -> int:
    """The largest total size of activation tensors alive at once along the operator order,
    counted as export's planner counts its lower bound (`planner.lower_bound`): a tensor
    lives from the operator that writes it to its last reader, sizes are rounded up to the
    planner's alignment, and constants, graph inputs (the caller's buffers) and graph
    outputs (written in place into the caller's buffers) are not in the pool."""
    from generator.export.planner import Interval, lower_bound

    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for op in model.ops:
        for t in op.inputs:
            if t >= 0 and t in first:
                last[t] = op.index
        for t in op.outputs:
            first.setdefault(t, op.index)
            last[t] = max(last.get(t, op.index), op.index)
    outside = set(model.inputs) | set(model.outputs)
    intervals = []
    for t, start in first.items():
        tensor = model.tensors[t]
        if t in outside or tensor.is_const or tensor.dtype.startswith("type "):
            continue
        size = math.prod(tensor.shape) * np.dtype(tensor.dtype).itemsize
        intervals.append(Interval(t, size, start, last[t]))
    return lower_bound(intervals)


def _io_name_notes(input_names: list[str], output_names: list[str]) -> list[str]:
    from generator.export.ccode import check_io_names

    try:
        check_io_names(input_names, output_names)
    except MtgError as exc:
        return [f"export refuses the names: {exc.one_line()}"]
    return []


def _last_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


# ---- ONNX ---------------------------------------------------------------------------------


def onnx_converters() -> set[str]:
    """The op_types TVM's Relax ONNX frontend converts (its converter table, and the nodes
    it handles itself)."""
    from tvm.relax.frontend.onnx import onnx_frontend

    return set(onnx_frontend._get_convert_map()) | {"Constant", "If"}


def _onnx_info(path: Path) -> ModelInfo:
    try:
        import onnx
    except ImportError as exc:
        raise ExportError("reading ONNX models needs the 'onnx' package",
                          hint="pip install onnx") from exc
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf raises anything on a damaged file
        why = _last_line(exc) or type(exc).__name__
        raise ExportError(f"{path}: not a readable ONNX model ({why})") from None
    graph = model.graph
    notes: list[str] = []
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception as exc:  # an inconsistent model: report what the file declares
        inferred = graph
        notes.append(f"ONNX shape inference failed ({_last_line(exc)[:120]}); "
                     "dtypes of intermediate values may be unknown")
    types = _onnx_types(inferred)
    initializers = {t.name for t in graph.initializer}
    real_inputs = [v for v in graph.input if v.name not in initializers]
    names = [v.name for v in (*real_inputs, *graph.output)]
    c_names = c_identifiers(names)
    io = [ModelTensor(v.name, c, *_onnx_value_type(v), None)
          for v, c in zip([*real_inputs, *graph.output], c_names, strict=True)]
    inputs, outputs = io[:len(real_inputs)], io[len(real_inputs):]
    for t in inputs:
        if any(isinstance(d, str) for d in t.shape):
            dims = [d if isinstance(d, int) else None for d in t.shape]
            notes.append(f"input '{shown(t.name)}' has a dynamic shape: export needs "
                         f"{hints.input_shape_option(shown(t.name), dims)}")
    notes += _io_name_notes(names[:len(real_inputs)], names[len(real_inputs):])
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")),
                 None)
    known = onnx_converters()
    operators = []
    for i, node in enumerate(graph.node):
        ins = _kinds(types, node.input, initializers)
        outs = _kinds(types, node.output, set())
        if node.op_type not in known:
            status = "unsupported"
            reason = "TVM 0.27's Relax ONNX frontend has no converter for it"
            if node.domain not in ("", "ai.onnx"):
                reason += f" (domain '{shown(node.domain, 40)}')"
        else:
            quantized = node.op_type in _ONNX_QUANT_OPS or node.op_type.startswith("QLinear")
            status, reason = ("quantized" if quantized else "supported"), ""
        operators.append(ModelOperator(i, node.op_type, f"{ins} → {outs}", status, reason,
                                       node.name))
    if any(op.status == "unsupported" for op in operators):
        notes.append("export refuses this model: TVM's ONNX frontend cannot convert every node")
    return ModelInfo(str(path), "onnx", inputs, outputs, operators, None, opset, notes)


def _onnx_types(graph) -> dict[str, str]:
    """Value name → its element type name, from inputs, outputs, value_info, initializers."""
    import onnx

    out: dict[str, str] = {}
    for t in graph.initializer:
        out[t.name] = _onnx_dtype(onnx, t.data_type)
    for v in (*graph.input, *graph.value_info, *graph.output):
        if v.type.HasField("tensor_type"):
            out[v.name] = _onnx_dtype(onnx, v.type.tensor_type.elem_type)
    return out


def _onnx_dtype(onnx, elem_type: int) -> str:
    try:
        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:  # undefined, string or a type numpy does not have
        return f"type {elem_type}"


def _onnx_value_type(v) -> tuple[str, list[int | str]]:
    import onnx

    if not v.type.HasField("tensor_type"):
        return "?", []
    tt = v.type.tensor_type
    shape: list[int | str] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            shape.append(int(d.dim_value))
        else:
            shape.append(d.dim_param or "?")
    return _onnx_dtype(onnx, tt.elem_type), shape


def _kinds(types: dict[str, str], names, constants: set[str]) -> str:
    seen: list[str] = []
    for n in names:
        if n and n not in constants:
            kind = types.get(n, "?")
            if kind not in seen:
                seen.append(kind)
    return ",".join(seen) or "-"


# ---- text ---------------------------------------------------------------------------------


def _shape_text(shape: list[int | str]) -> str:
    return "x".join(shown(str(d), 20) for d in shape) if shape else "scalar"


def _quant_text(q: dict | None) -> str:
    if q is None:
        return ""
    if len(q["scale"]) == 1:
        return f", scale {q['scale'][0]:.6g}, zero point {q['zero_point'][0]}"
    return f", per-channel along dimension {q['axis']} ({len(q['scale'])} scales)"


def report_lines(info: ModelInfo) -> list[str]:
    """The text `info` prints for a model file."""
    kind = "TFLite" if info.format == "tflite" else "ONNX"
    opset = f", opset {info.opset}" if info.opset is not None else ""
    lines = [f"model     {shown(info.path, 200)}: {kind}{opset}"]
    for what, tensors in (("input ", info.inputs), ("output", info.outputs)):
        for t in tensors:
            lines.append(f"  {what}  {shown(t.name)} (C name {t.c_name}): {t.dtype}"
                         f"[{_shape_text(t.shape)}]{_quant_text(t.quantization)}")
    width = max((len(str(op.index)) for op in info.operators), default=1)
    for op in info.operators:
        name = f" '{shown(op.name, 40)}'" if op.name else ""
        line = (f"  op #{op.index:<{width}}  {shown(op.op, 40)}{name} ({op.dtypes}): "
                f"{op.status}")
        lines.append(line + (f": {op.reason}" if op.reason else ""))
    lines.append(f"  summary {info.summary()}")
    if info.activation_lower_bound_bytes is not None:
        lines.append(f"  memory  activations need at least {info.activation_lower_bound_bytes} B "
                     "of RAM (a bound from the model's tensors: the most alive at once, "
                     "16-byte aligned, inputs and outputs in the caller's buffers; export's "
                     "fused kernels may differ, e.g. reshapes become views)")
    for note in info.notes:
        lines.append(f"  note    {note}")
    lines.append(f"next      {next_step(info.path)}")
    return lines
