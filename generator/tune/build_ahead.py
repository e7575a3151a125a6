"""Building the next round of candidates while this one is measured.

Lowering a batch (TVM) and compiling its firmware take longer than measuring it, and both
the lowering and the stock RPC client hold the interpreter, so a thread would not overlap
them: the next round is built in a forked child (`generator.forked`), which runs
`build_batch` for each batch of the round on the schedules as they are in memory and sends
back what it returns.
"""

from __future__ import annotations

import time
from pathlib import Path

from generator.forked import Forked
from generator.tune.builder import BuiltBatch, build_batch


class BuildAhead:
    """One round built at a time, in a child process; `start` it, then take its `result`."""

    def __init__(self, measurer) -> None:
        self.measurer = measurer
        self._child: Forked | None = None
        self._rounds: list[list] = []

    def __enter__(self) -> BuildAhead:
        return self

    def __exit__(self, *exc) -> None:
        if self._child is not None:  # Ctrl-C or an error: the child and its compilers
            self._child.stop()

    def start(self, rounds: list[list]) -> None:
        """Build each batch of schedules in `rounds` (one firmware each) in a child."""
        assert self._child is None, "one round at a time"
        m = self.measurer
        numbers = [m.log.new_batch() for _ in rounds]  # the parent's log counts them

        def work() -> list[dict]:
            out = []
            for schedules, number in zip(rounds, numbers, strict=True):
                start = time.monotonic()
                built = build_batch(m.task, [s.mod for s in schedules], m.board,
                                    Path(m.work_dir), m.log, number)
                out.append({"built": built.to_json(), "seconds": time.monotonic() - start})
            return out

        self._child, self._rounds = Forked(work), rounds

    def result(self) -> list[list]:
        """For each batch of the round started last: each candidate's artifact or the
        exception saying why it has none (as `Measurer.build`)."""
        assert self._child is not None, "nothing started"
        child, self._child = self._child, None
        batches = child.result()
        return [self.measurer.built(BuiltBatch.from_json(b["built"]),
                                    [s.mod for s in schedules], b["seconds"])
                for schedules, b in zip(self._rounds, batches, strict=True)]
