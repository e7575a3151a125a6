"""Turning an archive's files into a validated MlfArchive.

Versions 5, 6 and 7 as TVM 0.8–0.18 wrote them, and version 8 as our exporter writes it
(see docs/mlf.md). The version is checked
before anything else, so an archive from a newer tool gets a message about the version,
not about whatever field changed.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from generator.errors import MlfError, UnsupportedModelError
from generator.mlf import sources
from generator.mlf.archive import ArchiveFiles, read_archive
from generator.mlf.dtypes import ShapedTensor, dtype_bits
from generator.mlf.graph import Graph, graph_io, parse_graph
from generator.mlf.model import (
    AcceleratorUse,
    GraphSummary,
    MlfArchive,
    ModuleInfo,
    ObjectFile,
    OperatorInfo,
    ParamTensor,
    PlanSummary,
    Pool,
    SourceFile,
    TensorInfo,
    c_identifier,
)
from generator.mlf.params import load_params
from generator.mlf.safejson import load_bounded
from generator.mlf.schema import check_metadata, check_text

MAX_METADATA_BYTES = 16 * 1024 * 1024
MAX_IO_BYTES = 1 << 30  # one input or output tensor
MAX_SOURCE_BYTES = 32 * 1024 * 1024  # the module's C sources (real ones: a few MB)
MAX_HEADER_BYTES = 1024 * 1024  # the C interface header (real ones: a few KB)
SUPPORTED_VERSIONS = (5, 6, 7, 8)
MAX_WRITER_CHARS = 64  # a tool name or version in `generator`
WORKSPACE_CALL = "TVMBackendAllocWorkspace"  # a kernel that allocates at run time
NEWEST_KNOWN_VERSION = 8
# generator/export/mlf_writer.py ABI_NAME and OPERATOR_ABI_NAME, and the style of archive
# each belongs to.
V8_ABI_STYLES = {"mtvg-aot-c": "full-model", "mtvg-operators-packed": "operator"}
V8_ABIS = tuple(V8_ABI_STYLES)
_LANGUAGES = {"c": "c", "cc": "c++", "cpp": "c++"}
# Names TVM's frontends give to bound parameters in Relay text (`%v_param_3`, `%p0`).
_PARAM_NAME_RE = re.compile(r"^(v?_?param_\d+|p\d+)$")


def read_mlf(path: Path) -> MlfArchive:
    """Read and validate an MLF archive (tar or extracted directory)."""
    return load_mlf(path)[0]


def load_mlf(path: Path) -> tuple[MlfArchive, ArchiveFiles]:
    """Read and validate an archive; also return the member bytes it read."""
    files = read_archive(path)
    if not files.has("metadata.json"):
        raise MlfError(f"{path}: no metadata.json at the archive root; not a Model Library "
                       "Format archive")
    meta = load_bounded(files.text("metadata.json"), f"{path}: metadata.json",
                        max_bytes=MAX_METADATA_BYTES)
    if not isinstance(meta, dict):
        raise MlfError(f"{path}: metadata.json is not a JSON object")
    version = meta.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise MlfError(f"{path}: metadata.json has no integer 'version'")
    if version > NEWEST_KNOWN_VERSION:
        raise MlfError(f"{path}: MLF version {version} is newer than this tool understands "
                       f"(it reads versions {_versions_text()})",
                       hint="upgrade microtvm-gen")
    if version not in SUPPORTED_VERSIONS:
        raise MlfError(f"{path}: MLF version {version} is not supported (this tool reads "
                       f"versions {_versions_text()}: TVM 0.8 to 0.18 and microtvm-gen)")
    check_metadata(meta, version, f"{path}: metadata.json")
    style = _archive_style(meta, version, path)
    if version >= 7:
        entries = meta.get("modules")
        if not isinstance(entries, dict) or not entries:
            raise MlfError(f"{path}: version {version} metadata.json has no 'modules' object")
    else:
        entries = {meta.get("model_name", "default"): meta}
    if style == "operator":
        modules = [_read_operator_module(files, str(name), info)
                   for name, info in entries.items()]
    else:
        modules = [_read_module(files, version, str(name), info)
                   for name, info in entries.items()]
    digest = _file_sha256(path) if path.is_file() else ""
    return MlfArchive(
        origin=str(path),
        sha256=digest,
        version=version,
        style=style,
        export_datetime=_first(entries, "export_datetime"),
        modules=modules,
        member_names=files.names,
    ), files


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _archive_style(meta: dict, version: int, path: Path) -> str:
    """"full-model" or "operator". TVM ≤0.18 writes the style at the top level; version 8
    writes it in each module, and an archive's modules must agree."""
    style = meta.get("style", "full-model")
    entries = meta.get("modules")
    if version >= 8 and isinstance(entries, dict):
        styles = {info.get("style", "full-model") for info in entries.values()
                  if isinstance(info, dict)}
        if len(styles) > 1:
            raise MlfError(f"{path}: modules of different styles ({', '.join(sorted(styles))}) "
                           "in one archive")
        if styles:
            module_style = styles.pop()
            if "style" in meta and meta["style"] != module_style:
                raise MlfError(f"{path}: metadata.json says style '{meta['style']}' at the top "
                               f"and '{module_style}' in its modules")
            style = module_style
    if style == "operator" and version >= 8:
        return style
    if style != "full-model":
        raise UnsupportedModelError(f"{path}: '{style}'-style archives are not supported; "
                                    "only full-model archives (relay.build or microtvm-gen "
                                    "export) and version 8 operator archives from microtvm-gen")
    return style


