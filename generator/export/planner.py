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

import random
from dataclasses import dataclass
from itertools import permutations

ALIGN = 16  # every tensor starts on a 16-byte boundary (vector loads, DMA engines)


@dataclass(frozen=True)
class Interval:
    """A tensor to place: its size and the steps [first, last] it is live. `segments`
    ((first, last, size), in order, covering [first, last]) give bytes that change over
    its life: tensors written over one another share one place whose size at each step is
    the live one's (`size` is the largest)."""

    tensor: int
    size: int
    first: int
    last: int
    segments: tuple[tuple[int, int, int], ...] = ()

    def meets(self, other: Interval) -> bool:
        return self.first <= other.last and other.first <= self.last

    def occupancy(self) -> tuple[tuple[int, int, int], ...]:
        """(first, last, aligned bytes) over its life."""
        return tuple((f, la, align_up(n)) for f, la, n in
                     (self.segments or ((self.first, self.last, self.size),)))


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


def _live_bytes(intervals: list[Interval]) -> dict[int, int]:
    """Step → the total (aligned) size of the tensors live then."""
    if not intervals:
        return {}
    steps = range(min(i.first for i in intervals), max(i.last for i in intervals) + 1)
    return {s: sum(n for i in intervals for f, la, n in i.occupancy() if f <= s <= la)
            for s in steps}


def lower_bound(intervals: list[Interval]) -> int:
    """The largest total (aligned) size of tensors live at the same step."""
    return max(_live_bytes(intervals).values(), default=0)


EXHAUSTIVE_MAX = 7  # up to this many tensors, every placement order is tried if needed


def _lowest_free(item: Interval, placed: list[tuple[Interval, int]],
                 limit: int | None = None) -> int | None:
    """The lowest offset for `item` free of the `placed` tensors whose lifetimes meet its
    own (where both have bytes at the same step); None when it would pass `limit` bytes."""
    # (bytes the item has then, busy start, busy end) for each step range it shares
    clashes = [(n, offset, offset + m)
               for other, offset in placed if item.meets(other)
               for f, la, n in item.occupancy()
               for g, lb, m in other.occupancy() if f <= lb and g <= la]
    for candidate in sorted({0, *(end for _, _, end in clashes)}):
        if limit is not None and candidate + item.size > limit:
            return None
        if all(candidate + n <= start or candidate >= end for n, start, end in clashes):
            return candidate
    return None


def _first_fit(order: list[Interval]) -> list[Placement]:
    """Each tensor in `order` at the lowest offset free of already placed tensors."""
    placed: list[tuple[Interval, int]] = []
    for item in order:
        placed.append((item, _lowest_free(item, placed) or 0))
    return [Placement(i.tensor, offset, i.size, i.first, i.last) for i, offset in placed]


@dataclass(frozen=True)
class Region:
    """Bytes outside the pool that activations may use from step `free_from` on: an input
    buffer the caller lets the model write over once it is read (`export --reuse-input`)."""

    buffer: int  # the input tensor
    size: int
    free_from: int


def move_to_regions(intervals: list[Interval], regions: list[Region]
                    ) -> tuple[list[Interval], dict[int, tuple[int, int]]]:
    """Takes tensors out of the pool into the regions while the pool's fullest step has
    one that fits (the largest first): the intervals left for the pool, and each moved
    tensor's (region buffer, offset)."""
    left = list(intervals)
    inside: dict[int, list[tuple[Interval, int]]] = {r.buffer: [] for r in regions}
    moved: dict[int, tuple[int, int]] = {}
    while left:
        live_bytes = _live_bytes(left)
        step = max(live_bytes, key=live_bytes.get)
        live = sorted((i for i in left if i.first <= step <= i.last),
                      key=lambda i: (-i.size, i.tensor))
        fit = next(((item, region, offset) for item in live for region in regions
                    if item.first >= region.free_from
                    for offset in [_lowest_free(item, inside[region.buffer], region.size)]
                    if offset is not None), None)
        if fit is None:
            break
        item, region, offset = fit
        inside[region.buffer].append((item, offset))
        moved[item.tensor] = (region.buffer, offset)
        left.remove(item)
    return left, moved


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


# When no order above reaches the bound: orders changed by a few swaps, kept when they
# place smaller (a fixed seed: the same model gets the same plan). The number of tries
# shrinks with the square of the tensor count, so a large model costs about as much time.
SEARCH_SEED = 0
SEARCH_TRIES = 400
SEARCH_WORK = 2_000_000  # tries × tensors² at most


def plan(intervals: list[Interval]) -> Plan:
    """Offsets for every interval; deterministic for the same input. The first order whose
    first-fit plan reaches the lower bound wins; otherwise the smallest plan found, then
    improved by a short local search over placement orders."""
    bound = lower_bound(intervals)
    best: list[Placement] | None = None
    best_order: list[Interval] = []
    for order in _orders(intervals):
        placed = _first_fit(order)
        if best is None or _peak(placed) < _peak(best):
            best, best_order = placed, order
        if _peak(best) <= bound:
            break
    if best is not None and _peak(best) > bound and len(intervals) > 1:
        rng = random.Random(SEARCH_SEED)
        tries = min(SEARCH_TRIES, SEARCH_WORK // len(intervals) ** 2)
        for _ in range(tries):
            order = list(best_order)
            for _ in range(rng.randint(1, 3)):
                a, b = rng.randrange(len(order)), rng.randrange(len(order))
                order[a], order[b] = order[b], order[a]
            placed = _first_fit(order)
            if _peak(placed) < _peak(best):
                best, best_order = placed, order
                if _peak(best) <= bound:
                    break
    placed = sorted(best or [], key=lambda p: p.tensor)
    return Plan(placed, _peak(placed), bound)
