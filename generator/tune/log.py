"""The tuning log: one JSON line per measurement, appended and flushed as it happens.

A line: task (its name), workload (the untuned kernel's structural hash), candidate (the
scheduled IRModule's), batch, device, and either `run_secs` (a list, one per repeat) or
`error`. Results are keyed by workload and candidate, so two models' tasks of the same
name do not mix. Reading the log back gives the
results already known, so a rerun answers those candidates without measuring them again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

LOG_NAME = "log.jsonl"


def candidate_hash(mod) -> str:
    """A stable name for a scheduled candidate: its structural hash, 16 hex digits."""
    from tvm_ffi import structural_hash

    return f"{structural_hash(mod) & (2**64 - 1):016x}"


@dataclass
class Measurement:
    task: str
    candidate: str
    batch: int
    device: str
    run_secs: list[float] | None = None
    error: str | None = None
    cached: bool = False  # answered from the log, not measured
    workload: str = ""

    def to_json(self) -> dict:
        data = {"task": self.task, "workload": self.workload, "candidate": self.candidate,
                "batch": self.batch, "device": self.device}
        if self.error is not None:
            data["error"] = self.error
        else:
            data["run_secs"] = self.run_secs
        if self.cached:
            data["cached"] = True
        return data


@dataclass
class TuneLog:
    path: Path
    known: dict[tuple[str, str], Measurement] = field(default_factory=dict)
    batches: int = 0

    @classmethod
    def open(cls, directory: Path) -> TuneLog:
        log = cls(Path(directory) / LOG_NAME)
        if log.path.exists():
            for line in log.path.read_text().splitlines():
                try:
                    data = json.loads(line)
                    m = Measurement(str(data["task"]), str(data["candidate"]),
                                    int(data["batch"]), str(data["device"]),
                                    data.get("run_secs"), data.get("error"),
                                    workload=str(data["workload"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by an interruption
                log.batches = max(log.batches, m.batch + 1)
                log.known.setdefault((m.workload, m.candidate), m)
        return log

    def lookup(self, workload: str, candidate: str) -> Measurement | None:
        return self.known.get((workload, candidate))

    def measured(self, workload: str) -> int:
        """Distinct candidates of a workload with a result (timed or failed)."""
        return sum(1 for (w, _) in self.known if w == workload)

    def best(self, workload: str) -> float | None:
        times = [min(m.run_secs) for (w, _), m in self.known.items()
                 if w == workload and m.run_secs]
        return min(times) if times else None

    def new_batch(self) -> int:
        self.batches += 1
        return self.batches - 1

    def append(self, m: Measurement) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(m.to_json(), sort_keys=True) + "\n")
            f.flush()
        if not m.cached:
            self.known.setdefault((m.workload, m.candidate), m)
