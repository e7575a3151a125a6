"""Tuning records: the best schedules found, as MetaSchedule traces in plain JSON.

TVM 0.27's own JSON database cannot be used: writing any IR object with `tvm.ir.save_json`
crashes the process (segmentation fault in tvm-ffi's ToJSONGraph, apache-tvm 0.27.0.post1
with apache-tvm-ffi 0.1.15.post2), and the JSON database saves each workload that way. A
trace's own JSON form (`Trace.as_json`) is plain instructions and decisions; it is kept here
with the task's structural hash, one JSON line per timed candidate (`records.jsonl`).

This module owns the file: `tune` appends to it (`append_record`), `export --tuning-records`
reads it (`read_records`), and both go through `Record`'s JSON form and its checks. A line
that is not a valid record is skipped and counted, never half-read.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import ExportError

RECORDS_NAME = "records.jsonl"
MAX_RECORDS_BYTES = 64 * 2**20
HASH_HEX = 16  # workload and candidate names: 16 hex digits
# A tiling's name, as qkernels.ConvTiling.name writes it (checked here as a format only:
# this module stays below generator.export, which reads records; export's ConvTiling.parse
# decides which tilings exist)
TILING_RE = re.compile(r"p\d{1,2}c\d{1,2}u\d{1,2}")


def plain(value):
    """TVM containers and immediates (as `Trace.as_json` returns them) → JSON values."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "value") and isinstance(value.value, int | float):  # IntImm, FloatImm
        return value.value
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or hasattr(value, "__len__"):
        return [plain(v) for v in value]
    return str(value)


@dataclass
class Record:
    task: str
    workload: str  # structural hash of the untuned task
    candidate: str  # structural hash of the scheduled module
    run_secs: list[float]
    trace: list  # Trace.as_json(remove_postproc=True), plain
    reference_secs: float | None = None  # the untuned kernel, timed in the same batch
    # A conv2d in another tiling of export's kernel (qkernels.ConvTiling.name; its trace
    # is empty), or None: the trace scheduled the task's kernel
    tiling: str | None = None

    @property
    def secs(self) -> float:
        """The fastest repeat measured on the device."""
        return min(self.run_secs)

    def to_json(self) -> dict:
        out = {"task": self.task, "workload": self.workload, "candidate": self.candidate,
               "run_secs": self.run_secs, "trace": self.trace,
               "reference_secs": self.reference_secs}
        if self.tiling is not None:
            out["tiling"] = self.tiling
        return out

    @classmethod
    def from_line(cls, line: str) -> Record | None:
        """The record a line of records.jsonl holds, or None when it holds no valid one."""
        try:
            d = json.loads(line)
            ref = d.get("reference_secs")
            tiling = d.get("tiling")
            record = cls(str(d["task"]), str(d["workload"]), str(d["candidate"]),
                         [float(s) for s in d["run_secs"]], d["trace"],
                         None if ref is None else float(ref),
                         None if tiling is None else str(tiling))
            valid = (_is_hash(record.workload) and _is_hash(record.candidate)
                     and isinstance(record.trace, list) and record.secs > 0
                     and (tiling is None or (_is_tiling(tiling) and not record.trace)))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return record if valid else None


@dataclass
class RecordsFile:
    """The valid records of one records.jsonl, and what identifies and was left of it."""

    path: Path
    sha256: str  # of the file's bytes
    records: list[Record] = field(default_factory=list)
    skipped_lines: int = 0  # lines that are not blank and hold no valid record


def append_record(directory: Path, record: Record) -> None:
    with (Path(directory) / RECORDS_NAME).open("a") as f:
        f.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
        f.flush()


def read_records(path: Path, what: str = "tuning records") -> RecordsFile:
    """The records of `path`: a `tune` output directory or its records.jsonl. `what` names
    the input in errors (an ExportError: a file that is absent, too large or holds no valid
    record)."""
    path = Path(path)
    file = path / RECORDS_NAME if path.is_dir() else path
    if not file.is_file():
        raise ExportError(f"{what} {path}: no {RECORDS_NAME} there (the output directory of "
                          "'microtvm-gen tune')")
    if file.stat().st_size > MAX_RECORDS_BYTES:
        raise ExportError(f"{what} {file}: larger than {MAX_RECORDS_BYTES // 2**20} MiB")
    data = file.read_bytes()
    out = RecordsFile(file, hashlib.sha256(data).hexdigest())
    for line in data.decode("utf-8", errors="replace").splitlines():
        record = Record.from_line(line)
        if record is None:
            out.skipped_lines += bool(line.strip())
        else:
            out.records.append(record)
    if not out.records:
        raise ExportError(f"{what} {file}: no valid record")
    return out


def _is_tiling(name) -> bool:
    """Whether `name` has a conv tiling's form (qkernels.ConvTiling.name)."""
    return isinstance(name, str) and TILING_RE.fullmatch(name) is not None


def _is_hash(text: str) -> bool:
    return len(text) == HASH_HEX and all(c in "0123456789abcdef" for c in text)


def replay(func, record: Record):
    """The schedule of the PrimFunc `func` after the record's trace (TVM's own error when
    it refuses the trace)."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir.schedule import Trace

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    Trace.apply_json_to_schedule(record.trace, sch)
    return sch


def apply_record(func, record: Record):
    """The PrimFunc `func` scheduled by the record's trace."""
    return replay(func, record).mod["main"]
