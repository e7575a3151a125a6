"""Writing the report's pictures: each file whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

LAYERS_SUFFIX = ".layers.svg"


def layers_svg_path(svg: Path) -> Path:
    """Where --svg FILE puts the per-layer picture: beside the memory map."""
    stem = svg.name[:-len(".svg")] if svg.name.endswith(".svg") else svg.name
    return svg.with_name(stem + LAYERS_SUFFIX)


def write_pictures(report: dict, html: Path | None, svg: Path | None) -> list[Path]:
    """Write the pages asked for; the paths written, in order."""
    from generator.report import pictures

    written = []
    if svg is not None:
        written.append(_write(svg, pictures.memory_svg(report)))
        written.append(_write(layers_svg_path(svg), pictures.layers_svg(report)))
    if html is not None:
        written.append(_write(html, pictures.html_page(report)))
    return written


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def _write(path: Path, text: str) -> Path:
    """Through a temporary file in the same folder, renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would have made it
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
