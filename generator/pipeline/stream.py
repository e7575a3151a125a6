"""A stream of inputs through a pipeline directory: what was skipped, what ran, what each PE
measured, and the outputs of every input in the model's order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from generator.errors import InputError
from generator.pipeline import layout
from generator.pipeline.coordinator import Coordinator, PeStats, StageProject
from generator.run import TensorSpec, describe_inputs


@dataclass
class StreamReport:
    plan: dict
    outputs: list[list[np.ndarray]]  # per input, in the model's output order
    output_specs: list[TensorSpec]
    skipped: list[int]  # inputs an earlier run had done (--resume)
    pes: list[PeStats]
    interrupted: bool

    @property
    def counted(self) -> bool:
        return bool(self.pes) and all(pe.per_input is not None for pe in self.pes)

    @property
    def period(self) -> float | None:
        """Measured instructions between two inferences leaving one replica."""
        return max(pe.per_input for pe in self.pes) if self.counted else None

    @property
    def latency(self) -> float | None:
        """Measured instructions of one input through every stage (replica 0)."""
        if not self.counted:
            return None
        return sum(pe.per_input for pe in self.pes if pe.replica == 0)

    def to_json(self) -> dict:
        return {"plan": self.plan, "inputs": len(self.outputs), "skipped": self.skipped,
                "interrupted": self.interrupted,
                "measured": {"period": self.period, "latency": self.latency,
                             "unit": "instructions" if self.counted else None},
                "pes": [pe.to_json() for pe in self.pes],
                "outputs": [{s.name: o.tolist() for s, o in zip(self.output_specs, outs,
                                                                strict=True)}
                            for outs in self.outputs]}


def samples_by_index(first: StageProject, arrays: dict[str, np.ndarray]) -> list[dict]:
    """The inputs' arrays (one sample per row) as one dict per input of the stream."""
    missing = [s.name for s in first.inputs if s.name not in arrays]
    if missing:
        raise InputError(f"the pipeline's inputs are {describe_inputs(first.inputs)}; "
                         f"missing {', '.join(missing)}")
    counts = {len(a) for a in arrays.values()}
    if len(counts) != 1:
        raise InputError("every input file must hold the same number of samples")
    return [{k: v[i] for k, v in arrays.items()} for i in range(counts.pop())]


def run_stream(root: Path, arrays: dict[str, np.ndarray], resume: bool, timeout: float,
               progress: Callable[[str], None] | None = None,
               on_output: Callable[[int, list[np.ndarray]], None] | None = None
               ) -> StreamReport:
    """Every sample through the pipeline in `root`; each input's outputs saved as it leaves
    (so a rerun with `resume` skips it)."""
    plan, stages = layout.load(root)
    samples = samples_by_index(stages[0], arrays)
    specs = stages[-1].outputs
    if not resume:
        layout.clear_results(root)
    done_before = layout.done_inputs(root, len(samples))
    skipped = sorted(done_before)
    todo = {i: s for i, s in enumerate(samples) if i not in done_before}

    def keep(index: int, outputs: dict[str, np.ndarray]) -> None:
        ordered = [outputs[s.name] for s in specs]
        layout.save_result(root, index, ordered)
        if on_output:
            on_output(index, ordered)

    result = Coordinator(stages, int(plan.get("replicas", 1)), timeout).run(
        todo, keep, progress) if todo else None
    done = layout.done_inputs(root, len(samples))
    outputs = [layout.load_result(root, i, len(specs)) for i in sorted(done)]
    return StreamReport(plan, outputs, specs, skipped, result.pes if result else [],
                        bool(result and result.interrupted))
