"""A pipeline's plan: where a model's kernel calls are cut into stages, which processing
element (PE) runs each, and what throughput and latency that predicts.

The model is the steady state of a pipeline of stages: every PE works on its own input at
once, so one inference leaves the pipeline every `period` (the slowest stage's time per
input, its link included), and each takes `latency` (every stage's time in turn). A stage's
time is its calls' cost plus its link's: the bytes it receives and sends times the link's
instructions per byte. With more PEs than a useful pipeline is deep, the PEs hold several
copies (replicas) of a shallower pipeline, inputs dealt to them in turn; the plan picks the
depth that gives the most throughput (then the least latency, then the fewest PEs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from generator.boards import Board
from generator.errors import ExportError, InputError
from generator.export.stages import ModelSplit, StageNeed, balanced_cuts

# The firmware's own RAM beside a stage's buffers and the board's stack: the application's
# link frames (2 x MTVG_LINK_MAX_PAYLOAD), the runtime's state, the C library's (the build
# measures the real figure; kws on qemu-mps2-an385 uses 3,300 B of it).
RUNTIME_RAM_BYTES = 4096
# The firmware's code beside a stage's weights (the build measures the real figure: kws on
# qemu-mps2-an385, 10.7 KB with its kernels).
RUNTIME_FLASH_BYTES = 16384
# Without a profile, a call costs this many units per MAC and per byte it writes: a rough
# instruction count, fitted on kws's profile on qemu-mps2-an385 (Cortex-M3, our C kernels;
# depthwise layers cost far more per MAC than pointwise ones, which MACs alone hide).
ESTIMATE_PER_MAC = 2
ESTIMATE_PER_WRITTEN_BYTE = 85


@dataclass(frozen=True)
class LinkCost:
    """Instructions a PE spends on its framed UART link per input: per byte received (the
    interrupt, the wake-up from WFI, unstuffing, the CRC, the copy), per byte sent
    (stuffing, the CRC, the UART register) and per input (the run and output requests)."""

    rx_per_byte: float
    tx_per_byte: float
    per_input: float

    def of(self, received: int, sent: int) -> float:
        return self.rx_per_byte * received + self.tx_per_byte * sent + self.per_input

    def to_json(self) -> dict:
        return {"rx_per_byte": self.rx_per_byte, "tx_per_byte": self.tx_per_byte,
                "per_input": self.per_input}


# Measured by QEMU's instruction count on qemu-mps2-an385 (Cortex-M3) from kws over 1 and 2
# PEs: 40,066 instructions per input for 490 B in and 12 B out, 558,684 for 8,000 B in,
# 314,540 for 8,000 B out (benchmarks/pipeline.py measures them again).
LINK_COST = LinkCost(rx_per_byte=69, tx_per_byte=34.4, per_input=5_800)


@dataclass(frozen=True)
class ProcessingElement:
    """One kind of PE: a board, with the memory a stage may use there."""

    board: Board
    ram_bytes: int  # all of its RAM (the board file's, or less: --pe-ram)
    flash_bytes: int
    accelerators: tuple[str, ...] = ()  # what its stage offloads to (board+name)

    @property
    def name(self) -> str:
        return "+".join((self.board.name, *self.accelerators))

    @property
    def stage_ram(self) -> int:
        """What a stage's buffers may take: its RAM less the stack and the runtime's."""
        return self.ram_bytes - (self.board.stack_bytes or 0) - RUNTIME_RAM_BYTES

    @property
    def stage_flash(self) -> int:
        return self.flash_bytes - RUNTIME_FLASH_BYTES

    def fits(self, need: StageNeed) -> bool:
        return need.ram <= self.stage_ram and need.weight_bytes <= self.stage_flash


def processing_element(board: Board, ram: int | None = None, flash: int | None = None,
                       accelerators: tuple[str, ...] = ()) -> ProcessingElement:
    """A PE of `board`, its memory the board file's unless a smaller figure is given."""
    board_ram = board.ram_bytes if board.ram_bytes is not None else 1 << 40
    board_flash = board.flash_bytes if board.flash_bytes is not None else 1 << 40
    for value, limit, what in ((ram, board_ram, "RAM"), (flash, board_flash, "flash")):
        if value is not None and not 0 < value <= limit:
            raise InputError(f"a PE's {what} of {value} bytes is not within the "
                             f"{board.name}'s {limit} bytes")
    return ProcessingElement(board, ram or board_ram, flash or board_flash, accelerators)


@dataclass(frozen=True)
class PlannedStage:
    index: int
    first: int  # its first kernel call
    end: int  # one past its last
    kernels: list[str]
    cost: int  # its calls' cost, in the plan's unit
    need: StageNeed
    pe: ProcessingElement

    def time(self, link: LinkCost) -> float:
        return self.cost + link.of(self.need.input_bytes, self.need.output_bytes)

    def to_json(self, link: LinkCost) -> dict:
        return {"index": self.index, "calls": [self.first, self.end], "kernels": self.kernels,
                "cost": self.cost,
                "link_bytes": self.need.input_bytes + self.need.output_bytes,
                "time": round(self.time(link)), "board": self.pe.board.name,
                "accelerators": list(self.pe.accelerators),
                "ram_bytes": self.need.ram, "activation_bytes": self.need.activation_bytes,
                "input_bytes": self.need.input_bytes, "output_bytes": self.need.output_bytes,
                "weight_bytes": self.need.weight_bytes, "pe_stage_ram": self.pe.stage_ram,
                "pe_stage_flash": self.pe.stage_flash}


