"""Work in a forked child process, its result coming back as JSON through a pipe.

For work that holds the interpreter (TVM's calls keep the GIL) and should run next to other
work: the child has the parent's objects as they are (kernels, schedules), nothing is
serialized on the way in. The child runs in a process group of its own, so a terminal's
Ctrl-C reaches only the parent, which stops the whole group (the child and whatever it
started) when it takes the result or gives up on it. Fork only from a process that runs no
other thread that the child's work could need.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from collections.abc import Callable

from generator import errors

READ_CHUNK = 1 << 16


class Forked:
    """One child computing `work()` (JSON-serialisable); `result()` waits for it. With
    `own_group=False` the child stays in the parent's process group (a child of a child
    that has one: stopping the outer group stops it too)."""

    def __init__(self, work: Callable[[], object], own_group: bool = True) -> None:
        reader, writer = os.pipe()
        sys.stdout.flush()  # or the child's first print repeats what the parent buffered
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            _child(writer, work, own_group)  # never returns
        os.close(writer)
        if own_group:
            try:
                os.setpgid(pid, pid)  # the child does the same: whichever runs first
            except OSError:
                pass  # the child has set it already and exited
        self.pid: int | None = pid
        self._own_group = own_group
        self._reader = reader

    def result(self) -> object:
        """What `work()` returned; what it raised comes out here (our own errors as the
        same type, a bug as RuntimeError with the child's traceback)."""
        assert self.pid is not None, "result taken already"
        data = bytearray()
        try:
            while chunk := os.read(self._reader, READ_CHUNK):
                data += chunk
        finally:
            self.stop()
        try:
            report = json.loads(data)
        except ValueError:
            raise errors.MtgError("a worker process died before it finished (killed, or "
                                  "out of memory?)") from None
        if "value" in report:
            return report["value"]
        kind = getattr(errors, report.get("type", ""), None)
        if isinstance(kind, type) and issubclass(kind, errors.MtgError):
            raise kind(report["error"])
        raise RuntimeError(f"a worker process failed:\n{report['error']}")

    def stop(self) -> None:
        """Stop the child and what it started, if still running; reap it."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        os.close(self._reader)
        try:
            if self._own_group:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _child(writer: int, work: Callable[[], object], own_group: bool) -> None:
    code = 0
    try:
        if own_group:
            os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # not the parent's handler
        report: dict = {"value": work()}
    except errors.MtgError as exc:
        report, code = {"error": exc.one_line(), "type": type(exc).__name__}, 1
    except BaseException:  # noqa: BLE001 - a bug: the parent raises it with this traceback
        report, code = {"error": traceback.format_exc()}, 1
    try:
        view = memoryview(json.dumps(report).encode())
        while view:
            view = view[os.write(writer, view):]
    finally:
        os._exit(code)  # not the parent's cleanup (atexit, open sessions, temp dirs)
