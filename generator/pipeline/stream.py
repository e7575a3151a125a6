"""A stream of inputs through a pipeline directory: what was skipped, what ran, what each PE
measured, and the outputs of every input in the model's order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from generator.errors import InputError
from generator.pipeline import layout
from generator.pipeline.coordinator import Coordinator, PeFactory, PeStats, StageProject
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


@dataclass(frozen=True)
class Tracker:
    """PEs from a stock RPC tracker: servers under `key` (generator/pipeline/remote.py).
    `model`: the pipeline's model, lowered again for the stages' kernels and weights."""

    address: tuple[str, int]
    key: str
    model: Path


Staged = tuple[dict, list, "PeFactory | None"]


def stages_of(root: Path, tracker: Tracker | None, timeout: float = 60.0) -> Staged:
    """The plan, its stages, and how to make their PEs (None: this machine's)."""
    plan = layout.load_plan(root)
    if not plan.get("host_driven"):
        if tracker is not None:
            raise InputError(f"{root}: its stages are standalone firmware this machine "
                             "starts; --tracker needs a pipeline made with --tracker")
        return (*layout.load(root), None)
    if tracker is None:
        raise InputError(f"{root}: its stages run host-driven on PEs from an RPC tracker; "
                         "give --tracker HOST:PORT (and --key)")
    from generator.boards import load_board
    from generator.export.stages import split_model
    from generator.pipeline.remote import RemotePe, RemoteStage

    rows = {int(k): int(v) for k, v in plan.get("row_splits", {}).items()}
    split = split_model(tracker.model, None, rows)
    stages = [RemoteStage.of(split, s["index"], *s["calls"], layout.stage_dir(root, s["index"]),
                             load_board(s["board"])) for s in plan["stages"]]

    def make_pe(number: int, stage, replica: int, workdir: Path) -> RemotePe:
        return RemotePe(number, stage, replica, tracker.address, tracker.key, timeout)

    return plan, stages, make_pe


def run_stream(root: Path, arrays: dict[str, np.ndarray], resume: bool, timeout: float,
               progress: Callable[[str], None] | None = None,
               on_output: Callable[[int, list[np.ndarray]], None] | None = None,
               tracker: Tracker | None = None, staged: Staged | None = None) -> StreamReport:
    """Every sample through the pipeline in `root`; each input's outputs saved as it leaves
    (so a rerun with `resume` skips it). `staged`: what stages_of(root, tracker) gave."""
    plan, stages, make_pe = staged or stages_of(root, tracker, timeout)
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

    result = Coordinator(stages, int(plan.get("replicas", 1)), timeout, make_pe).run(
        todo, keep, progress) if todo else None
    done = layout.done_inputs(root, len(samples))
    outputs = [layout.load_result(root, i, len(specs)) for i in sorted(done)]
    return StreamReport(plan, outputs, specs, skipped, result.pes if result else [],
                        bool(result and result.interrupted))
