"""Finer cuts: a pointwise convolution split into row halves on two PEs
(generator/export/rowsplit.py), where a layer boundary leaves the stages unbalanced.

The search works on the lowered program alone: a split is simulated by putting its five
calls (two row copies, two half convolutions, the join) in place of the layer's call, their
costs from the layer's (in proportion to the rows) and from the copies' bytes. Each round
tries every pointwise convolution at a coarse set of rows, then the rows next to the best,
and keeps the split that shortens the pipeline's period most; at most one split per cut.
The model is then lowered once more with the chosen splits, and the plan made again on
the real calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from generator.errors import ExportError
from generator.export.lower import KernelCall, Program, Tensor
from generator.export.rowsplit import CALLS_PER_SPLIT, is_pointwise
from generator.export.stages import ModelSplit

# Instructions per byte of the copies a split adds, measured by run --profile on
# qemu-mps2-an385 (kws: rows 19,800 for 4,800 B; the join 65,000 for 8,000 B).
ROWS_PER_BYTE = 4.1
JOIN_PER_BYTE = 8.1
COARSE_STEPS = 8  # rows tried first: H * k / COARSE_STEPS
MIN_ROWS = 2


@dataclass(frozen=True)
class Pointwise:
    call: int  # its index among the program's calls
    ordinal: int  # among the model's pointwise convolutions (what the importer counts)
    rows: int  # H


def pointwise_calls(program: Program) -> list[Pointwise]:
    """The program's int8 pointwise convolutions, in order."""
    found = []
    for i, call in enumerate(program.calls):
        if not call.kernel.startswith("q_conv2d") or len(call.args) < 3:
            continue
        x, w = (program.tensors[program.root(t)] for t in call.args[:2])
        out = program.tensors[program.root(call.written[0])]
        if w.kind == "constant" and is_pointwise(x.shape, w.shape, out.shape):
            found.append(Pointwise(i, len(found), x.shape[1]))
    return found


def split_costs(costs: list[int], layer: Pointwise, row: int, x_bytes: int,
                y_bytes: int) -> list[int]:
    """The costs with the layer's one call replaced by its split's five."""
    cost = costs[layer.call]
    h = layer.rows
    part = [round(cost * row / h), round(cost * (h - row) / h)]
    copies = [round(ROWS_PER_BYTE * x_bytes * row / h),
              round(ROWS_PER_BYTE * x_bytes * (h - row) / h)]
    return [*costs[:layer.call], *copies, *part, round(JOIN_PER_BYTE * y_bytes),
            *costs[layer.call + 1:]]


def simulated(split: ModelSplit, layer: Pointwise, row: int) -> ModelSplit:
    """`split` as if the importer had split `layer` at `row`: for planning only."""
    program = split.program
    call = program.calls[layer.call]
    x_id, y_id = program.root(call.args[0]), program.root(call.written[0])
    x, y = program.tensors[x_id], program.tensors[y_id]
    tensors = list(program.tensors)

    def new(shape: tuple[int, ...]) -> int:
        tensors.append(Tensor(len(tensors), shape, "int8", "activation"))
        return len(tensors) - 1

    h = layer.rows
    xa, xb = new((1, row, *x.shape[2:])), new((1, h - row, *x.shape[2:]))
    ya, yb = new((1, row, *y.shape[2:])), new((1, h - row, *y.shape[2:]))
    consts = call.args[1:len(call.args) - call.outputs]
    calls = [KernelCall("q_rows", [x_id, xa]), KernelCall("q_rows", [x_id, xb]),
             KernelCall(call.kernel, [xa, *consts, ya]),
             KernelCall(call.kernel, [xb, *consts, yb]),
             KernelCall("q_concat", [ya, yb, y_id])]
    assert len(calls) == CALLS_PER_SPLIT
    spliced = dataclasses.replace(
        program, tensors=tensors,
        calls=[*program.calls[:layer.call], *calls, *program.calls[layer.call + 1:]])
    lowered = dataclasses.replace(split.lowered, program=spliced)
    names = dict(split.tensor_names)
    for tid in (xa, xb, ya, yb):
        names[tid] = f"split{tid}"
    return dataclasses.replace(split, lowered=lowered, tensor_names=names,
                               macs=[0] * len(spliced.calls),
                               written_bytes=[0] * len(spliced.calls))


