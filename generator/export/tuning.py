"""`export --tuning-records DIR`: a model's kernels scheduled as `tune` found fastest.

A record (`records.jsonl`, written by `microtvm-gen tune`) names a task by the structural
hash of the untuned kernel (`workload`), the candidate by the hash of the scheduled module,
and carries the MetaSchedule trace. A kernel of the model gets a record when its own hash is
a record's workload and the record was faster than the untuned kernel timed next to it in
the same firmware; the trace is replayed on it (or, for a conv2d measured in another
tiling, the kernel is built in that tiling), and the result must hash to the record's
candidate — the very kernel that was checked against the untuned one on the device and
timed there. Anything else (a trace TVM refuses, a different result, a kernel that does
not compile) leaves that record out, with a note; the next-fastest record of the workload is
tried, then the untuned schedule. A tuned kernel may allocate workspace (a schedule's local
buffers: TVMBackendAllocWorkspace of constant sizes); the archive says how much per kernel
and the project reserves the largest (`Lowered.workspaces`).

Each kernel is compiled once: the chosen candidates are compiled with the rest of the model,
and only a candidate that then fails makes the next one be tried.
The records file (its format: generator/tune/records.py) is input: it only ever reaches
generated code through TVM's scheduling primitives and C codegen, and only as a candidate it
hashes to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import ExportError
from generator.export.lower import workspace_requests
from generator.tune.records import MAX_RECORDS_BYTES, Record, read_records, replay

__all__ = ["MAX_RECORDS_BYTES", "TunedKernel", "TuningRecords"]
# How `apply` compiles kernels: (name → PrimFunc, the names compiled as scheduled) →
# (the C source, name → the C definition of that kernel).
Compile = Callable[[dict, set], tuple[str, dict[str, str]]]


@dataclass
class TunedKernel:
    kernel: str
    task: str
    workload: str
    candidate: str
    measured_secs: float
    tiling: str | None = None  # a conv2d in another tiling (qkernels.ConvTiling.name)

    def to_json(self) -> dict:
        out = {"kernel": self.kernel, "task": self.task, "workload": self.workload,
               "candidate": self.candidate, "measured_secs": self.measured_secs}
        if self.tiling is not None:
            out["tiling"] = self.tiling
        return out


@dataclass
class TuningRecords:
    source: Path
    sha256: str
    by_workload: dict[str, list[Record]] = field(default_factory=dict)  # fastest first
    skipped_lines: int = 0

    @classmethod
    def load(cls, path: Path) -> TuningRecords:
        """Records from `path`: a `tune` output directory or its records.jsonl."""
        file = read_records(path, "--tuning-records")
        records = cls(file.path, file.sha256, skipped_lines=file.skipped_lines)
        for record in file.records:
            records.by_workload.setdefault(record.workload, []).append(record)
        for listed in records.by_workload.values():
            listed.sort(key=lambda r: r.secs)
        return records

    def apply(self, kernels: dict, tunable: Iterable[str], alternatives: dict,
              compile_kernels: Compile, tilings: dict | None = None) \
            -> tuple[str, list[TunedKernel], list[str]]:
        """The C source of `kernels` (name → PrimFunc), those named in `tunable` that have
        a record scheduled by it; what was applied; notes on records left out. A kernel with
        an entry in `alternatives` (the form `tune` searched it in) takes records of either
        form; one with an entry in `tilings` (qkernels.Tilings) records of its tilings. The
        kernels are compiled once, unless a chosen candidate fails there."""
        tunable = [name for name in kernels if name in set(tunable)]
        tilings = tilings or {}
        notes: dict[str, list[str]] = {name: [] for name in tunable}
        pending = {name: self._candidates(name, kernels[name], alternatives.get(name),
                                          notes[name], tilings.get(name))
                   for name in tunable}
        chosen: dict[str, tuple[object, TunedKernel]] = {}

        def advance(name: str) -> None:
            chosen.pop(name, None)
            found = next(pending[name], None)
            if found is not None:
                chosen[name] = found

        for name in tunable:
            advance(name)
        while True:
            source, problems = _compile_chosen(kernels, chosen, compile_kernels)
            if not problems:
                break
            for name, problem in problems.items():
                notes[name].append(_left_out(chosen[name][1].candidate, name, problem))
                advance(name)
        applied = [chosen[name][1] for name in tunable if name in chosen]
        return source, applied, [note for name in tunable for note in notes[name]]

    def _candidates(self, name: str, func, alternative, notes: list[str], tilings=None) \
            -> Iterator[tuple[object, TunedKernel]]:
        """The kernel scheduled by each of its records that replays to the candidate
        measured, fastest first; notes on the others. None once a record is not faster
        than the untuned kernel."""
        forms = [func.with_attr("global_symbol", "main")]
        if alternative is not None:
            forms.append(alternative.with_attr("global_symbol", "main"))
        found = sorted(((record, form, workload)
                        for form in forms
                        for workload in [_hash(_module(form))]
                        for record in self.by_workload.get(workload, [])),
                       key=lambda item: item[0].secs)
        for record, form, workload in found:
            if record.reference_secs is not None and record.secs >= record.reference_secs:
                notes.append(f"{name}: the fastest candidate tuned was not faster than "
                             "the untuned kernel; left untuned")
                return  # the fastest record was not faster: none is
            if record.tiling is not None:
                problem, scheduled = _tiled(tilings, record)
            else:
                problem, scheduled = _replay(form, record)
            if problem is None:
                yield scheduled, TunedKernel(name, record.task, workload, record.candidate,
                                             record.secs, record.tiling)
            else:
                notes.append(_left_out(record.candidate, name, problem))

    def to_metadata(self, applied: list[TunedKernel]) -> dict:
        """What the archive records: which records file (by content) and which candidates."""
        return {"records_sha256": self.sha256, "kernels": [k.to_json() for k in applied]}


def _left_out(candidate: str, kernel: str, problem: str) -> str:
    return f"tuning record {candidate} of {kernel} left out: {problem}"


def _compile_chosen(kernels: dict, chosen: dict, compile_kernels: Compile) \
        -> tuple[str, dict[str, str]]:
    """The C source of `kernels` with the chosen candidates, and what is wrong with chosen
    ones (name → why): a workspace of a size that is not a constant, or (when the whole does
    not compile) a kernel that does not compile alone."""
    scheduled = {name: func for name, (func, _) in chosen.items()}
    try:
        source, definitions = compile_kernels({**kernels, **scheduled}, set(scheduled))
    except ExportError:
        if not chosen:
            raise
        source, definitions = "", {}
        problems = {}
        for name, func in scheduled.items():  # which candidate it is, as each compiles alone
            try:
                _, alone = compile_kernels({name: func}, {name})
            except ExportError as exc:
                problems[name] = exc.one_line()
                continue
            definitions[name] = alone[name]
        if not problems:
            raise
    else:
        problems = {}
    for name in scheduled:
        if name not in problems and workspace_requests(definitions[name]) is None:
            problems[name] = "its kernel allocates a workspace of a size that is not a constant"
    return source, problems


def _module(func):
    import tvm

    return tvm.IRModule({"main": func})


def _hash(mod) -> str:
    from tvm_ffi import structural_hash

    return f"{structural_hash(mod) & (2**64 - 1):016x}"


def _tiled(tilings, record: Record):
    """(None, the kernel in the record's tiling) or (why not, None)."""
    from generator.export.qkernels import ConvTiling

    tiling = ConvTiling.parse(record.tiling)
    if tilings is None or tiling not in tilings.choices:
        return f"tiling {record.tiling} is not one of this kernel's", None
    func = tilings.build(tiling)
    if _hash(_module(func)) != record.candidate:
        return "its tiling gives a different kernel than the one measured", None
    return None, func


def _replay(func, record: Record):
    """(None, scheduled PrimFunc) or (why not, None)."""
    from generator.export.lower import last_line

    try:
        sch = replay(func, record)
    except Exception as exc:  # a trace TVM refuses
        return f"TVM cannot replay its trace: {last_line(exc)}", None
    if _hash(sch.mod) != record.candidate:
        return "its trace gives a different kernel than the one measured", None
    return None, sch.mod["main"]
