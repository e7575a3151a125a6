"""Bytes and text as C source: string literals and array initialisers."""

from __future__ import annotations

LINE_BYTES = 96  # source bytes of data per line of generated C


def _escape(byte: int) -> str:
    if byte in (0x22, 0x5C):  # " and \
        return "\\" + chr(byte)
    if 0x20 <= byte < 0x7F and byte != 0x3F:  # printable, but not ? (no trigraphs)
        return chr(byte)
    return f"\\{byte:03o}"


def c_string_literal(data: bytes | str, indent: str = "") -> str:
    """A C string literal with exactly these bytes (split over lines when long).

    Every byte outside printable ASCII, and '?', becomes a three-digit octal escape, so no
    escape can swallow the next character and no trigraph can form.
    """
    raw = data.encode() if isinstance(data, str) else data
    if not raw:
        return f'{indent}""'
    lines = []
    for start in range(0, len(raw), LINE_BYTES):
        body = "".join(_escape(b) for b in raw[start:start + LINE_BYTES])
        lines.append(f'{indent}"{body}"')
    return "\n".join(lines)


def c_bytes_initializer(data: bytes, indent: str = "  ") -> str:
    """The body of a `uint8_t x[] = { ... }` initialiser, 16 bytes per line."""
    lines = []
    for start in range(0, len(data), 16):
        chunk = data[start:start + 16]
        lines.append(indent + ",".join(f"0x{b:02x}" for b in chunk) + ",")
    return "\n".join(lines)
