"""A model split into stages: contiguous runs of its kernel calls, one MLF v8 archive each.

Stage k's inputs are the tensors it reads that earlier stages (or the model's inputs) made;
its outputs are the tensors it makes that later stages read (the last stage's: the model's
outputs). Chaining the stages, each one's outputs into the next one's inputs by name, computes
exactly what the whole model computes: the same kernels, the same weights, called in the same
order. `balanced_cuts` places the cuts so that no stage costs more than it must; the
pipeline (generator/pipeline/) plans, writes and runs the stages."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from generator.accel.dispatch import Selected
from generator.errors import ExportError
from generator.export import ccode, frontend
from generator.export.api import lower_model, write_lowered
from generator.export.lower import Lowered, Program
from generator.export.planner import lower_bound, plan
from generator.export.rowsplit import row_splits


def balanced_cuts(costs: list[int], stages: int, allowed: set[int],
                  fits: Callable[[int, int], bool] | None = None,
                  overhead: Callable[[int, int], float] | None = None) -> list[int]:
    """Where stages start (after the first at 0), among `allowed` call indices, so that the
    costliest stage costs as little as possible (the earliest such cuts). `fits(first, end)`:
    whether calls [first, end) may form a stage (its memory fits its processing element);
    `overhead(first, end)`: what such a stage costs beside its calls (its link)."""
    n = len(costs)
    if not 1 <= stages <= n:
        raise ExportError(f"{stages} stages for a model of {n} kernel calls")
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][i]: the least possible largest stage cost of calls[:i] in k stages
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(1, n + 1):
            if i != n and i not in allowed:
                continue
            for j in range(k - 1, i):
                if j != 0 and j not in allowed or best[k - 1][j] == inf:
                    continue
                calls = prefix[i] - prefix[j]
                if max(best[k - 1][j], calls) >= best[k][i]:
                    continue  # no better even before its overhead: fits and overhead unasked
                if fits is not None and not fits(j, i):
                    continue
                own = calls + (overhead(j, i) if overhead else 0)
                worst = max(best[k - 1][j], own)
                if worst < best[k][i]:
                    best[k][i], cut[k][i] = worst, j
    if best[stages][n] == inf:
        raise ExportError(f"the model cannot be cut into {stages} stages"
                          + (" that each fit" if fits is not None else "")
                          + f" (cut points: {len(allowed)})")
    cuts, i = [], n
    for k in range(stages, 0, -1):
        i = cut[k][i]
        cuts.append(i)
    return sorted(cuts)[1:]


@dataclass(frozen=True)
class StageNeed:
    """What a stage's calls need of its processing element (bytes): its I/O buffers, its
    activations at their lifetime bound (`exact`: the planner's pool), its weights."""

    input_bytes: int
    output_bytes: int
    activation_bytes: int
    weight_bytes: int

    @property
    def ram(self) -> int:
        return self.input_bytes + self.output_bytes + self.activation_bytes


@dataclass
class ModelSplit:
    """A model lowered once, ready to be cut into stages anywhere between its calls."""

    model: Path
    lowered: Lowered
    tensor_names: dict[int, str]
    macs: list[int]  # per call
    written_bytes: list[int]  # per call: the bytes it writes
    accelerators: list[Selected] = dataclasses.field(default_factory=list)
    rows: dict[int, int] = dataclasses.field(default_factory=dict)  # layers split in rows
    # need(first, end) once per split: every depth and every plan of it asks again
    _needs: dict[tuple[int, int], StageNeed] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False)

    @property
    def program(self) -> Program:
        return self.lowered.program

    @functools.cached_property
    def sizes(self) -> list[int]:
        """Every tensor's bytes, by id."""
        return [t.nbytes for t in self.program.tensors]

    @property
    def calls(self) -> int:
        return len(self.program.calls)

    def kernels(self, first: int, end: int) -> list[str]:
        return [c.kernel for c in self.program.calls[first:end]]

    def cut_points(self) -> set[int]:
        """Call indices a stage may start at: every output of the model is made after it
        (a stage passes no tensor through unchanged)."""
        program = self.program
        made_at = {}
        for step, call in enumerate(program.calls):
            for tid in call.written:
                made_at[program.root(tid)] = step
        last_output = max((made_at.get(program.root(t), 0) for t in program.outputs),
                          default=0)
        return set(range(1, last_output + 1))

    def stage_program(self, first: int, end: int) -> tuple[Program, list[str], list[str]]:
        """The calls [first, end) as a program of their own: what they read from before
        becomes its inputs, what later calls (or the model's outputs) read its outputs."""
        program, names = self.program, self.tensor_names
        calls = program.calls[first:end]
        made_before = {program.root(t) for c in program.calls[:first]
                       for t in c.written} | set(program.inputs)
        made_here = [program.root(t) for c in calls for t in c.written]
        read_later = {program.root(t) for c in program.calls[end:] for t in c.args}
        inputs = sorted({program.root(t) for c in calls for t in c.args
                         if program.root(t) in made_before
                         and program.tensors[program.root(t)].kind != "constant"})
        if end == len(program.calls):
            outputs = list(program.outputs)
        else:
            outputs = [t for t in dict.fromkeys(made_here) if t in read_later]
        tensors = [dataclasses.replace(t, kind="input", base=None) if t.id in inputs
                   else t for t in program.tensors]
        sub = Program(tensors, inputs, outputs, [names[program.root(t)] for t in outputs],
                      calls)
        return sub, [names[t] for t in inputs], sub.output_names

    def need(self, first: int, end: int, exact: bool = False) -> StageNeed:
        """The memory of calls [first, end) as one stage (`exact`: activations as the
        planner places them, not their lifetime bound)."""
        if not exact and (first, end) in self._needs:
            return self._needs[first, end]
        sub, _, _ = self.stage_program(first, end)
        size = self.sizes
        outputs = {sub.root(t) for t in sub.outputs}
        intervals = ccode.pool_intervals(sub, outputs)  # outputs: in their buffers
        activations = plan(intervals).pool_bytes if exact else lower_bound(intervals)
        constants = {sub.root(t) for c in sub.calls for t in c.args
                     if sub.tensors[sub.root(t)].kind == "constant"}
        found = StageNeed(sum(size[t] for t in sub.inputs), sum(size[t] for t in outputs),
                          activations, sum(size[t] for t in constants))
        if not exact:
            self._needs[first, end] = found
        return found

    def write(self, first: int, end: int, path: Path, title: str) -> tuple[list[str], list[str]]:
        """Stage [first, end) as an MLF v8 archive at `path`; its input and output names."""
        sub, ins, outs = self.stage_program(first, end)
        staged: Lowered = dataclasses.replace(self.lowered, program=sub)
        code = ccode.generate(staged, "default", ins, outs)
        write_lowered(path, "default", staged, code, title, self.accelerators)
        return ins, outs

    def aligned_with(self, other: ModelSplit) -> bool:
        """Whether both make the same calls writing the same tensors (one lowered with an
        accelerator, one without): a cut of one is a cut of the other, by the same names."""
        mine, theirs = self.program, other.program
        return len(mine.calls) == len(theirs.calls) and all(
            [mine.tensors[mine.root(t)].shape for t in a.written]
            == [theirs.tensors[theirs.root(t)].shape for t in b.written]
            for a, b in zip(mine.calls, theirs.calls, strict=True))


