"""Export on TVM 0.27: a model (ONNX, TFLite, Relax IRModule) → an MLF version 8 archive.

`frontend` imports, `lower` turns Relax into C operators and a call sequence, `planner`
places activations in one pool, `ccode` writes the AOT run function and the constants,
`mlf_writer` packs the archive. TVM is imported only here, and only when exporting.
"""

from generator.export.api import ExportResult, export_model, export_relax

__all__ = ["ExportResult", "export_model", "export_relax"]
