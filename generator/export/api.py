"""Export entry points: a model file or a Relax IRModule → an MLF version 8 archive."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from generator.accel.dispatch import OffloadReport, Selected
from generator.cnames import c_identifiers
from generator.errors import ExportError, MlfError
from generator.export import ccode, conv_chain, frontend, qkernels
from generator.export.lower import (
    WORKSPACE_SYMBOLS,
    Lowered,
    fuse,
    kernel_scratch_bytes,
    lower,
    read_program,
)
from generator.export.mlf_writer import (
    ABI_NAME,
    MLF_VERSION,
    metadata_json,
    module_metadata,
    write_archive,
)
from generator.export.opnames import kernel_operators
from generator.export.planner import Plan
from generator.export.quantize import QuantReport
from generator.export.tuning import TuningRecords
from generator.mlf.schema import check_metadata

TARGET = "c -keys=cpu"
# How activations are laid out: "fast" gives every kernel its own output (the lifetime
# bound); "small" builds the kernels that can write over their input so, and the plan
# gives their outputs their inputs' bytes (docs/memory.md).
MEMORY_PRESETS = ("fast", "small")


@dataclass
class ExportResult:
    path: Path
    module: str
    kernels: int
    calls: int
    plan: Plan
    constants_bytes: int
    inputs: list[ccode.IoTensor]
    outputs: list[ccode.IoTensor]
    seconds: float
    notes: list[str] = field(default_factory=list)
    quant: QuantReport = field(default_factory=QuantReport)
    offload: OffloadReport = field(default_factory=OffloadReport)
    cpu_calls: list[str] = field(default_factory=list)  # kernels left on the CPU, in order
    tuned: list = field(default_factory=list)  # tuning.TunedKernel
    memory: str = "fast"  # the MEMORY_PRESETS entry the plan was made with
    lifetime_bound: int = 0  # the activations' lifetime lower bound (ccode.AotCode)
    over_inputs: int = 0  # calls whose output takes its input's bytes
    scratch_bytes: int = 0  # the kernels' own working memory at most (lower.kernel_scratch_bytes)
    reuse_input: bool = False  # activations may take the input buffers' bytes once read
    in_input_bytes: int = 0  # activation bytes placed in the input buffers


def export_model(model: Path, dest: Path, shapes: dict[str, tuple[int, ...]] | None = None,
                 module: str = "default",
                 accelerators: list[Selected] | None = None,
                 tuning: TuningRecords | None = None, memory: str = "fast",
                 ram_budget: int | None = None, reuse_input: bool = False) -> ExportResult:
    """Import an ONNX or TFLite file with TVM 0.27 and write it as an MLF v8 archive
    (kernels `tuning` has records for scheduled as `tune` found fastest; `memory` one of
    MEMORY_PRESETS). With `ram_budget` (bytes of activations, kernel scratch and I/O
    buffers), the first preset from `memory` on whose plan fits is written, or none; for
    each preset the tuned kernels first, then (when their scratch is what does not fit)
    the untuned ones. `reuse_input`: the model may write activations over its input
    buffers once it has read them (the caller sets the inputs before every run)."""
    start = time.monotonic()
    mod, output_names = frontend.import_model(model, shapes or {})
    if ram_budget is None:
        return _export(mod, dest, module, output_names, model.name, start,
                       accelerators or [], tuning, memory, reuse_input=reuse_input)
    needs: dict[str, int] = {}
    bound = None  # the fast plan's lifetime bound, once known: every preset reports it
    for preset in MEMORY_PRESETS[MEMORY_PRESETS.index(memory):]:
        for records in [tuning, None] if tuning is not None else [None]:
            result = _export(mod, dest, module, output_names, model.name, start,
                             accelerators or [], records, preset,
                             keep=lambda r: ram_needed(r) <= ram_budget, lifetime_bound=bound,
                             reuse_input=reuse_input)
            bound = result.lifetime_bound
            how = f"--memory {preset}" + ("" if records is tuning else ", untuned")
            needs[how] = ram_needed(result)
            if needs[how] <= ram_budget:
                if records is not tuning:
                    tuned = needs[f"--memory {preset}"]
                    result.notes.append(f"tuning records left out: with them the model needs "
                                        f"{tuned:,} B of RAM (their kernels' scratch), over "
                                        f"--ram-budget {ram_budget:,} B")
                return result
    smallest = min(needs, key=needs.get)
    raise ExportError(f"the model needs at least {needs[smallest]:,} B of RAM (activations, "
                      f"kernel scratch and I/O buffers, {smallest}); "
                      f"--ram-budget is {ram_budget:,} B")


def ram_needed(result: ExportResult) -> int:
    """What `--ram-budget` counts: activations, the kernels' scratch, the I/O buffers."""
    return (result.plan.pool_bytes + result.scratch_bytes
            + sum(t.size_bytes for t in [*result.inputs, *result.outputs]))


