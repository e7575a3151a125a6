"""Tuning records: the best schedules found, as MetaSchedule traces in plain JSON.

TVM 0.27's own JSON database cannot be used: writing any IR object with `tvm.ir.save_json`
crashes the process (segmentation fault in tvm-ffi's ToJSONGraph, apache-tvm 0.27.0.post1
with apache-tvm-ffi 0.1.15.post2), and the JSON database saves each workload that way. A
trace's own JSON form (`Trace.as_json`) is plain instructions and decisions; it is kept here
with the task's structural hash, one JSON line per timed candidate (`records.jsonl`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from generator.export.tuning import RECORDS_NAME


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
    candidate: str
    run_secs: list[float]
    trace: list  # Trace.as_json(remove_postproc=True), plain
    reference_secs: float | None = None  # the untuned kernel, timed in the same batch

    def to_json(self) -> dict:
        return {"task": self.task, "workload": self.workload, "candidate": self.candidate,
                "run_secs": self.run_secs, "trace": self.trace,
                "reference_secs": self.reference_secs}


def append_record(directory: Path, record: Record) -> None:
    with (Path(directory) / RECORDS_NAME).open("a") as f:
        f.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
        f.flush()


def read_records(directory: Path) -> list[Record]:
    path = Path(directory) / RECORDS_NAME
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                d = json.loads(line)
                out.append(Record(d["task"], d["workload"], d["candidate"],
                                  list(d["run_secs"]), d["trace"], d.get("reference_secs")))
            except (ValueError, KeyError, TypeError):
                continue
    return out


def best_records(directory: Path) -> dict[str, Record]:
    """The fastest record of each workload."""
    best: dict[str, Record] = {}
    for r in read_records(directory):
        if r.workload not in best or min(r.run_secs) < min(best[r.workload].run_secs):
            best[r.workload] = r
    return best


def apply_record(func, record: Record):
    """The PrimFunc `func` scheduled by the record's trace."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir.schedule import Trace

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    Trace.apply_json_to_schedule(record.trace, sch)
    return sch.mod["main"]
