"""`generate --profile`: firmware that reads its timer at each mark of the run function.

The exporter's run function (MLF v8, microtvm-gen) marks the timer before its first call
and after each when `TVMGEN_<MOD>_PROFILE` is defined; the standalone application keeps
the readings in a buffer of MTVG_PROFILE_POINTS entries and `run --profile` reads them.
Without --profile neither macro is defined: the marks compile to nothing."""

from __future__ import annotations

import json

from generator.errors import ProjectError
from generator.mlf.archive import ArchiveFiles
from generator.mlf.model import ModuleInfo, profile_macro
from generator.project.sizing import STANDALONE


def profile_points(module: ModuleInfo, files: ArchiveFiles, project_type: str,
                   where: str) -> int:
    """How many marks the run function makes (calls + 1); refuses what cannot profile."""
    if project_type != STANDALONE:
        raise ProjectError("--profile is for standalone projects (a host-driven project is "
                           "timed per operator by its RPC client: time_evaluator)")
    runs = [data for path, data in files.data.items()
            if path.endswith(f"{module.name}_lib1.c")]
    if module.abi is None or not runs or profile_macro(module.name).encode() not in runs[0]:
        raise ProjectError(f"{where}: its run function has no profile marks (archives "
                           "microtvm-gen's exporter wrote since the report came have them); "
                           "export the model again to profile it")
    try:
        info = json.loads(files.data["metadata.json"])["modules"][module.name]
        calls = info["calls"]
    except (KeyError, TypeError, ValueError):
        raise ProjectError(f"{where}: metadata.json lists no calls of module "
                           f"'{module.name}'") from None
    if not isinstance(calls, list) or not calls:
        raise ProjectError(f"{where}: metadata.json lists no calls of module '{module.name}'")
    return len(calls) + 1


def profile_definitions(module: ModuleInfo, points: int) -> dict[str, int]:
    return {"MTVG_PROFILE_POINTS": points, profile_macro(module.name): 1}
