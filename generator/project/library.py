"""The library output: a model as a static library for the user's own firmware.

`generate --format library` writes a folder with the model's C (the archive's kernels,
weights and run function), one public header `<name>.h` with `<name>_run()`, the runtime
sources the model needs (none for most exported models), a CMakeLists.txt exporting a
static library target, a `sources.txt` for IDE projects and a `<name>.mk` Makefile
fragment. No main, startup, UART or platform code: the user's firmware has those.

Every global symbol the library defines starts with the module name (`<name>_run`,
`tvmgen_<name>_*`); the runtime's (`mtvg_*`, `TVMBackend*`) are one shared copy per
firmware. Two models in one firmware are two libraries of archives exported with different
`--module` names. The library is rendered here, in process: it has no board of its own,
no build, flash or link, so no Project API server.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from generator import RUNTIME_ABI_VERSION, __version__
from generator.boards import load_board
from generator.errors import ProjectError, UnsupportedModelError
from generator.mlf.dtypes import dlpack_type_code, dtype_bits
from generator.mlf.model import ModuleInfo, TensorInfo, c_identifier, external_pool_macro
from generator.project.atomic_write import check_target_dir, write_atomically
from generator.project.checks import check_buildable
from generator.project.fit import check_fits
from generator.project.generate import (
    TVM_CODE_CFLAGS,
    load_module,
    plain_text,
    template_environment,
)
from generator.project.libraries import CMSIS_NN
from generator.project.record import record_bytes, tensor_json
from generator.project.sizing import (
    MIN_LIVE_BLOCKS,
    STANDALONE,
    WORKSPACE_ALIGN,
    arena_bytes_for,
)
from generator.project.tvm_headers import TvmHeaders, tvm_headers
from generator.resources import templates_dir

# The formats this module writes: the library, and the library as a Zephyr module (the
# same folder plus zephyr/module.yml, Kconfig and CMakeLists.txt).
FORMAT = "library"
ZEPHYR_MODULE = "zephyr-module"
REUSED_INPUT_ALIGN = 16  # the export's ALIGN: activations in an input buffer start there
FORMATS = (FORMAT, ZEPHYR_MODULE)
ZEPHYR_FILES = {"zephyr/module.yml": "zephyr/module.yml.j2", "zephyr/Kconfig": "zephyr/Kconfig.j2",
                "zephyr/CMakeLists.txt": "zephyr/CMakeLists.txt.j2"}
LIBRARY_FILE = "library.json"
LIBRARY_SCHEMA = 1
TEMPLATE = "library"
# The runtime a library may need: TVMBackendAllocWorkspace's arena and the error slot.
RUNTIME_SOURCES = ("workspace.c",)
RUNTIME_HEADERS = ("mtvg/runtime.h", "mtvg/status.h", "dlpack/dlpack.h",
                   "tvm/runtime/c_runtime_api.h", "tvm/runtime/c_backend_api.h")
# The symbol TVM 0.27's C codegen defines in every kernel file: renamed per module, so two
# libraries link together.
TVM_LIBRARY_CTX = "__tvm_ffi__library_ctx"
# Entries the library calls the model through (ModuleInfo.entry).
ENTRIES = ("c", "c-run-model", "packed")


@dataclass(frozen=True)
class LibraryTensor:
    """An input or output as the public header names it."""

    c_name: str
    comment: str  # the model's name made safe for a C comment
    type: str  # "int8[1, 49, 10, 1]"
    size_bytes: int
    align: int  # element size: the least alignment the kernels assume
    shape: tuple[int, ...]
    type_code: int
    bits: int


@dataclass
class GeneratedLibrary:
    path: Path
    name: str
    module: ModuleInfo
    files: list[str]
    static_bytes: int  # activations the model's code keeps in .bss whichever entry runs it
    workspace_bytes: int  # what <name>_run holds statically, <name>_run_with_workspace takes
    runtime_sources: list[str]


def generate_library(archive_path: Path, out_dir: Path, board_name: str | None = None,
                     force: bool = False, module_name: str | None = None,
                     fmt: str = FORMAT, share_workspace: bool = False) -> GeneratedLibrary:
    """Render the library of one AOT module of an archive (`fmt`: one of FORMATS);
    `board_name`, when given, is checked to be able to run it (the library itself is
    compiled by the user's toolchain). `share_workspace`: `<name>_run` works in the common
    symbol `mtvg_shared_workspace`, which every library generated so shares (the linker
    sizes it for the largest)."""
    if fmt not in FORMATS:
        raise ProjectError(f"unknown library format '{fmt}' (choose {' or '.join(FORMATS)})")
    archive, files, module = load_module(archive_path, module_name)
    origin = str(archive_path)
    _check_library_module(module, origin)
    if board_name is not None:
        board = load_board(board_name)
        check_buildable(module, board, origin)
        check_fits(module, board, STANDALONE, origin)
    check_target_dir(out_dir, force)

    rendered = _render(archive_path, archive.sha256 or "directory", files.data, module, fmt,
                       share_workspace)
    write_atomically(out_dir, rendered)
    memory = _memory(module, _pool_hook(module, files.data) is not None)
    return GeneratedLibrary(out_dir, module.name, module, sorted(rendered),
                            memory.fixed_bytes, memory.workspace_bytes,
                            _runtime_sources(module))


def _check_library_module(module: ModuleInfo, origin: str) -> None:
    """Refuse, in one line, a module the library output cannot carry."""
    if module.executor == "operator":
        raise UnsupportedModelError(
            f"{origin}: operator-style archives hold kernels for host-driven timing, not a "
            "model to call; export the model without --style operator for a library")
    if module.executor == "graph" or module.entry not in ENTRIES:
        raise UnsupportedModelError(
            f"{origin}: the library output needs an AOT module with a run function; module "
            f"'{module.name}' runs under the graph executor (generate a project for it, or "
            "export the model again with microtvm-gen export)")
    if module.accelerators:
        names = ", ".join(a.name for a in module.accelerators)
        raise UnsupportedModelError(
            f"{origin}: the model calls accelerator drivers ({names}); the library output "
            "does not carry drivers yet (generate a project, or export without them)")
    if module.objects or any(s.is_partition or s.target == CMSIS_NN for s in module.sources):
        raise UnsupportedModelError(
            f"{origin}: the library output takes C sources only, without BYOC partitions; "
            "this archive has compiled objects or CMSIS-NN partitions (generate a project)")
    if module.unsupported_calls:
        raise UnsupportedModelError(
            f"{origin}: the model's code calls {', '.join(module.unsupported_calls)}, which "
            "needs a full TVM runtime on the device; not supported")


def _uses_runtime(module: ModuleInfo) -> bool:
    """Code TVM ≤0.18 wrote calls the runtime's error setter and workspace allocator; ours
    only when a kernel allocates workspace."""
    return module.abi is None or module.workspace_call_sites > 0


def _runtime_sources(module: ModuleInfo) -> list[str]:
    return [f"runtime/src/{n}" for n in RUNTIME_SOURCES] if _uses_runtime(module) else []


@dataclass(frozen=True)
class LibraryMemory:
    """Where a library's activations live."""

    fixed_bytes: int  # static in the library whichever function runs it
    pool_bytes: int  # the run function's activation pool, when it can be the caller's
    arena_bytes: int  # the runtime's workspace arena (TVMBackendAllocWorkspace)

    @property
    def pool_part(self) -> int:
        """Where the arena starts in a workspace: after the pool, aligned."""
        return -(-self.pool_bytes // WORKSPACE_ALIGN) * WORKSPACE_ALIGN

    @property
    def workspace_bytes(self) -> int:
        """What `<name>_run` holds statically and `<name>_run_with_workspace` takes."""
        return self.pool_part + self.arena_bytes


def _pool_hook(module: ModuleInfo, data: dict[str, bytes]) -> str | None:
    """The run source (MLF v8) whose activation pool the caller may supply: it has the
    `#ifdef TVMGEN_<MOD>_EXTERNAL_POOL` our exporter writes (archives exported before it
    keep a static pool)."""
    if module.plan is None or module.plan.pool_bytes == 0:
        return None
    marker = f"#ifdef {external_pool_macro(module.name)}\n".encode()
    return next((s.path for s in module.sources if marker in data[s.path]), None)


def _memory(module: ModuleInfo, hooked: bool) -> LibraryMemory:
    """The archive's static plan (MLF v8) or TVM's internal pools stay in the library, and
    the USMP pools the wrapper declares; a hooked pool and the arena are the workspace."""
    planned = module.plan.pool_bytes if module.plan is not None else 0
    fixed = sum(p.size_bytes for p in module.pools
                if p.kind == "workspace" and (module.plan is None or not p.internal))
    return LibraryMemory(fixed + (0 if hooked else planned), planned if hooked else 0,
                         arena_bytes_for(module))


def _tensor(t: TensorInfo) -> LibraryTensor:
    shape = tuple(t.effective_shape())
    bits = dtype_bits(t.dtype)
    return LibraryTensor(t.c_name, plain_text(t.name),
                         f"{t.dtype}[{', '.join(str(d) for d in shape)}]", t.size_bytes,
                         max(1, bits // 8), shape, dlpack_type_code(t.dtype), bits)


def _render(archive_path: Path, sha256: str, data: dict[str, bytes],
            module: ModuleInfo, fmt: str, share_workspace: bool = False) -> dict[str, bytes]:
    name = module.name
    reused = module.plan is not None and module.plan.inputs_reused
    hook = _pool_hook(module, data)
    memory = _memory(module, hook is not None)
    out: dict[str, bytes] = {}
    for s in module.sources:
        text = data[s.path]
        if module.abi is not None and s.path.endswith("_lib0.c"):
            # TVM 0.27's kernels define one symbol without the module's prefix.
            text = (f"#define {TVM_LIBRARY_CTX} tvmgen_{name}_library_ctx\n").encode() + text
        if s.path == hook:  # the activation pool is the wrapper's pointer
            text = f"#define {external_pool_macro(name)} 1\n".encode() + text
        out[f"model/src/{s.path.rsplit('/', 1)[-1]}"] = text
    model_sources = sorted(out)
    if module.header:
        out[f"model/include/{module.header.rsplit('/', 1)[-1]}"] = data[module.header]
    out["model/metadata.json"] = data["metadata.json"]  # the layers, for `report`
    kernels = [n for n in model_sources if module.abi is not None and n.endswith("_lib0.c")]
    headers = tvm_headers(out, kernels, ["model/include"]) if kernels else None
    if headers is not None:
        out.update(headers.files)
    runtime_sources = _runtime_sources(module)
    include_dirs = ["model/include", *(headers.include_dirs if headers else [])]
    if runtime_sources or module.entry == "packed" or module.abi is None:
        common = templates_dir() / "common"
        for rel in RUNTIME_HEADERS:
            out[f"runtime/include/{rel}"] = (common / "include" / rel).read_bytes()
        for src in runtime_sources:
            out[src] = (common / "src" / src.rsplit("/", 1)[-1]).read_bytes()
        include_dirs.append("runtime/include")  # after TVM's: the kernels see TVM's headers
    context = {
        "generator_version": __version__,
        "abi_version": RUNTIME_ABI_VERSION,
        "archive_name": plain_text(archive_path.name),
        "archive_sha256": sha256,
        "module": module,
        "name": name,
        "upper": name.upper(),
        "guard": f"MTVG_LIBRARY_{name.upper()}_H_",
        # inputs the model writes over (export --reuse-input) hold pool-aligned activations
        "inputs_reused": reused,
        "inputs": [replace(_tensor(t), align=REUSED_INPUT_ALIGN) if reused else _tensor(t)
                   for t in module.inputs],
        "outputs": [_tensor(t) for t in module.outputs],
        "external_pools": [{"c_name": c_identifier(p.name), "size_bytes": p.size_bytes}
                           for p in module.pools if not p.internal],
        "static_bytes": memory.fixed_bytes,
        "workspace_bytes": memory.workspace_bytes,
        "pool_symbol": f"tvmgen_{name}_workspace_pool" if hook else None,
        "pool_part": memory.pool_part,
        "arena_bytes": memory.arena_bytes,
        "share_workspace": share_workspace,
        "uses_runtime": bool(runtime_sources),
        "runtime_sources": runtime_sources,
        "max_live_blocks": max(MIN_LIVE_BLOCKS, module.workspace_call_sites),
        "sources": [f"src/{name}.c", *model_sources],
        "model_sources": model_sources,
        "private_include_dirs": include_dirs,
        "defines": ({"MTVG_WORKSPACE_MAX_LIVE": max(MIN_LIVE_BLOCKS, module.workspace_call_sites)}
                    if runtime_sources else {}),
        "model_cflags": list(TVM_CODE_CFLAGS),
    }
    env = template_environment((str(templates_dir() / TEMPLATE),))
    renders = {f"include/{name}.h": "library.h.j2", f"src/{name}.c": "library.c.j2",
               "CMakeLists.txt": "CMakeLists.txt.j2", "sources.txt": "sources.txt.j2",
               f"{name}.mk": "library.mk.j2", "README.md": "README.md.j2",
               **(ZEPHYR_FILES if fmt == ZEPHYR_MODULE else {})}
    for path, template in renders.items():
        out[path] = env.get_template(template).render(context).encode()
    out[LIBRARY_FILE] = record_bytes(_record(archive_path, sha256, module, context, headers,
                                             fmt))
    return out


def _record(archive_path: Path, sha256: str, module: ModuleInfo, context: dict,
            headers: TvmHeaders | None, fmt: str) -> dict:
    """library.json: what the library was made from and what it holds."""
    record = {
        "schema": LIBRARY_SCHEMA,
        "format": fmt,
        "generator_version": __version__,
        "runtime_abi": RUNTIME_ABI_VERSION,
        "archive": {"name": archive_path.name, "sha256": sha256},
        "module": {"name": module.name, "entry": module.entry,
                   "inputs": [tensor_json(t) for t in module.inputs],
                   "outputs": [tensor_json(t) for t in module.outputs]},
        "static_bytes": context["static_bytes"],
        "workspace_bytes": context["workspace_bytes"],
        "shared_workspace": context["share_workspace"] and context["workspace_bytes"] > 0,
        "sources": context["sources"],
        "runtime_sources": context["runtime_sources"],
        "include_dirs": ["include", *context["private_include_dirs"]],
    }
    if headers is not None:
        record["tvm_headers"] = headers.record()
    return record

