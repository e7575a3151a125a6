"""A pipeline's directory: its plan, one archive and one project per stage, the results.

    DIR/plan.json          the plan (pipeline --plan-only prints the same)
    DIR/stageK.tar         stage K's MLF v8 archive
    DIR/stageK/            stage K's project (generate's, for its PE's board)
    DIR/results/NNNNN.npz  the outputs of input NNNNN, written as each leaves the pipeline
                           (a rerun with --resume skips the inputs found here)

The stages are generated in a staging folder inside DIR and moved into place when all are;
a failed generation, a failed build or a firmware over its PE's memory leaves nothing
behind.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from generator.build import board_ram
from generator.elfsize import elf_size
from generator.errors import ProjectError
from generator.export.stages import ModelSplit
from generator.pipeline.coordinator import StageProject
from generator.pipeline.plan import PipelinePlan, ProcessingElement
from generator.project.atomic_write import STAGING_NAME, check_target_dir, move_into_place
from generator.project.generate import generate
from generator.run import ensure_built
from generator.toolchain import BUILD_DIR, FIRMWARE

PLAN_FILE = "plan.json"
STAGE_ARCHIVE = "stage{index}.tar"
RESULTS_DIR = "results"
RESULT_FILE = "{index:05d}.npz"


def stage_dir(root: Path, index: int) -> Path:
    return root / f"stage{index}"


def create(split_for: Callable[[ProcessingElement], ModelSplit], plan: PipelinePlan,
           out_dir: Path, force: bool, progress: Callable[[str], None] | None = None,
           host_driven: bool = False) -> None:
    """Every stage's archive (cut from `split_for(its PE)`: the model lowered with that
    PE's accelerators) and project in `out_dir`, then every project built. `host_driven`:
    each stage's project is host-driven firmware of its kernels, for PEs a tracker hands
    out (generator/pipeline/remote.py)."""
    check_target_dir(out_dir, force)
    created = not out_dir.exists()
    staging = out_dir / STAGING_NAME  # inside DIR: nothing is written beside it
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for stage in plan.stages:
            if progress:
                progress(f"stage {stage.index}: calls {stage.first}-{stage.end - 1} for "
                         f"{stage.pe.name}")
            split = split_for(stage.pe)
            archive = staging / STAGE_ARCHIVE.format(index=stage.index)
            split.write(stage.first, stage.end, archive,
                        f"{split.model.name}, stage {stage.index} of {len(plan.stages)}")
            definitions = {}
            if host_driven:
                from generator.pipeline.remote import (
                    OPERATORS_ARCHIVE,
                    device_definitions,
                    write_stage_operators,
                )

                archive = staging / OPERATORS_ARCHIVE.format(index=stage.index)
                write_stage_operators(split, stage.first, stage.end, archive)
                definitions = device_definitions(split, stage.first, stage.end)
            generate(archive, stage.pe.board.name, stage_dir(staging, stage.index),
                     extra_definitions=definitions)
        (staging / PLAN_FILE).write_text(json.dumps(_record(plan, host_driven), indent=2)
                                         + "\n")
        move_into_place(out_dir, staging)  # --force: the old pipeline goes
    except BaseException:
        shutil.rmtree(out_dir if created else staging, ignore_errors=True)
        raise
    try:
        firmware = []
        for stage in plan.stages:
            if progress:
                progress(f"building stage {stage.index}")
            ensure_built(stage_dir(out_dir, stage.index))
            firmware.append(check_firmware(out_dir, stage.index, stage.pe))
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)  # no half-made pipeline is left
        raise
    record = _record(plan, host_driven)
    for entry, (ram, flash) in zip(record["stages"], firmware, strict=True):
        entry["firmware_ram_bytes"], entry["firmware_flash_bytes"] = ram, flash
    (out_dir / PLAN_FILE).write_text(json.dumps(record, indent=2) + "\n")


def _record(plan: PipelinePlan, host_driven: bool) -> dict:
    return {**plan.to_json(), "host_driven": host_driven}


def check_firmware(root: Path, index: int, pe: ProcessingElement) -> tuple[int, int]:
    """A stage's built firmware against its PE: RAM (static data and the stack the linker
    script reserves) and flash, as the ELF says. Refused in one line when over."""
    board = pe.board
    size = elf_size(stage_dir(root, index) / BUILD_DIR / FIRMWARE, board_ram(board))
    ram = size.ram + (board.stack_bytes or 0)
    if ram > pe.ram_bytes or size.flash > pe.flash_bytes:
        raise ProjectError(f"stage {index}'s firmware needs {ram:,} B of RAM and "
                           f"{size.flash:,} B of flash; its PE has {pe.ram_bytes:,} and "
                           f"{pe.flash_bytes:,} (the plan's estimate was short)")
    return ram, size.flash


def load_plan(root: Path) -> dict:
    """A pipeline directory's plan (its `depth` checked)."""
    try:
        plan = json.loads((root / PLAN_FILE).read_text())
        if not isinstance(plan, dict) or not isinstance(plan["depth"], int) \
                or not isinstance(plan["stages"], list) or len(plan["stages"]) != plan["depth"]:
            raise ValueError
    except OSError:
        raise ProjectError(f"{root} is not a pipeline (no {PLAN_FILE})",
                           hint="microtvm-gen pipeline MODEL --board B --pes N -o DIR") from None
    except (ValueError, KeyError, TypeError):
        raise ProjectError(f"{root / PLAN_FILE} is not a pipeline plan") from None
    return plan


def load(root: Path) -> tuple[dict, list[StageProject]]:
    """A pipeline directory's plan and its stages' projects (standalone firmware)."""
    plan = load_plan(root)
    if plan.get("host_driven"):
        raise ProjectError(f"{root}: its stages run host-driven, on PEs from a tracker "
                           "(--tracker)")
    return plan, [StageProject.load(k, stage_dir(root, k)) for k in range(plan["depth"])]


def result_path(root: Path, index: int) -> Path:
    return root / RESULTS_DIR / RESULT_FILE.format(index=index)


def save_result(root: Path, index: int, outputs: list[np.ndarray]) -> None:
    """One input's outputs (in the model's order), written whole or not at all."""
    path = result_path(root, index)
    path.parent.mkdir(exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("wb") as f:
        np.savez(f, *outputs)  # arr_0, arr_1, ...: never the model's names as file names
    partial.replace(path)


def clear_results(root: Path) -> None:
    shutil.rmtree(root / RESULTS_DIR, ignore_errors=True)


def done_inputs(root: Path, count: int) -> set[int]:
    """The inputs (of `count`) whose outputs an earlier run saved."""
    return {i for i in range(count) if result_path(root, i).is_file()}


def load_result(root: Path, index: int, count: int) -> list[np.ndarray]:
    """The `count` outputs an earlier run saved for input `index`."""
    path = result_path(root, index)
    try:
        with np.load(path, allow_pickle=False) as data:
            return [data[f"arr_{i}"] for i in range(count)]
    except (OSError, ValueError, KeyError):
        raise ProjectError(f"{path} is not a result this pipeline saved; delete it") from None
