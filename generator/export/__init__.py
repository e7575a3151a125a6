"""Export on TVM 0.27: a model (ONNX, TFLite, Relax IRModule) → an MLF version 8 archive.

`frontend` imports, `lower` turns Relax into C operators and a call sequence, `planner`
places activations in one pool, `ccode` writes the AOT run function and the constants,
`mlf_writer` packs the archive. TVM is imported only when exporting: the names below load
`api` on first use, so modules of this package that need no TVM (`model_info`, `tuning`'s
record format) import without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.export.api import ExportResult, export_model, export_relax

__all__ = ["ExportResult", "export_model", "export_relax"]


def __getattr__(name: str):
    """ExportResult, export_model, export_relax from generator.export.api (PEP 562)."""
    if name in __all__:
        from generator.export import api  # TVM: loaded only when exporting

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
