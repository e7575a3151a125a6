"""Batch builder: many candidate schedules of one task in one host-driven firmware.

Building and flashing is what costs on a board, so a batch of candidates becomes one
operator-style archive (`export_operators`, kernels kept as scheduled): `cand0`, `cand1`, …
and `ref`, the untuned kernel the way `export` lowers it. The archive becomes a host-driven
project, built once. Each candidate's artifact is `<project>#<operator>`; a candidate the
log already has a result for is not built (`cached#<hash>`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import ExportError, MtgError
from generator.export.operators import export_operators
from generator.tune.interrupt import check as check_interrupt
from generator.tune.log import TuneLog, candidate_hash
from generator.tune.tasks import Task

REFERENCE = "ref"
CANDIDATE = "cand{}"
MODULE = "tune"
BATCH_FILE = "batch.json"
CACHED = "cached#"
COMPILE_JOBS = max(1, min(2, os.cpu_count() or 1))  # processes lowering a batch's kernels


@dataclass
class BuiltBatch:
    number: int
    project: Path | None  # None: nothing to build (every candidate cached or refused)
    names: dict[str, str] = field(default_factory=dict)  # operator → candidate hash
    errors: dict[int, str] = field(default_factory=dict)  # input index → why not built
    artifacts: list[str | None] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"number": self.number,
                "project": None if self.project is None else str(self.project),
                "names": self.names, "errors": {str(i): e for i, e in self.errors.items()},
                "artifacts": self.artifacts}

    @classmethod
    def from_json(cls, data: dict) -> BuiltBatch:
        return cls(int(data["number"]),
                   None if data["project"] is None else Path(data["project"]),
                   dict(data["names"]), {int(i): e for i, e in data["errors"].items()},
                   list(data["artifacts"]))


def build_batch(task: Task, mods: list, board: str, work_dir: Path, log: TuneLog,
                number: int | None = None) -> BuiltBatch:
    """Build one firmware with every candidate of `mods` not already in the log (batch
    `number`, by default the log's next)."""
    from generator.build import build
    from generator.project.generate import generate
    from generator.project.sizing import HOST_DRIVEN

    number = log.new_batch() if number is None else number
    batch_dir = Path(work_dir) / "batches" / f"{number:05d}"
    if batch_dir.exists():
        shutil.rmtree(batch_dir)
    batch_dir.mkdir(parents=True)
    result = BuiltBatch(number, None, artifacts=[None] * len(mods))
    workload = task.workload
    funcs: dict = {}
    index_of: dict[str, int] = {}
    for i, mod in enumerate(mods):
        h = candidate_hash(mod)
        if log.lookup(workload, h) is not None:
            result.artifacts[i] = CACHED + h
            continue
        name = CANDIDATE.format(i)
        funcs[name] = mod["main"]
        index_of[name] = i
        result.names[name] = h
    if not funcs:
        shutil.rmtree(batch_dir)
        return result
    funcs[REFERENCE] = _reference(task.func if task.reference is None else task.reference)
    try:
        try:
            exported = export_operators(funcs, batch_dir / "ops.tar", module=MODULE,
                                        shrink=False, jobs=COMPILE_JOBS)
        except ExportError:  # one candidate TVM cannot compile: find it, build the rest
            check_interrupt()  # or Ctrl-C, which TVM turned into an error on its way out
            funcs = _compilable(funcs, result, index_of)
            if len(funcs) <= 1:
                shutil.rmtree(batch_dir)
                return result
            exported = export_operators(funcs, batch_dir / "ops.tar", module=MODULE,
                                        shrink=False, jobs=COMPILE_JOBS)
        project = batch_dir / "project"
        generate(batch_dir / "ops.tar", board, project, project_type=HOST_DRIVEN)
        build(project)
    except MtgError as exc:
        check_interrupt()
        for name in funcs:
            if name != REFERENCE:
                result.errors[index_of[name]] = f"build failed: {exc.one_line()}"
        return result
    outputs = {op.name: op.outputs or 1 for op in exported.operators}
    (batch_dir / BATCH_FILE).write_text(json.dumps(
        {"task": task.name, "batch": number, "candidates": result.names,
         "outputs": outputs}, indent=1, sort_keys=True))
    result.project = project
    for name in result.names:
        result.artifacts[index_of[name]] = f"{project}#{name}"
    return result


def _compilable(funcs: dict, result: BuiltBatch, index_of: dict[str, int]) -> dict:
    """`funcs` without the candidates TVM's C codegen refuses (each recorded as an error)."""
    from generator.export.lower import compile_plain_kernels

    kept = {}
    for name, func in funcs.items():
        check_interrupt()
        try:
            compile_plain_kernels({name: func}, "tvmgen_check_", shrink=False)
            kept[name] = func
        except ExportError as exc:
            if name == REFERENCE:
                raise
            result.errors[index_of[name]] = str(exc)
            result.names.pop(name, None)
    return kept


def _reference(func):
    """The untuned kernel, scheduled as a model export schedules it."""
    from generator.export.schedule import shrink_intermediates

    try:
        return shrink_intermediates(func)
    except Exception:  # as compile_plain_kernels does: keep it as it is
        return func


def batch_info(project: Path) -> dict:
    return json.loads((Path(project).parent / BATCH_FILE).read_text())
