"""Rendering a firmware project from an MLF archive, a board and the templates.

A project is derived only from its inputs (archive bytes, board file, templates, tool
version), so the same inputs give byte-identical projects. Everything is checked before
the first byte is written; a failure while writing leaves no half-made project behind.
"""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import jinja2

from generator import RUNTIME_ABI_VERSION, __version__
from generator.boards import Board, load_board
from generator.errors import ProjectError, UnsupportedModelError
from generator.mlf.archive import ArchiveFiles
from generator.mlf.model import (
    MlfArchive,
    ModuleInfo,
    c_identifier,
    dlpack_type_code,
    dtype_bits,
)
from generator.mlf.reader import load_mlf
from generator.project.accelerators import AcceleratorBuild, project_accelerators
from generator.project.cdata import c_bytes_initializer, c_string_literal
from generator.project.extra_files import read_extra_files
from generator.project.fit import check_fits
from generator.project.libraries import Libraries, needed_libraries
from generator.project.ports import port_files
from generator.project.tvm_headers import TvmHeaders, include_roots, tvm_headers
from generator.project.zephyr import (
    ZephyrBoard,
    effective_board,
    is_zephyr_template,
    zephyr_board,
)
from generator.resources import templates_dir

PROJECT_FILE = "project.json"
PROJECT_SCHEMA = 1
STAGING_NAME = ".mtvg-staging"
# The Project API server every project carries, and the copy of its archive.
PROJECT_API_FILES = ("microtvm_api_server.py", "launch_microtvm_api_server.sh")
MODEL_COPY = "model.tar"
EXECUTABLE_SUFFIXES = (".sh", "microtvm_api_server.py")
WORKSPACE_ALIGN = 16  # MTVG_WORKSPACE_ALIGN in templates/common/include/mtvg/runtime.h
MIN_LIVE_BLOCKS = 64  # MTVG_WORKSPACE_MAX_LIVE default
# Runtime files only graph-executor projects compile.
GRAPH_RUNTIME_SOURCES = ("graph.c", "graph_params.c")
# Runtime files only host-driven projects compile.
RPC_RUNTIME_SOURCES = ("rpc_server.c", "session.c")

STANDALONE = "standalone"
HOST_DRIVEN = "host-driven"
PROJECT_TYPES = (STANDALONE, HOST_DRIVEN)
# Host-driven link: frame payload limit (MTVG_LINK_MAX_PAYLOAD) and the tensor pool.
HOST_DRIVEN_MAX_PAYLOAD = 4096
HOST_DRIVEN_POOL_MAX = 1 << 20
HOST_DRIVEN_POOL_RAM_SHARE = 4  # at most a quarter of the board's RAM
# Small boards get smaller frames: each frame buffer takes at most 1/16 of the RAM (16 KiB: 1 KiB).
HOST_DRIVEN_MIN_PAYLOAD = 1024
HOST_DRIVEN_PAYLOAD_RAM_SHARE = 16



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


def resolve_project_type(module: ModuleInfo, project_type: str | None) -> str:
    """The project type asked for, or the one the archive implies (operators: host-driven)."""
    if project_type is None:
        return HOST_DRIVEN if module.executor == "operator" else STANDALONE
    if project_type not in PROJECT_TYPES:
        raise ProjectError(f"unknown project type '{project_type}' "
                           f"(choose {' or '.join(PROJECT_TYPES)})")
    return project_type


