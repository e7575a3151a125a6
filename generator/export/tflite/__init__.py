"""Our TFLite importer (DESIGN D13): a flatbuffer → a Relax module of our kernels.

`read_model` reads the file (`model.py`); `ImportedModel.module()` converts it operator by
operator (`convert.py` and the `ops_*` modules) into a Relax `main` whose quantized
operators are integer kernels with TFLite's reference arithmetic. `survey` converts every
operator it can and reports each one's status without stopping at the first failure (what
`info MODEL.tflite` prints).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from generator.errors import ExportError
from generator.export import qkernels, rowsplit
from generator.export.quantize import QuantReport

# the converters register themselves; earlier modules are tried first for an operator
from generator.export.tflite import (  # noqa: F401
    ops_detection,
    ops_elementwise,
    ops_int16,
    ops_int16_more,
    ops_layout,
    ops_lstm_int8,
    ops_nn,
    ops_reduce,
    ops_sequence,
    ops_signal,
    ops_unary,
)
from generator.export.tflite.convert import (
    CONVERTERS,
    Context,
    Unsupported,
    const,
    convert_op,
)
from generator.export.tflite.model import TfModel, TfOp, read_tflite

__all__ = ["ImportedModel", "OpStatus", "read_model", "survey", "supported_operators"]


@dataclass
class OpStatus:
    index: int
    code: str
    dtypes: str  # "int8 → int8"
    status: str  # integer | float | layout | unsupported
    reason: str = ""


@dataclass
class ImportedModel:
    """A TFLite model our importer takes. The Relax module is built on demand, once per
    conv2d form (`qkernels.conv_form`) and whether kernels carry their "blocks" form too
    (`qkernels.with_blocks_forms`: what tune searches)."""

    model: TfModel
    where: str
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    param_names: list[str] | None = None  # main's parameter names (default: the model's)
    _built: dict = field(default_factory=dict)

    @property
    def input_names(self) -> list[str]:
        """The inputs' names (an unnamed one: input0, input1, ... by position)."""
        return [self.model.tensors[i].name or f"input{n}"
                for n, i in enumerate(self.model.inputs)]

    def with_param_names(self, names: list[str]) -> ImportedModel:
        """The same model, main's parameters named `names` (C identifiers)."""
        return ImportedModel(self.model, self.where, self.shapes, list(names))

    @property
    def output_names(self) -> list[str]:
        """The outputs' names (an unnamed one: output0, output1, ... by position)."""
        return [self.model.tensors[i].name or f"output{n}"
                for n, i in enumerate(self.model.outputs)]

    def module(self) -> tuple[object, QuantReport]:
        key = qkernels.build_key()
        if key not in self._built:
            mod, report, failures = _build(self.model, True, self.param_names)
            if failures:
                raise ExportError(_refusal(self.where, failures[0]))
            self._built[key] = (mod, report)
        return self._built[key]


def supported_operators() -> list[str]:
    return sorted(CONVERTERS)


def read_model(path: Path, shapes: dict[str, tuple[int, ...]]) -> TfModel:
    model = read_tflite(path.read_bytes(), str(path))
    names = [model.tensors[i].name for i in model.inputs]
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise ExportError(f"{path}: --input-shape names {', '.join(unknown)}, but the model's "
                          f"inputs are {', '.join(names)}")
    for i in model.inputs:
        t = model.tensors[i]
        if t.name in shapes and tuple(shapes[t.name]) != t.shape:
            given = shapes[t.name]
            what = ("the same number of elements in another shape"
                    if int(np.prod(given)) == int(np.prod(t.shape)) else "another size")
            raise ExportError(f"{path}: input '{t.name}' has the fixed shape "
                              f"{','.join(map(str, t.shape))}; --input-shape "
                              f"{','.join(map(str, given))} is {what}")
    return model


def is_float_model(model: TfModel) -> bool:
    """No quantized tensor anywhere: TVM's frontend may take what we do not."""
    return all(t.quant is None or t.dtype in ("float32", "float16") for t in model.tensors)


