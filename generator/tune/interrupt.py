"""Ctrl-C during tuning, made reliable.

Much of tuning runs inside TVM: MetaSchedule's builder and runner call back into Python
through TVM's FFI, and so do the schedule primitives the search replays. A KeyboardInterrupt
raised in such a callback can come back out of TVM as an ordinary error, which the tuner's
"a sample TVM refuses" and "the call failed" handlers would swallow (and log a candidate as
failed that never was). So SIGINT also sets a flag, and the tuner checks it wherever it
catches errors and between steps (`check()`), raising KeyboardInterrupt from plain Python.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_interrupted = threading.Event()

STOPPING = ("Ctrl-C: stopping; the log keeps every finished measurement, and the same "
            "command continues from it")


@contextmanager
def catching_interrupts(announce: Callable[[str], None] | None = None) -> Iterator[None]:
    """SIGINT sets the flag (and raises KeyboardInterrupt as usual) inside the block; an
    error leaving the block after SIGINT (a KeyboardInterrupt that TVM turned into a
    RuntimeError on its way out of a callback) leaves as KeyboardInterrupt. The first
    SIGINT is announced at once (the way out may wait for a TVM compile to return)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if announce is not None and not _interrupted.is_set():
            announce(STOPPING)
        _interrupted.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except Exception:
        check()
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        _interrupted.clear()


def check() -> None:
    """Raise KeyboardInterrupt if SIGINT arrived (whatever became of the first one)."""
    if _interrupted.is_set():
        raise KeyboardInterrupt
