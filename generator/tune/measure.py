"""MetaSchedule's interface: a PyBuilder and a PyRunner over `build_batch` and `measure_batch`.

The tuner (`tuner.py`) builds one round of one task's candidates at a time (in a child
process, `build_ahead.py`, which hands its result to `Measurer.built`; `Measurer.task` says
which task, so the runner knows its reference kernel); a batch is one firmware, and the
runner measures it on one device session. Results already in the
log are answered from it (`cached#<hash>` artifacts), not measured. The same two objects
are what `ms.tune_tasks(builder=..., runner=...)` takes, once it runs (docs/tuning.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult

from generator.tune.builder import CACHED, BuiltBatch, batch_info, build_batch
from generator.tune.interrupt import check as check_interrupt
from generator.tune.log import Measurement, TuneLog
from generator.tune.runner import EvaluatorConfig, measure_batch
from generator.tune.tasks import Task

MAX_REQUEUES = 2  # a batch whose device was lost goes to a fresh session this often


@dataclass
class Counters:
    builds: int = 0  # firmware builds
    measured: int = 0  # candidates measured on a device (timed or failed there)
    failed: int = 0  # candidates with an error (build, check or call)
    cached: int = 0  # candidates answered from the log
    build_seconds: float = 0.0
    measure_seconds: float = 0.0


@dataclass
class Measurer:
    """What the builder and runner share: the task being tuned, the log, the counters."""
    board: str
    work_dir: Path
    log: TuneLog
    config: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    devices: object = None  # session.LocalDevices (default) or session.TrackerDevices
    parallel: int = 1  # batches measured at the same time (sessions open at once)
    say: Callable[[str], None] | None = None
    keep_batches: bool = False
    task: Task | None = None
    counters: Counters = field(default_factory=Counters)
    reference_secs: dict[str, float] = field(default_factory=dict)
    on_batch: Callable[[], None] | None = None

    def build(self, mods: list) -> list[str | None | Exception]:
        assert self.task is not None
        start = time.monotonic()
        batch = build_batch(self.task, mods, self.board, self.work_dir, self.log)
        return self.built(batch, mods, time.monotonic() - start)

    def built(self, batch: BuiltBatch, mods: list, seconds: float) \
            -> list[str | None | Exception]:
        """Count a built batch and log its candidates that could not be built; returns each
        candidate's artifact, or the exception saying why it has none."""
        from generator.tune.log import candidate_hash

        assert self.task is not None
        self.counters.build_seconds += seconds
        if batch.project is not None or batch.errors:
            self.counters.builds += 1
        out: list = []
        for i, artifact in enumerate(batch.artifacts):
            if i in batch.errors:
                m = Measurement(self.task.name, candidate_hash(mods[i]), batch.number,
                                "builder", error=batch.errors[i],
                                workload=self.task.workload)
                self.log.append(m)
                self.counters.failed += 1
                out.append(RuntimeError(batch.errors[i]))
            else:
                out.append(artifact)
        return out

    def run(self, artifacts: list[str], shapes) -> list[Measurement]:
        assert self.task is not None
        workload = self.task.workload
        results: list[Measurement | None] = [None] * len(artifacts)
        projects: dict[str, list[int]] = {}
        for i, artifact in enumerate(artifacts):
            if artifact.startswith(CACHED):
                known = self.log.lookup(workload, artifact[len(CACHED):])
                assert known is not None
                m = Measurement(known.task, known.candidate, known.batch, known.device,
                                known.run_secs, known.error, cached=True,
                                workload=workload)
                self.log.append(m)
                self.counters.cached += 1
                results[i] = m
            else:
                project, _, name = artifact.rpartition("#")
                projects.setdefault(project, []).append(i)
        if projects:
            start = time.monotonic()
            measured = self._measure_all(list(projects), shapes, workload)
            check_interrupt()  # nothing of an interrupted round goes to the log
            self.counters.measure_seconds += time.monotonic() - start
            for project, indices in projects.items():
                for i in indices:
                    name = artifacts[i].rpartition("#")[2]
                    m = measured[project][name]
                    self.log.append(m)
                    self.counters.measured += 1
                    self.counters.failed += m.error is not None
                    results[i] = m
                if not self.keep_batches:
                    import shutil

                    shutil.rmtree(Path(project).parent, ignore_errors=True)
        if self.on_batch:
            self.on_batch()
        return [m for m in results if m is not None]


    def _measure_all(self, projects: list[str], shapes, workload: str) \
            -> dict[str, dict[str, Measurement]]:
        """Every candidate of every project, measured on up to `parallel` sessions at once.
        A batch whose device was lost goes back to the queue with what it has left (for
        another session, from the tracker another server); after MAX_REQUEUES the rest is
        recorded as failed."""
        from concurrent.futures import ThreadPoolExecutor

        from generator.tune.session import LocalDevices

        assert self.task is not None
        task = self.task
        devices = self.devices or LocalDevices(self.config.reply_timeout)
        done: dict[str, dict[str, Measurement]] = {p: {} for p in projects}

        def one(project: str, only: list[str] | None):
            batch = int(Path(project).parent.name)
            return measure_batch(task.name, Path(project), shapes, self.config, batch,
                                 devices, self.say, workload, only, task.constants)

        queue: list[tuple[str, list[str] | None, int]] = [(p, None, 0) for p in projects]
        pool = ThreadPoolExecutor(max_workers=self.parallel) if self.parallel > 1 else None
        try:
            while queue:
                jobs = [(p, tries, pool.submit(one, p, only) if pool else (p, only))
                        for p, only, tries in queue]
                queue = []
                for project, tries, job in jobs:
                    measured = job.result() if pool else one(*job)
                    if measured.reference_secs:
                        self.reference_secs[task.name] = min(measured.reference_secs)
                    done[project].update(measured.results)
                    if not measured.unmeasured:
                        continue
                    if tries < MAX_REQUEUES:
                        queue.append((project, measured.unmeasured, tries + 1))
                        continue
                    for name in measured.unmeasured:
                        info = batch_info(Path(project))
                        done[project][name] = Measurement(
                            task.name, info["candidates"][name], int(Path(project).parent.name),
                            devices.label, error=measured.device_lost, workload=workload)
        finally:
            if pool is not None:  # after Ctrl-C: no new batches; the serves die with us
                pool.shutdown(wait=False, cancel_futures=True)
        return done


@derived_object
class BatchBuilder(PyBuilder):
    """Builds a batch of candidates into one host-driven firmware."""

    def __init__(self, measurer: Measurer) -> None:
        super().__init__()
        self.measurer = measurer

    def build(self, build_inputs):
        built = self.measurer.build([b.mod for b in build_inputs])
        return [BuilderResult(None, str(a)) if isinstance(a, Exception)
                else BuilderResult(a, None) for a in built]


@derived_object
class _Done(PyRunnerFuture):
    def __init__(self, result) -> None:
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self):
        return self._result


@derived_object
class DeviceRunner(PyRunner):
    """Checks and times the candidates of each built batch on a device session."""

    def __init__(self, measurer: Measurer) -> None:
        super().__init__()
        self.measurer = measurer

    def run(self, runner_inputs):
        if not runner_inputs:
            return []
        shapes = [(tuple(int(d) for d in a.shape), str(a.dtype))
                  for a in runner_inputs[0].args_info]
        measured = self.measurer.run([r.artifact_path for r in runner_inputs], shapes)
        return [_Done(RunnerResult(m.run_secs, None) if m.run_secs
                      else RunnerResult(None, m.error)) for m in measured]
