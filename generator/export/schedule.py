"""Memory-saving schedules for the fused TIR kernels TVM 0.27 legalizes Relax into.

Legalized kernels keep every stage in a full-size intermediate buffer (pad → conv → bias →
relu is three copies of the output). On a microcontroller that RAM is the product, so every
kernel gets the same generic treatment before lowering:

1. inline every injective stage into its consumers (padding becomes a bounds check, bias and
   activation fold into one expression);
2. move each remaining epilogue of a reduction under the reduction's spatial loops, so the
   reduction result lives in one scalar instead of a whole tensor;
3. start each reduction before its loop instead of testing for the first iteration inside
   it, so the innermost loop is a plain multiply-accumulate a C compiler can vectorize.

Each step is tried and skipped when TVM refuses it; a refused step never changes the result.
"""

from __future__ import annotations

from tvm import s_tir, tirx


def shrink_intermediates(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The kernel with its intermediate buffers inlined or reduced to scalars."""
    sch = s_tir.Schedule(func)
    _inline_injective(sch)
    _epilogues_under_reductions(sch)
    _init_before_reduction_loops(sch)
    return sch.mod["main"]


def _blocks(sch: s_tir.Schedule) -> list:
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def _inline_injective(sch: s_tir.Schedule) -> None:
    changed = True
    while changed:
        changed = False
        outputs = {sch.get(b).name_hint for b in sch.get_output_blocks(sch.get_sblock("root"))}
        for block in _blocks(sch):
            if sch.get(block).name_hint in outputs:
                continue
            try:
                sch.compute_inline(block)
            except s_tir.ScheduleError:
                continue
            changed = True
            break


def _is_reduction(sch: s_tir.Schedule, block) -> bool:
    return any(iv.iter_type == tirx.IterVar.CommReduce for iv in sch.get(block).iter_vars)


def _epilogues_under_reductions(sch: s_tir.Schedule) -> None:
    for block in _blocks(sch):
        producers = sch.get_producers(block)
        if len(producers) != 1 or not _is_reduction(sch, producers[0]):
            continue
        producer = producers[0]
        written, reduced = _written_elements(sch, block), _written_elements(sch, producer)
        if written is None or reduced is None or written > reduced:
            # an epilogue writing more than the reduction (a pad after a max pool): TVM
            # would keep only the writes at the reduction's points and drop the padding
            continue
        try:
            sch.reverse_compute_inline(block)
            continue
        except s_tir.ScheduleError:
            pass
        spatial = sum(1 for iv in sch.get(producer).iter_vars
                      if iv.iter_type == tirx.IterVar.DataPar)
        loops = sch.get_loops(producer)
        if spatial == 0 or spatial > len(loops):
            continue
        try:
            sch.reverse_compute_at(block, loops[spatial - 1], preserve_unit_loops=False)
        except s_tir.ScheduleError:
            continue


def _written_elements(sch: s_tir.Schedule, block) -> int | None:
    """How many elements a block's (one) output buffer has, None if unknown."""
    writes = sch.get(block).writes
    if len(writes) != 1:
        return None
    buffer = getattr(writes[0], "source", None)  # TVM 0.27: a TensorRegion over the buffer
    shape = getattr(buffer, "shape", None)
    if shape is None:
        return None
    total = 1
    for d in shape:
        if not isinstance(d, tirx.IntImm):
            return None
        total *= int(d)
    return total


def _init_before_reduction_loops(sch: s_tir.Schedule) -> None:
    for block in _blocks(sch):
        if not _is_reduction(sch, block):
            continue
        spatial = sum(1 for iv in sch.get(block).iter_vars
                      if iv.iter_type == tirx.IterVar.DataPar)
        loops = sch.get_loops(block)
        if spatial >= len(loops):
            continue
        try:
            sch.decompose_reduction(block, loops[spatial])
        except s_tir.ScheduleError:
            continue
