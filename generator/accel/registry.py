"""Finding accelerator plugins, and turning `--target a,b,c` plus `--target-a-opt=v` into
checked selections.

Where plugins come from, first found wins for a name:
1. `--accelerator-path DIR` (repeatable), then the directories in MICROTVM_GEN_ACCELERATOR_PATH
   (separated like PATH): each `NAME.py` and each package `NAME/__init__.py` in DIR is a
   plugin module;
2. Python entry points in the group `microtvm_gen.accelerators`;
3. the plugins that come with microtvm-gen (vanilla, cmsis-nn).
A plugin module exposes `accelerator`: an `Accelerator` subclass or instance.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from generator.accel.api import OPTION_TYPES, Accelerator, Option
from generator.accel.dispatch import Selected, call_plugin, one_line
from generator.errors import ExportError

PATH_ENV = "MICROTVM_GEN_ACCELERATOR_PATH"
ENTRY_POINT_GROUP = "microtvm_gen.accelerators"
# In search order: a board's defaults take layers in this order (arm-dsp before CMSIS-NN).
BUILT_IN = {"vanilla": "generator.accel.vanilla", "arm-dsp": "generator.accel.arm_dsp",
            "cmsis-nn": "generator.accel.cmsis_nn"}
NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
OPTION_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
CPU_TARGET = "c"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


@dataclass
class Found:
    """A plugin found (or a module that failed to load: `error` says why, in one line)."""

    name: str
    origin: str
    plugin: Accelerator | None = None
    error: str | None = None
    shadowed_by: str | None = None


def search_paths(extra: list[Path] | None = None) -> list[Path]:
    paths = list(extra or [])
    paths += [Path(p) for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p]
    return paths


def discover(extra_paths: list[Path] | None = None) -> list[Found]:
    """Every plugin in search order; duplicates of a name are marked `shadowed_by`."""
    found: list[Found] = []
    for directory in search_paths(extra_paths):
        found += _from_directory(directory)
    found += _from_entry_points()
    for name, module in BUILT_IN.items():
        found.append(_from_module(name, f"built-in ({module})", lambda m=module:
                                  importlib.import_module(m)))
    first: dict[str, Found] = {}
    for f in found:
        if f.name in first:
            f.shadowed_by = first[f.name].origin
        else:
            first[f.name] = f
    return found


def find(name: str, extra_paths: list[Path] | None = None) -> Accelerator:
    """The plugin called `name` (the first found), or a one-line error."""
    candidates = [f for f in discover(extra_paths) if f.name == name and not f.shadowed_by]
    if not candidates:
        names = sorted({f.name for f in discover(extra_paths) if f.error is None})
        raise ExportError(f"no accelerator plugin '{name}' (found: {', '.join(names)}; "
                          f"add a directory with --accelerator-path or {PATH_ENV})")
    f = candidates[0]
    if f.error:
        raise ExportError(f"accelerator plugin '{name}' from {f.origin} does not load: "
                          f"{f.error}")
    return f.plugin


def _from_directory(directory: Path) -> list[Found]:
    if not directory.is_dir():
        return [Found(directory.name or str(directory), str(directory),
                      error=f"{directory} is not a directory")]
    out = []
    for entry in sorted(directory.iterdir()):
        if entry.suffix == ".py" and entry.is_file() and not entry.name.startswith("_"):
            name, init = entry.stem, entry
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            name, init = entry.name, entry / "__init__.py"
        else:
            continue
        out.append(_from_module(name.replace("_", "-"), str(entry),
                                lambda n=name, i=init: _load_file(n, i)))
    return out


def _load_file(name: str, init: Path):
    digest = hashlib.sha1(str(init.resolve()).encode()).hexdigest()[:10]
    module_name = f"microtvm_gen_plugin_{digest}_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    locations = [str(init.parent)] if init.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(module_name, init,
                                                  submodule_search_locations=locations)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {init}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _from_entry_points() -> list[Found]:
    out = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        out.append(_from_module(ep.name, f"entry point {ep.value}", ep.load, direct=True))
    return out


def _from_module(name: str, origin: str, load, direct: bool = False) -> Found:
    """Load a plugin: `load()` gives a module (or, for entry points, the object itself)."""
    try:
        obj = load()
        if not direct:
            obj = getattr(obj, "accelerator", None)
            if obj is None:
                return Found(name, origin, error="the module defines no 'accelerator'")
        plugin = obj() if isinstance(obj, type) else obj
        if not isinstance(plugin, Accelerator):
            return Found(name, origin, error="'accelerator' is not a "
                                             "generator.accel.Accelerator")
        _check_declaration(plugin)
    except ExportError as exc:
        return Found(name, origin, error=str(exc))
    except Exception as exc:
        return Found(name, origin, error=f"{type(exc).__name__}: {one_line(exc)}")
    return Found(plugin.name, origin, plugin)


def _check_declaration(plugin: Accelerator) -> None:
    if not NAME_RE.fullmatch(plugin.name or "") or plugin.name == CPU_TARGET:
        raise ExportError(f"plugin name {plugin.name!r} is not lower-case letters, digits, "
                          "'-' and '_' (at most 32) or is 'c'")
    for opt in plugin.options:
        if not isinstance(opt, Option) or not OPTION_NAME_RE.fullmatch(opt.name) \
                or opt.type not in OPTION_TYPES:
            raise ExportError(f"option {opt!r} is not an Option with a name of lower-case "
                              f"letters, digits and '_' and a type in {OPTION_TYPES}")


# ---- --target and --target-<name>-<option> ------------------------------------------------

def split_target_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """Pull `--target-NAME-OPTION[=VALUE]` (and a following VALUE) out of argv."""
    rest, options = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--target-") and len(arg) > len("--target-"):
            if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                arg = f"{arg}={argv[i + 1]}"
                i += 1
            options.append(arg)
        else:
            rest.append(arg)
        i += 1
    return rest, options


def select(target: str | None, accelerators: list[str], raw_options: list[str],
           extra_paths: list[Path] | None = None) -> list[Selected]:
    """Plugins named by `--target a,b,c` (the last must be c) and `--accelerator NAME`,
    in order, each with its options checked and converted."""
    names: list[str] = []
    if target is not None:
        parts = [p.strip() for p in target.split(",")]
        if not parts or parts[-1] != CPU_TARGET or CPU_TARGET in parts[:-1] or \
                any(not p for p in parts):
            raise ExportError(f"--target {target!r}: name accelerators then 'c', e.g. "
                              "--target vanilla,c")
        names = parts[:-1]
    names += [a for a in accelerators if a not in names]
    if len(set(names)) != len(names):
        raise ExportError(f"--target names an accelerator twice: {','.join(names)}")
    plugins = [find(n, extra_paths) for n in names]
    given = _parse_raw_options(raw_options, names)
    selected = []
    for plugin in plugins:
        values = check_options(plugin, given.get(plugin.name, {}))
        call_plugin(plugin, "configure", plugin.configure, values)
        selected.append(Selected(plugin, values))
    return selected


def board_defaults(board, raw_options: list[str],
                   extra_paths: list[Path] | None = None) -> tuple[list[Selected], list[str]]:
    """The accelerators chosen by default for `board` (`export --board` without --target),
    and notes on defaults that could not be used (what to set)."""
    selected, notes = [], []
    for f in discover(extra_paths):
        plugin = f.plugin
        if plugin is None or f.shadowed_by or not set(plugin.default_on) & set(board.features):
            continue
        if plugin.supports(board):
            continue
        given = _parse_raw_options(raw_options, [plugin.name]).get(plugin.name, {}) \
            if any(o.startswith(f"--target-{plugin.name}-") for o in raw_options) else {}
        given = {**call_plugin(plugin, "board_options", plugin.board_options, board), **given}
        values = check_options(plugin, given)
        reason = call_plugin(plugin, "ready", plugin.ready, values)
        if reason:
            notes.append(f"accelerator '{plugin.name}' is the default on {board.name} but "
                         f"cannot be used: {reason}")
            continue
        call_plugin(plugin, "configure", plugin.configure, values)
        selected.append(Selected(plugin, values, "default"))
    return selected, notes


def _parse_raw_options(raw: list[str], names: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for item in raw:
        key, eq, value = item[len("--target-"):].partition("=")
        if not eq:
            raise ExportError(f"{item}: give a value, --target-NAME-OPTION=VALUE")
        owner = next((n for n in sorted(names, key=len, reverse=True)
                      if key.startswith(n + "-")), None)
        if owner is None:
            raise ExportError(f"{item}: no accelerator in --target takes it (targets: "
                              f"{','.join(names) or 'none'})")
        out.setdefault(owner, {})[key[len(owner) + 1:].replace("-", "_")] = value
    return out


def check_options(plugin: Accelerator, given: dict[str, Any]) -> dict[str, Any]:
    """Every declared option with a checked value (given, from its env, or the default)."""
    known = {o.name: o for o in plugin.options}
    unknown = sorted(set(given) - set(known))
    if unknown:
        listed = ", ".join(known) or "none"
        raise ExportError(f"accelerator '{plugin.name}' has no option '{unknown[0]}' "
                          f"(options: {listed})")
    values = {}
    for name, opt in known.items():
        raw = given.get(name)
        if raw is None and opt.env and os.environ.get(opt.env):
            raw = os.environ[opt.env]
        values[name] = opt.default if raw is None else convert(plugin.name, opt, raw)
    return values


def convert(plugin: str, opt: Option, raw: Any) -> Any:
    where = f"--target-{plugin}-{opt.name.replace('_', '-')}"
    text = str(raw)
    if opt.type == "int":
        if isinstance(raw, bool) or not re.fullmatch(r"-?\d{1,18}", text):
            raise ExportError(f"{where}={text!r}: not an integer")
        value: Any = int(text)
    elif opt.type == "bool":
        if isinstance(raw, bool):
            value = raw
        elif text.lower() in TRUE_WORDS + FALSE_WORDS:
            value = text.lower() in TRUE_WORDS
        else:
            raise ExportError(f"{where}={text!r}: not true or false")
    elif opt.type == "path":
        value = str(Path(text).expanduser())
    else:
        value = text
    if opt.choices and str(value) not in opt.choices:
        raise ExportError(f"{where}={text!r}: one of {', '.join(opt.choices)}")
    return value