def _versions_text() -> str:
    return ", ".join(str(v) for v in SUPPORTED_VERSIONS)


def _first(entries: dict, key: str):
    for info in entries.values():
        if isinstance(info, dict) and key in info:
            return info[key]
    return None


def _field(info: dict, key: str, kind: type, where: str):
    value = info.get(key)
    if not isinstance(value, kind):
        raise MlfError(f"{where}: '{key}' is missing or not a {kind.__name__}")
    return value


def _read_module(files: ArchiveFiles, version: int, name: str, info: object) -> ModuleInfo:
    where = f"{files.origin}: module '{name}'"
    if not isinstance(info, dict):
        raise MlfError(f"{where}: metadata is not an object")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise MlfError(f"{where}: module name is not a C identifier")
    executors = _field(info, "executors", list, where)
    if len(executors) != 1 or executors[0] not in ("aot", "graph"):
        raise MlfError(f"{where}: executors {executors!r}; expected ['aot'] or ['graph']")
    executor = executors[0]
    targets_raw = info.get("target", [])
    targets = list(targets_raw.values()) if isinstance(targets_raw, dict) else list(targets_raw)
    memory = _field(info, "memory", dict, where)
    functions = _field(memory, "functions", dict, where + " memory")
    mains = functions.get("main") or []
    main = next((m for m in mains if isinstance(m, dict) and m.get("device", 1) == 1), {})

    src_names = [n for n in files.under("codegen/host/src/")
                 if _module_file(_safe_member(where, n), name, version)]
    obj_names = [n for n in files.under("codegen/host/lib/")
                 if _module_file(_safe_member(where, n), name, version)]
    _check_source_bytes(where, files, src_names)
    srcs = []
    for n in src_names:
        ext = n.rsplit(".", 1)[-1]
        if ext not in _LANGUAGES:
            raise MlfError(f"{where}: unexpected source file '{_safe_member(where, n)}'")
        traits = sources.source_traits(files.text(_safe_member(where, n)))
        srcs.append(SourceFile(n, _LANGUAGES[ext], traits.target, traits.includes,
                               traits.uses_dsp))
    objs = [ObjectFile(n, sources.elf_arch(files.data[_safe_member(where, n)]))
            for n in obj_names]
    c_text = "\n".join(files.text(s.path) for s in srcs if not s.is_partition)
    calls = sources.count_calls(c_text, (WORKSPACE_CALL, *sources.UNSUPPORTED_CALLS))

    header_path = f"codegen/host/include/tvmgen_{name}.h"
    if files.has(header_path) and len(files.data[header_path]) > MAX_HEADER_BYTES:
        raise MlfError(f"{where}: {header_path} holds more than {MAX_HEADER_BYTES} bytes (real "
                       "interface headers hold a few KB)")
    header = (sources.parse_interface_header(files.text(header_path), name)
              if files.has(header_path) else None)

    params_path = f"parameters/{name}.params"
    params = []
    if files.has(params_path):
        params = [ParamTensor(p.name, p.dtype, p.shape, len(p.data), p.offset)
                  for p in load_params(files.data[params_path], f"{where}: {params_path}")]

    relay_path = f"src/{name}.relay" if version >= 7 else "src/relay.txt"
    try:
        relay = (sources.parse_relay_main(files.text(relay_path)) if files.has(relay_path)
                 else None)
    except MlfError as exc:
        raise MlfError(f"{where}: {relay_path}: {exc}") from None

    graph_path = None
    if executor == "graph":
        graph_path = (f"executor-config/graph/{name}.graph" if version >= 7
                      else "executor-config/graph/graph.json")
        if not files.has(graph_path):
            raise MlfError(f"{where}: graph executor archive without {graph_path}")

    graph = None
    notes: list[str] = []
    if graph_path is not None:
        graph = parse_graph(files.text(graph_path), f"{where}: {graph_path}")
        gio = graph_io(graph, _graph_param_names(graph, params, files.has(params_path),
                                                 _declared(main, "inputs")))
        meta_out = main.get("outputs") if isinstance(main.get("outputs"), dict) else {}
        out_names = sorted(meta_out, key=_natural_key) if len(meta_out) == len(gio.outputs) \
            else [t.name for t in gio.outputs]
        inputs = [TensorInfo(t.name, t.dtype, t.size_bytes, t.shape, "graph") for t in gio.inputs]
        outputs = [TensorInfo(n, t.dtype, t.size_bytes, t.shape, "graph")
                   for n, t in zip(out_names, gio.outputs, strict=True)]
    else:
        c_names = (_v8_c_names(info, where) if version >= 8
                   else {"inputs": {}, "outputs": {}})
        meta_shapes = ({kind: _v8_declared_shapes(info.get(kind)) for kind in ("inputs", "outputs")}
                       if version >= 8 else {"inputs": {}, "outputs": {}})
        inputs = _resolve_inputs(where, name, main, header, relay, {p.name for p in params},
                                 c_names["inputs"], meta_shapes["inputs"], notes)
        outputs = _resolve_outputs(where, name, main, header, relay, inputs,
                                   c_names["outputs"], meta_shapes["outputs"], notes)
    abi, plan, accelerators = None, None, []
    if version >= 8:
        abi, plan = _v8_abi_and_plan(info, where, "full-model")
        accelerators = _v8_accelerators(info, where)
        inputs = _v8_shapes(info.get("inputs"), inputs, where + " inputs")
        outputs = _v8_shapes(info.get("outputs"), outputs, where + " outputs")

    defs = sources.function_definitions(c_text)
    interface = "c" if header is not None else "packed"
    entry = _entry_kind(where, executor, interface, name, defs, bool(srcs))

    pools = [Pool(n, size, "workspace", True) for n, size in sources.internal_pools(c_text).items()]
    if header is not None:
        for pool in header.workspace_pools:
            size = header.pool_size(name, pool)
            if size is None:
                raise MlfError(f"{where}: external pool '{pool}' has no size macro in the header")
            pools.append(Pool(pool, size, "workspace", False))
        if header.devices:
            raise UnsupportedModelError(f"{where}: the model needs device contexts "
                                        f"({', '.join(header.devices)}) for BYOC accelerators; "
                                        "not supported yet")
        if header.io_in_pools:
            raise UnsupportedModelError(f"{where}: inputs/outputs placed inside USMP pools "
                                        "(tir.usmp.use_workspace_io) are not supported yet")

    registry = _registry(where, c_text)
    op_workspaces = [_operator_workspace(f) for f in functions.get("operator_functions") or []]
    summary = (_graph_summary(graph, params, files.has(params_path), params_path, registry,
                              set(defs), bool(srcs), memory.get("sids"), inputs)
               if graph is not None else None)

    deps = info.get("external_dependencies") or []
    written_by, writer_tvm = _writer(info, where)
    tvm_version = next((d.get("version_spec") for d in deps
                        if isinstance(d, dict) and d.get("short_name") == "tvm_standalone_crt"),
                       writer_tvm)
    return ModuleInfo(
        name=name,
        executor=executor,
        interface=interface,
        entry=entry,
        targets=[str(t) for t in targets],
        inputs=inputs,
        outputs=outputs,
        workspace_size_bytes=int(main.get("workspace_size_bytes", 0)),
        constants_size_bytes=int(main.get("constants_size_bytes", 0)),
        io_size_bytes=int(main.get("io_size_bytes", 0)),
        pools=pools,
        sources=srcs,
        objects=objs,
        params=params,
        header=header_path if header is not None else None,
        graph_json=graph_path,
        params_file=params_path if files.has(params_path) else None,
        workspace_call_sites=calls[WORKSPACE_CALL],
        unsupported_calls=[c for c in sources.UNSUPPORTED_CALLS if calls[c]],
        tvm_version=tvm_version,
        written_by=written_by,
        operator_workspace_bytes=max(op_workspaces) if op_workspaces else None,
        registry=registry,
        graph=summary,
        graph_model=graph,
        abi=abi,
        plan=plan,
        accelerators=accelerators,
        notes=notes,
    )


