"""Where the tool's data folders (templates/, boards/) live.

They sit next to the `generator` package in a source checkout or an editable install.
MICROTVM_GEN_ROOT overrides the location.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("MICROTVM_GEN_ROOT")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent


def templates_dir() -> Path:
    return project_root() / "templates"


def boards_dir() -> Path:
    return project_root() / "boards"