def export_relax(mod, dest: Path, module: str = "default",
                 output_names: list[str] | None = None,
                 accelerators: list[Selected] | None = None,
                 tuning: TuningRecords | None = None, memory: str = "fast") -> ExportResult:
    """Write a Relax IRModule (weights bound as constants, static shapes) as MLF v8."""
    return _export(mod, dest, module, output_names, "Relax IRModule", time.monotonic(),
                   accelerators or [], tuning, memory)


def _check_module_name(module: str) -> None:
    if not module.isidentifier() or not module.isascii():
        raise ExportError(f"module name '{module}' is not a C identifier")


def _export(mod, dest: Path, module: str, output_names: list[str] | None, origin: str,
            start: float, accelerators: list[Selected],
            tuning: TuningRecords | None = None, memory: str = "fast",
            keep: Callable[[ExportResult], bool] | None = None,
            lifetime_bound: int | None = None, reuse_input: bool = False) -> ExportResult:
    """Lower and plan, and write the archive (only if `keep` says yes to the result when
    it is given). `lifetime_bound`: the fast plan's, when the caller has it already."""
    if memory not in MEMORY_PRESETS:
        raise ExportError(f"memory preset '{memory}': choose {' or '.join(MEMORY_PRESETS)}")
    lowered, input_names, names = lower_model(mod, module, output_names, accelerators,
                                              tuning, memory)
    program = lowered.program
    code = ccode.generate(lowered, module, input_names, names, reuse_inputs=reuse_input)
    if memory != "fast":  # the bound is the model's as every kernel writes its own output
        code.lifetime_bound = (lifetime_bound if lifetime_bound is not None
                               else _fast_lifetime_bound(mod, accelerators))
    notes = [f"output '{n}' is copied after the last kernel" for n in code.copied_outputs]
    notes += [_unmatched_note(name, lowered.offload, accelerators)
              for name in lowered.offload.unmatched]
    notes += lowered.tuning_notes
    chains = sum(c.kernel.startswith(f"q_{conv_chain.KIND}") for c in program.calls)
    if chains and accelerators:
        plural = "s" if chains > 1 else ""
        notes.append(f"--memory small: {chains} convolution chain{plural} on the CPU "
                     "(accelerators do not take a chain's layers)")
    result = ExportResult(dest, module, len({c.kernel for c in program.calls}),
                          len(program.calls), code.plan, code.constants_bytes, code.inputs,
                          code.outputs, time.monotonic() - start, notes, lowered.quant,
                          lowered.offload,
                          [c.kernel for c in program.calls
                           if c.kernel not in lowered.accel_kernels], lowered.tuned,
                          memory, code.lifetime_bound, code.over_inputs,
                          kernel_scratch_bytes(lowered.c_source), reuse_input,
                          code.in_input_bytes)
    if keep is None or keep(result):
        write_lowered(dest, module, lowered, code, origin, accelerators, tuning, memory)
    return result


def _fast_lifetime_bound(mod, accelerators: list[Selected]) -> int:
    """The lifetime bound of the model's `--memory fast` program (kernels as they are, no
    conv chains): lowered to the call list only, no C compiled."""
    with qkernels.in_place_kernels(False):
        fused, _, _ = fuse(mod, accelerators)
    return ccode.lifetime_bound(read_program(fused))