_ACCEL_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_ACCEL_OPTION_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
_MAX_ACCELERATORS = 16
_MAX_ACCEL_OPTION_CHARS = 4096


def _v8_accelerators(info: dict, where: str) -> list[AcceleratorUse]:
    """The accelerators a v8 module calls (names and options are checked: they choose the
    plugin whose driver the project builds, and the plugin checks the values again)."""
    listed = info.get("accelerators", [])
    if not isinstance(listed, list) or len(listed) > _MAX_ACCELERATORS:
        raise MlfError(f"{where}: 'accelerators' is not a list of at most "
                       f"{_MAX_ACCELERATORS} objects")
    out = []
    for entry in listed:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) \
                or not _ACCEL_NAME_RE.fullmatch(entry["name"]):
            raise MlfError(f"{where}: an accelerator entry has no plugin name of lower-case "
                           "letters, digits, '-' and '_'")
        options = entry.get("options", {})
        if not isinstance(options, dict) or not all(
                isinstance(k, str) and _ACCEL_OPTION_RE.fullmatch(k)
                and (v is None or isinstance(v, bool | int | str))
                and len(str(v)) <= _MAX_ACCEL_OPTION_CHARS
                for k, v in options.items()):
            raise MlfError(f"{where}: accelerator '{entry['name']}' has options that are not "
                           "names with string, integer or boolean values")
        ops = entry.get("operators", [])
        if not isinstance(ops, list) or not all(
                isinstance(o, dict) and isinstance(o.get("macs", 0), int)
                and not isinstance(o.get("macs", 0), bool) and 0 <= o.get("macs", 0) < 2**63
                for o in ops):
            raise MlfError(f"{where}: accelerator '{entry['name']}' operators are not a list "
                           "of objects with integer 'macs'")
        scratch = entry.get("scratch_bytes", 0)
        if not isinstance(scratch, int) or isinstance(scratch, bool) \
                or not 0 <= scratch < 2**31:
            raise MlfError(f"{where}: accelerator '{entry['name']}' scratch_bytes is not a "
                           "size")
        abi = entry.get("abi", 1)
        if not isinstance(abi, int) or isinstance(abi, bool) or not 1 <= abi < 2**31:
            raise MlfError(f"{where}: accelerator '{entry['name']}' abi is not a positive "
                           "integer")
        out.append(AcceleratorUse(entry["name"], dict(options), len(ops),
                                  sum(o.get("macs", 0) for o in ops), scratch, abi))
    if len({a.name for a in out}) != len(out):
        raise MlfError(f"{where}: an accelerator is listed twice")
    return out


