"""`export --tuning-records DIR`: a model's kernels scheduled as `tune` found fastest.

A record (`records.jsonl`, written by `microtvm-gen tune`) names a task by the structural
hash of the untuned kernel (`workload`), the candidate by the hash of the scheduled module,
and carries the MetaSchedule trace. A kernel of the model gets a record when its own hash is
a record's workload and the record was faster than the untuned kernel timed next to it in
the same firmware; the trace is replayed on it, and the result must hash to the record's
candidate — the very kernel that was checked against the untuned one on the device and
timed there. Anything else (a trace TVM refuses, a different result, a kernel whose C needs
a runtime workspace, which full-model archives do not have) leaves that record out, with a
note; the next-fastest record of the workload is tried, then the untuned schedule.

The records file is input: it only ever reaches generated code through TVM's scheduling
primitives and C codegen, and only as a candidate it hashes to.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import ExportError

RECORDS_NAME = "records.jsonl"  # generator.tune.records writes this name
MAX_RECORDS_BYTES = 64 * 2**20
HASH_HEX = 16  # workload and candidate names: 16 hex digits
WORKSPACE_CALL = "TVMBackendAllocWorkspace("


@dataclass(frozen=True)
class TunedRecord:
    task: str
    workload: str
    candidate: str
    secs: float  # fastest repeat measured on the device
    trace: list
    reference_secs: float | None  # the untuned kernel in the same firmware, if known


@dataclass
class TunedKernel:
    kernel: str
    task: str
    workload: str
    candidate: str
    measured_secs: float

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "task": self.task, "workload": self.workload,
                "candidate": self.candidate, "measured_secs": self.measured_secs}


@dataclass
class TuningRecords:
    source: Path
    sha256: str
    by_workload: dict[str, list[TunedRecord]] = field(default_factory=dict)  # fastest first
    skipped_lines: int = 0

    @classmethod
    def load(cls, path: Path) -> TuningRecords:
        """Records from `path`: a `tune` output directory or its records.jsonl."""
        path = Path(path)
        file = path / RECORDS_NAME if path.is_dir() else path
        if not file.is_file():
            raise ExportError(f"--tuning-records {path}: no {RECORDS_NAME} there "
                              "(the output directory of 'microtvm-gen tune')")
        if file.stat().st_size > MAX_RECORDS_BYTES:
            raise ExportError(f"--tuning-records {file}: larger than "
                              f"{MAX_RECORDS_BYTES // 2**20} MiB")
        data = file.read_bytes()
        records = cls(file, hashlib.sha256(data).hexdigest())
        for line in data.decode("utf-8", errors="replace").splitlines():
            record = _parse(line)
            if record is None:
                records.skipped_lines += bool(line.strip())
                continue
            records.by_workload.setdefault(record.workload, []).append(record)
        if not records.by_workload:
            raise ExportError(f"--tuning-records {file}: no valid record")
        for listed in records.by_workload.values():
            listed.sort(key=lambda r: r.secs)
        return records

    def apply(self, funcs: dict, alternatives: dict | None = None) \
            -> tuple[dict, list[TunedKernel], list[str]]:
        """The kernels of `funcs` (name → PrimFunc) that have a record, scheduled by it;
        what was applied; notes on records left out. A kernel with an entry in
        `alternatives` (the form `tune` searched it in) takes records of either form."""
        scheduled, applied, notes = {}, [], []
        alternatives = alternatives or {}
        for name, func in funcs.items():
            forms = [func.with_attr("global_symbol", "main")]
            if name in alternatives:
                forms.append(alternatives[name].with_attr("global_symbol", "main"))
            found = sorted(((record, form, workload)
                            for form in forms
                            for workload in [_hash(_module(form))]
                            for record in self.by_workload.get(workload, [])),
                           key=lambda item: item[0].secs)
            for record, form, workload in found:
                if record.reference_secs is not None and record.secs >= record.reference_secs:
                    notes.append(f"{name}: the fastest candidate tuned was not faster than "
                                 "the untuned kernel; left untuned")
                    break  # the fastest record was not faster: none is
                problem, result = _replay(form, record)
                if problem is None:
                    scheduled[name] = result
                    applied.append(TunedKernel(name, record.task, workload, record.candidate,
                                               record.secs))
                    break
                notes.append(f"tuning record {record.candidate} of {name} left out: {problem}")
        return scheduled, applied, notes

    def to_metadata(self, applied: list[TunedKernel]) -> dict:
        """What the archive records: which records file (by content) and which candidates."""
        return {"records_sha256": self.sha256, "kernels": [k.to_json() for k in applied]}


def _parse(line: str) -> TunedRecord | None:
    try:
        d = json.loads(line)
        ref = d.get("reference_secs")
        record = TunedRecord(str(d["task"]), str(d["workload"]), str(d["candidate"]),
                             min(float(s) for s in d["run_secs"]), d["trace"],
                             None if ref is None else float(ref))
    except (ValueError, KeyError, TypeError):
        return None
    if not (_is_hash(record.workload) and _is_hash(record.candidate)
            and isinstance(record.trace, list) and record.secs > 0):
        return None
    return record


def _is_hash(text: str) -> bool:
    return len(text) == HASH_HEX and all(c in "0123456789abcdef" for c in text)


def _module(func):
    import tvm

    return tvm.IRModule({"main": func})


def _hash(mod) -> str:
    from tvm_ffi import structural_hash

    return f"{structural_hash(mod) & (2**64 - 1):016x}"


def _replay(func, record: TunedRecord):
    """(None, scheduled PrimFunc) or (why not, None)."""
    from tvm import s_tir
    from tvm.s_tir.schedule import Trace

    from generator.export.lower import compile_plain_kernels, last_line

    try:
        sch = s_tir.Schedule(_module(func))
        Trace.apply_json_to_schedule(record.trace, sch)
    except Exception as exc:  # a trace TVM refuses
        return f"TVM cannot replay its trace: {last_line(exc)}", None
    if _hash(sch.mod) != record.candidate:
        return "its trace gives a different kernel than the one measured", None
    scheduled = sch.mod["main"]
    try:
        source, _ = compile_plain_kernels({"kernel": scheduled}, "tvmgen_tuned_", shrink=False)
    except ExportError as exc:
        return exc.one_line(), None
    if WORKSPACE_CALL in source:
        return "its kernel needs a runtime workspace, which full-model archives do not " \
               "have", None
    return None, scheduled
