"""Operator-style export: TIR kernels → an MLF v8 archive of separately callable operators.

This is the input of host-driven timing and tuning: each operator is a kernel the host calls
by name, with tensors it sends, instead of a model run. Every operator is lowered the way
`lower.py` lowers a model's kernels and compiled by TVM's C codegen to a plain C function
`tvmgen_<mod>_<name>` (`<mod>_lib0.c`, TVM's output unchanged). `<mod>_lib1.c`, written
here, gives each one a legacy packed entry named `<name>` that checks its DLTensor arguments
against the operator's static buffers, plus the system-library registry that lists them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from generator import __version__
from generator.cdata import c_string_literal
from generator.errors import ExportError
from generator.export.api import TARGET, with_c_input_names
from generator.export.compile_jobs import compile_kernels
from generator.export.lower import (
    SYMBOL_PREFIX,
    WORKSPACE_SYMBOLS,
    fuse,
    kernel_prototypes,
    last_line,
    workspace_bytes,
    workspace_requests,
)
from generator.export.mlf_writer import (
    MLF_VERSION,
    OPERATOR_ABI_NAME,
    metadata_json,
    module_metadata,
    write_archive,
)
from generator.mlf.dtypes import ShapedTensor

STYLE = "operator"
ENTRY_SIGNATURE = ("int f(TVMValue* args, int* type_codes, int num_args, "
                   "TVMValue* out_ret_value, int* out_ret_tcode, void* resource_handle)")
_MAX_OPERATORS = 0xFFFF  # the registry's count is a u16

# dtype → (DLDataTypeCode name, bits, the C element type TVM 0.27's C codegen writes).
# float16 is missing on purpose: TVM writes it as `half`, which C99 does not have.
_DTYPES: dict[str, tuple[str, int, str]] = {
    "bool": ("kDLBool", 8, "bool"),
    "int8": ("kDLInt", 8, "int8_t"),
    "int16": ("kDLInt", 16, "int16_t"),
    "int32": ("kDLInt", 32, "int32_t"),
    "int64": ("kDLInt", 64, "int64_t"),
    "uint8": ("kDLUInt", 8, "uint8_t"),
    "uint16": ("kDLUInt", 16, "uint16_t"),
    "uint32": ("kDLUInt", 32, "uint32_t"),
    "uint64": ("kDLUInt", 64, "uint64_t"),
    "float32": ("kDLFloat", 32, "float"),
    "float64": ("kDLFloat", 64, "double"),
    "bfloat16": ("kDLBfloat", 16, "uint16_t"),
}

# Names an operator cannot have: its packed entry is a global C function of that name, linked
# with the C library, the runtime and TVM's kernels.
_C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic
_Generic _Noreturn _Static_assert _Thread_local bool true false asm typeof main
""".split())
_LIBM = """
acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp ilogb
ldexp log log10 log1p log2 logb modf scalbn scalbln cbrt fabs hypot pow sqrt erf erfc lgamma
tgamma ceil floor nearbyint rint lrint llrint round lround llround trunc fmod remainder remquo
copysign nan nextafter nexttoward fdim fmax fmin fma
""".split()
_LIBC = frozenset("""
abs labs llabs div ldiv lldiv atoi atol atoll atof strtol strtoll strtoul strtoull strtod
strtof strtold rand srand malloc calloc realloc free abort exit atexit getenv system bsearch
qsort memcpy memmove memset memcmp memchr strcpy strncpy strcat strncat strcmp strncmp strlen
strchr strrchr strstr strtok strerror printf fprintf sprintf snprintf vprintf puts putchar
getchar fputs fputc fgets fopen fclose fread fwrite fflush assert errno time clock signal
raise setjmp longjmp isnan isinf isfinite stdin stdout stderr environ
""".split()) | frozenset(f + s for f in _LIBM for s in ("", "f", "l"))
_RESERVED_PREFIXES = ("tvm", "TVM", "mtvg", "kTVM", "kDL", "DL", "_")


