"""The shape of metadata.json, checked before the reader uses any field.

Per MLF version: which fields are objects, lists, strings or sizes. A size is a JSON
integer (not a bool, not a float) from 0 to MAX_SIZE, which fits a 32-bit board's address
space; a name is a string of printable characters of bounded length. Fields the reader
does not use are not checked. Every failure is one MlfError naming the field's path.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from generator.errors import MlfError

MAX_SIZE = (1 << 31) - 1  # bytes: nothing larger fits a 32-bit microcontroller
MAX_NAME_CHARS = 256
MAX_TEXT_CHARS = 4096
# A model's tensor names are data (shown, matched by `run --input`, never written into C
# as they are: their C names are), so they may be longer than other names.
MAX_TENSOR_NAME_CHARS = MAX_TEXT_CHARS
MAX_ITEMS = 100_000
MAX_DIMS = 16
_C_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _fail(where: str, what: str) -> None:
    raise MlfError(f"{where}: {what}")


def is_size(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_SIZE


def check_size(value: object, where: str) -> int:
    if not is_size(value):
        _fail(where, f"{_show(value)} is not a size (an integer from 0 to {MAX_SIZE})")
    return value  # type: ignore[return-value]


def check_text(value: object, where: str, limit: int = MAX_TEXT_CHARS) -> str:
    if not isinstance(value, str):
        _fail(where, f"{_show(value)} is not a string")
    if len(value) > limit:  # type: ignore[arg-type]
        _fail(where, f"a string of {len(value)} characters, over the limit of {limit}")  # type: ignore[arg-type]
    if any(ord(c) < 0x20 or c == "\x7f" for c in value):  # type: ignore[union-attr]
        _fail(where, f"{_show(value)} holds control characters")
    return value  # type: ignore[return-value]


def check_name(value: object, where: str) -> str:
    name = check_text(value, where, MAX_NAME_CHARS)
    if not name:
        _fail(where, "an empty name")
    return name


def check_tensor_name(value: object, where: str) -> str:
    """A model's name of one of its tensors: any non-empty text without control characters,
    up to MAX_TENSOR_NAME_CHARS (the exporter checks the names it writes with this too)."""
    name = check_text(value, where, MAX_TENSOR_NAME_CHARS)
    if not name:
        _fail(where, "an empty name")
    return name


def check_c_name(value: object, where: str) -> str:
    """A C identifier the archive gives a tensor (MLF v8 `c_name`): it is written into the
    generated C, so nothing but [A-Za-z_][A-Za-z0-9_]* of at most MAX_NAME_CHARS."""
    name = check_text(value, where, MAX_NAME_CHARS)
    if not _C_NAME_RE.fullmatch(name):
        _fail(where, f"{_show(value)} is not a C identifier")
    return name


def check_shape(value: object, where: str) -> list[int]:
    if not isinstance(value, list) or len(value) > MAX_DIMS:
        _fail(where, f"{_show(value)} is not a shape (a list of at most {MAX_DIMS} sizes)")
    for i, dim in enumerate(value):  # type: ignore[arg-type]
        check_size(dim, f"{where}[{i}]")
    return value  # type: ignore[return-value]


def _obj(value: object, where: str, required: bool = True) -> dict:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        _fail(where, f"{_show(value)} is not an object")
    return value  # type: ignore[return-value]


def _list(value: object, where: str, required: bool = True) -> list:
    if value is None and not required:
        return []
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        _fail(where, f"{_show(value)} is not a list of at most {MAX_ITEMS} items")
    return value  # type: ignore[return-value]


def _optional(info: dict, key: str, check: Callable[[object, str], object], where: str) -> None:
    """Check a field when present (a null is checked too: the reader would use it)."""
    if key in info:
        check(info[key], f"{where}.{key}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_metadata(meta: dict, version: int, where: str) -> None:
    """Check the fields the reader uses, for this MLF version."""
    if version >= 7:
        modules = _obj(meta.get("modules"), f"{where} modules")
        if not modules:
            _fail(f"{where} modules", "no modules")
        for name, info in modules.items():
            check_name(name, f"{where} modules")
            _check_module(_obj(info, f"{where} modules.{name}"), version,
                          f"{where} modules.{name}")
    else:
        _optional(meta, "model_name", check_name, where)
        _check_module(meta, version, where)


def _check_module(info: dict, version: int, where: str) -> None:
    _optional(info, "style", check_name, where)
    _optional(info, "export_datetime", check_text, where)
    executors = _list(info.get("executors"), f"{where}.executors")
    for i, e in enumerate(executors):
        check_name(e, f"{where}.executors[{i}]")
    target = info.get("target", [])
    items = list(target.values()) if isinstance(target, dict) else _list(target, f"{where}.target")
    for i, t in enumerate(items):
        check_text(t, f"{where}.target[{i}]")
    for i, dep in enumerate(_list(info.get("external_dependencies"),
                                  f"{where}.external_dependencies", required=False)):
        at = f"{where}.external_dependencies[{i}]"
        dep = _obj(dep, at)
        _optional(dep, "short_name", check_text, at)
        _optional(dep, "version_spec", check_text, at)
    memory = _obj(info.get("memory"), f"{where}.memory")
    functions = _obj(memory.get("functions"), f"{where}.memory.functions")
    for i, main in enumerate(_list(functions.get("main"), f"{where}.memory.functions.main",
                                   required=False)):
        _check_main(_obj(main, f"{where}.memory.functions.main[{i}]"),
                    f"{where}.memory.functions.main[{i}]")
    for i, func in enumerate(_list(functions.get("operator_functions"),
                                   f"{where}.memory.functions.operator_functions",
                                   required=False)):
        at = f"{where}.memory.functions.operator_functions[{i}]"
        func = _obj(func, at)
        _optional(func, "function_name", check_text, at)
        for j, ws in enumerate(_list(func.get("workspace"), f"{at}.workspace", required=False)):
            ws = _obj(ws, f"{at}.workspace[{j}]")
            _optional(ws, "device", check_size, f"{at}.workspace[{j}]")
            _optional(ws, "workspace_size_bytes", check_size, f"{at}.workspace[{j}]")
    for i, sid in enumerate(_list(memory.get("sids"), f"{where}.memory.sids", required=False)):
        sid = _obj(sid, f"{where}.memory.sids[{i}]")
        _optional(sid, "storage_id", check_size, f"{where}.memory.sids[{i}]")
        _optional(sid, "size_bytes", check_size, f"{where}.memory.sids[{i}]")
    if version >= 8:
        _check_v8(info, where)


def _check_main(main: dict, where: str) -> None:
    for key in ("device", "workspace_size_bytes", "constants_size_bytes", "io_size_bytes"):
        _optional(main, key, check_size, where)
    for kind in ("inputs", "outputs"):
        for name, tensor in _obj(main.get(kind), f"{where}.{kind}", required=False).items():
            check_tensor_name(name, f"{where}.{kind}")
            at = f"{where}.{kind}.{name if len(name) <= 60 else name[:57] + '...'}"
            tensor = _obj(tensor, at)
            _optional(tensor, "size", check_size, at)
            _optional(tensor, "dtype", check_name, at)


def _check_v8(info: dict, where: str) -> None:
    abi = _obj(info.get("abi"), f"{where}.abi")
    check_name(abi.get("name"), f"{where}.abi.name")
    for i, pool in enumerate(_list(info.get("pools"), f"{where}.pools", required=False)):
        pool = _obj(pool, f"{where}.pools[{i}]")
        for key in ("size_bytes", "lower_bound_bytes"):
            _optional(pool, key, check_size, f"{where}.pools[{i}]")
        _optional(pool, "kind", check_name, f"{where}.pools[{i}]")
        _list(pool.get("tensors"), f"{where}.pools[{i}].tensors", required=False)
    for kind in ("inputs", "outputs"):
        for i, tensor in enumerate(_list(info.get(kind), f"{where}.{kind}", required=False)):
            tensor = _obj(tensor, f"{where}.{kind}[{i}]")
            check_tensor_name(tensor.get("name"), f"{where}.{kind}[{i}].name")
            _optional(tensor, "c_name", check_c_name, f"{where}.{kind}[{i}]")
            check_shape(tensor.get("shape"), f"{where}.{kind}[{i}].shape")
    for i, op in enumerate(_list(info.get("operators"), f"{where}.operators", required=False)):
        at = f"{where}.operators[{i}]"
        op = _obj(op, at)
        check_name(op.get("name"), f"{at}.name")
        check_name(op.get("symbol"), f"{at}.symbol")
        for j, arg in enumerate(_list(op.get("args"), f"{at}.args")):
            arg = _obj(arg, f"{at}.args[{j}]")
            check_name(arg.get("name"), f"{at}.args[{j}].name")
            check_name(arg.get("dtype"), f"{at}.args[{j}].dtype")
            check_shape(arg.get("shape"), f"{at}.args[{j}].shape")
            check_size(arg.get("size"), f"{at}.args[{j}].size")
