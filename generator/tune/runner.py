"""Measuring a built batch on a device: check each candidate against `ref`, then time it.

Inputs are random (int8 over its whole range, wider integers within ±2^15, floats normal).
A candidate counts only when its outputs equal the reference kernel's on the same inputs
(integers bit-exact, floats within 1e-5); otherwise it is recorded as failed, not timed.
A call that kills or hangs the device is tried once more on a fresh device session (a
device killed from outside is not the candidate's fault); failing again, the candidate is
recorded as failed. A device that does not come back leaves the rest of the batch
unmeasured (`BatchMeasurement.unmeasured`), for the caller to measure elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from generator.errors import MtgError
from generator.export.lower import last_line
from generator.tune.builder import REFERENCE, batch_info
from generator.tune.interrupt import check as check_interrupt
from generator.tune.log import Measurement

FLOAT_TOLERANCE = 1e-5
INT_RANGE = 2**15  # wider-than-8-bit integer inputs: |x| < this (no overflow in kernels)
MAX_RESTARTS = 2  # fresh device sessions per batch before the device is given up
# Errors after which the device is surely gone or stuck (no probe: it would wait too)
DEVICE_GONE = ("did not answer", "closed its link", "Connection reset", "Broken pipe")
SENTINEL = 77  # what output tensors hold before a call (a kernel that writes nothing fails)


@dataclass
class EvaluatorConfig:
    number: int = 10
    repeat: int = 3
    min_repeat_ms: int = 0
    reply_timeout: float = 20.0  # seconds a call may take before the device counts as hung
    seed: int = 0


@dataclass
class BatchMeasurement:
    results: dict[str, Measurement] = field(default_factory=dict)  # operator → result
    reference_secs: list[float] | None = None
    restarts: int = 0
    stop_seconds: float = 0.0  # closing sessions a candidate broke
    device_lost: str | None = None
    unmeasured: list[str] = field(default_factory=list)  # left when the device was lost


def random_inputs(shapes: list[tuple[tuple[int, ...], str]], rng: np.random.Generator) \
        -> list[np.ndarray]:
    out = []
    for shape, dtype in shapes:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(dt))
        elif dt.itemsize == 1:
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max + 1, shape, dtype=dt))
        else:
            low = 0 if dt.kind == "u" else -INT_RANGE
            out.append(rng.integers(low, INT_RANGE, shape).astype(dt))
    return out


def outputs_match(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when equal (floats within FLOAT_TOLERANCE), else what differs."""
    if got.dtype.kind == "f":
        bad = ~np.isclose(got, want, rtol=FLOAT_TOLERANCE, atol=FLOAT_TOLERANCE, equal_nan=False)
    else:
        bad = got != want
    count = int(np.count_nonzero(bad))
    if count == 0:
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"output differs from the reference at {count} of {got.size} elements "
            f"(first {list(first)}: {got[first]} != {want[first]})")


