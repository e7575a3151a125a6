"""Where the tool's data folders (templates/, boards/) live.

In an installed wheel they are package data: generator/_templates and generator/_boards
(setup.py maps the repository's top-level folders there at build time). In a source
checkout or an editable install they sit next to the `generator` package. MICROTVM_GEN_ROOT
(a folder holding templates/ and boards/) overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT_ENV = "MICROTVM_GEN_ROOT"
PACKAGE_DIR = Path(__file__).resolve().parent
# The installed copies, and the folders they come from in the repository.
INSTALLED = {"templates": PACKAGE_DIR / "_templates", "boards": PACKAGE_DIR / "_boards"}


def project_root() -> Path:
    """The source tree (or MICROTVM_GEN_ROOT): the folder holding templates/ and boards/."""
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env)
    return PACKAGE_DIR.parent


def _data_dir(name: str) -> Path:
    if not os.environ.get(ROOT_ENV) and INSTALLED[name].is_dir():
        return INSTALLED[name]
    return project_root() / name


def templates_dir() -> Path:
    return _data_dir("templates")


def boards_dir() -> Path:
    return _data_dir("boards")
