"""A board port's files: its own folder under templates/common/platform/, and the shared
layers its `port.toml` names (folders next to it: `cortex_m`, `semihost`, `st_usart`, ...).

    # templates/common/platform/stm32f7/port.toml
    layers = ["cortex_m", "cortex_m_board", "cortex_m_dwt", "st_usart"]

A project's `platform/` folder is flat: the port's files and every named layer's files side
by side, so a layer's `startup.c` includes the port's `port.h` by its plain name. A name that
two of those folders hold is an error, never a silent choice. A port without `port.toml`
(posix, zephyr) is its own folder alone.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from generator.errors import ProjectError

PORT_FILE = "port.toml"
LAYERS_KEY = "layers"
# What a project's platform/ folder takes from a port or a layer folder.
COPIED_SUFFIXES = (".c", ".h", ".ld", ".S", ".cmake")
LAYER_NAME_RE = re.compile(r"[a-z0-9_]+")


def port_layers(port_dir: Path) -> list[str]:
    """The layer folders `port_dir/port.toml` names, in its order (none without the file)."""
    spec = port_dir / PORT_FILE
    if not spec.is_file():
        return []
    try:
        data = tomllib.loads(spec.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProjectError(f"{spec}: {exc}") from exc
    unknown = sorted(set(data) - {LAYERS_KEY})
    layers = data.get(LAYERS_KEY, [])
    if unknown:
        raise ProjectError(f"{spec}: unknown keys {', '.join(unknown)} (it has '{LAYERS_KEY}')")
    if not isinstance(layers, list) or not all(isinstance(n, str) for n in layers):
        raise ProjectError(f"{spec}: '{LAYERS_KEY}' is a list of folder names")
    for name in layers:
        if not LAYER_NAME_RE.fullmatch(name) or name == port_dir.name:
            raise ProjectError(f"{spec}: '{name}' is not a layer folder name")
        if not (port_dir.parent / name).is_dir():
            raise ProjectError(f"{spec}: layer '{name}' has no folder {port_dir.parent / name}")
    if len(set(layers)) != len(layers):
        raise ProjectError(f"{spec}: a layer is named twice")
    return layers


def port_files(port_dir: Path) -> dict[str, Path]:
    """File name in the project's platform/ folder -> its source, sorted by name: the port's
    own files and those of every layer it names."""
    found: dict[str, Path] = {}
    for folder in [port_dir, *(port_dir.parent / n for n in port_layers(port_dir))]:
        for src in sorted(folder.iterdir()):
            if not (src.is_file() and src.suffix in COPIED_SUFFIXES):
                continue
            if src.name in found:
                raise ProjectError(f"port '{port_dir.name}': {src.name} is both "
                                   f"{found[src.name]} and {src}")
            found[src.name] = src
    return dict(sorted(found.items()))
