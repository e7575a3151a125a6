"""Writing a rendered project: every file, or nothing.

The files go to a staging folder inside the project directory first; only when all are
written do they replace the directory's old contents.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from generator.errors import ProjectError

STAGING_NAME = ".mtvg-staging"
EXECUTABLE_SUFFIXES = (".sh", "microtvm_api_server.py")


def check_target_dir(out_dir: Path, force: bool) -> None:
    """Refuse to render into a file, or into a non-empty directory unless forced."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ProjectError(f"{out_dir} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise ProjectError(f"{out_dir} exists and is not empty; pass --force to replace it")


def write_atomically(out_dir: Path, rendered: dict[str, bytes]) -> None:
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
        move_into_place(out_dir, staging)
    except BaseException:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        else:
            shutil.rmtree(staging, ignore_errors=True)
        raise


def move_into_place(out_dir: Path, staging: Path) -> None:
    """Replace everything in `out_dir` but `staging` (a folder inside it) with what
    `staging` holds, then remove `staging`."""
    for old in out_dir.iterdir():
        if old.name == staging.name:
            continue
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    for item in sorted(staging.iterdir()):
        item.rename(out_dir / item.name)
    staging.rmdir()