# plan(split, costs) -> the period and where the stages start (raises ExportError when no
# plan fits)
PeriodOf = Callable[[ModelSplit, list[int]], tuple[float, list[int]]]
NEAR_CUT = 2  # layers tried: those within this many calls of a cut of the best plan so far


def choose_row_splits(split: ModelSplit, costs: list[int], cuts: int,
                      period_of: PeriodOf) -> tuple[dict[int, int], list[int]]:
    """Row splits (pointwise ordinal → row) that shorten the period, at most `cuts` of them,
    and the costs of the calls with those splits made."""
    chosen: dict[int, int] = {}
    best, starts = period_of(split, costs)
    current, current_costs = split, costs
    for _ in range(cuts):
        found = None
        for layer in pointwise_calls(current.program):
            if _made_by_split(current, layer) or \
                    all(abs(layer.call - s) > NEAR_CUT for s in starts[1:]):
                continue
            tried: dict[int, float | None] = {}

            def period_at(row: int, layer: Pointwise = layer, tried: dict = tried,
                          base: ModelSplit = current, base_costs: list[int] = current_costs
                          ) -> float | None:
                if row not in tried:
                    tried[row] = _period_with(base, base_costs, layer, row, period_of)
                return tried[row]

            # halves of at least MIN_ROWS rows: each is a pointwise layer again
            low, high = MIN_ROWS, layer.rows - MIN_ROWS
            if low > high:
                continue
            coarse = sorted({max(low, min(high, layer.rows * k // COARSE_STEPS))
                             for k in range(1, COARSE_STEPS)})
            scored = [(p, r) for r in coarse if (p := period_at(r)) is not None]
            if not scored:
                continue
            _, near = min(scored)
            step = max(1, layer.rows // COARSE_STEPS)
            for r in range(max(low, near - step), min(high, near + step) + 1):
                period_at(r)
            p, r = min((p, r) for r, p in tried.items() if p is not None)
            if (best is None or p < best) and (found is None or p < found[0]):
                found = (p, layer, r)
        if found is None:
            break
        best, layer, row = found
        chosen[_original_ordinal(current, layer, chosen)] = row
        x_bytes, y_bytes = _layer_bytes(current, layer)
        current_costs = split_costs(current_costs, layer, row, x_bytes, y_bytes)
        current = simulated(current, layer, row)
        best, starts = period_of(current, current_costs)
    return chosen, current_costs


def _period_with(split: ModelSplit, costs: list[int], layer: Pointwise, row: int,
                 period_of: PeriodOf) -> float | None:
    x_bytes, y_bytes = _layer_bytes(split, layer)
    try:
        return period_of(simulated(split, layer, row),
                         split_costs(costs, layer, row, x_bytes, y_bytes))[0]
    except ExportError:
        return None


def _layer_bytes(split: ModelSplit, layer: Pointwise) -> tuple[int, int]:
    program = split.program
    call = program.calls[layer.call]
    return (program.tensors[program.root(call.args[0])].nbytes,
            program.tensors[program.root(call.written[0])].nbytes)


def _made_by_split(split: ModelSplit, layer: Pointwise) -> bool:
    """A half of a split layer (it reads a row copy): not split again."""
    program = split.program
    source = program.root(program.calls[layer.call].args[0])
    return any(c.kernel.startswith("q_rows") and program.root(c.written[0]) == source
               for c in program.calls)


def _original_ordinal(split: ModelSplit, layer: Pointwise, chosen: dict[int, int]) -> int:
    """The layer's ordinal in the unsplit model: the halves of earlier splits are
    pointwise calls too, two in place of one."""
    before = sum(1 for p in pointwise_calls(split.program)[:layer.ordinal]
                 if _made_by_split(split, p))
    return layer.ordinal - before // 2


def check_realised(split: ModelSplit, base_calls: int, rows: dict[int, int]) -> None:
    """The model lowered with `rows` makes the split calls the search simulated."""
    expected = base_calls + (CALLS_PER_SPLIT - 1) * len(rows)
    if split.calls != expected or \
            sum(c.kernel.startswith("q_rows") for c in split.program.calls) != 2 * len(rows):
        raise ExportError(f"splitting {len(rows)} layer(s) gave {split.calls} kernel calls, "
                          f"not {expected}")
