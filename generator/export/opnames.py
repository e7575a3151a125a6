"""The model operators a kernel computes, read from its name.

TVM names a fused kernel after its operators (`fused_conv2d1_add1_relu1`: Relax's op names
with a number where a name repeats); our int8 kernels are `q_<operator>`. Operator names hold
underscores themselves (`max_pool2d`), so the name is cut into Relax's known op names."""

from __future__ import annotations

import functools
import re

_PREFIXES = ("fused_", "q_")
_NUMBERED = re.compile(r"^(.*?)\d*$")


@functools.cache
def _relax_op_names() -> frozenset[str]:
    from tvm import ir

    return frozenset(n.rsplit(".", 1)[-1] for n in ir.Op.list_op_names()
                     if n.startswith("relax."))


def kernel_operators(kernel: str) -> list[str]:
    """["conv2d", "add", "relu"] for `fused_conv2d1_add1_relu1`; the name itself (without
    its number) when it is not made of known operator names."""
    name = kernel
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    words = name.split("_")
    known = _relax_op_names()
    cut = _segment(tuple(words), known)
    if cut is None:
        return [_NUMBERED.match(name).group(1) or name]
    return cut


def _segment(words: tuple[str, ...], known: frozenset[str]) -> list[str] | None:
    """`words` joined back into known op names (each maybe followed by a number), fewest
    pieces first; None when no cut works."""
    @functools.cache
    def from_index(i: int) -> tuple[str, ...] | None:
        if i == len(words):
            return ()
        for j in range(len(words), i, -1):  # longest name first
            piece = _NUMBERED.match("_".join(words[i:j])).group(1)
            if piece in known:
                rest = from_index(j)
                if rest is not None:
                    return (piece, *rest)
        return None

    found = from_index(0)
    return None if found is None else list(found)
