"""Running a built project on its board: send inputs, run, read outputs."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from time import monotonic

import numpy as np

from generator import RUNTIME_ABI_VERSION, abi, hints
from generator.boards import Board
from generator.build import BuildResult, board_ram, build
from generator.device.links import link_of
from generator.elfsize import elf_size
from generator.errors import DeviceError, InputError, ProjectError
from generator.link.app_client import AppClient, RunResult
from generator.mlf.model import c_identifier
from generator.project.backends import board_of_project
from generator.project.record import load_project
from generator.project_api.drive import project_device
from generator.toolchain import BUILD_DIR, FIRMWARE

BOOT_TIMEOUT = 60.0
REPLY_TIMEOUT = 120.0
PROGRESS_SECONDS = 1.0  # --batch: at most one "sample i/n" line a second (and the first, the last)
# The mtvg/status.h names of what the model's run function and the application may return
# (anything else is the generated code's own status, passed on).
RUN_STATUSES = ("MTVG_OK", "MTVG_FAILED", "MTVG_ACCEL_RUN_FAILED")
EXIT_STATUSES = ("MTVG_EXIT_OK", "MTVG_EXIT_SETUP_FAILED")


@dataclass
class TensorSpec:
    name: str  # as the model spells it
    dtype: str
    shape: tuple[int, ...]
    size_bytes: int
    c_name: str = ""  # its C identifier (projects generated before c_name: TVM's rule)

    def __post_init__(self) -> None:
        if not self.c_name:
            self.c_name = c_identifier(self.name)

    @classmethod
    def from_json(cls, d: dict) -> TensorSpec:
        return cls(d["name"], d["dtype"], tuple(d["shape"]), d["size_bytes"],
                   d.get("c_name") or "")


def find_input(inputs: list[TensorSpec], name: str, where: str) -> TensorSpec:
    """The input a user names by the model's name or, failing that, by its C name."""
    for spec in inputs:
        if spec.name == name:
            return spec
    for spec in inputs:
        if spec.c_name == name:
            return spec
    raise InputError(f"{where}: the model has no input '{name}' (inputs: "
                     f"{describe_inputs(inputs)})")


def describe_inputs(inputs: list[TensorSpec]) -> str:
    """The inputs by name, with the C name where it differs (either works in --input)."""
    return ", ".join(s.name if s.c_name == s.name else f"{s.name} (C name {s.c_name})"
                     for s in inputs)


NS_PER_SECOND = 10**9


@dataclass(frozen=True)
class Timing:
    """One run's time in the unit the board measures honestly.

    Under QEMU's -icount the guest clock is virtual: QEMU runs one instruction every
    2**shift ns, so the board timer counts instructions (ticks * 1e9 / hz / 2**shift;
    x40 for a 25 MHz timer at shift 0), not time on a real chip. Elsewhere the timer
    counts nanoseconds (the host), CPU cycles (a real board's timer on its CPU clock) or
    plain ticks (any other timer; QEMU without -icount follows the host's wall clock).
    """

    unit: str  # "instructions" | "cycles" | "ns" | "ticks"
    count: int  # in that unit
    ticks: int  # what the board timer read
    tick_hz: int
    seconds: float | None  # real seconds; None when the clock is virtual

    def brief(self) -> str:
        """Instructions under QEMU -icount (virtual time), else milliseconds."""
        if self.seconds is None:
            return f"{self.count:,} {self.unit}"
        return f"{self.seconds * 1e3:.3f} ms"

    def to_json(self) -> dict:
        return {"unit": self.unit, "count": self.count, "ticks": self.ticks,
                "tick_hz": self.tick_hz, "seconds": self.seconds,
                "instructions": self.count if self.unit == "instructions" else None}


