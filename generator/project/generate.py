"""Rendering a firmware project from an MLF archive, a board and the templates.

A project is derived only from its inputs (archive bytes, board file, templates, tool
version), so the same inputs give byte-identical projects. Everything is checked before
the first byte is written; a failure while writing leaves no half-made project behind.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from pathlib import Path

import jinja2

from generator import RUNTIME_ABI_VERSION, __version__
from generator.boards import Board
from generator.cdata import c_bytes_initializer, c_string_literal
from generator.errors import ProjectError
from generator.mlf.archive import ArchiveFiles
from generator.mlf.dtypes import dlpack_type_code, dtype_bits
from generator.mlf.model import MlfArchive, ModuleInfo, c_identifier
from generator.mlf.reader import load_mlf
from generator.project.accelerators import AcceleratorBuild, project_accelerators
from generator.project.atomic_write import check_target_dir, write_atomically
from generator.project.backend import (
    BASE_TEMPLATE,
    TemplateBackend,
    TemplateBoard,
    backend_spec,
)
from generator.project.backends import backend_named
from generator.project.checks import check_buildable
from generator.project.extra_files import read_extra_files
from generator.project.fit import check_fits
from generator.project.libraries import (
    CMSIS_NN,
    Libraries,
    cmsis_nn_files,
    needed_libraries,
)
from generator.project.placement import Placement, linker_files, parse_request
from generator.project.placement import place as place_memory
from generator.project.ports import port_files
from generator.project.profiling import profile_definitions, profile_points
from generator.project.record import MODEL_COPY, PROJECT_FILE, new_record, record_bytes
from generator.project.sizing import (
    HOST_DRIVEN,
    MIN_LIVE_BLOCKS,
    STANDALONE,
    arena_bytes_for,
    host_driven_payload,
    resolve_project_type,
    rpc_pool_bytes,
)
from generator.project.tvm_headers import TvmHeaders, include_roots, tvm_headers
from generator.resources import templates_dir

# The Project API server every project carries, and the copy of its archive.
PROJECT_API_FILES = ("microtvm_api_server.py", "launch_microtvm_api_server.sh")
# Runtime files only graph-executor projects compile.
GRAPH_RUNTIME_SOURCES = ("graph.c", "graph_params.c")
# Runtime files only host-driven projects compile.
RPC_RUNTIME_SOURCES = ("rpc_server.c", "session.c")


@dataclass(frozen=True)
class ExternalPool:
    name: str
    c_name: str
    size_bytes: int


@dataclass
class GeneratedProject:
    path: Path
    board: Board
    archive: MlfArchive
    module: ModuleInfo
    arena_bytes: int
    files: list[str]
    project_type: str = STANDALONE


# How code TVM wrote (kernels, old archives' sources) is compiled: as TVM's own builds did,
# quietly. Projects, the tests' ctypes runner and the benchmarks all use these flags.
TVM_CODE_CFLAGS = ("-std=gnu99", "-w", "-fno-strict-aliasing")


def tvm_include_dirs() -> list[str]:
    """Include directories of the installed tvm-ffi and apache-tvm packages.

    Kernels in MLF v8 archives are TVM 0.27's C codegen output, which includes TVM's own
    headers (`tvm/runtime/base.h`, `tvm/ffi/c_api.h`). Projects carry copies of the ones
    they need (generator/project/tvm_headers.py); the tests' ctypes runner and the
    benchmarks compile against these folders directly.
    """
    return [root.path.as_posix() for root in include_roots()]


def generate(archive_path: Path, board_name: str, out_dir: Path, force: bool = False,
             module_name: str | None = None,
             project_type: str | None = None,
             cmsis_nn: Path | None = None,
             extra_definitions: dict[str, str] | None = None,
             werror: bool = True,
             extra_files_tar: Path | None = None,
             template: Path | None = None,
             place: str | None = None,
             profile: bool = False) -> GeneratedProject:
    """Render a project. The Project API's options arrive as `extra_definitions` (checked
    NAME → VALUE), `werror` for our code, and a tar of extra files (plain names, never
    replacing a generated file). `template`: a template directory (default: templates/crt);
    its template.json names the back-end that knows its boards (generator/project/backend.py).
    `place`: which memory regions hold the model's activations, scratch, weights and code
    ('activations=DTCM,weights=DDR' or 'auto'; generator/project/placement.py).
    `profile`: the firmware records the timer at each call of the run function (run
    --profile; generator/project/profiling.py)."""
    template_dir = template if template is not None else templates_dir() / BASE_TEMPLATE
    spec = backend_spec(template_dir)
    backend = backend_named(spec)
    target = backend.template_board(template_dir, board_name)
    board = target.board
    archive, files, module = load_module(archive_path, module_name)
    kind = resolve_project_type(module, project_type)

    def others() -> list[tuple[str, Board]]:  # the template's boards a hint may name
        return [(name, backend.template_board(template_dir, name).board)
                for name in backend.board_names(template_dir) if name != board_name]

    check_buildable(module, board, str(archive_path), kind, others)
    check_fits(module, board, kind, str(archive_path), others)
    libraries = needed_libraries(module, str(archive_path), cmsis_nn)
    accelerators = project_accelerators(
        module, board, str(archive_path), None if backend.accelerator_drivers else backend.title,
        {"cmsis-nn": {"path": str(cmsis_nn)}} if cmsis_nn else None)
    placement = _placement(place, board, module, kind)
    points = profile_points(module, files, kind, str(archive_path)) if profile else None
    check_target_dir(out_dir, force)

    extra = read_extra_files(extra_files_tar) if extra_files_tar else {}
    rendered = _render_files(archive, files, module, board, archive_path, kind, libraries,
                             extra_definitions or {}, werror, template_dir, spec, backend,
                             target, accelerators, placement, points)
    rendered.update(_project_api_files(archive_path, template))
    clash = sorted(set(extra) & set(rendered))
    if clash:
        raise ProjectError(f"{extra_files_tar}: '{clash[0]}' would replace a generated file")
    rendered.update(extra)
    write_atomically(out_dir, rendered)
    return GeneratedProject(out_dir, board, archive, module, arena_bytes_for(module),
                            sorted(rendered), kind)


def _placement(place: str | None, board: Board, module: ModuleInfo,
               kind: str) -> Placement | None:
    request = parse_request(place)
    if request is None:
        return None
    if kind != STANDALONE or not board.linker_script:
        raise ProjectError("--place is for standalone projects on boards with a linker script "
                           "of ours")
    return place_memory(request, board, module,
                        sum(a.scratch_bytes for a in module.accelerators))


def load_module(archive_path: Path,
                module_name: str | None) -> tuple[MlfArchive, ArchiveFiles, ModuleInfo]:
    """The archive, its files and the module asked for (None: the first), or one line."""
    archive, files = load_mlf(archive_path)
    try:
        return archive, files, archive.module(module_name)
    except KeyError:
        names = ", ".join(m.name for m in archive.modules)
        raise ProjectError(f"{archive_path}: no module '{module_name}' (it has: {names})") from None


def _project_api_files(archive_path: Path, template: Path | None = None) -> dict[str, bytes]:
    """Every project carries the Project API server (and the archive it came from)."""
    crt = templates_dir() / "crt"
    files = {name: ((template if template and (template / name).is_file() else crt) / name)
             .read_bytes() for name in PROJECT_API_FILES}
    if archive_path.is_file():
        files[MODEL_COPY] = archive_path.read_bytes()
    return files


def _template_file(search: list[Path], name: str) -> Path:
    """The first of the template folders that holds `name`: the template's own copy, else
    the CRT template's."""
    return next((d / name for d in search if (d / name).is_file()), search[-1] / name)


