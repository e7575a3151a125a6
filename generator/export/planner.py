"""The static memory plan: every activation gets an offset in one workspace pool.

Tensors live from the call that writes them to the last call that reads them. Two tensors
may share bytes only if their lifetimes do not meet (a kernel's inputs and outputs are live
together, so a kernel never writes over what it reads). Placement is greedy by size: the
largest tensor first, each at the lowest offset that does not collide with an already
placed tensor of overlapping lifetime. When that misses the lower bound, other orders are
tried (every order, for a handful of tensors) and the smallest plan kept. The plan's peak
is compared with the lower bound: the largest total size of tensors live at one step,
which no plan can beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

ALIGN = 16  # every tensor starts on a 16-byte boundary (vector loads, DMA engines)


@dataclass(frozen=True)
class Interval:
    """A tensor to place: its size and the steps [first, last] it is live."""

    tensor: int
    size: int
    first: int
    last: int

    def meets(self, other: Interval) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Placement:
    tensor: int
    offset: int
    size: int
    first: int
    last: int


@dataclass(frozen=True)
class Plan:
    placements: list[Placement]
    pool_bytes: int  # the plan's peak: the pool size
    lower_bound: int  # the largest live set's total size (sizes rounded up to ALIGN)

    @property
    def ratio(self) -> float:
        return self.pool_bytes / self.lower_bound if self.lower_bound else 1.0

    def offset_of(self, tensor: int) -> int:
        for p in self.placements:
            if p.tensor == tensor:
                return p.offset
        raise KeyError(tensor)


def align_up(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


def lower_bound(intervals: list[Interval]) -> int:
    """The largest total (aligned) size of tensors live at the same step."""
    if not intervals:
        return 0
    steps = range(min(i.first for i in intervals), max(i.last for i in intervals) + 1)
    return max(sum(align_up(i.size) for i in intervals if i.first <= s <= i.last)
               for s in steps)


EXHAUSTIVE_MAX = 7  # up to this many tensors, every placement order is tried if needed


def _first_fit(order: list[Interval]) -> list[Placement]:
    """Each tensor in `order` at the lowest offset free of already placed tensors whose
    lifetimes meet its own."""
    placed: list[Placement] = []
    for item in order:
        size = align_up(item.size)
        busy = sorted((p.offset, p.offset + align_up(p.size)) for p in placed
                      if item.meets(Interval(p.tensor, p.size, p.first, p.last)))
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, end)
        placed.append(Placement(item.tensor, offset, item.size, item.first, item.last))
    return placed


def _peak(placed: list[Placement]) -> int:
    return max((p.offset + align_up(p.size) for p in placed), default=0)


def _orders(intervals: list[Interval]):
    """Placement orders to try: the largest first (the usual best), then other greedy
    orders, then (for a handful of tensors) every permutation."""
    yield sorted(intervals, key=lambda i: (-align_up(i.size), i.first, i.tensor))
    yield sorted(intervals, key=lambda i: (-align_up(i.size) * (i.last - i.first + 1),
                                           i.first, i.tensor))
    yield sorted(intervals, key=lambda i: (i.first, -align_up(i.size), i.tensor))
    yield sorted(intervals, key=lambda i: (-i.last, -align_up(i.size), i.tensor))
    if len(intervals) <= EXHAUSTIVE_MAX:
        yield from (list(p) for p in permutations(sorted(intervals, key=lambda i: i.tensor)))


def plan(intervals: list[Interval]) -> Plan:
    """Offsets for every interval; deterministic for the same input. The first order whose
    first-fit plan reaches the lower bound wins; otherwise the smallest plan found."""
    bound = lower_bound(intervals)
    best: list[Placement] | None = None
    for order in _orders(intervals):
        placed = _first_fit(order)
        if best is None or _peak(placed) < _peak(best):
            best = placed
        if _peak(best) <= bound:
            break
    placed = sorted(best or [], key=lambda p: p.tensor)
    return Plan(placed, _peak(placed), bound)