# One tensor parameter of an operator: a static, compact buffer.
OperatorArg = ShapedTensor


@dataclass
class Operator:
    name: str  # the packed entry and registry name
    symbol: str  # the plain C kernel, tvmgen_<mod>_<name>
    args: list[OperatorArg]
    outputs: int | None  # trailing arguments the kernel writes, when known
    c_types: list[str] = field(default_factory=list)  # element type of each kernel parameter
    workspace_bytes: int = 0  # TVMBackendAllocWorkspace bytes, one alignment pad per block
    workspace_calls: int = 0


@dataclass
class OperatorExportResult:
    path: Path
    module: str
    operators: list[Operator]
    seconds: float
    notes: list[str] = field(default_factory=list)


# ---- entry points --------------------------------------------------------------------------

def export_operators(funcs, dest: Path, module: str = "default", *,
                     shrink: bool = True, jobs: int = 1) -> OperatorExportResult:
    """Write TIR kernels as an operator-style MLF v8 archive.

    `funcs` is an IRModule (its PrimFuncs, by name), a dict name → PrimFunc or name → list
    of TE tensors, a list of TE tensors (one operator, named after the last tensor's op), or
    one PrimFunc (named by its global_symbol). With `shrink` the kernels get the same
    memory-saving schedule as a model's kernels; pass False to keep a tuned schedule as is.
    `jobs` processes share the compiling (compile_jobs.py).
    """
    start = time.monotonic()
    _check_module_name(module)
    named, notes = _named_prim_funcs(funcs)
    for name in named:
        problem = operator_name_problem(name)
        if problem:
            raise ExportError(f"operator '{name}': {problem}")
    return _export(named, {}, Path(dest), module, "TIR PrimFuncs", shrink, notes, start,
                   jobs)


def export_model_operators(model_path: Path, dest: Path,
                           shapes: dict[str, tuple[int, ...]] | None = None,
                           module: str = "default") -> OperatorExportResult:
    """Import a model and write every fused kernel its main function calls as an operator.

    The kernels are the ones a full-model export of the same file runs, lowered the same way,
    so timing them over the packed entries times the model's own code.
    """

    from generator.export import frontend

    start = time.monotonic()
    _check_module_name(module)
    model_path = Path(model_path)
    mod, _ = frontend.import_model(model_path, shapes or {})
    mod = with_c_input_names(mod)  # kernel parameters are named after main's parameters
    fused, _, _ = fuse(mod)  # the same integer kernels as a full-model export
    calls, notes = _kernel_calls(fused)
    if not calls:
        raise ExportError(f"{model_path}: the model's main function calls no TIR kernels")
    named: dict = {}
    outputs: dict[str, int] = {}
    for kernel, n_out in calls:
        name = _safe_name(kernel, set(named))
        if name != kernel:
            notes.append(f"kernel '{kernel}' is exported as '{name}' ('{kernel}' is reserved)")
        named[name] = fused[kernel]
        outputs[name] = n_out
    return _export(named, outputs, Path(dest), module, model_path.name, True, notes, start)


