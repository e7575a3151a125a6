"""Relax → fused TIR kernels → plain C functions, and the call sequence that runs them.

The Relax side is TVM's own pipeline (legalize, fold, fuse). What comes out of it is read
into a `Program`: tensors (inputs, outputs, constants, activations) and the kernel calls
in order. Kernels are then scheduled to drop their intermediates (`schedule.py`),
lowered, given plain pointer parameters, and compiled by TVM's C codegen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from generator import abi
from generator.accel.dispatch import OffloadReport, Selected, merge_identical_kernels, offload
from generator.accel.tir import ACCELERATOR_ATTR
from generator.errors import ExportError
from generator.export import qkernels
from generator.export.macs import kernel_macs
from generator.export.quantize import QuantReport, integer_rewrite
from generator.export.schedule import shrink_intermediates
from generator.mlf.dtypes import ShapedTensor

# Name prefix of every symbol the archive defines, as TVM's C interface did.
SYMBOL_PREFIX = "tvmgen_{mod}_"
PLAIN_C_PIPELINE = "mtvg-plain-c"  # tvm.tirx.build pipeline registered by _register_pipeline
# Passes of TVM's default TIR pipeline the plain kernels skip. Two are for GPUs
# (InjectPermutedLayout, InjectVirtualThread); the other three left every kernel's C the same,
# byte for byte, on all 44 models of the fixtures, and took 70 % of `export`'s time: the
# first StmtSimplify (the later one stays), HoistIfThenElse and RemoveNoOp.
SKIPPED_PASSES = ("s_tir.InjectPermutedLayout", "s_tir.InjectVirtualThread",
                  "s_tir.StmtSimplify", "s_tir.HoistIfThenElse", "tirx.RemoveNoOp")


@dataclass
class Tensor:
    """A tensor of the model's main function."""

    id: int
    shape: tuple[int, ...]
    dtype: str
    kind: str  # "input" | "constant" | "activation"
    name: str = ""
    data: np.ndarray | None = None  # constants only
    base: int | None = None  # reshape views: the tensor whose bytes these are

    @property
    def nbytes(self) -> int:
        return ShapedTensor(self.name, self.shape, self.dtype).size_bytes


@dataclass
class KernelCall:
    kernel: str  # kernel name (without the symbol prefix)
    args: list[int]  # tensor ids: inputs first, then outputs
    outputs: int = 1  # how many of `args` (the last ones) it writes

    @property
    def written(self) -> list[int]:
        """The tensors it writes: the last `outputs` of `args`."""
        return self.args[len(self.args) - self.outputs:]


@dataclass
class Program:
    tensors: list[Tensor]
    inputs: list[int]
    outputs: list[int]  # may repeat, or name inputs/constants; ccode copies where needed
    output_names: list[str]
    calls: list[KernelCall]

    def root(self, tid: int) -> int:
        """The tensor whose bytes `tid` views (itself unless a reshape)."""
        while self.tensors[tid].base is not None:
            tid = self.tensors[tid].base
        return tid


@dataclass
class Lowered:
    program: Program
    c_source: str  # TVM's C codegen output: one plain C function per kernel
    prototypes: dict[str, str] = field(default_factory=dict)  # kernel → parameter list text
    relax_text: str = ""
    quant: QuantReport = field(default_factory=QuantReport)
    accel_kernels: dict[str, str] = field(default_factory=dict)  # kernel → accelerator
    offload: OffloadReport = field(default_factory=OffloadReport)
    tuned: list = field(default_factory=list)  # tuning.TunedKernel: kernels scheduled by tune
    tuning_notes: list[str] = field(default_factory=list)
    kernel_macs: dict[str, int] = field(default_factory=dict)  # kernel → MACs of one call
    # kernel → bit mask of the inputs its output may overwrite (qkernels.IN_PLACE_ATTR; not
    # for kernels an accelerator or a tuning record replaced)
    in_place: dict[str, int] = field(default_factory=dict)
    # kernel → bytes of the runtime's workspace arena it allocates (TVMBackendAllocWorkspace:
    # tuned kernels with local buffers; the project reserves the largest)
    workspaces: dict[str, int] = field(default_factory=dict)


