"""Model files → Relax IRModules, through TVM 0.27's ONNX and TFLite frontends."""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from generator import hints
from generator.errors import ExportError
from generator.export.onnx_shapes import known_dims

SUFFIXES = {".onnx": "onnx", ".tflite": "tflite"}


def parse_shape_overrides(items: list[str]) -> dict[str, tuple[int, ...]]:
    """`NAME=1,1,28,28` items → {NAME: (1, 1, 28, 28)}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        if not sep or not name or not re.fullmatch(r"\d+(,\d+)*", dims.replace(" ", "")):
            raise ExportError(f"--input-shape '{item}': expected NAME=D1,D2,... "
                              "with positive integers")
        shape = tuple(int(d) for d in dims.replace(" ", "").split(","))
        if any(d <= 0 for d in shape):
            raise ExportError(f"--input-shape '{item}': dimensions must be positive")
        shapes[name] = shape
    return shapes


def import_model(path: Path, shapes: dict[str, tuple[int, ...]]):
    """The Relax IRModule of a model file (weights bound as constants) and its output names."""
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ExportError(f"{path}: unknown model type '{path.suffix}' "
                          f"(export reads {', '.join(sorted(SUFFIXES))})")
    if not path.is_file():
        raise ExportError(f"{path}: no such file")
    with quiet_native_stderr():
        try:
            return _import_onnx(path, shapes) if kind == "onnx" else _import_tflite(path, shapes)
        except ExportError:
            raise
        except Exception as exc:  # TVM's frontends raise anything; name the operator if we can
            message = (f"{path}: TVM 0.27's {kind} frontend cannot import this model: "
                       f"{_frontend_reason(exc)}")
    raise ExportError(message)


def _import_onnx(path: Path, shapes: dict[str, tuple[int, ...]]):
    try:
        import onnx
    except ImportError as exc:
        raise ExportError("exporting ONNX models needs the 'onnx' package",
                          hint="pip install onnx") from exc
    from tvm.relax.frontend.onnx import from_onnx

    try:
        model = onnx.load(str(path))
    except Exception as exc:
        raise ExportError(f"{path}: not a readable ONNX model ({_first_line(exc)})") from exc
    initializers = {t.name for t in model.graph.initializer}
    real_inputs = [i for i in model.graph.input if i.name not in initializers]
    unknown = sorted(set(shapes) - {i.name for i in real_inputs})
    if unknown:
        raise ExportError(f"{path}: --input-shape names {', '.join(unknown)}, but the model's "
                          f"inputs are {', '.join(i.name for i in real_inputs)}")
    from generator.export import onnx_qdq

    if onnx_qdq.is_quantized(model):  # our importer: integer kernels, ONNX Runtime's arithmetic
        imported = onnx_qdq.import_qdq(model, path, shapes)
        return imported, imported.output_names
    shape_dict = {}
    for inp in real_inputs:
        dims = inp.type.tensor_type.shape.dim
        fixed = ([d.dim_value for d in dims]
                 if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims) else None)
        if inp.name in shapes:
            given = list(shapes[inp.name])
            if fixed is not None and given != fixed:
                raise ExportError(f"{path}: --input-shape {inp.name}="
                                  f"{','.join(map(str, given))}, but the model fixes that "
                                  f"input's shape at {fixed}",
                                  hint=hints.fixed_shape(inp.name))
            shape_dict[inp.name] = given
        elif fixed is not None:
            shape_dict[inp.name] = fixed
        else:
            raise ExportError(f"{path}: input '{inp.name}' has a dynamic shape",
                              hint=hints.input_shape(inp.name, known_dims(dims)))
    # TVM's converter prints what it cannot convert on stdout; the error says it in one line.
    with contextlib.redirect_stdout(io.StringIO()):
        mod = from_onnx(model, shape_dict=shape_dict, keep_params_in_input=False,
                        sanitize_input_names=False)
    return mod, [o.name for o in model.graph.output]


def _import_tflite(path: Path, shapes: dict[str, tuple[int, ...]]):
    """Our importer; TVM's frontend only for a float model with an operator we lack."""
    from generator.export import tflite as ours

    model = ours.read_model(path, shapes)
    imported = ours.ImportedModel(model, str(path), shapes)
    try:
        imported.module()
    except ExportError as refusal:
        if not ours.is_float_model(model):
            raise
        try:
            return _tvm_tflite(path, shapes)
        except Exception as exc:  # our reason names the operator; TVM's says less
            raise refusal from exc
    return imported, imported.output_names


def _tvm_tflite(path: Path, shapes: dict[str, tuple[int, ...]]):
    try:
        import tflite
    except ImportError as exc:
        raise ExportError("exporting TFLite models needs the 'tflite' package",
                          hint="pip install tflite") from exc
    from tvm.relax.frontend.tflite import from_tflite

    data = path.read_bytes()
    model = tflite.Model.GetRootAsModel(data, 0)
    subgraph = model.Subgraphs(0)
    outputs = [(subgraph.Tensors(subgraph.Outputs(i)).Name() or b"").decode()
               for i in range(subgraph.OutputsLength())]
    shape_dict = {n: list(s) for n, s in shapes.items()} or None
    with _fully_connected_flattens_input():
        return from_tflite(model, shape_dict=shape_dict), outputs


@contextlib.contextmanager
def _fully_connected_flattens_input() -> Iterator[None]:
    """TFLite's FULLY_CONNECTED flattens its input to [-1, n_inputs] (TFLite's reference
    kernel does); TVM 0.27's converter passes a 4-D input straight to matmul and fails
    (magic_wand, micro_speech). For the duration of an import, the converter sees such an
    input already reshaped."""
    from tvm import relax
    from tvm.relax.frontend.tflite import tflite_frontend

    converter = tflite_frontend.OperatorConverter
    original = converter.convert_fully_connected

    def convert(self, op):
        tensors = self.get_input_tensors(op)
        n_inputs = int(self.get_tensor_shape(tensors[1])[1])
        in_shape = [int(d) for d in self.get_tensor_shape(tensors[0])]
        if len(in_shape) <= 2 or in_shape[-1] == n_inputs:
            return original(self, op)
        own_get = self.get_tensor_expr

        def get_tensor_expr(tensor, *args, **kwargs):
            expr = own_get(tensor, *args, **kwargs)
            if tensor.tensor_idx == tensors[0].tensor_idx:
                expr = relax.op.reshape(expr, (-1, n_inputs))
            return expr

        self.get_tensor_expr = get_tensor_expr
        try:
            return original(self, op)
        finally:
            del self.get_tensor_expr

    converter.convert_fully_connected = convert
    try:
        yield
    finally:
        converter.convert_fully_connected = original


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Hide what TVM's C++ side logs on file descriptor 2 (warnings a user cannot act on);
    our own error message says what went wrong."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def _frontend_reason(exc: BaseException) -> str:
    """The failing operator and TVM's own last line, from a frontend traceback."""
    reason = _first_line(exc)
    op = None
    tb = exc.__traceback__
    while tb is not None:  # the deepest frame that names the operator being converted wins
        local = tb.tb_frame.f_locals
        for key in ("op_code_str", "op_type", "op_name"):
            if isinstance(local.get(key), str):
                op = local[key]
                if isinstance(local.get("op_idx"), int):
                    op = f"{op} (operator #{local['op_idx']})"
        tb = tb.tb_next
    return f"operator {op}: {reason}" if op else reason
