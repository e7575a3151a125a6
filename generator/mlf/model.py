"""The typed result of reading an MLF archive."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from generator.mlf.dtypes import dtype_bits
from generator.mlf.graph import Graph


def c_identifier(name: str) -> str:
    """TVM's SanitizeName: every non-alphanumeric character becomes '_'."""
    return re.sub(r"[^0-9A-Za-z]", "_", name)


def external_pool_macro(module: str) -> str:
    """MLF v8 (our exporter): the macro that makes the run function's activation pool a
    pointer the caller sets (the library output's `<name>_run_with_workspace`), where it is
    otherwise a static array."""
    return f"TVMGEN_{module.upper()}_EXTERNAL_POOL"


def profile_macro(module: str) -> str:
    """MLF v8 (our exporter): the macro that makes the run function mark the timer before
    its first call and after each (`mtvg_profile_mark(point)`, point 0 .. calls); without
    it the marks compile to nothing."""
    return f"TVMGEN_{module.upper()}_PROFILE"


def profile_mark_macro(module: str) -> str:
    """The run function's mark, `TVMGEN_<MOD>_MARK(point)`: a call of PROFILE_MARK_FUNCTION
    with profile_macro(module) defined, nothing otherwise."""
    return f"TVMGEN_{module.upper()}_MARK"


# What the run function calls at each mark (the firmware defines it: `run --profile`).
PROFILE_MARK_FUNCTION = "mtvg_profile_mark"


@dataclass(frozen=True)
class TensorInfo:
    """One model input or output."""

    name: str  # as the model spells it: data, never written into C as is
    dtype: str
    size_bytes: int
    shape: tuple[int, ...] | None = None
    # Where the shape came from: "relay", "metadata", "flat" (only the size is known).
    shape_source: str = "flat"
    # Its C identifier (the interface header's struct member): MLF v8 metadata `c_name`
    # (checked by the reader), else TVM's rule applied to the name.
    c_name: str = ""

    def __post_init__(self) -> None:
        if not self.c_name:
            object.__setattr__(self, "c_name", c_identifier(self.name))

    @property
    def numel(self) -> int:
        return self.size_bytes * 8 // dtype_bits(self.dtype)

    def effective_shape(self) -> tuple[int, ...]:
        return self.shape if self.shape is not None else (self.numel,)


@dataclass(frozen=True)
class Pool:
    """A memory pool the generated code uses (USMP or a TVMBackendAllocWorkspace arena)."""

    name: str
    size_bytes: int
    kind: str  # "workspace" | "constant"
    internal: bool  # True: the generated code declares it; False: the application provides it


@dataclass(frozen=True)
class SourceFile:
    path: str  # path inside the archive
    language: str  # "c" | "c++"
    # The first word of its `// tvm target:` line: "c" for TVM's own code, else the BYOC
    # code generator that wrote it ("cmsis-nn", "ethos-u", ...).
    target: str = "c"
    includes: tuple[str, ...] = ()  # headers it includes with <...>
    uses_dsp: bool = False  # includes <arm_acle.h>: Cortex-M DSP intrinsics

    @property
    def is_partition(self) -> bool:
        return self.target != "c"


@dataclass(frozen=True)
class ObjectFile:
    path: str
    arch: str  # "arm", "aarch64", "x86_64", "riscv", ... or "unknown"


@dataclass(frozen=True)
class ParamTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    size_bytes: int
    offset: int = -1  # where its data starts in the params file


@dataclass(frozen=True)
class GraphSummary:
    """What the on-device graph executor will need for this archive's graph."""

    nodes: int
    operators: int
    storage_ids: int
    storage_bytes: int  # RAM carved for the storage ids (inputs, outputs, activations)
    params_in_place_bytes: int  # parameters read straight from flash
    params_copied_bytes: int  # parameters copied to RAM (misaligned in the params file)
    functions: list[str]  # operator functions the graph calls
    problems: list[str]  # why our executor cannot run it (empty: it can)
    # Storage ids whose size in metadata `sids` differs from the graph's (TVM ≤0.18 computed
    # `sids` by indexing shapes with storage ids; the graph is what the executor uses).
    sids_disagree: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class AcceleratorUse:
    """An accelerator an MLF v8 archive's code calls: the plugin's name, the options it
    was exported with, and how many operators (and multiply-accumulates) it took."""

    name: str
    options: dict[str, str | int | bool | None]
    operators: int
    macs: int
    scratch_bytes: int = 0
    abi: int = 1  # the driver interface it was exported for (Accelerator.abi)