def _v8_abi_and_plan(info: dict, where: str, style: str) -> tuple[str, PlanSummary | None]:
    abi = info.get("abi")
    if not isinstance(abi, dict) or not isinstance(abi.get("name"), str):
        raise MlfError(f"{where}: version 8 metadata has no 'abi' object with a 'name'")
    if abi["name"] not in V8_ABIS:
        raise UnsupportedModelError(f"{where}: generated code ABI '{abi['name']}' is not one "
                                    f"this tool can call ({', '.join(V8_ABIS)})")
    if V8_ABI_STYLES[abi["name"]] != style:
        raise MlfError(f"{where}: ABI '{abi['name']}' belongs to {V8_ABI_STYLES[abi['name']]} "
                       f"archives, but the module is {style}")
    plan = None
    for pool in info.get("pools") or []:
        if isinstance(pool, dict) and pool.get("kind") == "workspace" \
                and isinstance(pool.get("size_bytes"), int) \
                and isinstance(pool.get("lower_bound_bytes"), int):
            preset = pool.get("memory_preset")
            over = pool.get("over_input_calls")
            in_input = pool.get("in_input_bytes")
            plan = PlanSummary(pool["size_bytes"], pool["lower_bound_bytes"],
                               len(pool.get("tensors") or []),
                               preset if preset in ("fast", "small") else None,
                               over if isinstance(over, int) and over >= 0 else 0,
                               pool.get("inputs_reused") is True,
                               in_input if isinstance(in_input, int) and in_input >= 0 else 0)
    return abi["name"], plan


def _writer(info: object, where: str) -> tuple[str | None, str | None]:
    """Who wrote an MLF v8 module, from its `generator` entry ({name, version, tvm_version,
    source}, microtvm-gen's exporter): "name version" and the TVM version, else None."""
    writer = info.get("generator") if isinstance(info, dict) else None
    if writer is None:
        return None, None
    if not isinstance(writer, dict):
        raise MlfError(f"{where}: 'generator' is not an object")
    name, version, tvm = (None if writer.get(k) is None else
                          check_text(writer.get(k), f"{where} generator.{k}", MAX_WRITER_CHARS)
                          for k in ("name", "version", "tvm_version"))
    return (" ".join(t for t in (name, version) if t) or None), (tvm or None)