def timing(board: Board, ticks: int, hz: int) -> Timing:
    """How to read a run's timer ticks on this board."""
    link = link_of(board)
    shift = link.icount_shift(board)
    if shift is not None and hz:
        # Integer arithmetic, rounded to nearest: exact for timers dividing 1 GHz.
        per = hz << shift
        return Timing("instructions", (ticks * NS_PER_SECOND + per // 2) // per, ticks, hz,
                      None)
    seconds = ticks / hz if hz else 0.0
    if hz == NS_PER_SECOND:
        return Timing("ns", ticks, ticks, hz, seconds)
    cycles = not link.emulated and hz == board.clock_hz  # a timer on the CPU clock
    return Timing("cycles" if cycles else "ticks", ticks, ticks, hz, seconds)


@dataclass
class RunReport:
    board: str
    outputs: list[dict[str, np.ndarray]]  # one dict per sample
    results: list[RunResult]
    flash_bytes: int
    ram_bytes: int
    arena_bytes: int
    output_files: list[Path] = field(default_factory=list)
    storage_bytes: int = 0  # graph executor storage reserved in the firmware
    storage_used: int = 0  # and what the executor placed there
    timings: list[Timing] = field(default_factory=list)  # one per sample
    # Accelerator counters of each sample's run: {accelerator: {counter: value}}.
    counters: list[dict[str, dict[str, int]]] = field(default_factory=list)
    requested: int = 0  # samples asked for; fewer in `outputs` when interrupted
    interrupted: bool = False  # Ctrl-C: the samples finished before it are kept
    # run --profile: each sample's time per call of the run function, in its timing's unit.
    profiles: list[list[int]] = field(default_factory=list)

    def to_json(self) -> dict:
        samples = []
        for outs, res, time in zip(self.outputs, self.results, self.timings, strict=True):
            samples.append({
                "status": res.status,
                **time.to_json(),
                "workspace_peak_bytes": res.workspace_peak,
                "outputs": {k: v.tolist() for k, v in outs.items()},
            })
        for sample, counters in zip(samples, self.counters, strict=False):
            sample["accelerator_counters"] = counters
        for sample, calls in zip(samples, self.profiles, strict=False):
            sample["profile"] = calls
        return {"board": self.board, "samples": samples, "flash_bytes": self.flash_bytes,
                "ram_bytes": self.ram_bytes, "arena_bytes": self.arena_bytes,
                "storage_bytes": self.storage_bytes, "storage_used_bytes": self.storage_used,
                "output_files": [str(p) for p in self.output_files],
                "samples_requested": self.requested, "interrupted": self.interrupted}


def prepare_input(spec: TensorSpec, array: np.ndarray, origin: str) -> bytes:
    """Check a user's array against the model input and return its bytes."""
    want = np.dtype(spec.dtype)
    if array.dtype != want:
        raise InputError(f"{origin}: input '{spec.name}' must be {spec.dtype}, got {array.dtype}")
    if array.size * want.itemsize != spec.size_bytes:
        raise InputError(f"{origin}: input '{spec.name}' needs shape {list(spec.shape)} "
                         f"({spec.size_bytes} bytes), got shape {list(array.shape)}")
    return np.ascontiguousarray(array).astype(want.newbyteorder("<"), copy=False).tobytes()


def firmware_matches(hello, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> bool:
    """The device's hello names this runtime's ABI and these tensors' sizes."""
    return hello.abi == RUNTIME_ABI_VERSION \
        and hello.input_sizes == [s.size_bytes for s in inputs] \
        and hello.output_sizes == [s.size_bytes for s in outputs]


def run_failure(result: RunResult) -> str | None:
    """'returned status X[: message]' when the run function failed, else None."""
    if result.status == abi.constant("MTVG_OK"):
        return None
    status = abi.describe_status(result.status, RUN_STATUSES)
    return f"returned status {status}" + (f": {result.message}" if result.message else "")


def decode_output(spec: TensorSpec, raw: bytes) -> np.ndarray:
    """An output's bytes from the device (little-endian) as the model's array."""
    return np.frombuffer(raw, dtype=np.dtype(spec.dtype).newbyteorder("<")) \
        .astype(spec.dtype).reshape(spec.shape)


def ensure_built(project_dir: Path, progress=None, sanitize: bool | None = None) -> BuildResult:
    """Bring the firmware up to date; Ninja decides what is stale (a no-op build is fast).

    `sanitize=None` keeps the sanitizer setting of the last build.
    """
    return build(project_dir, sanitize=sanitize, progress=progress)


# on_sample(index, outputs, result, timing, counters): a sample finished on the device.
SampleCallback = Callable[[int, dict, RunResult, Timing, dict], None]


def run_project(project_dir: Path, samples: list[dict[str, np.ndarray]],
                output_dir: Path | None = None, progress=None,
                sanitize: bool | None = None,
                on_sample: SampleCallback | None = None, batch: bool = False,
                profile: bool = False) -> RunReport:
    """Run `samples` on the project's device. Ctrl-C (KeyboardInterrupt) after a sample
    finished ends the run early: the report holds the finished samples (`interrupted`),
    and their outputs are written; before the first, it propagates. `profile`: also the
    time of each call of the run function (a project generated with --profile)."""
    project = load_project(project_dir)
    points = profile_points_of(project, project_dir) if profile else 0
    inputs = [TensorSpec.from_json(d) for d in project["module"]["inputs"]]
    outputs = [TensorSpec.from_json(d) for d in project["module"]["outputs"]]
    encoded = []
    for i, given in enumerate(samples):
        where = f"sample {i}" if len(samples) > 1 else "input"
        sample: dict[str, np.ndarray] = {}
        unknown = []
        for key, array in given.items():  # by the model's name or by the C name
            spec = next((s for s in inputs if s.name == key), None) \
                or next((s for s in inputs if s.c_name == key), None)
            if spec is None:
                unknown.append(key)
            elif spec.name in sample:
                raise InputError(f"{where}: input '{spec.name}' is given twice")
            else:
                sample[spec.name] = array
        missing = [s.name for s in inputs if s.name not in sample]
        if missing or unknown:
            raise InputError(f"{where}: model inputs are {describe_inputs(inputs)}"
                             + (f"; missing {', '.join(missing)}" if missing else "")
                             + (f"; unknown {', '.join(sorted(unknown))}" if unknown else ""))
        encoded.append([prepare_input(s, sample[s.name], where) for s in inputs])

    board = board_of_project(project)  # a Zephyr board by its Zephyr name
    link = link_of(board)
    if link.needs_flash:  # its firmware answers the hello whenever the port opens
        link.check_reachable(board)
    all_outputs: list[dict[str, np.ndarray]] = []
    results: list[RunResult] = []
    if progress:
        progress(f"building if needed, then starting {board.name}")
    # Through the project's Project API server: its build, then its transport.
    with project_device(project_dir, sanitize) as device:
        size = elf_size(project_dir / BUILD_DIR / FIRMWARE, board_ram(board))
        client = AppClient(device, REPLY_TIMEOUT)
        hello = client.hello(BOOT_TIMEOUT)
        if not firmware_matches(hello, inputs, outputs):
            if link.needs_flash:
                raise DeviceError(f"the firmware on the {board.name} is not this project's",
                                  hint=f"microtvm-gen flash {project_dir}, then run again")
            raise DeviceError("the firmware does not match project.json; rebuild the project")
        counted = any(a.get("counters") for a in project.get("accelerators", []))
        counters: list[dict] = []
        profiles: list[list[int]] = []
        before = client.counters() if counted else {}
        shown = -PROGRESS_SECONDS
        interrupted = False
        try:
            for n, sample_bytes in enumerate(encoded):
                if progress and len(encoded) > 1 and (
                        n in (0, len(encoded) - 1) or monotonic() - shown >= PROGRESS_SECONDS):
                    progress(f"sample {n + 1}/{len(encoded)}")  # a line a second at most
                    shown = monotonic()
                for index, data in enumerate(sample_bytes):
                    client.set_input(index, data)
                result = client.run()
                failed = run_failure(result)
                if failed:
                    raise DeviceError(f"the model {failed} on the device")
                calls = _call_times(client.profile(), points, board, result.hz) \
                    if points else []
                sample_counters = {}
                if counted:
                    after = client.counters()
                    sample_counters = _difference(after, before)
                    before = after
                outs = {}
                for index, spec in enumerate(outputs):
                    outs[spec.name] = decode_output(spec,
                                                    client.get_output(index, spec.size_bytes))
                with _sigint_deferred():  # a sample is kept and shown whole, or not at all
                    results.append(result)
                    if counted:
                        counters.append(sample_counters)
                    if points:
                        profiles.append(calls)
                    all_outputs.append(outs)
                    if on_sample:
                        on_sample(n, outs, result, timing(board, result.ticks, result.hz),
                                  sample_counters)
        except KeyboardInterrupt:
            if not all_outputs:
                raise
            interrupted = True  # the device is stopped as the block ends, mid-request
        if not interrupted:
            client.quit(0)
            status = device.wait(timeout=BOOT_TIMEOUT)
            if status != abi.constant("MTVG_EXIT_OK"):
                raise DeviceError(f"{device.description} exited with status "
                                  f"{abi.describe_status(status, EXIT_STATUSES)}")
    report = RunReport(board.name, all_outputs, results, size.flash, size.ram,
                       project["module"]["arena_bytes"], storage_bytes=hello.storage_bytes,
                       storage_used=hello.storage_used,
                       timings=[timing(board, r.ticks, r.hz) for r in results],
                       counters=counters, requested=len(encoded), interrupted=interrupted,
                       profiles=profiles)
    if output_dir is not None and all_outputs:
        output_dir.mkdir(parents=True, exist_ok=True)
        for spec in outputs:
            # A batch (asked for, or more than one sample) is stacked along a first axis
            # however many samples finished; a single run is saved as it is.
            stacked = (np.stack([o[spec.name] for o in all_outputs])
                       if batch or len(encoded) > 1 else all_outputs[0][spec.name])
            path = output_dir / f"{spec.c_name}.npy"  # a C identifier: a safe file name
            np.save(path, stacked)
            report.output_files.append(path)
    return report


def profile_points_of(project: dict, project_dir: Path) -> int:
    """The marks a project generated with --profile makes per run; refused otherwise."""
    record = project.get("profile")
    points = record.get("points") if isinstance(record, dict) else None
    if not isinstance(points, int) or points < 2:
        raise ProjectError(f"{project_dir}: generated without --profile: its firmware does not "
                           "time each call",
                           hint=hints.profile_project(project_dir, project.get("board", ""),
                                                      project.get("backend") == "crt"))
    return points


def _call_times(ticks: list[int], points: int, board: Board, hz: int) -> list[int]:
    """Each call's time in the run's unit: the difference of its marks."""
    if len(ticks) != points:
        raise DeviceError(f"the run function marked {len(ticks)} of its {points} points; "
                          "the firmware is not this project's build")
    return [timing(board, after - before, hz).count
            for before, after in zip(ticks, ticks[1:], strict=False)]


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Ctrl-C inside the block takes effect (KeyboardInterrupt) when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if arrived:
        raise KeyboardInterrupt


def _difference(after: dict[str, dict[str, int]],
                before: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """What each counter advanced during one run (drivers count from reset)."""
    return {accel: {name: value - before.get(accel, {}).get(name, 0)
                    for name, value in counts.items()}
            for accel, counts in after.items()}
