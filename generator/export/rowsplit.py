"""Row splits: a pointwise convolution computed in two calls, over rows [0, r) and [r, H) of
its input, then joined. The pipeline asks for one where a stage boundary would otherwise
fall on a layer too large to balance (generator/pipeline/rowsplit.py).

A 1x1 convolution with stride 1 and no padding computes each output row from the same input
row alone, so the two halves with the same weights, bias and requantisation are the whole
layer, byte for byte. The importer emits, for a split layer, in this order:

    a = rows(x, 0, r)     b = rows(x, r, H)     ya = conv(a)     yb = conv(b)
    y = concat(ya, yb, axis=1)

so that a cut between `conv(a)` and `conv(b)` hands on `b` and `ya`: H rows in all, as
many bytes as a cut before or after the layer.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field

CALLS_PER_SPLIT = 5  # rows, rows, conv, conv, concat in place of one conv


@dataclass
class _Requests:
    rows: dict[int, int]  # pointwise convolution (its ordinal in the model) → r
    seen: int = 0
    done: list[int] = field(default_factory=list)


_REQUESTS: contextvars.ContextVar[_Requests | None] = contextvars.ContextVar("row_splits",
                                                                             default=None)


@contextlib.contextmanager
def row_splits(rows: dict[int, int]) -> Iterator[list[int]]:
    """Inside the block, the importer splits the pointwise convolutions `rows` names (by
    their ordinal among the model's int8 pointwise convolutions) at that row. Yields the
    ordinals it did split."""
    requests = _Requests(dict(rows))
    token = _REQUESTS.set(requests)
    try:
        yield requests.done
    finally:
        _REQUESTS.reset(token)


def is_pointwise(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                 out_shape: tuple[int, ...]) -> bool:
    """A regular (not depthwise) NHWC convolution, OHWI weights, batch 1, whose 1x1 kernel
    keeps the rows and columns (stride 1, no padding): each output row is its input row's."""
    return (len(x_shape) == len(out_shape) == len(w_shape) == 4 and x_shape[0] == 1
            and tuple(w_shape[1:3]) == (1, 1) and w_shape[3] == x_shape[3]
            and tuple(x_shape[1:3]) == tuple(out_shape[1:3]) and x_shape[1] >= 2)


def new_model() -> None:
    """The importer starts a model (again: it builds one once per kernel form)."""
    requests = _REQUESTS.get()
    if requests is not None:
        requests.seen = 0
        requests.done.clear()


def split_row() -> int | None:
    """For the next int8 pointwise convolution the importer meets: the row to split it at,
    or None."""
    requests = _REQUESTS.get()
    if requests is None:
        return None
    ordinal = requests.seen
    requests.seen += 1
    row = requests.rows.get(ordinal)
    if row is not None:
        requests.done.append(ordinal)
    return row