def _read_operator_module(files: ArchiveFiles, name: str, info: object) -> ModuleInfo:
    """A module of a version 8 operator-style archive (generator/export/operators.py)."""
    where = f"{files.origin}: module '{name}'"
    if not isinstance(info, dict):
        raise MlfError(f"{where}: metadata is not an object")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise MlfError(f"{where}: module name is not a C identifier")
    if _field(info, "executors", list, where):
        raise MlfError(f"{where}: an operator archive has no executor, but metadata lists "
                       f"{info['executors']!r}")
    abi, _ = _v8_abi_and_plan(info, where, "operator")
    targets_raw = info.get("target", [])
    targets = list(targets_raw.values()) if isinstance(targets_raw, dict) else list(targets_raw)
    memory = _field(info, "memory", dict, where)
    functions = _field(memory, "functions", dict, where + " memory")

    srcs = []
    for n in files.under("codegen/host/src/"):
        if _module_file(n, name, 8):
            ext = n.rsplit(".", 1)[-1]
            if _LANGUAGES.get(ext) != "c":
                raise MlfError(f"{where}: unexpected source file '{_safe_member(where, n)}'")
            srcs.append(SourceFile(_safe_member(where, n), "c"))
    objs = [ObjectFile(n, sources.elf_arch(files.data[_safe_member(where, n)]))
            for n in files.under("codegen/host/lib/") if _module_file(n, name, 8)]
    _check_source_bytes(where, files, [s.path for s in srcs])
    c_text = "\n".join(files.text(s.path) for s in srcs)
    calls = sources.count_calls(c_text, (WORKSPACE_CALL, *sources.UNSUPPORTED_CALLS))
    registry = _registry(where, c_text)
    if registry is None:
        raise MlfError(f"{where}: the sources have no system library (a TVMFuncRegistry and "
                       "TVMSystemLibEntryPoint); the operators cannot be called by name")

    operators = [_operator(op, f"{where} operator #{i}")
                 for i, op in enumerate(_field(info, "operators", list, where))]
    listed = [op.name for op in operators]
    if listed != registry:
        raise MlfError(f"{where}: metadata lists operators {', '.join(listed) or 'none'} but "
                       f"the registry holds {', '.join(registry) or 'none'}")
    defs = sources.function_definitions(c_text)
    for op in operators:
        entry = defs.get(op.name)
        if entry is None or len(entry.params) != 6:
            raise MlfError(f"{where}: the registry lists '{op.name}', but the sources define "
                           "no packed function of that name")
    op_workspaces = [_operator_workspace(f) for f in functions.get("operator_functions") or []]
    largest = max(op_workspaces, default=0)
    written_by, tvm_version = _writer(info, where)
    return ModuleInfo(
        name=name,
        executor="operator",
        interface="packed",
        entry="system-lib",
        targets=[str(t) for t in targets],
        inputs=[],
        outputs=[],
        workspace_size_bytes=largest,  # the host calls one operator at a time
        constants_size_bytes=0,
        io_size_bytes=0,
        sources=srcs,
        objects=objs,
        workspace_call_sites=calls[WORKSPACE_CALL],
        unsupported_calls=[c for c in sources.UNSUPPORTED_CALLS if calls[c]],
        operator_workspace_bytes=largest,
        registry=registry,
        abi=abi,
        operators=operators,
        tvm_version=tvm_version,
        written_by=written_by,
    )


def _check_source_bytes(where: str, files: ArchiveFiles, paths: list[str]) -> None:
    """Refuse oversized sources before any of them is decoded or scanned."""
    if sum(len(files.data[p]) for p in paths) > MAX_SOURCE_BYTES:
        raise MlfError(f"{where}: the C sources hold more than {MAX_SOURCE_BYTES} bytes")


def _safe_member(where: str, path: str) -> str:
    """A member the tool copies into projects: its name must be plain (letters, digits,
    '_', '.', '+', '-'), since it reaches CMake and C text."""
    base = path.rsplit("/", 1)[-1]
    if not sources.SAFE_FILE_NAME_RE.fullmatch(base):
        shown = base.encode("unicode_escape").decode("ascii")[:80]
        raise MlfError(f"{where}: file name '{shown}' has characters other than letters, "
                       "digits, '_', '.', '+' and '-'; refusing the archive")
    return path


def _registry(where: str, c_text: str) -> list[str] | None:
    try:
        return sources.system_library_functions(c_text)
    except MlfError as exc:
        raise MlfError(f"{where}: {exc}") from None


def _operator(item: object, where: str) -> OperatorInfo:
    if not isinstance(item, dict):
        raise MlfError(f"{where}: not an object")
    name = _field(item, "name", str, where)
    symbol = _field(item, "symbol", str, where)
    args = []
    for j, arg in enumerate(_field(item, "args", list, where)):
        at = f"{where} ('{name}') argument {j}"
        if not isinstance(arg, dict):
            raise MlfError(f"{at}: not an object")
        arg_name = _field(arg, "name", str, at)
        dtype = _field(arg, "dtype", str, at)
        shape = _field(arg, "shape", list, at)
        size = arg.get("size")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise MlfError(f"{at}: shape {shape!r} is not a list of sizes")
        try:
            bits = dtype_bits(dtype)
        except ValueError:
            raise MlfError(f"{at}: unknown dtype '{dtype}'") from None
        if size != ShapedTensor(arg_name, tuple(shape), dtype).numel * bits // 8:
            raise MlfError(f"{at}: size {size!r} does not match {dtype}{shape}")
        args.append(TensorInfo(arg_name, dtype, size, tuple(shape), "metadata"))
    outputs = item.get("outputs")
    if outputs is not None and (not isinstance(outputs, int) or isinstance(outputs, bool)
                                or not 0 <= outputs <= len(args)):
        raise MlfError(f"{where} ('{name}'): 'outputs' must be null or a count of arguments")
    return OperatorInfo(name, symbol, tuple(args), outputs)