def measure_batch(task: str, project: Path, shapes: list[tuple[tuple[int, ...], str]],
                  config: EvaluatorConfig, batch: int, devices,
                  say: Callable[[str], None] | None = None, workload: str = "",
                  only: list[str] | None = None,
                  constants: dict | None = None) -> BatchMeasurement:
    """Check and time the candidates of a built batch project (or those named `only`) on a
    fresh session from `devices` (session.LocalDevices or session.TrackerDevices). Inputs
    at positions in `constants` get those values (the model's weights, biases and
    requantization parameters), the others random ones."""
    info = batch_info(project)
    names = sorted(only or info["candidates"], key=lambda n: int(n[len("cand"):]))
    n_out = int(info["outputs"].get(REFERENCE, 1))
    rng = np.random.default_rng(config.seed + batch)
    inputs = random_inputs(shapes[:len(shapes) - n_out], rng)
    for position, values in (constants or {}).items():
        if position < len(inputs) and values.shape == inputs[position].shape:
            inputs[position] = np.ascontiguousarray(values, dtype=inputs[position].dtype)
    out_specs = shapes[len(shapes) - n_out:]
    result = BatchMeasurement()
    session = None

    def record(name: str, secs=None, error=None) -> None:
        check_interrupt()  # an error that was really Ctrl-C is not the candidate's
        device = session.name if session is not None else devices.label
        result.results[name] = Measurement(task, info["candidates"][name], batch, device,
                                           secs, error, workload=workload)

    def lost(exc: BaseException, position: int) -> None:
        where = session.name if session is not None else devices.label
        result.device_lost = (f"device {where} did not come back: {last_line(exc)}; "
                              "its candidates go to another session")
        if say:
            say(result.device_lost)
        result.unmeasured = names[position:]

    try:
        session = devices.open(Path(project))
    except Exception as exc:  # no server, or one whose device failed as the session began
        lost(exc, 0)
        return result
    try:
        try:
            args = _upload(session, inputs)
            reference, outs = _call(session, REFERENCE, args, out_specs)
            result.reference_secs = _time(session, REFERENCE, args + outs, config)
        except Exception as exc:
            if session.alive():
                for name in names:
                    record(name, error=f"the reference kernel failed: {last_line(exc)}")
            else:
                lost(exc, 0)
            return result
        position, retried = 0, False
        while position < len(names):
            name = names[position]
            try:
                if args is None:  # a fresh session, or inputs a candidate wrote into
                    session.held.clear()
                    args = _upload(session, inputs)
                got, outs = _call(session, name, args, out_specs)
                problem = next((p for p in (outputs_match(g, w)
                                            for g, w in zip(got, reference, strict=True))
                                if p), None)
                if not problem and not _unchanged(args, inputs):
                    problem, args = "the candidate wrote into its inputs", None
                if problem:
                    record(name, error=problem)
                else:
                    record(name, secs=_time(session, name, args + outs, config))
                position, retried = position + 1, False
                continue
            except Exception as exc:
                gone = any(s in str(exc) for s in DEVICE_GONE) or not session.alive()
                if not gone:
                    record(name, error=f"the call failed: {last_line(exc)}")
                    position, retried = position + 1, False
                    continue
                if retried:  # it broke a fresh device too: the candidate's doing
                    record(name, error=f"the call failed: {last_line(exc)}")
                    position, retried = position + 1, False
                else:
                    retried = True
            # the device crashed, hung or was reset: a fresh session
            stop = time.monotonic()
            session.close()
            result.stop_seconds += time.monotonic() - stop
            try:
                if result.restarts >= MAX_RESTARTS:
                    raise MtgError(f"{MAX_RESTARTS} restarts in this batch")
                result.restarts += 1
                session, args = devices.open(Path(project)), None
            except Exception as exc:
                session = None
                lost(exc, position)
                break
    finally:
        if session is not None:
            session.close()
    return result


def _upload(session, inputs: list[np.ndarray]) -> list:
    """The inputs as device tensors: uploaded once per session, shared by the batch's
    candidates (a link like QEMU's UART moves tens of KB/s: uploads were most of a
    measurement)."""
    import tvm

    dev = session.remote.cpu(0)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    session.held[:] = args  # freed when the session is closed
    return args


def _unchanged(args: list, inputs: list[np.ndarray]) -> bool:
    """Whether the device's input tensors still hold the inputs (a download is cheap)."""
    return all(np.array_equal(a.numpy(), x, equal_nan=x.dtype.kind == "f")
               for a, x in zip(args, inputs, strict=True))


def _call(session, name: str, args: list, out_specs) -> tuple[list[np.ndarray], list]:
    """Call `name` on the inputs and fresh outputs holding a sentinel (a kernel that writes
    nothing fails its check); the outputs' values and their device tensors."""
    import tvm

    dev = session.remote.cpu(0)
    outs = []
    for shape, dtype in out_specs:
        dt = np.dtype(dtype)
        fill = np.nan if dt.kind == "f" else SENTINEL
        outs.append(tvm.runtime.tensor(np.full(shape, fill, dtype=dt), dev))
    # Held by the session, so a device that hangs in the call has them freed only after
    # its session is closed (no FreeHandle waits on it).
    session.held[len(args):] = outs
    session.remote.system_lib()[name](*args, *outs)
    return [a.numpy() for a in outs], outs


def _time(session, name: str, args: list, config: EvaluatorConfig) -> list[float]:
    lib = session.remote.system_lib()
    f = lib.time_evaluator(name, session.remote.cpu(0), number=config.number,
                           repeat=config.repeat, min_repeat_ms=config.min_repeat_ms)
    return [float(s) for s in f(*args).results]