@functools.lru_cache(maxsize=8)
def template_environment(search: tuple[str, ...]) -> jinja2.Environment:
    """The Jinja environment for a template search path, kept for the process: its compiled
    templates are reused (a template file edited since is compiled again, by its mtime)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(list(search)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["c_string"] = c_string_literal
    return env


def plain_text(text: str) -> str:
    """Text from outside (a file name) made safe for a comment in any generated language:
    every character but letters, digits and ' _.+-' becomes '?'."""
    return "".join(c if c.isascii() and (c.isalnum() or c in " _.+-") else "?" for c in text)


def _render_files(archive: MlfArchive, files: ArchiveFiles, module: ModuleInfo, board: Board,
                  archive_path: Path, project_type: str, libraries: Libraries | None,
                  extra_definitions: dict[str, str], werror: bool, template: Path,
                  spec: str, backend: TemplateBackend, target: TemplateBoard,
                  accelerators: list[AcceleratorBuild],
                  placement: Placement | None = None,
                  profile_points: int | None = None) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if placement is not None:
        board = placement.board  # its RAM window less the regions taken from it
    for accel in accelerators:
        out.update(accel.files)
    common = templates_dir() / "common"
    # A template's own files first (its CMakeLists.txt.j2...), the CRT template's otherwise.
    search = backend.search_path(template)

    for src in sorted((common / "include").rglob("*.h")):
        out[f"runtime/include/{src.relative_to(common / 'include').as_posix()}"] = src.read_bytes()
    host_driven = project_type == HOST_DRIVEN
    for src in sorted((common / "src").glob("*.c")):
        if src.name in GRAPH_RUNTIME_SOURCES and (module.executor != "graph" or host_driven):
            continue
        if src.name in RPC_RUNTIME_SOURCES and not host_driven:
            continue
        out[f"runtime/src/{src.name}"] = src.read_bytes()
    platform_dir = common / "platform" / board.platform
    if not platform_dir.is_dir():
        raise ProjectError(f"board '{board.name}' names platform '{board.platform}', which has "
                           f"no folder {platform_dir}")
    for name, src in port_files(platform_dir).items():  # the port's and its layers'
        out[f"platform/{name}"] = src.read_bytes()
    if board.linker_script:  # the files its linker script includes
        out.update({f"platform/{n}": t for n, t in linker_files(placement).items()})
    app_main = "rpc_main.c" if host_driven else "app.c"
    out[f"app/{app_main}"] = _template_file(search, f"src/{app_main}").read_bytes()

    for s in module.sources:
        out[f"model/src/{s.path.rsplit('/', 1)[-1]}"] = files.data[s.path]
    for o in module.objects:
        out[f"model/lib/{o.path.rsplit('/', 1)[-1]}"] = files.data[o.path]
    if module.header:
        out[f"model/include/{module.header.rsplit('/', 1)[-1]}"] = files.data[module.header]
    out["model/metadata.json"] = files.data["metadata.json"]

    arena = arena_bytes_for(module)
    external_pools = [ExternalPool(p.name, c_identifier(p.name), p.size_bytes)
                      for p in module.pools if not p.internal]
    env = template_environment(tuple(str(d) for d in search))
    compile_definitions: dict[str, int] = {}
    graph_context: dict = {}
    if module.executor == "graph" and not host_driven:
        compile_definitions, graph_context = _graph_context(files, module)
    if placement is not None:
        compile_definitions["MTVG_PLACED_MEMORY"] = 1  # the reset code walks its tables
    if profile_points is not None:
        compile_definitions.update(profile_definitions(module, profile_points))
    pool = rpc_pool_bytes(board)
    if host_driven:
        compile_definitions = {"MTVG_HOST_DRIVEN": 1,
                               "MTVG_LINK_MAX_PAYLOAD": host_driven_payload(board),
                        "MTVG_RPC_POOL_BYTES": pool, "MTVG_RPC_WORKSPACE_BYTES": arena}
    # MLF v8: <mod>_lib0.c is TVM 0.27's kernel code, built against TVM's own headers; the
    # other sources are ours (run function, weights, packed entries), built with the runtime.
    tvm_kernels = sorted(n for n in out if module.abi is not None and n.startswith("model/src/")
                         and n.endswith("_lib0.c"))
    # ...whose copies (only those the kernels include) travel with the project.
    headers = (tvm_headers(out, tvm_kernels, ["model/include"]) if module.abi is not None
               else TvmHeaders())
    out.update(headers.files)
    context = {
        "generator_version": __version__,
        "abi_version": RUNTIME_ABI_VERSION,
        "board": board,
        "module": module,
        "archive_name": plain_text(archive_path.name),
        "cmsis_nn_path": libraries.cmsis_nn.as_posix() if libraries and libraries.cmsis_nn
        else None,
        "cmsis_nn_files": cmsis_nn_files(libraries, [
            files.data[s.path].decode(errors="replace") for s in module.sources
            if s.target == CMSIS_NN]),
        "extra_definitions": extra_definitions or {},
        "werror": werror,
        "archive_sha256": archive.sha256 or "directory",
        "arena_bytes": arena,
        "external_pools": external_pools,
        "max_live_blocks": max(MIN_LIVE_BLOCKS, module.workspace_call_sites),
        "dtype_code": dlpack_type_code,
        "dtype_bits": dtype_bits,
        "runtime_sources": sorted(n for n in out if n.startswith("runtime/src/")),
        "platform_sources": sorted(n for n in out if n.startswith("platform/")
                                   and n.endswith((".c", ".S"))),
        "app_sources": ["app/rpc_main.c"] if host_driven else ["app/app.c", "app/model_glue.c"],
        "compile_definitions": compile_definitions,
        "size_optimized_sources": [f"runtime/src/{n}" for n in GRAPH_RUNTIME_SOURCES
                                   if f"runtime/src/{n}" in out],
        "model_sources": sorted(n for n in out if n.startswith("model/src/")
                                and n not in tvm_kernels),
        "tvm_kernel_sources": tvm_kernels,
        "model_objects": sorted(n for n in out if n.startswith("model/lib/")),
        "tvm_include_dirs": headers.include_dirs,
        "tvm_code_cflags": TVM_CODE_CFLAGS,
        "accelerators": accelerators,
        "accel_counters": [a.counters for a in accelerators if a.counters],
        "multilib_flags": [f for f in board.cflags if f.startswith(("-mcpu", "-mthumb",
                                                                    "-mfloat-abi", "-mfpu"))],
    }
    context.update(graph_context)
    context.update(target.context)
    if not host_driven:
        glue = "graph_glue.c.j2" if module.executor == "graph" else "model_glue.c.j2"
        out["app/model_glue.c"] = env.get_template(glue).render(context).encode()
    out["CMakeLists.txt"] = env.get_template("CMakeLists.txt.j2").render(context).encode()
    out.update(backend.render_extras(env, context, board))
    out["README.md"] = env.get_template("README.md.j2").render(
        context, project_type=project_type, board_is_native=board.is_native).encode()

    sections = dict(target.record)
    if placement is not None:
        sections["placement"] = placement.record()
    if profile_points is not None:
        sections["profile"] = {"points": profile_points}
    out[PROJECT_FILE] = record_bytes(new_record(
        spec, board, archive, archive_path.name, module, project_type, accelerators,
        headers.record() if module.abi is not None else None, sections))
    return out


def _graph_context(files: ArchiveFiles, module: ModuleInfo) -> tuple[dict[str, int], dict]:
    """What graph_glue.c.j2 needs, and the executor limits that fit this graph exactly."""
    graph = module.graph_model
    assert graph is not None and module.graph is not None and module.params_file
    text = graph.compact_json().encode()
    params = files.data[module.params_file]
    own_registry = module.registry is None
    names_blob = (struct.pack("<H", len(module.graph.functions)) +
                  b"".join(f.encode() + b"\0" for f in module.graph.functions))
    return graph.limits(), {
        "graph": module.graph,
        "graph_json_bytes": len(text),
        "graph_json_literal": c_string_literal(text, indent="  "),
        "params_bytes": len(params),
        "params_initializer": c_bytes_initializer(params),
        "own_registry": own_registry,
        "registry_names_literal": c_string_literal(names_blob) if own_registry else "",
    }