def _v8_c_names(info: dict, where: str) -> dict[str, dict[str, str]]:
    """Per kind, C name → the model's name, from version 8 metadata `c_name` fields (the
    model's names are data; the header's struct members are these C names)."""
    out: dict[str, dict[str, str]] = {}
    for kind in ("inputs", "outputs"):
        listed = info.get(kind)
        by_c: dict[str, str] = {}
        for t in listed if isinstance(listed, list) else []:
            if not isinstance(t, dict) or not isinstance(t.get("c_name"), str):
                continue
            if t["c_name"] in by_c:
                raise MlfError(f"{where} {kind}: two tensors have the C name '{t['c_name']}'")
            by_c[t["c_name"]] = t["name"]
        out[kind] = by_c
    return out


def _v8_shapes(listed: object, tensors: list[TensorInfo], where: str) -> list[TensorInfo]:
    """Tensors with the shapes version 8 metadata lists for them (checked against sizes),
    and the C names it gives them (which must be those the header declares)."""
    if not isinstance(listed, list):
        raise MlfError(f"{where}: version 8 metadata must list them with shapes")
    by_name = {t.get("name"): t for t in listed if isinstance(t, dict)}
    result = []
    for t in tensors:
        entry = by_name.get(t.name)
        shape = entry.get("shape") if entry else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise MlfError(f"{where}: no valid shape for '{t.name}'")
        c_name = entry.get("c_name") if entry else None
        if c_name is not None and c_name != t.c_name:
            raise MlfError(f"{where}: '{t.name}' has the C name '{c_name}', which the C "
                           "interface header does not declare for it")
        shaped = TensorInfo(t.name, t.dtype, t.size_bytes, tuple(shape), "metadata", t.c_name)
        if shaped.numel != ShapedTensor(t.name, tuple(shape), t.dtype).numel:
            raise MlfError(f"{where}: '{t.name}' shape {shape} does not match its "
                           f"{t.size_bytes} bytes of {t.dtype}")
        result.append(shaped)
    return result


def _operator_workspace(func: object) -> int:
    """CPU workspace bytes of one metadata operator_functions item."""
    if not isinstance(func, dict):
        return 0
    sizes = [int(w.get("workspace_size_bytes", 0)) for w in func.get("workspace") or []
             if isinstance(w, dict) and w.get("device", 1) == 1]
    return max(sizes, default=0)


def _graph_param_names(graph: Graph, params: list[ParamTensor], has_params: bool,
                       declared_inputs: dict) -> set[str]:
    """The graph's argument nodes that are parameters, not model inputs.

    With a params file, its names. Without one (the parameters were not exported), the
    argument nodes metadata.json does not list as inputs, or, when it lists none, those
    named as TVM names bound parameters (p0, p1, ...).
    """
    if has_params:
        return {p.name for p in params}
    args = [graph.nodes[nid].name for nid in graph.arg_nodes]
    if declared_inputs:
        return {a for a in args if a not in declared_inputs}
    return {a for a in args if _PARAM_NAME_RE.match(a)}


def _graph_summary(graph: Graph, params: list[ParamTensor], has_params: bool,
                   params_path: str, registry: list[str] | None, defined: set[str],
                   has_sources: bool, sids: object, inputs: list[TensorInfo]) -> GraphSummary:
    problems = graph.problems()
    if not has_params:
        missing = sorted(set(graph.arg_names()) - {t.name for t in inputs})
        problems.append(f"the archive has no {params_path}: the graph's parameters "
                        f"({', '.join(missing) or 'none'}) have no data")
    problems += graph.param_problems({p.name: (p.dtype, p.shape) for p in params})
    functions = graph.func_names()
    available = set(registry) if registry is not None else defined
    if registry is not None or has_sources:
        where = "system library" if registry is not None else "sources"
        problems += [f"the graph calls '{f}', which the archive's {where} does not provide"
                     for f in functions if f not in available]
    plan = graph.storage_plan({p.name: (p.offset, p.dtype) for p in params})
    return GraphSummary(
        nodes=len(graph.nodes),
        operators=len(graph.op_nodes()),
        storage_ids=plan.storage_ids,
        storage_bytes=plan.ram_bytes,
        params_in_place_bytes=plan.params_in_place_bytes,
        params_copied_bytes=plan.params_copied_bytes,
        functions=functions,
        problems=problems,
        sids_disagree=_sids_disagreeing(graph, sids),
    )


def _sids_disagreeing(graph: Graph, sids: object) -> list[int]:
    """Storage ids whose metadata `sids` size differs from the graph's own."""
    if not isinstance(sids, list):
        return []
    sizes = graph.storage_sizes()
    out = []
    for item in sids:
        if isinstance(item, dict) and isinstance(item.get("storage_id"), int):
            sid = item["storage_id"]
            if item.get("size_bytes") != sizes.get(sid):
                out.append(sid)
    return out


def _module_file(path: str, mod: str, version: int) -> bool:
    base = path.rsplit("/", 1)[-1]
    if version >= 3:
        return base.startswith(f"{mod}_lib")
    return base.startswith("lib")