def check_buildable(module: ModuleInfo, board: Board, origin: str,
                    project_type: str = STANDALONE) -> None:
    """Refuse, with one clear reason, an archive this board cannot run."""
    if project_type == HOST_DRIVEN and module.registry is None:
        raise UnsupportedModelError(
            f"{origin}: host-driven projects call functions by name through the archive's "
            "system library, and this archive has none",
            hint="export the model with '--style operator'")
    if module.executor == "operator" and project_type != HOST_DRIVEN:
        raise UnsupportedModelError(
            f"{origin}: operator-style archives are for host-driven mode (each operator called "
            "by name with tensors from the host); they hold no model to run as firmware",
            hint="generate with '--project-type host-driven', or export the whole model")
    foreign = [o for o in module.objects if o.arch != board.arch]
    if foreign:
        arches = ", ".join(sorted({o.arch for o in foreign}))
        paths = ", ".join(o.path for o in foreign)
        what = "holds only compiled objects" if not module.sources else "holds compiled objects"
        raise UnsupportedModelError(
            f"{origin}: cannot build for board '{board.name}': the archive {what} for "
            f"{arches} ({paths}) and the board runs {board.arch} code",
            hint="export the model with a C target ('c -keys=cpu') so the archive carries sources")
    if not module.sources and not module.objects:
        raise UnsupportedModelError(f"{origin}: the archive has no code (no codegen/host/src "
                                    "or codegen/host/lib files)")
    if project_type == STANDALONE and module.graph is not None and module.graph.problems:
        raise UnsupportedModelError(f"{origin}: cannot run this graph: {module.graph.problems[0]}")
    if any(s.language != "c" for s in module.sources):
        raise UnsupportedModelError(f"{origin}: C++ model sources are not supported yet")
    dsp = [s.path.rsplit("/", 1)[-1] for s in module.sources if s.uses_dsp]
    if dsp and "dsp" not in getattr(board, "features", ()):
        raise UnsupportedModelError(
            f"{origin}: the model's kernels ({', '.join(dsp)}) use Arm DSP intrinsics "
            f"(<arm_acle.h>, TVM's Cortex-M micro-kernels), and board '{board.name}' has no "
            "DSP extension",
            hint="choose a Cortex-M4, M7 or M33 board")
    if module.unsupported_calls:
        raise UnsupportedModelError(
            f"{origin}: the model's code calls {', '.join(module.unsupported_calls)}, "
            "which needs a full TVM runtime on the device; not supported")


def arena_bytes_for(module: ModuleInfo) -> int:
    """Bytes to reserve for TVMBackendAllocWorkspace.

    TVM's workspace size plus one alignment pad per allocation site: the number of
    simultaneously live blocks never exceeds the number of call sites. For AOT that size
    is main's workspace_size_bytes; the graph executor runs one operator at a time, each
    freeing what it took, so it is the largest operator's workspace.
    """
    if module.workspace_call_sites == 0:
        return 0
    size = module.workspace_size_bytes
    if module.executor == "graph" and module.operator_workspace_bytes is not None:
        size = module.operator_workspace_bytes
    return size + module.workspace_call_sites * WORKSPACE_ALIGN


def generate(archive_path: Path, board_name: str, out_dir: Path, force: bool = False,
             module_name: str | None = None,
             project_type: str | None = None,
             cmsis_nn: Path | None = None,
             extra_definitions: dict[str, str] | None = None,
             werror: bool = True,
             extra_files_tar: Path | None = None,
             template: Path | None = None) -> GeneratedProject:
    """Render a project. The Project API's options arrive as `extra_definitions` (checked
    NAME → VALUE), `werror` for our code, and a tar of extra files (plain names, never
    replacing a generated file). `template`: a template directory with its own templates
    (a Zephyr template names Zephyr boards: generator/project/zephyr.py)."""
    zephyr = None
    if is_zephyr_template(template):
        assert template is not None
        zephyr = zephyr_board(template, board_name)
        board = effective_board(zephyr)
    else:
        board = load_board(board_name)
    archive, files = load_mlf(archive_path)
    try:
        module = archive.module(module_name)
    except KeyError:
        names = ", ".join(m.name for m in archive.modules)
        raise ProjectError(f"{archive_path}: no module '{module_name}' (it has: {names})") from None
    kind = resolve_project_type(module, project_type)
    check_buildable(module, board, str(archive_path), kind)
    check_fits(module, board, kind, str(archive_path))
    libraries = needed_libraries(module, str(archive_path), cmsis_nn)
    accelerators = project_accelerators(
        module, board, str(archive_path), zephyr is not None,
        {"cmsis-nn": {"path": str(cmsis_nn)}} if cmsis_nn else None)
    _check_target_dir(out_dir, force)

    extra = read_extra_files(extra_files_tar) if extra_files_tar else {}
    rendered = _render_files(archive, files, module, board, archive_path, kind, libraries,
                             extra_definitions or {}, werror, template, zephyr, accelerators)
    rendered.update(_project_api_files(archive_path, template))
    clash = sorted(set(extra) & set(rendered))
    if clash:
        raise ProjectError(f"{extra_files_tar}: '{clash[0]}' would replace a generated file")
    rendered.update(extra)
    _write_atomically(out_dir, rendered)
    return GeneratedProject(out_dir, board, archive, module, arena_bytes_for(module),
                            sorted(rendered), kind)