def _check_module_name(module: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", module):
        raise ExportError(f"module name '{module}' is not a C identifier")


def operator_name_problem(name: str) -> str | None:
    """Why `name` cannot be an operator's packed entry, or None if it can."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        return "the name must be a C identifier starting with a letter"
    if name in _C_KEYWORDS or name in _LIBC:
        return "the name is a C keyword or a C library function"
    if name.startswith(_RESERVED_PREFIXES) or name.endswith("_t"):
        return ("names starting with tvm, TVM, mtvg, kTVM, kDL, DL or '_', or ending in '_t', "
                "are reserved for the runtime")
    return None


# ---- inputs → named PrimFuncs --------------------------------------------------------------

def _named_prim_funcs(funcs) -> tuple[dict, list[str]]:
    import tvm
    from tvm import te, tirx

    notes: list[str] = []
    named: dict = {}
    if isinstance(funcs, tvm.IRModule):
        for gv, func in sorted(funcs.functions.items(), key=lambda item: item[0].name_hint):
            if isinstance(func, tirx.PrimFunc):
                named[gv.name_hint] = func
            else:
                notes.append(f"'{gv.name_hint}' is not a TIR PrimFunc; not exported")
    elif isinstance(funcs, dict):
        for name, value in funcs.items():
            if not isinstance(name, str):
                raise ExportError(f"operator names must be strings, not {type(name).__name__}")
            named[name] = value if isinstance(value, tirx.PrimFunc) else _te_func(name, value)
    elif isinstance(funcs, tirx.PrimFunc):
        symbol = funcs.attrs.get("global_symbol") if funcs.attrs is not None else None
        if symbol is None:
            raise ExportError("a PrimFunc without a global_symbol has no name; pass "
                              "{name: func} instead")
        named[str(symbol)] = funcs
    elif isinstance(funcs, list | tuple) and funcs and all(isinstance(t, te.Tensor)
                                                            for t in funcs):
        name = funcs[-1].op.name
        named[name] = _te_func(name, funcs)
    else:
        raise ExportError("export_operators takes an IRModule, a PrimFunc, a dict of PrimFuncs "
                          "or TE tensor lists, or a list of TE tensors; got "
                          f"{type(funcs).__name__}")
    if not named:
        raise ExportError("there is no TIR PrimFunc to export")
    if len(named) > _MAX_OPERATORS:
        raise ExportError(f"{len(named)} operators; one archive holds at most {_MAX_OPERATORS}")
    return named, notes


def _te_func(name: str, tensors):
    from tvm import te

    if not isinstance(tensors, list | tuple) or not all(isinstance(t, te.Tensor)
                                                         for t in tensors):
        raise ExportError(f"operator '{name}': expected a PrimFunc or a list of TE tensors")
    try:
        return te.create_prim_func(list(tensors))
    except Exception as exc:
        raise ExportError(f"operator '{name}': TVM cannot make a PrimFunc of these tensors: "
                          f"{last_line(exc)}") from exc


def _kernel_calls(fused) -> tuple[list[tuple[str, int]], list[str]]:
    """(kernel, output count) of each call_tir in main, in order of first use."""
    from tvm import relax

    if "main" not in [gv.name_hint for gv in fused.functions]:
        raise ExportError("the Relax module has no 'main' function")
    seen: dict[str, int] = {}
    other: set[str] = set()

    def visit(expr) -> None:
        if not isinstance(expr, relax.Call):
            return
        name = getattr(expr.op, "name", None)
        if name == "relax.call_tir":
            kernel = expr.args[0].name_hint
            ty = expr.ty
            seen.setdefault(kernel, len(ty.fields) if isinstance(ty, relax.TupleType) else 1)
        elif name not in (None, "relax.reshape", "relax.memory.view"):
            other.add(str(name))

    relax.analysis.post_order_visit(fused["main"].body, visit)
    notes = [f"main also calls '{op}', which is not a TIR kernel; not exported"
             for op in sorted(other)]
    return list(seen.items()), notes


def _safe_name(kernel: str, taken: set[str]) -> str:
    base = kernel if re.fullmatch(r"\w+", kernel) else re.sub(r"\W", "_", kernel)
    name = base
    if operator_name_problem(name):
        name = "op_" + base.lstrip("_")
    n = 1
    candidate = name
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


# ---- signatures ----------------------------------------------------------------------------

def _signature(name: str, func, symbol: str, outputs: int | None) -> Operator:
    from tvm import tirx

    args = []
    for p in func.params:
        if not isinstance(p.ty, tirx.BufferType):
            raise ExportError(f"operator '{name}': parameter '{p.name}' is a scalar "
                              f"({p.ty}); only tensor parameters can be called through "
                              "the packed entry")
        args.append(_buffer_arg(name, p))
    if not args:
        raise ExportError(f"operator '{name}' has no parameters; there is nothing to call it "
                          "with")
    if outputs is None:
        outputs = _trailing_outputs(func)
    return Operator(name, symbol, args, outputs)


def _buffer_arg(op: str, buf) -> OperatorArg:
    where = f"operator '{op}', buffer '{buf.name}'"
    dtype = str(buf.dtype)
    if dtype not in _DTYPES:
        raise ExportError(f"{where}: dtype {dtype} is not supported (supported: "
                          f"{', '.join(_DTYPES)})")
    shape = []
    for d in buf.shape:
        if not hasattr(d, "value"):
            raise ExportError(f"{where}: dynamic dimension '{d}'; operators need static shapes")
        shape.append(int(d.value))
    if any(d < 0 for d in shape):
        raise ExportError(f"{where}: negative dimension in {shape}")
    if not (hasattr(buf.elem_offset, "value") and int(buf.elem_offset.value) == 0):
        raise ExportError(f"{where}: has an element offset; only compact buffers are supported")
    if len(buf.strides):
        strides = [int(s.value) if hasattr(s, "value") else None for s in buf.strides]
        if strides != _compact_strides(shape):
            raise ExportError(f"{where}: strides {buf.strides} are not compact row-major")
    return OperatorArg(str(buf.name), tuple(shape), dtype)


def _compact_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def _trailing_outputs(func) -> int | None:
    """How many trailing parameters the kernel writes, from its blocks; None if unclear."""
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(func)
        params = list(sch.mod["main"].params)
        stored = []
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            for region in sch.get(block).writes:
                stored.append(region.source if hasattr(region, "source") else region.buffer)
    except Exception:  # no blocks (TIR written with plain loops): not known
        return None
    written = [any(p.same_as(b) for b in stored) for p in params]
    count = 0
    while count < len(written) and written[len(written) - 1 - count]:
        count += 1
    if count == 0 or any(written[:len(written) - count]):
        return None
    return count


# ---- lowering and compiling ----------------------------------------------------------------

def _compile(funcs: dict, prefix: str, shrink: bool, jobs: int = 1) -> tuple[str, str]:
    """TVM's C source of the plain kernels, and the TVMScript of the lowered kernels."""
    try:
        return compile_kernels(funcs, prefix, shrink, jobs)
    except ExportError as exc:
        raise ExportError(str(exc).replace("kernels", "operators", 1)) from exc


_PARAM_RE = re.compile(r"\s*(\w+)\s*\*\s*\w+\s*")


def _attach_c(ops: list[Operator], c_source: str) -> None:
    """Each operator's parameter types and workspace, from TVM's C source."""
    prototypes = kernel_prototypes(c_source)
    for op in ops:
        params = prototypes.get(op.symbol)
        if params is None:
            raise ExportError(f"TVM's C codegen did not emit the kernel {op.symbol}")
        types = []
        for text in [p for p in params.split(",") if p.strip()]:
            m = _PARAM_RE.fullmatch(text)
            if m is None:
                raise ExportError(f"{op.symbol}: unexpected parameter '{text.strip()}' in "
                                  "TVM's C output")
            types.append(m.group(1))
        want = [_DTYPES[a.dtype][2] for a in op.args]
        if types != want:
            raise ExportError(f"{op.symbol}: TVM's C parameters ({', '.join(types)}) do not "
                              f"match the buffers ({', '.join(want)})")
        op.c_types = types
        sizes = workspace_requests(_function_body(c_source, op.symbol))
        if sizes is None:
            raise ExportError(f"{op.symbol}: a workspace allocation of a size that is not a "
                              "constant; operators need static shapes")
        op.workspace_calls = len(sizes)
        op.workspace_bytes = workspace_bytes(sizes)


def _function_body(c_source: str, symbol: str) -> str:
    m = re.search(rf"TVM_DLL void {symbol}\([^)]*\)\s*\{{", c_source)
    if m is None:
        raise ExportError(f"TVM's C codegen did not define the kernel {symbol}")
    end = c_source.find("\n}\n", m.end())
    return c_source[m.end():end if end >= 0 else len(c_source)]


# ---- lib1.c: packed entries and the system library -----------------------------------------

def packed_source(module: str, ops: list[Operator]) -> str:
    """The C99 file with each operator's packed entry, the registry, TVMSystemLibEntryPoint."""
    uses_workspace = any(op.workspace_calls for op in ops)
    lines = [
        "/*",
        f" * Operators of module '{module}': packed entries and the system library.",
        f" * Generated by microtvm-gen {__version__}. Do not edit.",
        " *",
        " * Each entry takes one DLTensor per kernel parameter, checks it against the kernel's",
        " * static buffer (type code, CPU, ndim, shape, dtype, compact), then calls the plain",
        f" * C kernel in {module}_lib0.c. Given an mtvg_op_binding_t as its resource_handle",
        " * (mtvg/operator.h: the time evaluator's), it also binds the kernel to the checked",
        " * arguments. Compile with the runtime's headers.",
        " */",
    ]
    if any(a.dtype == "bool" for op in ops for a in op.args):
        lines.append("#include <stdbool.h>")
    lines += ["#include <stddef.h>", "#include <stdint.h>", ""]
    lines.append('#include "mtvg/operator.h"')
    if uses_workspace:
        lines.append('#include "mtvg/runtime.h"')
    lines += ['#include "tvm/runtime/c_runtime_api.h"', '#include "tvm/runtime/crt/module.h"',
              "", f"/* The kernels ({module}_lib0.c). */"]
    for op in ops:
        params = ", ".join(f"{t}* arg{i}" for i, t in enumerate(op.c_types)) or "void"
        lines.append(f"void {op.symbol}({params});")
    lines += ["", "/* The packed entries. */"]
    for op in ops:
        lines.append(f"TVM_DLL int {op.name}(TVMValue* args, int* type_codes, int num_args, "
                     "TVMValue* out_ret_value,")
        lines.append(" " * (len(op.name) + 13) + "int* out_ret_tcode, void* resource_handle);")
    lines += ["", _HELPERS]
    for index, op in enumerate(ops):
        lines += _entry(index, op)
    names = (len(ops).to_bytes(2, "little")
             + b"".join(op.name.encode() + b"\0" for op in ops))
    lines += [
        "/* The system library: a u16 count, each name and its NUL, one more NUL (the literal's",
        " * own); funcs[i] is the i-th name's entry. */",
        f"static const TVMBackendPackedCFunc mtvg_op_funcs[{len(ops)}] = {{",
        *[f"  {op.name}," for op in ops],
        "};",
        "static const TVMFuncRegistry mtvg_op_registry = {",
        c_string_literal(names, indent="  ") + ",",
        "  mtvg_op_funcs,",
        "};",
        "static const TVMModule mtvg_op_system_lib = {&mtvg_op_registry};",
        "",
        "const TVMModule* TVMSystemLibEntryPoint(void) { return &mtvg_op_system_lib; }",
        "",
    ]
    return "\n".join(lines)


_HELPERS = r"""/* Records "<what>: <why>" as the last error; returns -1. */
static int mtvg_op_fail(const char* what, const char* why) {
  static char text[128];
  size_t n = 0;
  while (*what != '\0' && n < sizeof(text) - 1) {
    text[n++] = *what++;
  }
  if (n < sizeof(text) - 2) {
    text[n++] = ':';
    text[n++] = ' ';
  }
  while (*why != '\0' && n < sizeof(text) - 1) {
    text[n++] = *why++;
  }
  text[n] = '\0';
  TVMAPISetLastError(text);
  return -1;
}

/* 0 when argument i is a compact CPU DLTensor of this shape and dtype; else -1, with the
 * reason as the last error. Bool tensors may also come as TVM's older uint1/uint8. */
static int mtvg_op_check(const TVMValue* args, const int* type_codes, int i, int32_t ndim,
                         const int64_t* shape, uint8_t code, uint8_t bits, const char* what) {
  const DLTensor* t;
  int32_t d;
  int64_t step = 1;
  int64_t numel = 1;
  if (type_codes[i] != kTVMDLTensorHandle && type_codes[i] != kTVMNDArrayHandle) {
    return mtvg_op_fail(what, "is not a tensor (type code 7 or 13)");
  }
  t = (const DLTensor*)args[i].v_handle;
  if (t == NULL) {
    return mtvg_op_fail(what, "is a NULL tensor");
  }
  if (t->device.device_type != kDLCPU) {
    return mtvg_op_fail(what, "is not on the CPU");
  }
  if (t->ndim != ndim || (ndim > 0 && t->shape == NULL)) {
    return mtvg_op_fail(what, "has the wrong number of dimensions");
  }
  if (t->dtype.lanes != 1 ||
      !((t->dtype.code == code && t->dtype.bits == bits) ||
        (code == kDLBool && t->dtype.code == kDLUInt &&
         (t->dtype.bits == 1 || t->dtype.bits == 8)))) {
    return mtvg_op_fail(what, "has the wrong dtype");
  }
  for (d = 0; d < ndim; d++) {
    if (t->shape[d] != shape[d]) {
      return mtvg_op_fail(what, "has the wrong shape");
    }
    numel *= shape[d];
  }
  if (t->strides != NULL) {
    for (d = ndim - 1; d >= 0; d--) {
      if (shape[d] != 1 && t->strides[d] != step) {
        return mtvg_op_fail(what, "is not compact (strides)");
      }
      step *= shape[d];
    }
  }
  if (t->data == NULL && numel > 0) {
    return mtvg_op_fail(what, "has no data");
  }
  return 0;
}

/* The first element of argument i. */
static void* mtvg_op_data(const TVMValue* args, int i) {
  const DLTensor* t = (const DLTensor*)args[i].v_handle;
  return (char*)t->data + t->byte_offset;
}

/* Fills a caller's binding (mtvg/operator.h) with the checked arguments and the kernel. */
static void mtvg_op_bind(void* handle, const TVMValue* args, int n,
                         void (*run)(void* const* data)) {
  mtvg_op_binding_t* b = (mtvg_op_binding_t*)handle;
  int i;
  if (b == NULL || b->magic != MTVG_OP_BINDING_MAGIC || b->data == NULL ||
      (uint32_t)n > b->capacity) {
    return;
  }
  for (i = 0; i < n; i++) {
    b->data[i] = mtvg_op_data(args, i);
  }
  b->run = run;
}
"""


def _entry(index: int, op: Operator) -> list[str]:
    lines = []
    for j, a in enumerate(op.args):
        if a.shape:
            dims = ", ".join(str(d) for d in a.shape)
            lines.append(f"static const int64_t mtvg_op{index}_shape{j}[{len(a.shape)}] = "
                         f"{{{dims}}};")
    data_args = ",\n" + " " * (len(op.symbol) + 3)
    lines += [
        "/* The kernel on bound arguments (the time evaluator's timed calls). */",
        f"static void mtvg_op{index}_run(void* const* data) {{",
        *(["  (void)data;"] if not op.c_types else []),
        f"  {op.symbol}(" + data_args.join(
            f"({t}*)data[{j}]" for j, t in enumerate(op.c_types)) + ");",
        "}",
        "",
        f"TVM_DLL int {op.name}(TVMValue* args, int* type_codes, int num_args, "
        "TVMValue* out_ret_value,",
        " " * (len(op.name) + 13) + "int* out_ret_tcode, void* resource_handle) {",
    ]
    if op.workspace_calls:
        lines.append("  uint32_t failures;")
    lines += [
        "  (void)out_ret_value;",
        f"  if (num_args != {len(op.args)} || args == NULL || type_codes == NULL) {{",
        f"    return mtvg_op_fail({c_string_literal(op.name)}, "
        f"{c_string_literal(f'expects {len(op.args)} tensor arguments')});",
        "  }",
    ]
    checks = []
    for j, a in enumerate(op.args):
        code, bits, _ = _DTYPES[a.dtype]
        shape = f"mtvg_op{index}_shape{j}" if a.shape else "NULL"
        dims = ", ".join(str(d) for d in a.shape)
        what = c_string_literal(f"{op.name}: argument {j} ({a.name}, {a.dtype}[{dims}])")
        checks.append(f"mtvg_op_check(args, type_codes, {j}, {len(a.shape)}, {shape}, {code}, "
                      f"{bits},\n                    {what}) != 0")
    lines.append("  if (" + " ||\n      ".join(checks) + ") {")
    lines += ["    return -1;", "  }"]
    lines.append(f"  mtvg_op_bind(resource_handle, args, {len(op.args)}, mtvg_op{index}_run);")
    call_args = data_args.join(
        f"({t}*)mtvg_op_data(args, {j})" for j, t in enumerate(op.c_types))
    if op.workspace_calls:
        lines.append("  failures = mtvg_workspace_failures();")
    lines.append(f"  {op.symbol}({call_args});")
    if op.workspace_calls:
        lines += [
            "  if (mtvg_workspace_failures() != failures) {",
            "    return -1; /* the allocator said why */",
            "  }",
        ]
    lines += [
        "  if (out_ret_tcode != NULL) {",
        "    *out_ret_tcode = kTVMNullptr;",
        "  }",
        "  return 0;",
        "}",
        "",
    ]
    return lines


# ---- the archive ---------------------------------------------------------------------------

def _export(funcs: dict, outputs: dict[str, int], dest: Path, module: str, origin: str,
            shrink: bool, notes: list[str], start: float, jobs: int = 1) \
        -> OperatorExportResult:
    prefix = SYMBOL_PREFIX.format(mod=module)
    ops = [_signature(name, func, prefix + name, outputs.get(name))
           for name, func in funcs.items()]
    c_source, tir_text = _compile(funcs, prefix, shrink, jobs)
    _attach_c(ops, c_source)
    files = {
        "metadata.json": metadata_json(_metadata(module, ops, origin)),
        f"codegen/host/src/{module}_lib0.c": c_source.encode(),
        f"codegen/host/src/{module}_lib1.c": packed_source(module, ops).encode(),
        f"src/{module}.tir": tir_text.encode(),
    }
    write_archive(dest, files)
    return OperatorExportResult(dest, module, ops, time.monotonic() - start, notes)


def _metadata(module: str, ops: list[Operator], origin: str) -> dict:

    needs = ["TVMAPISetLastError"]
    if any(op.workspace_calls for op in ops):
        needs += WORKSPACE_SYMBOLS
    return {
        "version": MLF_VERSION,
        "modules": {
            module: {
                **module_metadata(module, STYLE, [], TARGET, origin),
                "abi": {
                    "name": OPERATOR_ABI_NAME,
                    "interface": "packed",
                    "registry": "TVMSystemLibEntryPoint",
                    "entry": ENTRY_SIGNATURE,
                    "arguments": "one DLTensor per kernel parameter (type code 7 or 13), on "
                                 "the CPU, compact, of the listed shape and dtype",
                    "kernels": "plain C functions: void tvmgen_<mod>_<name>(T0* arg0, ...), "
                               "no return value",
                    "needs": needs,
                },
                "operators": [
                    {"name": op.name, "symbol": op.symbol,
                     "args": [{"name": a.name, "shape": list(a.shape), "dtype": a.dtype,
                               "size": a.size_bytes} for a in op.args],
                     "outputs": op.outputs}
                    for op in ops
                ],
                "memory": {"functions": {
                    "main": [],
                    "operator_functions": [
                        {"function_name": op.symbol,
                         "workspace": [{"device": 1,
                                        "workspace_size_bytes": op.workspace_bytes}]}
                        for op in ops
                    ],
                }},
            },
        },
    }