def _entry_kind(where: str, executor: str, interface: str, mod: str,
                defs: dict[str, sources.FunctionDef], has_sources: bool) -> str:
    if executor == "graph":
        return "graph"
    run, run_model = f"tvmgen_{mod}_run", f"tvmgen_{mod}_run_model"
    if not has_sources:
        return interface  # object files only: trust the interface, the linker will tell
    if interface == "c":
        if run in defs:
            return "c"
        if run_model in defs:
            return "c-run-model"
    else:
        if run in defs and len(defs[run].params) == 6:
            return "packed"
        if run in defs:
            return "c"
    raise UnsupportedModelError(f"{where}: the C sources define neither {run} nor {run_model}; "
                                "cannot find the model's entry point")


def _pair_names(members: list[str], declared: list[str], known: list[str],
                c_names: dict[str, str] | None = None) -> list[str]:
    """The tensor names for the header's struct members.

    MLF v8 metadata gives each tensor's C name (`c_names`, C name → name): used when it
    names every member.

    A member is TVM's sanitised name of a tensor (`input_1:0` → `input_1_0`): match it to a
    declared (metadata) or known (Relay) name by that rule. When some member matches none,
    but the metadata declares as many tensors as the header has members, they are paired by
    position (TVM 0.11-era archives name a tensor one way in each file).
    """
    if c_names and all(m in c_names for m in members):
        return [c_names[m] for m in members]
    by_c: dict[str, str] = {}
    for name in [*known, *declared]:
        by_c.setdefault(c_identifier(name), name)
    for name in declared:
        by_c[c_identifier(name)] = name
    if all(c_identifier(m) in by_c for m in members):
        return [by_c[c_identifier(m)] for m in members]
    if declared and len(declared) == len(members):
        return list(declared)
    return list(members)


def _declared(main: dict, kind: str) -> dict[str, dict]:
    entries = main.get(kind)
    return entries if isinstance(entries, dict) else {}


def _v8_declared_shapes(listed: object) -> dict[str, list[int]]:
    """Name → shape, from version 8 metadata's `inputs`/`outputs` lists (schema-checked)."""
    out: dict[str, list[int]] = {}
    for t in listed if isinstance(listed, list) else []:
        if isinstance(t, dict) and isinstance(t.get("name"), str) \
                and isinstance(t.get("shape"), list):
            out[t["name"]] = t["shape"]
    return out


def _witness(relay, relay_decl: ShapedTensor | None, meta: dict, name: str,
             meta_shapes: dict[str, list[int]]) -> tuple[str, ShapedTensor | None] | None:
    """What else tells a tensor's size, with a description of the source: its Relay
    declaration; the Relay text without a declaration of it (it exists but cannot
    contradict: TVM does not always annotate the result); or, without Relay text, version 8
    metadata's own shape and dtype. None: nothing."""
    if relay_decl is not None:
        return "the Relay text", relay_decl
    if relay is not None:
        return "the Relay text", None
    shape, dtype = meta_shapes.get(name), meta.get(name, {}).get("dtype")
    if shape is None or not isinstance(dtype, str):
        return None
    try:
        dtype_bits(dtype)
    except ValueError:
        return None
    return "its declared shape", ShapedTensor(name, tuple(shape), dtype)


def _io_size(where: str, what: str, name: str, declared: dict, header, mod: str,
             member: str | None,
             witness: tuple[str, ShapedTensor | None] | None = None,
             notes: list[str] | None = None) -> int | None:
    """A tensor's size from the metadata and the header macro.

    When the two disagree, the tensor's declaration decides (`witness`: its Relay
    declaration, or version 8 metadata's shape and dtype). TVM 0.11-era archives with USMP
    write nonsense `*_SIZE` macros while metadata.json holds the true size: metadata the
    declaration confirms (or Relay text that does not declare the tensor leaves standing) is
    used and the header overruled, with a note; metadata the declaration contradicts, or a
    disagreement with neither Relay text nor a declared shape, is refused.
    """
    meta_size = declared.get(name, {}).get("size")
    header_size = header.io_size(mod, member) if header is not None and member else None
    if meta_size is None or header_size is None or meta_size == header_size:
        return meta_size if meta_size is not None else header_size
    macro = header.io_size_macro(mod, member)
    if witness is None:
        raise MlfError(f"{where}: {what} '{name}' has {meta_size} bytes in metadata.json but "
                       f"{header_size} in the C interface header ({macro}), and no Relay "
                       "declaration of it tells which is right")
    source, decl = witness
    if decl is not None and decl.size_bytes != meta_size:
        shape = "x".join(map(str, decl.shape))
        raise MlfError(f"{where}: {what} '{name}' has {meta_size} bytes in metadata.json but "
                       f"{source} gives {decl.dtype}[{shape}] = {decl.size_bytes} bytes "
                       f"(and header macro {macro} says {header_size})")
    if notes is not None:
        agree = (f"metadata and {source} say {meta_size} B" if decl is not None else
                 f"metadata says {meta_size} B ({source} does not declare its shape)")
        notes.append(f"header macro {macro} says {header_size} B; {agree}: using {meta_size}")
    return meta_size


