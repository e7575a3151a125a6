"""The archive's own C: the AOT run function, the weights, the C interface header.

The run function calls the kernels in order with pointers: inputs and outputs are the
caller's buffers (the `tvmgen_<mod>_inputs/outputs` structs of TVM's C interface),
activations are offsets in one static workspace pool, weights are `const` arrays (flash).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from generator import abi
from generator.cdata import c_bytes_initializer
from generator.cnames import c_identifiers
from generator.errors import ExportError, MlfError
from generator.export.lower import Lowered, Program
from generator.export.planner import (
    ALIGN,
    Interval,
    Plan,
    Region,
    lower_bound,
    move_to_regions,
    plan,
)
from generator.mlf.model import (
    PROFILE_MARK_FUNCTION,
    external_pool_macro,
    profile_macro,
    profile_mark_macro,
)
from generator.mlf.schema import check_tensor_name

RUN_FAILED = abi.constant("MTVG_FAILED")
ACCEL_RUN_FAILED = abi.constant("MTVG_ACCEL_RUN_FAILED")  # the generated code has no mtvg/ headers


@dataclass(frozen=True)
class IoTensor:
    name: str  # as the model spells it (metadata only: never written into C)
    c_name: str  # its C identifier (generator.cnames): struct member and macro
    shape: tuple[int, ...]
    dtype: str
    size_bytes: int


@dataclass
class AotCode:
    header: str  # codegen/host/include/tvmgen_<mod>.h
    run_source: str  # the run function and the workspace pool
    constants_source: str  # the weights
    plan: Plan
    pool_name: str
    inputs: list[IoTensor]
    outputs: list[IoTensor]
    constants_bytes: int
    copied_outputs: list[str]  # outputs that are not written in place (copied at the end)
    layers: list[dict]  # per call: its tensors and where they live (metadata "layers")
    # The lifetime lower bound: the most bytes of tensors live at once when every kernel
    # writes its own output. The plan is below it when kernels write over their inputs.
    lifetime_bound: int = 0
    over_inputs: int = 0  # calls whose output takes its input's bytes
    # The most activation bytes in the caller's input buffers at once (`reuse_inputs`):
    # placed there once the buffers are read, not in the pool.
    in_input_bytes: int = 0
    reuse_inputs: bool = False


def check_io_names(input_names: list[str], output_names: list[str]) -> None:
    """Refuse names an archive cannot keep (the reader's own check) and duplicates."""
    for kind, names in (("input", input_names), ("output", output_names)):
        for i, name in enumerate(names):
            try:
                check_tensor_name(name, f"{kind} {i}")
            except MlfError as exc:
                raise ExportError(f"the model's {exc}; an archive cannot keep this name") \
                    from None
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ExportError(f"two of the model's {kind}s are named '{twice[0]}'")


def _io_tensors(program: Program, input_names: list[str],
                output_names: list[str]) -> tuple[list[IoTensor], list[IoTensor]]:
    """The model's inputs and outputs with their C names (unique across both: the size
    macros of inputs and outputs share one namespace)."""
    check_io_names(input_names, output_names)
    c_names = c_identifiers([*input_names, *output_names])
    tensors = []
    for tid, name, c_name in zip([*program.inputs, *program.outputs],
                                 [*input_names, *output_names], c_names, strict=True):
        t = program.tensors[tid]
        tensors.append(IoTensor(name, c_name, t.shape, t.dtype, t.nbytes))
    return tensors[:len(input_names)], tensors[len(input_names):]


def pool_intervals(program: Program, in_place_outputs: set[int],
                   aliases: dict[int, int] | None = None) -> list[Interval]:
    """Lifetimes (in call steps) of the activations that live in the pool; a tensor in
    `aliases` (`over_input_aliases`) lives in the bytes of the tensor it maps to, which are
    as many as the largest of the tensors that share them."""
    aliases = aliases or {}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, call in enumerate(program.calls):
        for tid in call.args:
            root = program.root(tid)
            if program.tensors[root].kind != "activation" or root in in_place_outputs:
                continue
            first.setdefault(root, step)
            last[root] = step
    end = len(program.calls)
    for tid in program.outputs:  # copied to the caller after the last call
        root = program.root(tid)
        if root in first:
            last[root] = end
    members: dict[int, list[int]] = {}
    for t in sorted(first):
        members.setdefault(aliases.get(t, t), []).append(t)
    intervals = []
    for shared, group in members.items():
        if len(group) == 1:
            intervals.append(Interval(shared, program.tensors[shared].nbytes, first[shared],
                                      last[shared]))
            continue
        # The shared bytes at each step: the most any member live then has.
        lo, hi = min(first[t] for t in group), max(last[t] for t in group)
        sizes = [max((program.tensors[t].nbytes for t in group if first[t] <= s <= last[t]),
                     default=0) for s in range(lo, hi + 1)]
        segments: list[tuple[int, int, int]] = []
        for s, n in enumerate(sizes, start=lo):
            if segments and segments[-1][2] == n:
                segments[-1] = (segments[-1][0], s, n)
            else:
                segments.append((s, s, n))
        intervals.append(Interval(shared, max(sizes), lo, hi, tuple(segments)))
    return sorted(intervals, key=lambda i: i.tensor)


def direct_outputs(program: Program) -> set[int]:
    """The activations the model returns: their kernels write the caller's buffers."""
    return {program.root(t) for t in program.outputs
            if program.tensors[program.root(t)].kind == "activation"}


def lifetime_bound(program: Program) -> int:
    """The pool's lifetime lower bound when every kernel writes its own output, without the
    scratch outputs of in-place kernels (written after the output, never read)."""
    read = {program.root(t) for c in program.calls for t in c.args[:len(c.args) - c.outputs]}
    scratch = {program.root(t) for c in program.calls for t in c.written[1:]
               if program.root(t) not in read}
    return lower_bound(pool_intervals(program, direct_outputs(program) | scratch))


def over_input_aliases(program: Program, in_place_kernels: dict[str, int],
                       in_place_outputs: set[int]) -> dict[int, int]:
    """Activations written over an input: output → the pool tensor whose bytes it takes.

    A call of a kernel that can write over its input i (bit i of `Lowered.in_place`: its
    output starts at that input's first byte, whatever their sizes) takes the first such
    input's bytes that both live in the pool and no later call (nor the caller) reads.
    Chains follow: a tensor written over one that was itself written over another maps to
    the first."""
    last_read = last_reads(program)
    returned = {program.root(t) for t in program.outputs}
    aliases: dict[int, int] = {}
    tensors = program.tensors
    for step, call in enumerate(program.calls):
        mask = in_place_kernels.get(call.kernel, 0)
        if not mask:
            continue
        inputs = [program.root(t) for t in call.args[:len(call.args) - call.outputs]]
        dst = program.root(call.written[0])
        if tensors[dst].kind != "activation" or dst in in_place_outputs:
            continue
        for index, src in enumerate(inputs):
            if (mask >> index & 1 and tensors[src].kind == "activation"
                    and src not in in_place_outputs and src not in returned
                    and inputs.count(src) == 1 and last_read.get(src) == step and src != dst):
                aliases[dst] = aliases.get(src, src)
                break
    return aliases


def last_reads(program: Program) -> dict[int, int]:
    """Tensor (root) → the last call that reads it."""
    last_read: dict[int, int] = {}
    for step, call in enumerate(program.calls):
        for tid in call.args[:len(call.args) - call.outputs]:
            last_read[program.root(tid)] = step
    return last_read


def input_regions(program: Program) -> list[Region]:
    """The model's input buffers as room for activations once their last reader has run
    (not an input the model also returns)."""
    last_read = last_reads(program)
    returned = {program.root(t) for t in program.outputs}
    return [Region(tid, program.tensors[tid].nbytes, last_read[tid] + 1)
            for tid in program.inputs if tid in last_read and tid not in returned]


def generate(lowered: Lowered, module: str, input_names: list[str],
             output_names: list[str], reuse_inputs: bool = False) -> AotCode:
    """The AOT run function, its header and the weights. `reuse_inputs`: the caller lets
    the model write over its input buffers once it has read them (they must be aligned to
    ALIGN), so activations that fit are placed there instead of in the pool."""
    program = lowered.program
    prefix = f"tvmgen_{module}_"
    if len(input_names) != len(program.inputs) or len(output_names) != len(program.outputs):
        raise ExportError(f"{len(input_names)} input and {len(output_names)} output names for "
                          f"{len(program.inputs)} inputs and {len(program.outputs)} outputs")
    inputs, outputs = _io_tensors(program, input_names, output_names)

    # Each activation returned by the model is written straight into the caller's output
    # buffer by its kernel (once: a tensor returned twice is copied the second time).
    in_place: dict[int, str] = {}
    for tid, out in zip(program.outputs, outputs, strict=True):
        root = program.root(tid)
        if program.tensors[root].kind == "activation" and root not in in_place:
            in_place[root] = out.c_name
    aliases = over_input_aliases(program, lowered.in_place, set(in_place))
    all_intervals = pool_intervals(program, set(in_place), aliases)
    intervals, moved = all_intervals, {}
    if reuse_inputs:
        intervals, moved = move_to_regions(all_intervals, input_regions(program))
    memory_plan = plan(intervals)
    lifetime = lifetime_bound(program)
    pool = f"{prefix}workspace_pool"
    input_of = {tid: t.c_name for tid, t in zip(program.inputs, inputs, strict=True)}

    def place(root: int) -> tuple[str, int]:
        """Where an activation lives: ("pool", offset) or (an input's C name, offset)."""
        shared = aliases.get(root, root)
        if shared in moved:
            buffer, offset = moved[shared]
            return input_of[buffer], offset
        return "pool", memory_plan.offset_of(shared)

    constants = sorted({program.root(t) for c in program.calls for t in c.args
                        if program.tensors[program.root(t)].kind == "constant"}
                       | {program.root(t) for t in program.outputs
                          if program.tensors[program.root(t)].kind == "constant"})
    const_names = {tid: f"{prefix}const_{i}" for i, tid in enumerate(constants)}

    def where(tid: int) -> str:
        root = program.root(tid)
        kind = program.tensors[root].kind
        if kind == "input":
            return f"inputs->{input_of[root]}"
        if kind == "constant":
            return const_names[root]
        if root in in_place:
            return f"outputs->{in_place[root]}"
        base, offset = place(root)
        if base == "pool":
            return f"({pool} + {offset})"
        return f"((uint8_t*)inputs->{base} + {offset})"

    mark = profile_mark_macro(module)
    lines = [f"  {mark}(0);"]
    for step, call in enumerate(program.calls):
        types = [p.rsplit("*", 1)[0].strip() + "*"
                 for p in lowered.prototypes[call.kernel].split(",")]
        if len(types) != len(call.args):
            raise ExportError(f"kernel {call.kernel}: {len(types)} parameters in C, "
                              f"{len(call.args)} arguments in the model")
        args = ", ".join(f"({ty}){where(t)}" for ty, t in zip(types, call.args, strict=True))
        lines.append(f"  {prefix}{call.kernel}({args});")
        if call.kernel in lowered.workspaces:  # TVM's C returns early when an alloc fails
            lines.append(f"  if (mtvg_workspace_failures() != failures) return {RUN_FAILED};")
        lines.append(f"  {mark}({step + 1});")
        if call.kernel in lowered.accel_kernels:
            lines.append(f"  if (mtvg_accel_failed()) return {ACCEL_RUN_FAILED}; "
                         f"/* {lowered.accel_kernels[call.kernel]} */")
    if lowered.accel_kernels:
        lines.insert(0, "  mtvg_accel_clear();")
    if lowered.workspaces:
        lines.insert(0, "  const uint32_t failures = mtvg_workspace_failures();")
    copied = []
    for tid, out in zip(program.outputs, outputs, strict=True):
        if in_place.get(program.root(tid)) != out.c_name:
            lines.append(f"  memcpy(outputs->{out.c_name}, {where(tid)}, {out.size_bytes}u);")
            copied.append(out.name)

    return AotCode(
        header=_header(module, inputs, outputs, reuse_inputs),
        run_source=_run_source(module, lowered, program, memory_plan, pool, const_names, lines),
        constants_source=_constants_source(module, program, const_names),
        plan=memory_plan,
        pool_name=pool,
        inputs=inputs,
        outputs=outputs,
        constants_bytes=sum(program.tensors[t].nbytes for t in constants),
        copied_outputs=copied,
        layers=_layers(program, lowered, inputs, in_place, place, const_names, prefix),
        lifetime_bound=lifetime,
        over_inputs=len(aliases),
        in_input_bytes=lower_bound([i for i in all_intervals if i.tensor in moved]),
        reuse_inputs=reuse_inputs,
    )


def _layers(program: Program, lowered: Lowered, inputs: list[IoTensor], in_place: dict[int, str],
            place: Callable[[int], tuple[str, int]], const_names: dict[int, str],
            prefix: str) -> list[dict]:
    """What each call reads and writes, and where those bytes live: `report`'s per-layer
    table. A constant's bytes count for the first call that reads it."""
    input_of = {tid: t.c_name for tid, t in zip(program.inputs, inputs, strict=True)}
    seen: set[int] = set()
    out = []
    for call in program.calls:
        args, weights = [], 0
        n_inputs = len(call.args) - call.outputs
        for position, tid in enumerate(call.args):
            tensor, root = program.tensors[tid], program.root(tid)
            kind = program.tensors[root].kind
            if kind == "input":
                ref = input_of[root]
            elif kind == "constant":
                ref = const_names[root].removeprefix(prefix)
                if root not in seen:
                    weights += program.tensors[root].nbytes
                    seen.add(root)
            elif root in in_place:
                kind, ref = "output", in_place[root]
            else:
                ref = "{}+{}".format(*place(root))
            args.append({"role": "input" if position < n_inputs else "output", "kind": kind,
                         "shape": list(tensor.shape), "dtype": tensor.dtype,
                         "bytes": tensor.nbytes, "ref": ref})
        out.append({"kernel": call.kernel, "macs": lowered.kernel_macs.get(call.kernel),
                    "implementation": (f"accelerator:{lowered.accel_kernels[call.kernel]}"
                                       if call.kernel in lowered.accel_kernels else "ours"),
                    "weights_bytes": weights, "args": args})
    return out


def _header(module: str, inputs: list[IoTensor], outputs: list[IoTensor],
            reuse_inputs: bool = False) -> str:
    up = module.upper()
    guard = f"TVMGEN_{up}_H_"
    out = [f"/* The C interface of module '{module}' (MLF version 8, written by microtvm-gen)."
           " Same names as TVM's C interface. */",
           f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>", "",
           "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    for kind, group in (("Input", inputs), ("Output", outputs)):
        for t in group:
            # The C name only: the model's own name may hold anything (even "*/").
            out.append(f"/* {kind} tensor {t.c_name}: {t.dtype}{list(t.shape)}, size in bytes */")
            out.append(f"#define TVMGEN_{up}_{t.c_name.upper()}_SIZE {t.size_bytes}")
    for kind, group in (("inputs", inputs), ("outputs", outputs)):
        out += ["", f"/* {kind.capitalize()} tensor pointers for module '{module}' */",
                f"struct tvmgen_{module}_{kind} {{"]
        out += [f"  void* {t.c_name};" for t in group]
        out.append("};")
    if reuse_inputs:
        out += ["", f"/* Module '{module}' writes over its input buffers once it has read "
                f"them (export --reuse-input): set every input before each run; input buffers "
                f"must be aligned to {ALIGN} bytes. */",
                f"#define TVMGEN_{up}_REUSES_INPUTS 1"]
    out += ["", f"/* Runs module '{module}'. Buffers must be aligned to their element size; "
            "returns 0, or nonzero when an accelerator driver failed. */",
            f"int32_t tvmgen_{module}_run(struct tvmgen_{module}_inputs* inputs, "
            f"struct tvmgen_{module}_outputs* outputs);",
            "", "#ifdef __cplusplus", "}", "#endif", "", f"#endif  /* {guard} */", ""]
    return "\n".join(out)


def _run_source(module: str, lowered: Lowered, program: Program, memory_plan: Plan,
                pool: str, const_names: dict[int, str], body: list[str]) -> str:
    prefix = f"tvmgen_{module}_"
    out = [f"/* The AOT run function of module '{module}' (written by microtvm-gen). */",
           "#include <stdint.h>", "#include <string.h>", "",
           f'#include "tvmgen_{module}.h"', ""]
    kernels = sorted({c.kernel for c in program.calls})
    out += [f"void {prefix}{k}({lowered.prototypes[k]});" for k in kernels]
    if lowered.workspaces:
        out += ["", "/* Kernels with local buffers take them from the runtime's workspace "
                "arena (mtvg/runtime.h). */", "uint32_t mtvg_workspace_failures(void);"]
    if lowered.accel_kernels:
        out += ["", "/* Accelerator drivers report failures here (mtvg/accel.h). */",
                "int32_t mtvg_accel_failed(void);", "void mtvg_accel_clear(void);"]
    mark = profile_mark_macro(module)
    out += ["", f"/* Built with {profile_macro(module)} defined, the run function reads the "
            "timer before its first call and after each (run --profile). */",
            f"#ifdef {profile_macro(module)}",
            f"void {PROFILE_MARK_FUNCTION}(uint32_t point);",
            f"#define {mark}(point) {PROFILE_MARK_FUNCTION}(point)",
            "#else",
            f"#define {mark}(point)",
            "#endif"]
    out.append("")
    out += [f"extern const uint8_t {name}[{program.tensors[tid].nbytes}];"
            for tid, name in const_names.items()]
    if memory_plan.pool_bytes:
        out += ["", f"/* Activations: {len(memory_plan.placements)} tensors in "
                f"{memory_plan.pool_bytes} bytes (lower bound {memory_plan.lower_bound}). "
                f"Built with {external_pool_macro(module)} defined, the pool is the caller's: "
                f"{pool} points at {memory_plan.pool_bytes} bytes aligned to {ALIGN}. */",
                f"#ifdef {external_pool_macro(module)}",
                f"extern uint8_t* {pool};",
                "#else",
                f"static uint8_t __attribute__((aligned({ALIGN}))) "
                f"{pool}[{memory_plan.pool_bytes}];",
                "#endif"]
    out += ["", f"int32_t {prefix}run(struct {prefix}inputs* inputs, "
            f"struct {prefix}outputs* outputs) {{",
            "  (void)inputs;", "  (void)outputs;", *body, "  return 0;", "}", ""]
    return "\n".join(out)


def _constants_source(module: str, program: Program, const_names: dict[int, str]) -> str:
    out = [f"/* The weights of module '{module}': read-only, kept in flash. */",
           "#include <stdint.h>", ""]
    for tid, name in const_names.items():
        t = program.tensors[tid]
        data = t.data.astype(t.data.dtype.newbyteorder("<"), copy=False).tobytes()
        out.append(f"/* {t.dtype}{list(t.shape)} */")
        out.append(f"const uint8_t __attribute__((aligned({ALIGN}))) {name}[{len(data)}] = {{")
        out.append(c_bytes_initializer(data))
        out.append("};")
    out.append("")
    return "\n".join(out)
