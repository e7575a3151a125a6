"""The host coordinator of a pipeline: every PE its own firmware on its own framed link
(host-relayed), inputs streamed into stage 0, each stage's outputs moved to the next
stage's inputs, several inputs in flight.

One thread per PE talks to it (the standalone application's protocol, as `run` speaks it):
stage k works on input i while stage k+1 works on input i-1. Bounded queues between the
stages keep at most IN_FLIGHT inputs waiting before each PE. With replicas, input i goes to
replica i mod R. A PE that fails, dies or hangs stops the whole pipeline: every PE is
stopped, and the error names the PE and the input it had in flight.

Where the link counts instructions (QEMU under -icount), each PE's instructions over the
stream are read before the first input and after the last: per input, they are that PE's
whole work, its link included (the firmware sleeps, uncounted, while it waits).
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from generator import abi
from generator.boards import Board
from generator.device.links import link_of
from generator.errors import DeviceError, MtgError
from generator.link.app_client import AppClient
from generator.project.backends import board_of_project
from generator.project.record import load_project
from generator.run import (
    BOOT_TIMEOUT,
    TensorSpec,
    decode_output,
    firmware_matches,
    prepare_input,
    run_failure,
    timing,
)
from generator.toolchain import BUILD_DIR, FIRMWARE

IN_FLIGHT = 2  # inputs queued before each PE, beside the one it works on
POLL_SECONDS = 0.2  # how often waiting threads look whether the pipeline stopped
PROGRESS_SECONDS = 1.0  # at most one "input i done" line a second (and the first, the last)
_STOP = None  # the end of the stream, in a queue


class PipelineError(DeviceError):
    """A PE failed: the pipeline stopped."""


@dataclass
class StageProject:
    """A stage's generated project and its tensors."""

    index: int
    project_dir: Path
    board: Board
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    accelerators: list[str]

    @classmethod
    def load(cls, index: int, project_dir: Path) -> StageProject:
        project = load_project(project_dir)
        return cls(index, project_dir, board_of_project(project),
                   [TensorSpec.from_json(d) for d in project["module"]["inputs"]],
                   [TensorSpec.from_json(d) for d in project["module"]["outputs"]],
                   [str(a.get("name")) for a in project.get("accelerators", [])])

    @property
    def pe_name(self) -> str:
        """Its board, with the accelerators its firmware drives: board+name."""
        return "+".join((self.board.name, *self.accelerators))


@dataclass
class PeStats:
    """What one PE did over the stream."""

    pe: int
    stage: int
    replica: int
    board: str
    inputs: int = 0
    run_count: int = 0  # the run function's time, summed (in `unit`)
    unit: str = ""
    executed: int | None = None  # all its instructions over the stream (QEMU's count)
    received_bytes: int = 0
    sent_bytes: int = 0
    counters: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def per_input(self) -> float | None:
        """Instructions per input, its link included (where counted)."""
        return self.executed / self.inputs if self.executed is not None and self.inputs \
            else None

    def to_json(self) -> dict:
        return {"pe": self.pe, "stage": self.stage, "replica": self.replica,
                "board": self.board, "inputs": self.inputs, "run_count": self.run_count,
                "unit": self.unit, "instructions": self.executed,
                "instructions_per_input": self.per_input,
                "received_bytes": self.received_bytes, "sent_bytes": self.sent_bytes,
                "accelerator_counters": self.counters}


@dataclass
class StreamResult:
    outputs: dict[int, dict[str, np.ndarray]]  # by input index
    pes: list[PeStats]
    interrupted: bool = False


@dataclass
class _Failure:
    pe: int
    description: str
    input_index: int | None
    message: str


class Pe:
    """A PE as the coordinator sees it: its stage, its place in the pipeline (the queue it
    takes inputs from, the one it hands outputs to), what it did. Subclasses talk to the
    device: start, connect, work, finish, terminate, close."""

    def __init__(self, number: int, stage, replica: int) -> None:
        self.number = number
        self.stage = stage
        self.replica = replica
        self.inbox: queue.Queue = queue.Queue(maxsize=IN_FLIGHT)
        self.outbox: queue.Queue | None = None  # the next stage's inbox, or the results
        self.in_flight: int | None = None
        self.stats = PeStats(number, stage.index, replica, stage.pe_name)