def lower_model(mod, module: str, output_names: list[str] | None,
                accelerators: list[Selected], tuning: TuningRecords | None = None,
                memory: str = "fast") -> tuple[Lowered, list[str], list[str]]:
    """The model lowered to kernels and their calls, with its input and output names
    (with `memory` "small", kernels that can write over their input are built so)."""
    _check_module_name(module)
    input_names = _input_names(mod)
    ccode.check_io_names(input_names, list(output_names or []))
    # The model's names are data: TVM names kernel parameters after main's parameters and
    # its C codegen writes them as they are (`float* 0_ptr`), so main gets C names.
    mod = _with_input_names(mod, c_identifiers(input_names))
    with qkernels.in_place_kernels(memory == "small"):
        lowered = lower(mod, module, accelerators, tuning)
    program = lowered.program
    names = output_names or []
    if len(names) != len(program.outputs):
        names = (["output"] if len(program.outputs) == 1
                 else [f"output{i}" for i in range(len(program.outputs))])
    if len(program.inputs) != len(input_names):
        raise ExportError(f"main has {len(input_names)} parameters before lowering and "
                          f"{len(program.inputs)} after")
    for name, tid in zip(names, program.outputs, strict=True):
        shape = program.tensors[tid].shape
        if 0 in shape:  # an archive no firmware can run: `generate` would refuse it
            raise ExportError(f"output '{name}' has no elements (shape "
                              f"{tuple(int(d) for d in shape)}): a model must return at "
                              "least one value; check the model's last operators (e.g. a "
                              "Slice past the end of an axis)")
    return lowered, input_names, names


def write_lowered(dest: Path, module: str, lowered: Lowered, code: ccode.AotCode, origin: str,
                  accelerators: list[Selected], tuning: TuningRecords | None = None,
                  memory: str = "fast") -> None:
    """The MLF v8 archive of lowered code: checked to read back before it is written."""
    meta = _metadata(module, lowered, code, origin, accelerators, tuning, memory)
    try:  # what `info` and `generate` refuse is never written
        check_metadata(meta, MLF_VERSION, "metadata.json")
    except MlfError as exc:
        raise ExportError(f"the archive would not read back: {exc}") from None
    files = {
        "metadata.json": metadata_json(meta),
        f"codegen/host/include/tvmgen_{module}.h": code.header.encode(),
        f"codegen/host/src/{module}_lib0.c": lowered.c_source.encode(),
        f"codegen/host/src/{module}_lib1.c": code.run_source.encode(),
        f"codegen/host/src/{module}_lib2.c": code.constants_source.encode(),
        f"src/{module}.relax": lowered.relax_text.encode(),
    }
    write_archive(dest, files)


def _input_names(mod) -> list[str]:
    """The model's names of its inputs: main's parameters, as the importer named them."""
    if hasattr(mod, "input_names"):  # our importer's model (tflite.ImportedModel)
        return mod.input_names
    if "main" not in [gv.name_hint for gv in mod.functions]:
        raise ExportError("the Relax module has no 'main' function")
    return [str(p.name) for p in mod["main"].params]


def _with_input_names(mod, names: list[str]):
    """The module with main's parameters renamed (same types, same order)."""
    from tvm import relax

    if hasattr(mod, "with_param_names"):  # our importer's model: names it builds with
        return mod.with_param_names(names)

    main = mod["main"]
    if [str(p.name) for p in main.params] == names:
        return mod
    params = [relax.Var(name, p.ty) for p, name in zip(main.params, names, strict=True)]
    body = main.bind_params(dict(zip(main.params, params, strict=True))).body
    renamed = relax.Function(params, body, main.ret_ty, main.is_pure, main.attrs, main.span)
    out = mod.clone()  # the caller's module stays as it was
    out.update_func(out.get_global_var("main"), renamed)
    return out


def with_c_input_names(mod):
    """The module with main's parameters renamed to their C names (generator.cnames):
    TVM names kernel parameters after them and writes them into C as they are."""
    return _with_input_names(mod, c_identifiers(_input_names(mod)))


def _tensor_meta(t: ccode.IoTensor) -> dict:
    """An input or output: the model's own name (data) and its C name (generator.cnames)."""
    return {"name": t.name, "c_name": t.c_name, "dtype": t.dtype, "shape": list(t.shape),
            "size": t.size_bytes}