def _resolve_inputs(where: str, mod: str, main: dict, header, relay,
                    param_names: set[str], c_names: dict[str, str],
                    meta_shapes: dict[str, list[int]] | None = None,
                    notes: list[str] | None = None) -> list[TensorInfo]:
    meta_in = _declared(main, "inputs")
    relay_params = {p.name: p for p in relay.params} if relay else {}
    members: list[str | None]
    if header is not None and header.inputs:
        members = list(header.inputs)
        names = _pair_names(header.inputs, list(meta_in), list(relay_params), c_names)
    elif meta_in:
        order = [p for p in relay_params if p in meta_in]
        names = order + sorted(n for n in meta_in if n not in order)
        members = [None] * len(names)
    elif relay is not None:
        names = [p.name for p in relay.params
                 if p.name not in param_names and not _PARAM_NAME_RE.match(p.name)]
        members = [None] * len(names)
    else:
        raise MlfError(f"{where}: cannot tell the model's inputs (no metadata inputs, no C "
                       "interface header, no Relay text)")
    if not names:
        raise MlfError(f"{where}: the model has no inputs")
    result = []
    for n, member in zip(names, members, strict=True):
        rp = relay_params.get(n)
        dtype = meta_in.get(n, {}).get("dtype") or (rp.dtype if rp else None)
        size = _io_size(where, "input", n, meta_in, header, mod, member,
                        _witness(relay, rp, meta_in, n, meta_shapes or {}), notes)
        if size is None and rp is not None:
            size = rp.size_bytes
        if dtype is None or size is None:
            raise MlfError(f"{where}: cannot tell the dtype and size of input '{n}'")
        result.append(_tensor(where, "input", n, _checked_dtype(where, n, dtype), size,
                              rp.shape if rp is not None and rp.size_bytes == size else None,
                              _member_c_name(member, c_names)))
    return result


def _resolve_outputs(where: str, mod: str, main: dict, header, relay,
                     inputs: list[TensorInfo], c_names: dict[str, str],
                     meta_shapes: dict[str, list[int]] | None = None,
                     notes: list[str] | None = None) -> list[TensorInfo]:
    meta_out = _declared(main, "outputs")
    members: list[str | None]
    if header is not None and header.outputs:
        members = list(header.outputs)
        names = _pair_names(header.outputs, sorted(meta_out, key=_natural_key), [], c_names)
    elif meta_out:
        names = sorted(meta_out, key=_natural_key)
        members = [None] * len(names)
    else:
        names, members = ["output"], [None]
    single = relay.result if relay is not None and len(names) == 1 else None
    result = []
    for n, member in zip(names, members, strict=True):
        size = _io_size(where, "output", n, meta_out, header, mod, member,
                        _witness(relay, single, meta_out, n, meta_shapes or {}), notes)
        if size is None and single is not None:
            size = single.size_bytes
        if size is None and len(names) == 1 and main.get("io_size_bytes"):
            size = int(main["io_size_bytes"]) - sum(t.size_bytes for t in inputs)
        dtype = meta_out.get(n, {}).get("dtype")
        if dtype is None and not meta_out and relay is not None:
            dtype = (single.dtype if single is not None
                     else relay.result_dtype_hint or relay.uniform_dtype)
        if dtype is None:
            raise MlfError(f"{where}: cannot tell the dtype of output '{n}' (neither "
                           "metadata.json nor the model's Relay text gives it)")
        if size == 0:
            raise MlfError(f"{where}: output '{n}' has no elements (0 bytes): there is "
                           "nothing for the firmware to return")
        if size is None or size < 0:
            raise MlfError(f"{where}: cannot tell the size of output '{n}'")
        shape = single.shape if single is not None and single.size_bytes == size else None
        result.append(_tensor(where, "output", n, _checked_dtype(where, n, dtype), size, shape,
                              _member_c_name(member, c_names)))
    return result


def _checked_dtype(where: str, name: str, dtype: str) -> str:
    try:
        dtype_bits(dtype)
    except ValueError:
        raise MlfError(f"{where}: tensor '{name}' has unknown dtype '{dtype}'") from None
    return dtype


def _member_c_name(member: str | None, c_names: dict[str, str]) -> str:
    """A header member's name when v8 metadata names it ("": TVM's rule on the name)."""
    return member if member is not None and member in c_names else ""


def _tensor(where: str, what: str, name: str, dtype: str, size: int,
            shape: tuple[int, ...] | None, c_name: str = "") -> TensorInfo:
    if not 0 < size <= MAX_IO_BYTES:
        raise MlfError(f"{where}: {what} '{name}' has {size} bytes (from 1 to {MAX_IO_BYTES})")
    if size * 8 % dtype_bits(dtype):
        raise MlfError(f"{where}: {what} '{name}' has {size} bytes, not a whole number of "
                       f"{dtype} elements")
    return TensorInfo(name, dtype, int(size), shape, "relay" if shape else "flat", c_name)


def _natural_key(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
