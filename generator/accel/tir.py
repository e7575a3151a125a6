"""Building blocks for lowerings: a PrimFunc that calls a driver function, and patterns."""

from __future__ import annotations

from dataclasses import dataclass

ACCELERATOR_ATTR = "mtvg.accelerator"  # PrimFunc attribute: the plugin that lowered it
# Kernel attribute that keeps int8 operators apart for accelerator patterns (export sets it,
# offloading drops it once the patterns have run).
QOP_ATTR = "mtvg.qop"
OPAQUE_PATTERN = 8  # TVM's kOpaque: FuseOps never fuses the call with its neighbours


@dataclass(frozen=True)
class Param:
    """A buffer parameter of the kernel: activations, then constants, then the output."""

    name: str
    shape: tuple[int, ...]
    dtype: str


def extern_kernel(accelerator: str, symbol: str, params: list[Param],
                  call_args: list[str | int]):
    """A PrimFunc over `params` whose body is `mtvg_accel_check(symbol(call_args...))`.

    Each entry of `call_args` is a parameter name (its data pointer is passed) or an int
    (passed as int32_t). The driver function returns int32_t: 0 on success.
    """
    from tvm import tirx

    buffers = {p.name: tirx.decl_buffer(p.shape, p.dtype, p.name) for p in params}
    if len(buffers) != len(params):
        raise ValueError(f"{symbol}: parameter names repeat")
    args = []
    for a in call_args:
        if isinstance(a, str):
            if a not in buffers:
                raise ValueError(f"{symbol}: '{a}' is not a parameter")
            args.append(buffers[a].data)
        elif isinstance(a, bool | int):
            if not -(1 << 31) <= int(a) < (1 << 31):
                raise ValueError(f"{symbol}: {a} does not fit int32_t")
            args.append(tirx.const(int(a), "int32"))
        else:
            raise ValueError(f"{symbol}: argument {a!r} is neither a parameter nor an int")
    status = tirx.call_extern("int32", symbol, *args)
    call = tirx.Evaluate(tirx.call_extern("int32", "mtvg_accel_check", status))
    # A root block, as TVM's Relax passes expect of every PrimFunc they inspect.
    from tvm import s_tir

    body = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", call))
    func = tirx.PrimFunc([buffers[p.name] for p in params], body)
    return func.with_attr(ACCELERATOR_ATTR, accelerator).with_attr("op_pattern",
                                                                   OPAQUE_PATTERN)


def int8_op(kind: str):
    """A pattern for one int8 operator of the integer rewrite (`QuantizedOp.kind`)."""
    from tvm.relax import dpl

    from generator.accel.api import Pattern

    call = dpl.is_op("relax.call_tir")(dpl.GlobalVarPattern(), dpl.wildcard())
    return Pattern(kind, call, {"op": call}, int8_kind=kind)


def pair(values) -> tuple[int, int]:
    """Relax attributes like strides: one value for both axes, or (height, width)."""
    v = [int(x) for x in values]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def with_check(pattern, check):
    """`pattern` (e.g. from int8_op) with a check hook."""
    from dataclasses import replace

    return replace(pattern, check=check)