@dataclass(frozen=True)
class PlanSummary:
    """The static memory plan an MLF v8 archive records for its activations."""

    pool_bytes: int
    lower_bound_bytes: int
    tensors: int
    memory_preset: str | None = None  # "fast" | "small" (export --memory), when recorded
    over_input_calls: int = 0  # calls whose output takes its input's bytes
    inputs_reused: bool = False  # the run writes over its input buffers (export --reuse-input)
    in_input_bytes: int = 0  # activation bytes it places there

    @property
    def ratio(self) -> float:
        return self.pool_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0


@dataclass(frozen=True)
class OperatorInfo:
    """One operator of an operator-style archive: a packed entry the host calls by name."""

    name: str  # registry name
    symbol: str  # the plain C kernel it calls
    args: tuple[TensorInfo, ...]  # one tensor per kernel parameter, in order
    outputs: int | None  # how many trailing arguments the kernel writes, when known


@dataclass
class ModuleInfo:
    """One module of the archive (TVM ≥0.9 archives may hold several)."""

    name: str
    executor: str  # "aot" | "graph" | "operator" (operator-style archives: no executor)
    interface: str  # "c" (tvmgen_<mod>.h present) | "packed"
    # How the firmware calls the model: "c" (tvmgen_<mod>_run with structs),
    # "c-run-model" (the archive lacks tvmgen_<mod>_run; we call tvmgen_<mod>_run_model),
    # "packed" (tvmgen_<mod>_run with TVMValue/DLTensor arguments), "graph" (graph executor),
    # "system-lib" (operator archives: each operator by name through TVMSystemLibEntryPoint).
    entry: str
    targets: list[str]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    workspace_size_bytes: int
    constants_size_bytes: int
    io_size_bytes: int
    pools: list[Pool] = field(default_factory=list)
    sources: list[SourceFile] = field(default_factory=list)
    objects: list[ObjectFile] = field(default_factory=list)
    params: list[ParamTensor] = field(default_factory=list)
    header: str | None = None  # archive path of codegen/host/include/tvmgen_<mod>.h
    graph_json: str | None = None  # archive path of the graph JSON (graph executor)
    params_file: str | None = None
    workspace_call_sites: int = 0  # static count of TVMBackendAllocWorkspace calls
    # Largest workspace of one operator (metadata operator_functions), if listed.
    operator_workspace_bytes: int | None = None
    # Functions of the archive's system library (TVMSystemLibEntryPoint), if it has one.
    registry: list[str] | None = None
    graph: GraphSummary | None = None
    # The parsed graph itself (graph executor), for the generator; not part of the JSON.
    graph_model: Graph | None = field(default=None, repr=False, compare=False)
    # Things the archive's code needs that our runtime does not provide.
    unsupported_calls: list[str] = field(default_factory=list)
    tvm_version: str | None = None
    # MLF v8: the tool that wrote the module (its `generator` entry), e.g. "microtvm-gen 0.1.0".
    written_by: str | None = None
    # MLF v8 (our exporter): the ABI of the generated code and its static memory plan.
    abi: str | None = None
    plan: PlanSummary | None = None
    accelerators: list[AcceleratorUse] = field(default_factory=list)
    # Operator-style archives: the operators, in registry order.
    operators: list[OperatorInfo] = field(default_factory=list)
    # What the reader decided on the archive's behalf (e.g. a wrong size macro overruled).
    notes: list[str] = field(default_factory=list)

    @property
    def mangled(self) -> str:
        return f"tvmgen_{self.name}"


@dataclass
class MlfArchive:
    """Everything the tool knows about an archive."""

    origin: str
    sha256: str
    version: int
    style: str  # "full-model" | "operator"
    export_datetime: str | None
    modules: list[ModuleInfo]
    member_names: list[str]

    def module(self, name: str | None = None) -> ModuleInfo:
        if name is None:
            return self.modules[0]
        for m in self.modules:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> dict:
        data = asdict(self)
        data.pop("member_names")
        for module in data["modules"]:
            module.pop("graph_model")
        data["file_count"] = len(self.member_names)
        return data