class LocalPe(Pe):
    """A PE this machine starts: the stage's standalone firmware, over its framed link."""

    def __init__(self, number: int, stage: StageProject, replica: int, workdir: Path,
                 timeout: float) -> None:
        super().__init__(number, stage, replica)
        self.workdir = workdir
        self.timeout = timeout
        self.device = None
        self.counter = None
        self.client: AppClient | None = None

    @property
    def name(self) -> str:
        return f"PE {self.number} (stage {self.stage.index}, {self.stage.pe_name})"

    def start(self) -> None:
        board = self.stage.board
        link = link_of(board)
        if not link.runs_locally:
            raise DeviceError(f"a pipeline starts every PE itself, and board '{board.name}' "
                              f"{link.where} (PEs elsewhere: serve them under a tracker key, "
                              "pipeline --tracker)")
        elf = self.stage.project_dir / BUILD_DIR / FIRMWARE
        self.device, self.counter = link.open_counted(board, elf, self.workdir)

    def connect(self) -> None:
        """Hello, the firmware checked against its project, the instruction count read."""
        self.client = AppClient(self.device, self.timeout)
        hello = self.client.hello(BOOT_TIMEOUT)
        if not firmware_matches(hello, self.stage.inputs, self.stage.outputs):
            raise DeviceError("its firmware is not its stage's project; rebuild it")
        if self.counter is not None:
            self.stats.executed = -self.counter.executed()

    def work(self, values: dict[str, np.ndarray], index: int) -> dict[str, np.ndarray]:
        """One input through this PE's stage: its outputs added to `values`."""
        client = self.client
        assert client is not None
        for i, spec in enumerate(self.stage.inputs):
            data = prepare_input(spec, values[spec.name], f"input {index}")
            client.set_input(i, data)
            self.stats.received_bytes += len(data)
        result = client.run()
        failed = run_failure(result)
        if failed:
            raise DeviceError(f"its stage {failed}")
        measured = timing(self.stage.board, result.ticks, result.hz)
        self.stats.run_count += measured.count
        self.stats.unit = measured.unit
        out = dict(values)
        for i, spec in enumerate(self.stage.outputs):
            raw = client.get_output(i, spec.size_bytes)
            self.stats.sent_bytes += len(raw)
            out[spec.name] = decode_output(spec, raw)
        self.stats.inputs += 1
        return out

    def finish(self) -> None:
        """The instruction count read, the counters read, the firmware asked to exit."""
        client = self.client
        assert client is not None
        if self.counter is not None and self.stats.executed is not None:
            self.stats.executed += self.counter.executed()
        self.stats.counters = client.counters()
        client.quit(0)
        status = self.device.wait(timeout=BOOT_TIMEOUT)
        if status != abi.constant("MTVG_EXIT_OK"):
            raise DeviceError(f"it exited with status {status}")

    def terminate(self) -> None:
        stop = getattr(self.device, "terminate", None)
        if stop is not None:
            stop()

    def close(self) -> None:
        if self.counter is not None:
            self.counter.close()
        if self.device is not None:
            self.device.close(hung=True)


# make_pe(number, stage, replica, workdir): a PE for `stage` (default: LocalPe, this machine's)
PeFactory = Callable[[int, object, int, Path], Pe]


