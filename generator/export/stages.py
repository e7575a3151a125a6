"""A model split into stages: contiguous runs of its kernel calls, one MLF v8 archive each.

Stage k's inputs are the tensors it reads that earlier stages (or the model's inputs) made;
its outputs are the tensors it makes that later stages read (the last stage's: the model's
outputs). Chaining the stages, each one's outputs into the next one's inputs by name, computes
exactly what the whole model computes: the same kernels, the same weights, called in the same
order. The cuts balance a cost per call (MACs, or the times of `run --profile`) so that no
stage costs more than it must: the first step of running a model over several processing
elements (a pipeline)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from generator.errors import ExportError
from generator.export import ccode, frontend
from generator.export.api import lower_model, write_lowered
from generator.export.lower import Lowered, Program

STAGE_ARCHIVE = "stage{index}.tar"


@dataclass(frozen=True)
class Stage:
    index: int
    first_call: int
    end_call: int  # one past its last call
    path: Path
    inputs: list[str]  # tensor names, as the previous stage's outputs name them
    outputs: list[str]
    cost: int  # the sum of its calls' costs


def balanced_cuts(costs: list[int], stages: int, allowed: set[int]) -> list[int]:
    """Where stages start (after the first at 0), among `allowed` call indices, so that the
    costliest stage costs as little as possible (the earliest such cuts)."""
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
                worst = max(best[k - 1][j], prefix[i] - prefix[j])
                if worst < best[k][i]:
                    best[k][i], cut[k][i] = worst, j
    if best[stages][n] == inf:
        raise ExportError(f"the model cannot be cut into {stages} stages (cut points: "
                          f"{len(allowed)})")
    cuts, i = [], n
    for k in range(stages, 0, -1):
        i = cut[k][i]
        cuts.append(i)
    return sorted(cuts)[1:]


def _valid_cuts(program: Program) -> set[int]:
    """Call indices a stage may start at: every output of the model is made after it (a
    stage passes no tensor through unchanged)."""
    made_at = {}
    for step, call in enumerate(program.calls):
        for tid in call.written:
            made_at[program.root(tid)] = step
    last_output = max((made_at.get(program.root(t), 0) for t in program.outputs), default=0)
    return set(range(1, last_output + 1))


def _stage_program(program: Program, first: int, end: int,
                   names: dict[int, str]) -> tuple[Program, list[str], list[str]]:
    """The calls [first, end) as a program of their own: what they read from before
    becomes its inputs, what later calls (or the model's outputs) read its outputs."""
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
    sub = Program(tensors, inputs, outputs, [names[program.root(t)] for t in outputs], calls)
    return sub, [names[t] for t in inputs], sub.output_names


def export_stages(model: Path, out_dir: Path, stages: int,
                  costs: list[int] | None = None) -> list[Stage]:
    """Split `model` into `stages` archives in `out_dir` (stage0.tar, ...), balanced by
    `costs` per kernel call (default: each call's MACs, at least 1)."""
    mod, output_names = frontend.import_model(model, {})
    lowered, input_names, names = lower_model(mod, "default", output_names, [])
    program = lowered.program
    if costs is None:
        costs = [max(1, lowered.kernel_macs.get(c.kernel) or 0) for c in program.calls]
    if len(costs) != len(program.calls):
        raise ExportError(f"{len(costs)} costs for {len(program.calls)} kernel calls")
    cuts = balanced_cuts(costs, stages, _valid_cuts(program))
    tensor_names = _tensor_names(program, input_names, names)
    out_dir.mkdir(parents=True, exist_ok=True)
    bounds = [0, *cuts, len(program.calls)]
    result = []
    for index, (first, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        sub, ins, outs = _stage_program(program, first, end, tensor_names)
        staged: Lowered = dataclasses.replace(lowered, program=sub)
        code = ccode.generate(staged, "default", ins, outs)
        path = out_dir / STAGE_ARCHIVE.format(index=index)
        write_lowered(path, "default", staged, code,
                      f"{model.name}, stage {index} of {stages}", [])
        result.append(Stage(index, first, end, path, ins, outs, sum(costs[first:end])))
    return result


def _tensor_names(program: Program, input_names: list[str],
                  output_names: list[str]) -> dict[int, str]:
    """Names for every tensor a stage may pass on: the model's own for its inputs and
    outputs, `t<id>` for the others."""
    names = {t.id: f"t{t.id}" for t in program.tensors}
    names.update(zip([program.root(t) for t in program.inputs], input_names, strict=True))
    names.update(zip([program.root(t) for t in program.outputs], output_names, strict=True))
    return names