def split_model(model: Path, accelerators: list[Selected] | None = None,
                rows: dict[int, int] | None = None) -> ModelSplit:
    """Import and lower `model` once for splitting (its kernels as `export` makes them,
    offloading to `accelerators` where they take an operator, the pointwise layers `rows`
    names split in rows: generator/export/rowsplit.py)."""
    with row_splits(rows or {}):
        mod, output_names = frontend.import_model(model, {})
        lowered, input_names, names = lower_model(mod, "default", output_names,
                                                  accelerators or [])
    program = lowered.program
    macs = [lowered.kernel_macs.get(c.kernel) or 0 for c in program.calls]
    written = [sum(program.tensors[program.root(t)].nbytes for t in c.written)
               for c in program.calls]
    return ModelSplit(model, lowered, _tensor_names(program, input_names, names), macs,
                      written, list(accelerators or []), dict(rows or {}))


def _tensor_names(program: Program, input_names: list[str],
                  output_names: list[str]) -> dict[int, str]:
    """Names for every tensor a stage may pass on: the model's own for its inputs and
    outputs, `call<i>_out<j>` (the j-th tensor call i writes) for the others: the same in
    lowerings of one model that make the same calls (with an accelerator or without)."""
    names = {}
    for i, call in enumerate(program.calls):
        for j, tid in enumerate(call.written):
            names.setdefault(program.root(tid), f"call{i}_out{j}")
    names.update(zip([program.root(t) for t in program.inputs], input_names, strict=True))
    names.update(zip([program.root(t) for t in program.outputs], output_names, strict=True))
    return names
