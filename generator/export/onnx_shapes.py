"""ONNX input shapes: which dimensions a model fixes and which it leaves open."""

from __future__ import annotations


def known_dims(dims) -> list[int | None]:
    """An ONNX input's dimensions: the fixed sizes, None where the model leaves it open."""
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
