"""Reading Model Library Format archives.

The names below load their modules on first use (PEP 562): a module that needs only the
archive's types (`generator.mlf.model`, `dtypes`) imports without the reader and numpy,
which keeps the Project API server and the CLI quick to start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.mlf.model import MlfArchive, ModuleInfo, TensorInfo
    from generator.mlf.reader import read_mlf

__all__ = ["MlfArchive", "ModuleInfo", "TensorInfo", "read_mlf"]
_HOMES = {"MlfArchive": "model", "ModuleInfo": "model", "TensorInfo": "model",
          "read_mlf": "reader"}


def __getattr__(name: str):
    """The names of __all__, from the module that defines them."""
    if name in _HOMES:
        from importlib import import_module

        return getattr(import_module(f"generator.mlf.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
