"""A pipeline planned from a model file: the model lowered (once per set of accelerators
its PEs offload to), the costs, the cuts, then the row splits that balance them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from generator.errors import InputError
from generator.export.stages import ModelSplit
from generator.pipeline.plan import (
    LINK_COST,
    LinkCost,
    PipelinePlan,
    ProcessingElement,
    call_costs,
    plan_pipeline,
    plan_stages,
)
from generator.pipeline.refine import check_realised, choose_row_splits
from generator.progress import progress

# Models whose importer can split a layer in rows (our TFLite importer; ONNX models keep
# their layers whole).
ROW_SPLIT_SUFFIXES = (".tflite",)


class Splits:
    """The model lowered once per set of accelerators its PEs offload to (with the same
    layers split in rows: generator/export/rowsplit.py)."""

    def __init__(self, model: Path, accelerator_path: list[Path] | None = None,
                 rows: dict[int, int] | None = None) -> None:
        self.model = model
        self.accelerator_path = list(accelerator_path or [])
        self.rows = dict(rows or {})
        self._by_set: dict[tuple[str, ...], ModelSplit] = {}

    def __call__(self, pe: ProcessingElement) -> ModelSplit:
        from generator.accel import registry
        from generator.export.stages import split_model

        key = pe.accelerators
        if key not in self._by_set:
            selected = registry.select(None, list(key), [], self.accelerator_path) \
                if key else []
            split = split_model(self.model, selected, self.rows)
            if key and not split.aligned_with(self(replace(pe, accelerators=()))):
                raise InputError(f"{pe.name}: offloading changes the model's kernel calls; "
                                 "its stage cannot be cut where the others are")
            self._by_set[key] = split
        return self._by_set[key]


@dataclass(frozen=True)
class Request:
    """What to plan: `count` PEs like pes[0], or one stage per PE of `pes` (count None)."""

    model: Path
    pes: list[ProcessingElement]
    count: int | None = None
    depth: int | None = None
    profile: Path | None = None  # a run --profile of the whole model (plan.call_costs)
    link: LinkCost = LINK_COST
    split_layers: bool = True
    accelerator_path: tuple[Path, ...] = ()


def make_plan(request: Request) -> tuple[Splits, PipelinePlan]:
    """The plan, and the lowerings its stages are cut from."""
    if not request.model.is_file():
        raise InputError(f"{request.model}: no such file")
    progress(f"importing {request.model.name} and compiling its kernels with TVM")
    splits = Splits(request.model, list(request.accelerator_path))
    split = splits(replace(request.pes[0], accelerators=()))
    costs, unit = call_costs(split, request.profile)
    plan = plan_pipeline(split, costs, unit, request.pes, request.count, request.depth,
                         request.link)
    if not request.split_layers or len(plan.stages) < 2 \
            or request.model.suffix.lower() not in ROW_SPLIT_SUFFIXES:
        return splits, plan
    return _with_row_splits(request, split, costs, unit, plan)


def _with_row_splits(request: Request, split: ModelSplit, costs: list[int], unit: str,
                     plan: PipelinePlan) -> tuple[Splits, PipelinePlan]:
    """The plan with pointwise layers split in rows where that shortens its period
    (generator/pipeline/refine.py); the plan unchanged when nothing does."""
    pes = [s.pe for s in plan.stages]

    def period_of(candidate: ModelSplit, candidate_costs: list[int]) -> tuple[float, list[int]]:
        tried = plan_stages(candidate, candidate_costs, unit, pes, plan.replicas,
                            plan.pes_given, plan.link)
        return tried.period, [s.first for s in tried.stages]

    rows, split_costs = choose_row_splits(split, costs, len(pes) - 1, period_of)
    if not rows:
        return Splits(request.model, list(request.accelerator_path)), plan
    progress(f"splitting {len(rows)} pointwise layer(s) in rows to balance the stages")
    splits = Splits(request.model, list(request.accelerator_path), rows)
    real = splits(replace(pes[0], accelerators=()))
    check_realised(real, split.calls, rows)
    refined = plan_stages(real, split_costs, unit, pes, plan.replicas, plan.pes_given,
                          plan.link)
    return splits, replace(refined, single=plan.single, row_splits=rows)
