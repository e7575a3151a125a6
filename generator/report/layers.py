"""The model's layers as the archive records them (metadata "layers", written by our
exporter since MLF v8 archives carry it): what each call computes, reads and writes."""

from __future__ import annotations

import json
from pathlib import Path

from generator.elfsize import ElfSymbol
from generator.errors import InputError
from generator.report.model import Layer, TensorUse

_KINDS = ("input", "output", "constant", "activation")
METADATA = Path("model") / "metadata.json"  # a project's copy of the archive's metadata


def module_metadata(path: Path, module: str) -> dict:
    """One module's entry of a metadata.json file ({} when it cannot be read)."""
    try:
        return module_entry(path.read_bytes(), module)
    except OSError:
        return {}


def module_entry(text: bytes, module: str) -> dict:
    """One module's entry of metadata.json's text ({} when it has none)."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    modules = data.get("modules") if isinstance(data, dict) else None
    info = modules.get(module) if isinstance(modules, dict) else None
    return info if isinstance(info, dict) else {}


def layers_of(module_info: dict, module: str, symbols: list[ElfSymbol] | None = None,
              where: str = "metadata.json") -> list[Layer]:
    """The layers of one module's metadata (empty when the archive's writer recorded none:
    archives TVM 0.8-0.18 wrote). With the ELF's `symbols`, each layer's kernel code size."""
    records = module_info.get("layers")
    if records is None:
        return []
    if not isinstance(records, list):
        raise InputError(f"{where}: 'layers' is not a list")
    code = {}
    if symbols is not None:
        prefix = f"tvmgen_{module}_"
        code = {s.name[len(prefix):]: s.size for s in symbols
                if s.kind == "func" and s.name.startswith(prefix)}
    return [_layer(i, record, code, f"{where}: layer {i}") for i, record in enumerate(records)]


def _layer(index: int, record, code: dict[str, int], where: str) -> Layer:
    if not isinstance(record, dict):
        raise InputError(f"{where} is not an object")
    kernel = _text(record.get("kernel"), where, "kernel")
    operators = record.get("operators", [])
    if not isinstance(operators, list) or not all(isinstance(o, str) for o in operators):
        raise InputError(f"{where}: 'operators' is not a list of names")
    macs = record.get("macs")
    if macs is not None and not _count(macs):
        raise InputError(f"{where}: 'macs' is not a count")
    weights = record.get("weights_bytes", 0)
    if not _count(weights):
        raise InputError(f"{where}: 'weights_bytes' is not a count")
    args = record.get("args", [])
    if not isinstance(args, list):
        raise InputError(f"{where}: 'args' is not a list")
    tensors = [_tensor(a, f"{where} argument {n}") for n, a in enumerate(args)]
    return Layer(index, kernel, operators,
                 [t for t, role in tensors if role == "input"],
                 [t for t, role in tensors if role == "output"],
                 macs, weights, _text(record.get("implementation", "ours"), where,
                                      "implementation"),
                 code.get(kernel))


def _tensor(record, where: str) -> tuple[TensorUse, str]:
    if not isinstance(record, dict):
        raise InputError(f"{where} is not an object")
    shape = record.get("shape")
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise InputError(f"{where}: 'shape' is not a list of sizes")
    kind = record.get("kind")
    if kind not in _KINDS:
        raise InputError(f"{where}: 'kind' is not one of {', '.join(_KINDS)}")
    role = record.get("role")
    if role not in ("input", "output"):
        raise InputError(f"{where}: 'role' is not input or output")
    size = record.get("bytes")
    if not _count(size):
        raise InputError(f"{where}: 'bytes' is not a count")
    return TensorUse(shape, _text(record.get("dtype"), where, "dtype"), kind, size,
                     _text(record.get("ref", ""), where, "ref")), role


def _text(value, where: str, key: str) -> str:
    """A name from the archive: printable (it reaches terminals and pages), not too long."""
    if not isinstance(value, str) or len(value) > 256 or not value.isprintable():
        raise InputError(f"{where}: '{key}' is not a name")
    return value


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
