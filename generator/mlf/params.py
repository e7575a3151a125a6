"""The TVM params binary (`parameters/<mod>.params`, `tvm.runtime.save_param_dict`).

Layout (all little-endian): u64 list magic, u64 reserved, u64 name count, names as
u64 length + bytes, u64 tensor count, then per tensor: u64 magic, u64 reserved,
i32 device type, i32 device id, i32 ndim, u8 dtype code, u8 bits, u16 lanes,
i64 shape[ndim], i64 data byte size, data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from generator.errors import MlfError

LIST_MAGIC = 0xF7E58D4F05049CB7
TENSOR_MAGIC = 0xDD5E40F096B4A13F
MAX_NDIM = 32
MAX_NAME_BYTES = 4096

_CODE_TO_KIND = {0: "int", 1: "uint", 2: "float", 4: "bfloat"}
_KIND_TO_CODE = {v: k for k, v in _CODE_TO_KIND.items()}


@dataclass
class Param:
    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes
    offset: int = field(default=-1, compare=False)  # where its data starts in the blob

    def as_numpy(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=np.dtype(self.dtype)).reshape(self.shape)


class _Reader:
    def __init__(self, blob: bytes, origin: str) -> None:
        self.blob = blob
        self.pos = 0
        self.origin = origin

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.blob):
            raise MlfError(f"{self.origin}: params file is truncated at byte {self.pos}")
        out = self.blob[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def load_params(blob: bytes, origin: str = "params") -> list[Param]:
    """Decode a params file; raises MlfError on anything malformed."""
    r = _Reader(blob, origin)
    magic, _reserved, count = r.unpack("QQQ")
    if magic != LIST_MAGIC:
        raise MlfError(f"{origin}: not a TVM params file (magic {magic:#x})")
    if count > len(blob):
        raise MlfError(f"{origin}: params file claims {count} names")
    names = []
    for _ in range(count):
        (length,) = r.unpack("Q")
        if length > MAX_NAME_BYTES:
            raise MlfError(f"{origin}: parameter name of {length} bytes")
        names.append(r.take(length).decode("utf-8", "replace"))
    (tensors,) = r.unpack("Q")
    if tensors != count:
        raise MlfError(f"{origin}: {count} names but {tensors} tensors")
    params = []
    for name in names:
        tmagic, _res, _dev_type, _dev_id, ndim, code, bits, _lanes = r.unpack("QQiiiBBH")
        if tmagic != TENSOR_MAGIC:
            raise MlfError(f"{origin}: tensor '{name}' has a bad magic {tmagic:#x}")
        if not 0 <= ndim <= MAX_NDIM:
            raise MlfError(f"{origin}: tensor '{name}' has ndim {ndim}")
        if code not in _CODE_TO_KIND or bits == 0:
            raise MlfError(f"{origin}: tensor '{name}' has dtype code {code} bits {bits}")
        shape = r.unpack("q" * ndim) if ndim else ()
        if any(d < 0 for d in shape):
            raise MlfError(f"{origin}: tensor '{name}' has a negative dimension")
        (nbytes,) = r.unpack("q")
        numel = 1
        for d in shape:
            numel *= d
        if nbytes != numel * ((bits + 7) // 8):
            raise MlfError(f"{origin}: tensor '{name}' holds {nbytes} bytes, its shape needs "
                           f"{numel * ((bits + 7) // 8)}")
        offset = r.pos
        params.append(Param(name, f"{_CODE_TO_KIND[code]}{bits}", tuple(shape), r.take(nbytes),
                            offset))
    return params


def save_params(params: list[Param]) -> bytes:
    """Encode params in the same format (used by tests and by our exporter)."""
    out = [struct.pack("<QQQ", LIST_MAGIC, 0, len(params))]
    for p in params:
        raw = p.name.encode("utf-8")
        out.append(struct.pack("<Q", len(raw)) + raw)
    out.append(struct.pack("<Q", len(params)))
    for p in params:
        kind = p.dtype.rstrip("0123456789")
        bits = int(p.dtype[len(kind):])
        out.append(struct.pack("<QQiiiBBH", TENSOR_MAGIC, 0, 1, 0, len(p.shape),
                               _KIND_TO_CODE[kind], bits, 1))
        out.append(struct.pack("<" + "q" * len(p.shape), *p.shape))
        out.append(struct.pack("<q", len(p.data)) + p.data)
    return b"".join(out)