def relax_pipeline():
    import tvm
    from tvm import relax

    return tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        relax.transform.FoldConstant(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
        relax.transform.RewriteDataflowReshape(),
        relax.transform.DeadCodeElimination(),
    ])


def lower(mod, module_name: str = "default", accelerators: list[Selected] | None = None,
          tuning=None) -> Lowered:
    """Lower a Relax IRModule (weights bound as constants) to C kernels and a call list;
    operators the `accelerators` take (in order) become calls to their drivers; kernels
    `tuning` (a `tuning.TuningRecords`) has a record for are scheduled as it says."""

    with qkernels.with_blocks_forms(tuning is not None):  # the build `fuse_with_blocks` takes
        main_mod = mod.module()[0] if hasattr(mod, "module") else mod
    if "main" not in [gv.name_hint for gv in main_mod.functions]:
        raise ExportError("the Relax module has no 'main' function")
    relax_text = main_mod["main"].script(show_meta=False)

    fused, quant, offload_report, blocks = fuse_with_blocks(mod, accelerators,
                                                            blocks=tuning is not None)
    program = read_program(fused)
    accel_kernels = {}
    for gv, func in fused.functions.items():
        attrs = getattr(func, "attrs", None)
        if attrs is not None and ACCELERATOR_ATTR in attrs:
            accel_kernels[gv.name_hint] = str(attrs[ACCELERATOR_ATTR])
    used = sorted({c.kernel for c in program.calls})
    prefix = SYMBOL_PREFIX.format(mod=module_name)
    kernels = {name: fused[name] for name in used}

    def compile_kernels(funcs: dict, keep: set) -> tuple[str, dict[str, str]]:
        source, _ = compile_plain_kernels(funcs, prefix, keep_schedule=keep)
        return source, kernel_definitions(source, prefix)

    tuned_kernels, tuning_notes = [], []
    if tuning is None:
        c_source, _ = compile_kernels(kernels, set())
    else:
        cpu = {name: f for name, f in kernels.items() if name not in accel_kernels}
        c_source, tuned_kernels, tuning_notes = tuning.apply(
            kernels, cpu, tunable_forms(blocks, cpu), compile_kernels,
            {name: quant.tilings[name] for name in cpu if name in quant.tilings})
    prototypes = {name[len(prefix):]: params
                  for name, params in kernel_prototypes(c_source).items()}
    missing = [k for k in used if k not in prototypes]
    if missing:
        raise ExportError(f"TVM's C codegen did not emit kernels {', '.join(missing)}")
    macs = {name: (offload_report.macs_of(name) if name in accel_kernels
                   else kernel_macs(func)) for name, func in kernels.items()}
    replaced = set(accel_kernels) | {t.kernel for t in tuned_kernels}
    in_place = {name: int(func.attrs[qkernels.IN_PLACE_ATTR]) for name, func in kernels.items()
                if name not in replaced and func.attrs is not None
                and qkernels.IN_PLACE_ATTR in func.attrs}
    workspaces = kernel_workspaces(kernel_definitions(c_source, prefix))
    return Lowered(program, c_source, prototypes, relax_text, quant, accel_kernels,
                   offload_report, tuned_kernels, tuning_notes, macs, in_place, workspaces)


def fuse(mod, accelerators: list[Selected] | None = None) \
        -> tuple[object, QuantReport, OffloadReport]:
    """The integer rewrite, the accelerators' offloading, then TVM's legalize-and-fuse:
    the module whose main calls the kernels (what `lower` compiles and `tune` searches).
    `mod` is a Relax IRModule (TVM's frontends: the integer rewrite finds the quantized
    patterns) or a model our importer read (`tflite.ImportedModel`: integer already)."""
    fused, quant, offload_report, _ = fuse_with_blocks(mod, accelerators, blocks=False)
    return fused, quant, offload_report