def _project_api_files(archive_path: Path, template: Path | None = None) -> dict[str, bytes]:
    """Every project carries the Project API server (and the archive it came from)."""
    crt = templates_dir() / "crt"
    files = {name: ((template if template and (template / name).is_file() else crt) / name)
             .read_bytes() for name in PROJECT_API_FILES}
    if archive_path.is_file():
        files[MODEL_COPY] = archive_path.read_bytes()
    return files


def plain_text(text: str) -> str:
    """Text from outside (a file name) made safe for a comment in any generated language:
    every character but letters, digits and ' _.+-' becomes '?'."""
    return "".join(c if c.isascii() and (c.isalnum() or c in " _.+-") else "?" for c in text)


def host_driven_payload(board: Board) -> int:
    """Frame payload limit of a host-driven project: 4 KiB, less on boards with little RAM."""
    if not board.ram_bytes:
        return HOST_DRIVEN_MAX_PAYLOAD
    return max(HOST_DRIVEN_MIN_PAYLOAD,
               min(HOST_DRIVEN_MAX_PAYLOAD, board.ram_bytes // HOST_DRIVEN_PAYLOAD_RAM_SHARE))


def rpc_pool_bytes(board: Board) -> int:
    """Tensor memory of a host-driven project: a quarter of the RAM, at most 1 MiB."""
    ram = board.ram_bytes if board.ram_bytes else HOST_DRIVEN_POOL_MAX
    return min(HOST_DRIVEN_POOL_MAX, ram // HOST_DRIVEN_POOL_RAM_SHARE)


def _check_target_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ProjectError(f"{out_dir} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise ProjectError(f"{out_dir} exists and is not empty; pass --force to replace it")


def _render_files(archive: MlfArchive, files: ArchiveFiles, module: ModuleInfo, board: Board,
                  archive_path: Path, project_type: str,
                  libraries: Libraries | None = None,
                  extra_definitions: dict[str, str] | None = None,
                  werror: bool = True, template: Path | None = None,
                  zephyr: ZephyrBoard | None = None,
                  accelerators: list[AcceleratorBuild] | None = None) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    accelerators = accelerators or []
    for accel in accelerators:
        out.update(accel.files)
    common = templates_dir() / "common"
    crt = templates_dir() / "crt"

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
    app_main = "rpc_main.c" if host_driven else "app.c"
    out[f"app/{app_main}"] = (crt / "src" / app_main).read_bytes()

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
    # A template's own files first (its CMakeLists.txt.j2...), the CRT template's otherwise.
    search = [str(template), str(crt)] if zephyr is not None and template else [str(crt)]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(search),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["c_string"] = c_string_literal
    compile_definitions: dict[str, int] = {}
    graph_context: dict = {}
    if module.executor == "graph" and not host_driven:
        compile_definitions, graph_context = _graph_context(files, module)
    pool = rpc_pool_bytes(board)
    if host_driven:
        compile_definitions = {"MTVG_LINK_MAX_PAYLOAD": host_driven_payload(board),
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
        "zephyr": zephyr,
        "accelerators": accelerators,
        "accel_counters": [a.counters for a in accelerators if a.counters],
        "multilib_flags": [f for f in board.cflags if f.startswith(("-mcpu", "-mthumb",
                                                                    "-mfloat-abi", "-mfpu"))],
    }
    context.update(graph_context)
    if not host_driven:
        glue = "graph_glue.c.j2" if module.executor == "graph" else "model_glue.c.j2"
        out["app/model_glue.c"] = env.get_template(glue).render(context).encode()
    out["CMakeLists.txt"] = env.get_template("CMakeLists.txt.j2").render(context).encode()
    if zephyr is not None:
        out["prj.conf"] = env.get_template("prj.conf.j2").render(context).encode()
    elif not board.is_native:
        toolchain = env.get_template("toolchain.cmake.j2").render(context)
        out["cmake/toolchain.cmake"] = toolchain.encode()
    out["README.md"] = env.get_template("README.md.j2").render(
        context, project_type=project_type, board_is_native=board.is_native).encode()

    project = {
        "schema": PROJECT_SCHEMA,
        "generator_version": __version__,
        "runtime_abi": RUNTIME_ABI_VERSION,
        "project_type": project_type,
        "board": board.name,
        "archive": {"name": archive_path.name, "sha256": archive.sha256,
                    "mlf_version": archive.version},
        "module": {
            "name": module.name,
            "executor": module.executor,
            "entry": module.entry,
            "inputs": [_tensor_json(t) for t in module.inputs],
            "outputs": [_tensor_json(t) for t in module.outputs],
            "workspace_size_bytes": module.workspace_size_bytes,
            "arena_bytes": arena,
            "pools": [{"name": p.name, "size_bytes": p.size_bytes, "internal": p.internal}
                      for p in module.pools],
            "storage_bytes": module.graph.storage_bytes if module.graph else 0,
        },
        "accelerators": [{"name": a.name, "counters": a.counters} for a in accelerators],
    }
    if host_driven:
        project["host_driven"] = {"link_max_payload": host_driven_payload(board),
                                  "tensor_pool_bytes": pool,
                                  "functions": list(module.registry or [])}
    if module.abi is not None:
        project["tvm_headers"] = headers.record()
    if zephyr is not None:
        project["zephyr"] = {"board": zephyr.to_json(), "platform_name": "zephyr"}
    out[PROJECT_FILE] = (json.dumps(project, indent=2, sort_keys=True) + "\n").encode()
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


def _tensor_json(t) -> dict:
    return {"name": t.name, "c_name": t.c_name, "dtype": t.dtype,
            "shape": list(t.effective_shape()), "size_bytes": t.size_bytes}


def _write_atomically(out_dir: Path, rendered: dict[str, bytes]) -> None:
    """Write every file, or nothing: on failure the directory is as it was (or absent)."""
    created = not out_dir.exists()
    staging = out_dir / STAGING_NAME
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if staging.exists():
            shutil.rmtree(staging)
        for rel, data in sorted(rendered.items()):
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            if rel.endswith(EXECUTABLE_SUFFIXES):
                dest.chmod(0o755)
        for old in out_dir.iterdir():
            if old.name == STAGING_NAME:
                continue
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
        for item in sorted(staging.iterdir()):
            item.rename(out_dir / item.name)
        staging.rmdir()
    except BaseException:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        else:
            shutil.rmtree(staging, ignore_errors=True)
        raise


def load_project(project_dir: Path) -> dict:
    path = project_dir / PROJECT_FILE
    if not path.is_file():
        raise ProjectError(f"{project_dir} is not a microtvm-gen project (no {PROJECT_FILE})",
                           hint="run 'microtvm-gen generate' first")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ProjectError(f"{path} is not valid JSON ({exc.msg})") from exc
    if data.get("schema") != PROJECT_SCHEMA:
        raise ProjectError(f"{path}: project schema {data.get('schema')!r}; regenerate the project")
    return data