def _unmatched_note(name: str, offload, accelerators: list[Selected]) -> str:
    default = any(s.name == name and s.origin == "default" for s in accelerators)
    if offload.offloaded:
        return (f"accelerator '{name}' took none of the operators the others left"
                + ("; it is left out of the archive" if default else ""))
    return f"accelerator '{name}' matched no operator; the model runs on the CPU"


def _accelerators_meta(lowered, accelerators: list[Selected]) -> list[dict]:
    """What each accelerator took: the archive's record, and what `generate` reads. A
    board's default that took nothing is not recorded (its project would need its driver
    for no call)."""
    out = []
    for s in accelerators:
        mine = [o for o in lowered.offload.offloaded if o.accelerator == s.name]
        if not mine and s.origin == "default":
            continue
        # Paths name the exporting machine's files: not recorded (generate takes them from
        # its own environment and flags).
        kinds = {o.name: o.type for o in s.plugin.options}
        options = {k: v for k, v in s.options.items() if kinds.get(k) != "path"}
        out.append({"name": s.name, "abi": s.plugin.abi, "options": options,
                    "scratch_bytes": max((o.scratch_bytes for o in mine), default=0),
                    "operators": [{"pattern": o.pattern, "kernel": o.kernel, "macs": o.macs}
                                  for o in mine]})
    return out


def _metadata(module: str, lowered, code: ccode.AotCode, origin: str,
              accelerators: list[Selected], tuning: TuningRecords | None = None,
              memory: str = "fast") -> dict:

    program = lowered.program
    memory_plan = code.plan
    io_bytes = sum(t.size_bytes for t in code.inputs + code.outputs)
    main_usage = {
        "device": 1,
        "workspace_size_bytes": memory_plan.pool_bytes,
        "constants_size_bytes": code.constants_bytes,
        "io_size_bytes": io_bytes,
        "inputs": {t.name: {"size": t.size_bytes, "dtype": t.dtype} for t in code.inputs},
        "outputs": {t.name: {"size": t.size_bytes, "dtype": t.dtype} for t in code.outputs},
    }
    kernels = sorted({c.kernel for c in program.calls})
    return {
        "version": MLF_VERSION,
        "modules": {
            module: {
                **module_metadata(module, "full-model", ["aot"], TARGET, origin),
                "abi": {
                    "name": ABI_NAME,
                    "interface": "c",
                    "entry": f"tvmgen_{module}_run",
                    "operators": "plain C functions: void f(T0* arg0, ...), inputs then "
                                 "outputs, no return value",
                    "alignment": 16,
                    "needs": (["TVMAPISetLastError", *WORKSPACE_SYMBOLS]
                              if lowered.workspaces else []),
                },
                "inputs": [_tensor_meta(t) for t in code.inputs],
                "outputs": [_tensor_meta(t) for t in code.outputs],
                "pools": [
                    {"name": code.pool_name, "kind": "workspace", "placement": "internal",
                     "size_bytes": memory_plan.pool_bytes, "alignment": 16,
                     "lower_bound_bytes": code.lifetime_bound,
                     "memory_preset": memory, "over_input_calls": code.over_inputs,
                     "inputs_reused": code.reuse_inputs,
                     "in_input_bytes": code.in_input_bytes,
                     "tensors": [{"offset": p.offset, "size": p.size,
                                  "first_call": p.first, "last_call": p.last}
                                 for p in memory_plan.placements]},
                    {"name": f"tvmgen_{module}_constants", "kind": "constant",
                     "placement": "flash", "size_bytes": code.constants_bytes},
                ],
                "calls": [c.kernel for c in program.calls],
                "layers": [{**layer, "operators": kernel_operators(layer["kernel"])}
                           for layer in code.layers],
                "accelerators": _accelerators_meta(lowered, accelerators),
                **({"tuning": tuning.to_metadata(lowered.tuned)} if tuning else {}),
                "quantization": {"integer": lowered.quant.integer,
                                 "float_fallback": [{"operator": op, "reason": why}
                                                    for op, why in lowered.quant.fallback]},
                "memory": {"functions": {
                    "main": [main_usage],
                    "operator_functions": [{"function_name": f"tvmgen_{module}_{k}",
                                            "workspace": [{
                                                "device": 1, "workspace_size_bytes":
                                                lowered.workspaces.get(k, 0)}]}
                                           for k in kernels],
                }},
            },
        },
    }