def fuse_with_blocks(mod, accelerators: list[Selected] | None = None, blocks: bool = True) \
        -> tuple[object, QuantReport, OffloadReport, object]:
    """`fuse`, and (with `blocks`) the same module fused with its int8 conv2d kernels in
    their "blocks" form (qkernels.CONV_FORMS; None when no kernel has another form), both
    from one integer rewrite: the kernels carry both forms (`qkernels.with_blocks_forms`)."""
    import tvm

    from generator.export.frontend import quiet_native_stderr

    try:
        with tvm.transform.PassContext(opt_level=3), quiet_native_stderr():
            with qkernels.with_blocks_forms(blocks):
                if hasattr(mod, "module"):
                    mod, quant = mod.module()
                else:
                    mod, quant = integer_rewrite(mod, tag_ops=bool(accelerators))
            # The other form's module first: offloading and merging change `mod` in place.
            other = _with_functions(mod, quant.blocks_forms) if quant.blocks_forms else None
            fused, offload_report = _legalize_and_fuse(mod, quant, accelerators)
            if other is not None:
                other, _ = _legalize_and_fuse(other, quant, accelerators)
    except ExportError:
        raise
    except Exception as exc:
        raise ExportError(f"TVM could not legalize and fuse the model: {last_line(exc)}") \
            from exc
    return fused, quant, offload_report, other


def _legalize_and_fuse(mod, quant: QuantReport, accelerators: list[Selected] | None) \
        -> tuple[object, OffloadReport]:
    from tvm import relax

    offload_report = OffloadReport()
    if accelerators:
        mod = relax.transform.FoldConstant()(mod)
        mod, offload_report = offload(mod, quant.ops, accelerators)
    else:
        mod = merge_identical_kernels(mod)
    return relax_pipeline()(mod), offload_report


def _with_functions(mod, functions: dict):
    """A copy of `mod` with the functions named in `functions` (name → PrimFunc) replaced."""
    out = mod.clone()
    for name, func in functions.items():
        out[out.get_global_var(name)] = func
    return out


def tunable_forms(blocks, kernels: dict) -> dict:
    """Kernels of `kernels` (name → PrimFunc, as `fuse(mod)` gives them) that `tune`
    searches in another form: int8 conv2d built as one reduction block (qkernels'
    "blocks" form), name → that PrimFunc, from `blocks` (the module `fuse_with_blocks`
    fused with that form, or None). Same parameters, same results; only its schedule can
    differ."""
    if blocks is None:
        return {}
    names = {gv.name_hint for gv in blocks.functions}
    out = {}
    for name, func in kernels.items():
        if name not in names:
            continue
        other = blocks[name]
        if len(other.params) != len(func.params) or _same(other, func):
            continue
        out[name] = other
    return out


def _same(a, b) -> bool:
    from tvm_ffi import structural_equal

    return bool(structural_equal(a, b))


_PROTOTYPE_RE = re.compile(r"TVM_DLL void (\w+)\(([^)]*)\);")
# A definition: its signature line, the body, and the closing brace in the first column.
_DEFINITION_RE = re.compile(r"^TVM_DLL void (\w+)\([^)]*\) \{\n.*?^\}$", re.M | re.S)


def kernel_prototypes(c_source: str) -> dict[str, str]:
    """Symbol → parameter list text of each plain kernel TVM's C codegen declared."""
    return dict(_PROTOTYPE_RE.findall(c_source))


def kernel_definitions(c_source: str, prefix: str) -> dict[str, str]:
    """Kernel name → the text of its definition, for each `<prefix><name>` TVM's C codegen
    defined in `c_source`."""
    return {m.group(1)[len(prefix):]: m.group(0) for m in _DEFINITION_RE.finditer(c_source)
            if m.group(1).startswith(prefix)}


# What code that allocates workspace needs from the runtime (an archive's `abi.needs`).
WORKSPACE_SYMBOLS = ("TVMBackendAllocWorkspace", "TVMBackendFreeWorkspace",
                     "mtvg_workspace_failures")
_WORKSPACE_CALL = "TVMBackendAllocWorkspace("
_WORKSPACE_SIZE_RE = re.compile(
    r"TVMBackendAllocWorkspace\(\s*1\s*,\s*0\s*,\s*\(uint64_t\)(\d+)U?L*\s*,")