def survey(model: TfModel) -> list[OpStatus]:
    """Every operator with its dtypes and whether (and how) the importer takes it."""
    _, report, failures = _build(model, stop_at_first=False)
    failed = {f.index: f for f in failures}
    out = []
    for op in model.ops:
        if op.index in failed:
            out.append(failed[op.index])
            continue
        dtypes = _dtypes(model, op)
        # integer: any quantized or integer tensor (int32 shapes, int16 audio...)
        integer = any(not model.tensors[t].dtype.startswith("float")
                      for t in (*op.inputs, *op.outputs)
                      if t >= 0 and not model.tensors[t].is_const)
        out.append(OpStatus(op.index, op.code, dtypes, "integer" if integer else "float"))
    return out


def _dtypes(model: TfModel, op: TfOp) -> str:
    def kinds(idx) -> str:
        seen = []
        for t in idx:
            if t >= 0:
                d = model.tensors[t].describe()
                if d not in seen:
                    seen.append(d)
        return ",".join(seen) or "-"
    ins = [t for t in op.inputs if t >= 0 and not model.tensors[t].is_const]
    return f"{kinds(ins)} → {kinds(op.outputs)}"


def _refusal(where: str, f: OpStatus) -> str:
    return (f"{where}: operator #{f.index} {f.code} ({f.dtypes}) is not supported: "
            f"{f.reason} (see docs/operators.md; `microtvm-gen info {Path(where).name}` "
            "lists every operator)")


def _build(model: TfModel, stop_at_first: bool, param_names: list[str] | None = None):
    from tvm import relax

    bb = relax.BlockBuilder()
    ctx = Context(model, bb)
    rowsplit.new_model()  # the row splits asked for count this model's layers from 0
    params = []
    for n, i in enumerate(model.inputs):
        t = model.tensors[i]
        if t.dtype.startswith("type "):
            raise ExportError(f"input '{t.name}' is of TFLite {t.dtype}")
        name = param_names[n] if param_names else (t.name or f"input{n}")
        params.append(relax.Var(name, relax.TensorType(t.shape, t.dtype)))
    failures: list[OpStatus] = []
    try:
        _convert(bb, ctx, params, failures, stop_at_first)
    except _Stopped:
        return None, ctx.report, failures
    mod = relax.transform.DeadCodeElimination()(bb.get())
    return mod, ctx.report, failures


class _Stopped(Exception):
    """An operator failed and the caller wants only the first failure."""


def _convert(bb, ctx: Context, params: list, failures: list[OpStatus],
             stop_at_first: bool) -> None:
    from tvm import relax

    model = ctx.model
    with bb.function("main", params):
        with bb.dataflow():
            for param, i in zip(params, model.inputs, strict=True):
                t = model.tensors[i]
                value = param
                if t.dtype == "uint8" and t.quant is not None:
                    value = _shift(ctx, param, t.shape, "uint8", "int8")
                ctx.set(t, value)
            for op in model.ops:
                try:
                    convert_op(ctx, op)
                except Exception as exc:  # Unsupported, or a converter's own failure
                    reason = str(exc) if isinstance(exc, Unsupported) else \
                        f"the importer failed ({type(exc).__name__}: {_last_line(exc)})"
                    failures.append(OpStatus(op.index, op.code, _dtypes(model, op),
                                             "unsupported", reason))
                    if stop_at_first:
                        break
                    for o in op.outputs:  # stand-ins, so later operators can be surveyed
                        t = model.tensors[o]
                        dtype = "int8" if t.dtype == "uint8" and t.quant else t.dtype
                        if not dtype.startswith("type "):
                            ctx.set(t, const(np.zeros(t.shape, dtype)))
            if failures and stop_at_first:
                raise _Stopped
            results = []
            for i in model.outputs:
                t = model.tensors[i]
                value = ctx.values[i]
                if not isinstance(value, relax.Var):
                    value = ctx.emit(relax.op.add(
                        value, const(np.zeros((), str(value.ty.dtype)))))
                if t.dtype == "uint8" and t.quant is not None:
                    value = _shift(ctx, value, t.shape, "int8", "uint8")
                results.append(bb.emit_output(value))
        bb.emit_func_output(results[0] if len(results) == 1 else relax.Tuple(results))


def _last_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def _shift(ctx: Context, value, shape, src: str, dst: str):
    from tvm import relax

    kernel = qkernels.shift_domain(tuple(shape), src, dst)
    gv = ctx.bb.add_func(kernel.func, f"q_to_{dst}")
    return ctx.emit(relax.call_tir(gv, [value], relax.TensorType(tuple(shape), dst)))