@dataclass(frozen=True)
class PipelinePlan:
    model: str
    stages: list[PlannedStage]
    replicas: int  # copies of the pipeline
    pes_given: int
    unit: str  # "instructions" (a profile's) or "estimated instructions"
    single: float  # one PE running the whole model, per input, its link included
    link: LinkCost
    # pointwise convolutions computed in two row halves (ordinal → row; refine.py)
    row_splits: dict[int, int] = field(default_factory=dict)

    @property
    def pes_used(self) -> int:
        return len(self.stages) * self.replicas

    @property
    def period(self) -> float:
        """Time between two inferences leaving one replica (its slowest stage)."""
        return max(s.time(self.link) for s in self.stages)

    @property
    def latency(self) -> float:
        return sum(s.time(self.link) for s in self.stages)

    @property
    def speedup(self) -> float:
        """Throughput over one PE's running the whole model."""
        return self.replicas * self.single / self.period

    def to_json(self) -> dict:
        return {"model": self.model, "unit": self.unit, "pes": self.pes_given,
                "pes_used": self.pes_used, "replicas": self.replicas,
                "depth": len(self.stages), "single_pe_time": round(self.single),
                "period": round(self.period), "latency": round(self.latency),
                "speedup": round(self.speedup, 3),
                "link": self.link.to_json(),
                "row_splits": {str(k): v for k, v in sorted(self.row_splits.items())},
                "stages": [s.to_json(self.link) for s in self.stages]}


def call_costs(split: ModelSplit, profile: Path | None) -> tuple[list[int], str]:
    """Each call's cost: a `run --profile` of the whole model (its project's
    build/profile.json, or the file itself), else the MAC-and-bytes estimate."""
    if profile is None:
        return ([ESTIMATE_PER_MAC * m + ESTIMATE_PER_WRITTEN_BYTE * b
                 for m, b in zip(split.macs, split.written_bytes, strict=True)],
                "estimated instructions")
    path = profile / "build" / "profile.json" if profile.is_dir() else profile
    try:
        record = json.loads(path.read_text())
        counts = [int(c["count"]) for c in record["calls"]]
        kernels = [str(c.get("kernel", "")) for c in record["calls"]]
        unit = str(record["unit"])
    except OSError as exc:
        raise InputError(f"{path}: cannot read the profile ({exc.strerror}); run the "
                         "whole model's project with run --profile first") from None
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{path}: not a profile that run --profile wrote") from None
    if len(counts) != split.calls:
        raise InputError(f"{path}: a profile of {len(counts)} calls; this model makes "
                         f"{split.calls}")
    mine = split.kernels(0, split.calls)
    other = next((i for i, (k, m) in enumerate(zip(kernels, mine, strict=True)) if k != m),
                 None)
    if other is not None:
        raise InputError(f"{path}: call {other} of the profile is '{kernels[other][:40]}', "
                         f"this model's is '{mine[other]}': a profile of another model")
    return counts, unit


def plan_stages(split: ModelSplit, costs: list[int], unit: str,
                pes: list[ProcessingElement], replicas: int, pes_given: int,
                link: LinkCost) -> PipelinePlan:
    """The best cuts for one PE per stage (`pes`, in stage order), each stage fitting its PE."""
    depth = len(pes)
    need = split.need  # memoised by the split
    # The cuts balance each stage's calls and link; a PE's stage must fit it. With PEs of
    # several kinds, a stage fits if it fits the smallest (the order is the user's).
    smallest = min(pes, key=lambda p: (p.stage_ram, p.stage_flash))
    cuts = balanced_cuts(costs, depth, split.cut_points(),
                         lambda first, end: smallest.fits(need(first, end)),
                         lambda first, end: link.of(need(first, end).input_bytes,
                                                    need(first, end).output_bytes))
    bounds = [0, *cuts, split.calls]
    stages = []
    for index, (first, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        n = need(first, end)
        stages.append(PlannedStage(index, first, end, split.kernels(first, end),
                                   sum(costs[first:end]), n, pes[index]))
    whole = need(0, split.calls)
    single = sum(costs) + link.of(whole.input_bytes, whole.output_bytes)
    return PipelinePlan(split.model.name, stages, replicas, pes_given, unit, single,
                        link)


def plan_pipeline(split: ModelSplit, costs: list[int], unit: str,
                  pes: list[ProcessingElement], count: int | None, depth: int | None = None,
                  link: LinkCost = LINK_COST) -> PipelinePlan:
    """Without a count: one stage on each PE of `pes`, in order. With `count` PEs like
    pes[0]: `depth` stages (default: one per PE), replicated count // depth times; when
    the model has fewer cut points than PEs, the depth that gives the most throughput."""
    if count is None:
        return plan_stages(split, costs, unit, pes, 1, len(pes), link)
    if count < 1:
        raise InputError(f"--pes {count}: a pipeline needs at least one PE")
    deepest = len(split.cut_points()) + 1
    if depth is not None:
        if not 1 <= depth <= min(count, deepest):
            raise InputError(f"--depth {depth}: between 1 and {min(count, deepest)} for "
                             f"{count} PEs and a model of {deepest} possible stages")
        return plan_stages(split, costs, unit, [pes[0]] * depth, count // depth, count,
                           link)
    if count <= deepest:
        return plan_stages(split, costs, unit, [pes[0]] * count, 1, count, link)
    best: PipelinePlan | None = None
    problem: ExportError | None = None
    for d in range(1, deepest + 1):
        try:
            plan = plan_stages(split, costs, unit, [pes[0]] * d, count // d, count,
                               link)
        except ExportError as exc:  # no cut of this depth fits its PEs: try deeper
            problem = exc
            continue
        if best is None or (plan.speedup, -plan.latency, -plan.pes_used) > \
                (best.speedup, -best.latency, -best.pes_used):
            best = plan
    if best is None:
        assert problem is not None
        raise problem
    return best
