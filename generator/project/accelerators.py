"""The accelerator drivers a project builds: from the plugins an MLF v8 archive names.

The archive says which plugin took which operators and with which options; the plugin
(found on this machine, never code from the archive) says which C files, include
directories and defines its driver needs. Everything that reaches CMake or C is checked.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from generator.accel import registry
from generator.accel.api import Accelerator, Driver
from generator.boards import Board
from generator.errors import MtgError, ProjectError
from generator.mlf.model import ModuleInfo
from generator.project.libraries import SAFE_PATH_RE

RELATIVE_PATH_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
DEFINE_VALUE_RE = re.compile(r"-?[0-9]{1,18}|[A-Za-z_][A-Za-z0-9_]{0,63}")
GLOB_RE = re.compile(r"[A-Za-z0-9_*][A-Za-z0-9_.*/+-]*")
MAX_DRIVER_FILE_BYTES = 4 << 20


@dataclass
class ExternalBuild:
    name: str  # a CMake-safe identifier
    root: str
    globs: list[str]
    include_dirs: list[str]


@dataclass
class AcceleratorBuild:
    """One accelerator's part of a project: files to write and what CMake adds."""

    name: str
    files: dict[str, bytes] = field(default_factory=dict)  # project path → content
    sources: list[str] = field(default_factory=list)
    include_dirs: list[str] = field(default_factory=list)
    defines: dict[str, str] = field(default_factory=dict)
    external: list[ExternalBuild] = field(default_factory=list)
    counters: str | None = None


def project_accelerators(module: ModuleInfo, board: Board, origin: str,
                         refused_by: str | None = None,
                         overrides: dict[str, dict] | None = None) -> list[AcceleratorBuild]:
    """Every accelerator the module calls, checked against the board, as build parts.
    `refused_by`: the title of a template that builds no accelerator drivers (its back-end
    says so); `overrides`: option values given at generation ({plugin: {option: value}})."""
    builds = []
    for use in module.accelerators:
        if refused_by:
            raise ProjectError(f"{origin}: the model calls accelerator '{use.name}'; the "
                               f"{refused_by} template does not build accelerator drivers yet "
                               "(use the crt template)")
        try:
            plugin = registry.find(use.name)
            options = _options(plugin, use.options, (overrides or {}).get(use.name, {}))
        except MtgError as exc:
            raise ProjectError(f"{origin}: {exc.one_line()}") from None
        if use.abi != plugin.abi:
            raise ProjectError(f"{origin}: the model was exported for accelerator "
                               f"'{use.name}' driver interface {use.abi}, this microtvm-gen's "
                               f"is {plugin.abi}: export the model again with this version")
        reason = plugin.supports(board)
        if reason:
            raise ProjectError(f"{origin}: accelerator '{use.name}' does not support board "
                               f"'{board.name}': {reason}")
        try:
            driver = plugin.driver(options, board)
        except MtgError as exc:
            raise ProjectError(f"{origin}: {exc.one_line()}") from None
        except Exception as exc:
            raise ProjectError(f"accelerator '{use.name}' raised in driver(): "
                               f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
        if not isinstance(driver, Driver):
            raise ProjectError(f"accelerator '{use.name}': driver() must return a "
                               "generator.accel.Driver")
        build = _build(use.name, driver)
        if driver.scratch_define:
            build.defines[driver.scratch_define] = str(max(1, use.scratch_bytes))
        builds.append(build)
    return builds


def _options(plugin: Accelerator, recorded: dict, given: dict) -> dict:
    """The archive's option values, checked again by the plugin's declaration; an option
    with an environment variable takes the variable's value when it is set here. Paths are
    never taken from an archive (they name the exporting machine's files): they come from
    this machine's environment or generate's own flags."""
    kinds = {o.name: o.type for o in plugin.options}
    values = {k: v for k, v in recorded.items() if v is not None and kinds.get(k) != "path"}
    values.update(given)
    for opt in plugin.options:
        if opt.env and os.environ.get(opt.env) and opt.name not in given:
            values[opt.name] = os.environ[opt.env]
    return registry.check_options(plugin, values)


def _build(name: str, driver: Driver) -> AcceleratorBuild:
    where = f"accelerator '{name}'"
    safe = re.sub(r"[^a-z0-9_]", "_", name)
    base = f"accel/{safe}"
    build = AcceleratorBuild(name)
    directory = Path(driver.directory).resolve()
    for rel in (*driver.sources, *driver.headers):
        if not RELATIVE_PATH_RE.fullmatch(rel) or ".." in rel.split("/"):
            raise ProjectError(f"{where}: driver file {rel!r} is not a plain relative path")
        path = (directory / rel).resolve()
        if not path.is_file() or directory not in path.parents:
            raise ProjectError(f"{where}: driver file {path} does not exist in {directory}")
        if path.stat().st_size > MAX_DRIVER_FILE_BYTES:
            raise ProjectError(f"{where}: driver file {path} is over 4 MiB")
        build.files[f"{base}/{rel}"] = path.read_bytes()
    build.sources = [f"{base}/{rel}" for rel in driver.sources]
    for rel in driver.include_dirs:
        if rel != "." and (not RELATIVE_PATH_RE.fullmatch(rel) or ".." in rel.split("/")):
            raise ProjectError(f"{where}: include directory {rel!r} is not a plain relative "
                               "path")
        build.include_dirs.append(base if rel == "." else f"{base}/{rel}")
    for key, value in driver.defines.items():
        text = str(int(value)) if isinstance(value, bool | int) else str(value)
        if not C_IDENTIFIER_RE.fullmatch(key) or not DEFINE_VALUE_RE.fullmatch(text):
            raise ProjectError(f"{where}: define {key}={text!r} is not an identifier with a "
                               "number or identifier value")
        build.defines[key] = text
    if driver.scratch_define is not None and \
            not C_IDENTIFIER_RE.fullmatch(driver.scratch_define):
        raise ProjectError(f"{where}: scratch define {driver.scratch_define!r} is not a C "
                           "identifier")
    if driver.counters is not None and not C_IDENTIFIER_RE.fullmatch(driver.counters):
        raise ProjectError(f"{where}: counters hook {driver.counters!r} is not a C identifier")
    build.counters = driver.counters
    for ext in driver.external:
        root = Path(ext.root).expanduser().resolve()
        if not SAFE_PATH_RE.fullmatch(root.as_posix()) or not root.is_dir():
            raise ProjectError(f"{where}: {ext.name} source tree {root.as_posix()!r} is not a "
                               "directory with a plain path (letters, digits, '_', '.', "
                               "'+', '-', '/')")
        if not C_IDENTIFIER_RE.fullmatch(ext.name.replace("-", "_")) or not all(
                GLOB_RE.fullmatch(g) and ".." not in g for g in ext.globs) or not all(
                RELATIVE_PATH_RE.fullmatch(d) and ".." not in d for d in ext.include_dirs):
            raise ProjectError(f"{where}: external sources '{ext.name}' have unsafe globs or "
                               "include directories")
        build.external.append(ExternalBuild(ext.name.replace("-", "_"), root.as_posix(),
                                            list(ext.globs), list(ext.include_dirs)))
    return build