class Coordinator:
    """Runs a stream of inputs through `stages` on `replicas` copies of the pipeline."""

    def __init__(self, stages: list, replicas: int = 1, timeout: float = 60.0,
                 make_pe: PeFactory | None = None) -> None:
        self.stages = stages
        self.replicas = replicas
        self.timeout = timeout
        self.make_pe = make_pe or (lambda number, stage, replica, workdir:
                                   LocalPe(number, stage, replica, workdir, timeout))
        self._failure: _Failure | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    def _fail(self, pe: Pe, message: str) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = _Failure(pe.number, pe.name, pe.in_flight, message)
        self._stopped.set()

    def _put(self, box: queue.Queue, item) -> bool:
        """Put unless the pipeline stopped (False then)."""
        while not self._stopped.is_set():
            try:
                box.put(item, timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, box: queue.Queue):
        """The next item, or _STOP once the pipeline stopped."""
        while not self._stopped.is_set():
            try:
                return box.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
        return _STOP

    def _serve(self, pe: Pe) -> None:
        try:
            while True:
                item = self._get(pe.inbox)
                if item is _STOP:
                    break
                index, values = item
                pe.in_flight = index
                out = pe.work(values, index)
                pe.in_flight = None
                if not self._put(pe.outbox, (index, out)):
                    return
            if not self._stopped.is_set():
                pe.finish()
                self._put(pe.outbox, _STOP)
        except MtgError as exc:
            self._fail(pe, exc.one_line())
        except (OSError, ValueError) as exc:  # its streams closed under it
            self._fail(pe, f"its link failed: {exc}")

    def run(self, samples: dict[int, dict[str, np.ndarray]],
            on_output: Callable[[int, dict[str, np.ndarray]], None] | None = None,
            progress: Callable[[str], None] | None = None) -> StreamResult:
        """Every sample (by its index) through the pipeline; `on_output` as each leaves."""
        workroot = Path(tempfile.mkdtemp(prefix="mtvg-pipe-"))  # short: QMP socket paths
        pes: list[Pe] = []
        results: queue.Queue = queue.Queue()
        outputs: dict[int, dict[str, np.ndarray]] = {}
        threads: list[threading.Thread] = []
        interrupted = False
        try:
            for replica in range(self.replicas):
                chain = []
                for stage in self.stages:
                    workdir = workroot / f"pe{len(pes)}"
                    workdir.mkdir()
                    pe = self.make_pe(len(pes), stage, replica, workdir)
                    pes.append(pe)
                    chain.append(pe)
                for before, after in zip(chain, chain[1:], strict=False):
                    before.outbox = after.inbox
                chain[-1].outbox = results
            if progress:
                progress(f"starting {len(pes)} PEs")
            for pe in pes:
                try:
                    pe.start()
                except MtgError as exc:
                    raise PipelineError(f"{pe.name}: {exc.one_line()}") from None
            for pe in pes:
                try:
                    pe.connect()
                except MtgError as exc:
                    raise PipelineError(f"{pe.name}: {exc.one_line()}") from None
            threads = [threading.Thread(target=self._serve, args=(pe,), daemon=True)
                       for pe in pes]
            for t in threads:
                t.start()
            firsts = [pe for pe in pes if pe.stage is self.stages[0]]
            feeder = threading.Thread(target=self._feed, args=(samples, firsts), daemon=True)
            feeder.start()
            ends = 0
            shown = time.monotonic()
            while ends < self.replicas and not self._stopped.is_set():
                try:
                    item = results.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    continue
                if item is _STOP:
                    ends += 1
                    continue
                index, values = item
                final = {s.name: values[s.name] for s in self.stages[-1].outputs}
                outputs[index] = final
                if on_output:
                    on_output(index, final)
                if progress and (len(outputs) in (1, len(samples))
                                 or time.monotonic() - shown >= PROGRESS_SECONDS):
                    progress(f"input {index} done ({len(outputs)}/{len(samples)})")
                    shown = time.monotonic()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self._stopped.set()
            if any(t.is_alive() for t in threads):  # stopped early: end their waits
                for pe in pes:
                    pe.terminate()
            for t in threads:
                t.join(timeout=self.timeout)
            for pe in pes:
                pe.close()
            shutil.rmtree(workroot, ignore_errors=True)
        if self._failure is not None and not interrupted:
            f = self._failure
            raise PipelineError(f"{f.description} stopped the pipeline"
                                + (f" with input {f.input_index} in flight"
                                   if f.input_index is not None else "")
                                + f": {f.message}")
        return StreamResult(outputs, [pe.stats for pe in pes], interrupted)

    def _feed(self, samples: dict[int, dict[str, np.ndarray]], firsts: list[Pe]) -> None:
        for n, (index, sample) in enumerate(sorted(samples.items())):
            if not self._put(firsts[n % len(firsts)].inbox, (index, sample)):
                return
        for pe in firsts:
            if not self._put(pe.inbox, _STOP):
                return
