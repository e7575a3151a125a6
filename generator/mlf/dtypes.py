"""TVM dtype strings ('int8', 'float32') and tensors known by shape and dtype.

A leaf: the archive's typed model (`model.py`) and the graph parser (`graph.py`) both use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DTYPE_RE = re.compile(r"^(int|uint|float|bfloat|bool)(\d*)$")
DTYPE_BITS = (1, 4, 8, 16, 32, 64)


def dtype_bits(dtype: str) -> int:
    """Bits of one element of a TVM dtype string such as 'int8' or 'float32'."""
    m = DTYPE_RE.match(dtype)
    if not m:
        raise ValueError(f"unknown dtype '{dtype}'")
    if m.group(1) == "bool":
        return 8
    bits = int(m.group(2) or 32) if len(m.group(2)) <= 3 else 0
    if bits not in DTYPE_BITS:
        raise ValueError(f"unknown dtype '{dtype}'")
    return bits


# DLPack type codes (DLDataTypeCode) of the dtype families.
_DLPACK_CODES = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "bool": 1}


def dlpack_type_code(dtype: str) -> int:
    """The DLPack type code of a TVM dtype string ('int8' -> 0, 'float32' -> 2)."""
    m = DTYPE_RE.match(dtype)
    if not m:
        raise ValueError(f"unknown dtype '{dtype}'")
    return _DLPACK_CODES[m.group(1)]


@dataclass(frozen=True)
class ShapedTensor:
    """A tensor known by name, shape and dtype (from Relay text or a graph JSON)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def size_bytes(self) -> int:
        return (self.numel * dtype_bits(self.dtype) + 7) // 8
