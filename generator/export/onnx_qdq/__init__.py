"""Our importer of quantized ONNX models (QDQ and QOperator formats, issue 24).

`onnxruntime.quantization.quantize_static` writes QuantizeLinear / DequantizeLinear pairs
around float operators (QDQ) or QLinearConv / QLinearMatMul nodes (QOperator). TVM's Relax
frontend turns both into float math. This importer reads the quantized parts of the graph
(`convert.py`) and emits integer kernels (`kernels.py`) with the arithmetic of ONNX Runtime's
CPU provider at its default optimization level, which fuses each DQ → op → Q group into an
integer kernel: float I/O at the model's edges, integer inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from generator.export.quantize import QuantReport

QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul")


def is_quantized(model) -> bool:
    """Whether an ONNX ModelProto has a quantized operator this importer takes over."""
    return any(n.op_type in QUANTIZED_OPS for n in model.graph.node)


@dataclass
class OnnxQdqModel:
    """A quantized ONNX model; the Relax module is built on demand (once)."""

    model: object  # onnx.ModelProto
    where: str
    shapes: dict[str, tuple[int, ...]]
    param_names: list[str] | None = None
    _built: dict = field(default_factory=dict)

    @property
    def input_names(self) -> list[str]:
        from generator.export.onnx_qdq.convert import graph_inputs

        return [i.name for i in graph_inputs(self.model)]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.model.graph.output]

    def with_param_names(self, names: list[str]) -> OnnxQdqModel:
        """The same model, main's parameters named `names` (C identifiers)."""
        return OnnxQdqModel(self.model, self.where, self.shapes, list(names))

    def module(self) -> tuple[object, QuantReport]:
        from generator.export.onnx_qdq.convert import build

        if "mod" not in self._built:
            self._built["mod"] = build(self.model, self.where, self.shapes, self.param_names)
        return self._built["mod"]


def import_qdq(model, path: Path, shapes: dict[str, tuple[int, ...]]) -> OnnxQdqModel:
    """The model for `export`: built once here, so a refusal surfaces at import."""
    imported = OnnxQdqModel(model, str(path), dict(shapes))
    imported.module()
    return imported