def workspace_requests(definition: str) -> list[int] | None:
    """The sizes of the TVMBackendAllocWorkspace calls in a kernel's C definition, in
    order; None when one of them is not a constant (static shapes make them constants)."""
    sizes = [int(n) for n in _WORKSPACE_SIZE_RE.findall(definition)]
    return sizes if len(sizes) == definition.count(_WORKSPACE_CALL) else None


def workspace_bytes(sizes: list[int]) -> int:
    """What the runtime's arena gives `sizes` at most: each block rounded up to
    MTVG_WORKSPACE_ALIGN (a kernel frees its blocks before it returns)."""
    align = abi.constant("MTVG_WORKSPACE_ALIGN")
    return sum(-(-n // align) * align for n in sizes)


def kernel_workspaces(definitions: dict[str, str]) -> dict[str, int]:
    """Kernel → arena bytes it allocates, for the kernels whose C allocates workspace."""
    out = {}
    for name, definition in definitions.items():
        sizes = workspace_requests(definition)
        if sizes is None:
            raise ExportError(f"kernel {name}: a workspace allocation of a size that is not "
                              "a constant; kernels need static shapes")
        if sizes:
            out[name] = workspace_bytes(sizes)
    return out


def kernel_scratch_bytes(c_source: str) -> int:
    """The kernels' scratch: the largest sum of local array sizes (stack) and
    TVMBackendAllocWorkspace requests over the kernels' C functions."""
    sizes = {"int8_t": 1, "uint8_t": 1, "int16_t": 2, "int32_t": 4, "uint32_t": 4,
             "int64_t": 8, "float": 4, "double": 8}
    largest = 0
    for body in re.split(r"\nTVM_DLL void ", c_source)[1:]:
        total = sum(sizes.get(t, 8) * int(n)
                    for t, n in re.findall(r"^\s+(\w+) \w+\[(\d+)\];", body, re.M))
        total += sum(workspace_requests(body) or [])
        largest = max(largest, total)
    return largest


def last_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


# ---- main → Program ----------------------------------------------------------------------

def _static_shape(sinfo, where: str) -> tuple[tuple[int, ...], str]:
    from tvm import relax

    if not isinstance(sinfo, relax.TensorType) or sinfo.shape is None:
        raise ExportError(f"{where}: not a tensor of known shape ({sinfo})")
    dims = []
    shape = sinfo.shape
    for d in getattr(shape, "values", shape):
        if not hasattr(d, "value"):
            raise ExportError(f"{where}: dynamic dimension '{d}'; give the input shapes "
                              "with --input-shape")
        dims.append(int(d.value))
    return tuple(dims), str(sinfo.dtype)


class _MainReader:
    """Walks the fused main function into a Program."""

    def __init__(self) -> None:
        self.tensors: list[Tensor] = []
        self.values: dict = {}  # relax.Var → tensor id or tuple of ids
        self.calls: list[KernelCall] = []

    def new(self, shape, dtype, kind, name="", data=None, base=None) -> int:
        t = Tensor(len(self.tensors), shape, dtype, kind, name, data, base)
        self.tensors.append(t)
        return t.id

    def value(self, expr):
        from tvm import relax
        from tvm.ir.expr import GenericConst

        if isinstance(expr, relax.Var):
            if expr not in self.values:
                raise ExportError(f"main uses '{expr.name}' before defining it")
            return self.values[expr]
        if isinstance(expr, GenericConst):
            shape, dtype = _static_shape(expr.ty, "constant")
            return self.new(shape, dtype, "constant", data=expr.value.numpy())
        if isinstance(expr, relax.Tuple):
            return tuple(self.value(f) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            tup = self.value(expr.tuple_value)
            return tup[expr.index]
        if isinstance(expr, relax.Call):
            return self.call(expr)
        raise ExportError(f"main: unsupported expression {type(expr).__name__} after lowering")

    def call(self, call):
        from tvm import relax

        op = call.op
        name = getattr(op, "name", None)
        if name == "relax.call_tir":
            kernel = call.args[0].name_hint
            args = self.value(call.args[1])
            args = list(args) if isinstance(args, tuple) else [args]
            sinfo = call.ty
            infos = list(sinfo.fields) if isinstance(sinfo, relax.TupleType) else [sinfo]
            outs = [self.new(*_static_shape(s, kernel), "activation") for s in infos]
            if len(call.args) > 2:
                raise ExportError(f"{kernel}: call_tir with symbolic shape arguments")
            self.calls.append(KernelCall(kernel, [*args, *outs], len(outs)))
            return tuple(outs) if isinstance(sinfo, relax.TupleType) else outs[0]
        if name in ("relax.reshape", "relax.memory.view"):
            src = self.value(call.args[0])
            shape, dtype = _static_shape(call.ty, name)
            return self.new(shape, dtype, self.tensors[src].kind, base=src)
        raise ExportError(f"main: operator '{name or op}' was not lowered to TIR "
                          "(TVM 0.27 has no legalization for it)")


def kernel_constants(fused) -> dict[str, dict[int, np.ndarray]]:
    """Each kernel's constant arguments at its first call in `fused` main (as `fuse` gives
    it): kernel → {argument position: values}. What a kernel is measured with in tuning
    (random weights are fine, random requantization shifts are not)."""
    program = read_program(fused)
    out: dict[str, dict[int, np.ndarray]] = {}
    for call in program.calls:
        if call.kernel in out:
            continue
        found = {}
        for position, tid in enumerate(call.args):
            tensor = program.tensors[tid]
            root = program.tensors[program.root(tid)]
            if root.kind == "constant" and root.data is not None:
                found[position] = np.asarray(root.data).reshape(tensor.shape)
        out[call.kernel] = found
    return out


def read_program(mod) -> Program:
    """The fused main function as a Program: its tensors and kernel calls."""
    from tvm import relax

    main = mod["main"]
    reader = _MainReader()
    inputs = []
    for p in main.params:
        shape, dtype = _static_shape(p.ty, f"input '{p.name}'")
        tid = reader.new(shape, dtype, "input", name=p.name)
        reader.values[p] = tid
        inputs.append(tid)
    body = main.body
    if not isinstance(body, relax.SeqExpr):
        raise ExportError("main is not a sequence of bindings after lowering")
    for block in body.blocks:
        for binding in block.bindings:
            if not isinstance(binding, relax.VarBinding):
                raise ExportError("main has a match_cast binding; shapes must be static")
            reader.values[binding.var] = reader.value(binding.value)
    result = reader.value(body.body)
    outputs = list(result) if isinstance(result, tuple) else [result]
    if any(isinstance(o, tuple) for o in outputs):
        raise ExportError("main returns nested tuples; only tensors or a tuple of tensors")
    names = ["output"] if len(outputs) == 1 else [f"output{i}" for i in range(len(outputs))]
    return Program(reader.tensors, inputs, outputs, names, reader.calls)


# ---- kernels → C --------------------------------------------------------------------------

def _pre_lowering():
    """TVM's own block lowering up to flat buffers (CompactBufferAllocation shrinks what
    `shrink_intermediates` moved under a loop to the region one iteration touches)."""
    import tvm
    from tvm import s_tir, tirx

    return tvm.transform.Sequential([
        s_tir.transform.CanonicalizeLoop(),
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerMatchBuffer(),
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.StmtSimplify(),
    ])


def _plain_c_signature(func, symbol: str):
    """The kernel with raw data pointers as parameters, compiled as a plain C function.

    A non-default calling convention keeps MakePackedAPI away from it; TVM's C codegen
    then writes `void symbol(float* a, ...)`.
    """
    from tvm import tirx

    pointers = [tirx.Var(p.name + "_ptr", p.data.ty) for p in func.params]
    decls = [tirx.DeclBuffer(p, data=q) for p, q in zip(func.params, pointers, strict=True)]
    body = tirx.SeqStmt([*decls, func.body])
    plain = tirx.PrimFunc(pointers, body, func.ret_type, func.attrs)
    return plain.with_attr("global_symbol", symbol).with_attr("calling_conv", 1)


def _register_pipeline() -> None:
    """`tvm.tirx.build`'s default pipeline, then device attributes on the plain kernels.

    MakePackedAPI, which the plain kernels skip, is what normally tells LowerTVMBuiltin the
    device of the function's workspace allocations; without it a kernel with an intermediate
    too large for the stack does not compile. The attributes say: CPU, device 0.
    """
    import tvm
    from tvm import tirx
    from tvm.tirx.compilation_pipeline import PIPELINE_MAP

    if PLAIN_C_PIPELINE in PIPELINE_MAP:
        return
    _register_c_intrinsics()

    @tirx.transform.prim_func_pass(opt_level=0, name="MtvgPlainDeviceAttrs")
    def device_attrs(func, _mod, _ctx):
        if func.attrs is None or int(func.attrs.get("calling_conv", 0)) != 1:
            return func
        where = tvm.ir.StringImm("default")
        body = tirx.AttrStmt(where, "device_type", tirx.const(1, "int32"), func.body)
        body = tirx.AttrStmt(where, "device_id", tirx.const(0, "int32"), body)
        return func.with_body(body)

    def factory():
        pipeline, host_passes, device_passes = tirx.get_tir_pipeline("default")
        return tvm.transform.Sequential([pipeline, device_attrs]), host_passes, device_passes

    tirx.register_tir_pipeline(PLAIN_C_PIPELINE, factory)


def _register_c_intrinsics() -> None:
    """C lowerings TVM 0.27's C target lacks: `fabs` (Softplus, Softsign) becomes C's fabsf
    or fabs, by dtype, instead of an unresolved call at code generation."""
    from tvm import tirx

    def fabs(op):
        dtype = str(op.ty)
        return tirx.call_pure_extern(dtype, "fabsf" if dtype == "float32" else "fabs",
                                     op.args[0])

    tirx.register_intrin_lowering("tirx.fabs", target="c", f=fabs, level=99)


def compile_plain_kernels(funcs: dict, prefix: str, shrink: bool = True,
                          keep_schedule: set[str] = frozenset()) -> tuple[str, str]:
    """TVM's C source of `funcs` (name → PrimFunc) as plain C functions `<prefix><name>`,
    and the TVMScript of the lowered kernels. Kernels in `keep_schedule` (or all, without
    `shrink`) are compiled as scheduled; the others get `shrink_intermediates` first."""
    import tvm

    kernels = {}
    for name, func in funcs.items():
        if shrink and name not in keep_schedule:
            try:
                func = shrink_intermediates(func)
            except Exception:  # a schedule TVM refuses halfway: keep the kernel as it is
                func = funcs[name]
        kernels[prefix + name] = func.with_attr("global_symbol", prefix + name)
    try:
        flat = _pre_lowering()(tvm.IRModule(kernels))
        plain = {gv.name_hint: _plain_c_signature(f, gv.name_hint)
                 for gv, f in flat.functions.items()}
        tir_text = tvm.IRModule(plain).script()
        if len(plain) == 1:
            # With a single function TVM's codegen adds an FFI entry wrapper that calls it
            # with packed arguments; a second, unused kernel keeps it away.
            plain[prefix + "_unused"] = _empty_kernel(prefix + "_unused")
        _register_pipeline()
        with _without_skipped_passes():
            lib = tvm.tirx.build(tvm.IRModule(plain), target="c", pipeline=PLAIN_C_PIPELINE)
    except Exception as exc:
        raise ExportError(f"TVM could not compile the kernels to C: {last_line(exc)}") from exc
    return lib.inspect_source(), tir_text


def _without_skipped_passes():
    """The current pass context, with SKIPPED_PASSES disabled too."""
    import tvm

    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(
        opt_level=current.opt_level, required_pass=list(current.required_pass),
        disabled_pass=[*current.disabled_pass, *SKIPPED_PASSES],
        instruments=list(current.instruments), config=dict(current.config))


def _empty_kernel(symbol: str):
    from tvm import tirx

    return tirx.PrimFunc([], tirx.Evaluate(0)).with_attr("global_symbol", symbol) \
        .with_attr("calling_conv", 1)
