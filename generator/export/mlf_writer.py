"""MLF version 8 archives: the v7 layout plus the ABI, the pools and per-tensor shapes.

The archive is a plain tar whose bytes depend only on its contents: members sorted, times,
owners and modes fixed. It is written to a temporary file next to the destination and
renamed into place, so a failed export leaves nothing behind.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

MLF_VERSION = 8
ABI_NAME = "mtvg-aot-c"  # docs/mlf.md: C interface run function, kernels as plain C functions
OPERATOR_ABI_NAME = "mtvg-operators-packed"


def write_archive(dest: Path, files: dict[str, bytes]) -> None:
    """Write `files` (archive path → bytes) as a deterministic tar at `dest`, atomically."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w",
                                                    format=tarfile.USTAR_FORMAT) as tar:
            dirs = sorted({str(Path(p).parent) for p in files} - {"."}
                          | {str(parent) for p in files for parent in Path(p).parents
                             if str(parent) != "."})
            for d in dirs:
                tar.addfile(_info(f"./{d}", 0, tarfile.DIRTYPE, 0o755))
            for path in sorted(files):
                data = files[path]
                tar.addfile(_info(f"./{path}", len(data), tarfile.REGTYPE, 0o644),
                            io.BytesIO(data))
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _info(name: str, size: int, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = kind
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def module_metadata(module: str, style: str, executors: list[str], target: str,
                    origin: str) -> dict:
    """The keys every v8 module starts with: v7's, plus who wrote it from what."""
    import tvm

    from generator import __version__

    return {"model_name": module, "style": style, "executors": executors, "target": [target],
            "generator": {"name": "microtvm-gen", "version": __version__,
                          "tvm_version": tvm.__version__, "source": origin}}


def metadata_json(metadata: dict) -> bytes:
    return (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode()
