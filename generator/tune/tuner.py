"""`tune_model`: extract a model's tasks and tune each on a device.

Tasks are tuned one after another, each with its share of the trials (by calls per
inference). MetaSchedule's `tune_tasks` cannot run in TVM 0.27.0.post1 (its task scheduler
saves IR as JSON, which crashes: see records.py), so the search loop is ours, over
MetaSchedule's parts: the design space of `space.py`, random decisions replayed on its
traces, and its mutators applied to the best traces measured so far. Each round of batches
is built in a child process while the round before it is measured (`build_ahead.py`), and
measured through MetaSchedule's runner interface (`measure.py`); a round's candidates are
proposed while the round before it builds, so mutations start from results one round old.
The output directory gets `log.jsonl` (every measurement) and `records.jsonl` (every timed
candidate's trace).

The search is a function of the seed and the results: each task's random state comes from
(seed, task workload), and a candidate is new when this run has not proposed it yet. A rerun
therefore proposes the same batches again, in order; the ones the log has are answered
from it (nothing built or measured), so an interrupted run continues exactly where it
stopped and ends with the same best schedules as an uninterrupted one (given the same
times: QEMU's virtual time under `-icount` is; a host process's is not).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from generator.errors import ExportError, InputError
from generator.export.lower import last_line
from generator.tune.build_ahead import BuildAhead
from generator.tune.builder import CACHED
from generator.tune.cost_model import CostModel
from generator.tune.cost_model import available as cost_model_available
from generator.tune.interrupt import catching_interrupts
from generator.tune.interrupt import check as check_interrupt
from generator.tune.log import LOG_NAME, TuneLog, candidate_hash
from generator.tune.measure import Counters, DeviceRunner, Measurer
from generator.tune.records import RECORDS_NAME, Record, append_record, plain, read_records
from generator.tune.runner import EvaluatorConfig
from generator.tune.space import tune_context
from generator.tune.tasks import Task, extract_tasks

MUTATE_SHARE = 0.5  # of new candidates, once something is timed: mutations of the best
POOL_FACTOR = 8  # candidates drawn per one proposed, when the cost model ranks them
EXPLORE_SHARE = 0.25  # of a guided batch: drawn at random, not ranked
SEARCHES = ("model", "random")
PARENTS = 4  # the best traces of a task that mutations start from
PROPOSE_TRIES = 20  # attempts per wanted candidate before the space counts as exhausted


@dataclass
class TaskSummary:
    name: str
    weight: int
    budget: int  # trials this task gets in total
    done: int  # distinct candidates with a result, this run and earlier ones
    best_secs: float | None
    reference_secs: float | None  # the untuned kernel, measured next to the candidates

    def to_json(self) -> dict:
        return {"name": self.name, "weight": self.weight, "budget": self.budget,
                "done": self.done, "best_secs": self.best_secs,
                "reference_secs": self.reference_secs}


@dataclass
class TuneSummary:
    model: str
    board: str
    directory: Path
    trials: int
    tasks: list[TaskSummary] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    seconds: float = 0.0

    def to_json(self) -> dict:
        c = self.counters
        return {"model": self.model, "board": self.board, "directory": str(self.directory),
                "trials": self.trials, "tasks": [t.to_json() for t in self.tasks],
                "builds": c.builds, "measured": c.measured, "failed": c.failed,
                "cached": c.cached, "build_seconds": round(c.build_seconds, 3),
                "measure_seconds": round(c.measure_seconds, 3),
                "seconds": round(self.seconds, 3),
                "records": str(self.directory / RECORDS_NAME),
                "log": str(self.directory / LOG_NAME)}


def budgets(tasks: list[Task], trials: int) -> list[int]:
    """Each task's share of `trials`, by weight (at least one trial each)."""
    total = sum(t.weight for t in tasks)
    return [max(1, round(trials * t.weight / total)) for t in tasks]


def tune_model(model: Path, board: str, trials: int, out_dir: Path, *, batch_size: int = 8,
               config: EvaluatorConfig | None = None,
               shapes: dict[str, tuple[int, ...]] | None = None,
               progress: Callable[[str], None] | None = None,
               seed: int = 0, devices=None, parallel: int = 1,
               search: str = "model") -> TuneSummary:
    """Tune every task of `model` on `board`; results in `out_dir`."""
    from generator.boards import load_board

    _require_device(load_board(board), devices)
    tasks = extract_tasks(Path(model), shapes)
    return tune_tasks(tasks, board, trials, out_dir, batch_size=batch_size, config=config,
                      progress=progress, seed=seed, model=str(model), devices=devices,
                      parallel=parallel, search=search)


def _require_device(board, devices) -> None:
    """Measuring on this machine's own device (no tracker): that device is there (a physical
    board plugged in, the board's QEMU installed) before the first build, not after it."""
    if devices is None:
        from generator.device.links import link_of

        link_of(board).check_reachable(board)


def tune_tasks(tasks: list[Task], board: str, trials: int, out_dir: Path, *,
               batch_size: int = 8, config: EvaluatorConfig | None = None,
               progress: Callable[[str], None] | None = None, seed: int = 0,
               model: str = "", devices=None, parallel: int = 1,
               search: str = "model") -> TuneSummary:
    """Tune `tasks` on `board`; measurement on `devices` (session.LocalDevices: private
    serves on this machine, the default; session.TrackerDevices: servers from a tracker),
    `parallel` batches at a time. `search`: "model" (the cost model ranks candidates once
    it has measurements, when xgboost is installed) or "random"."""
    from generator.boards import load_board

    if trials < 1 or batch_size < 1 or parallel < 1:
        raise InputError("--trials, --batch and --parallel must be at least 1")
    if search not in SEARCHES:
        raise InputError(f"--search {search!r}: one of {', '.join(SEARCHES)}")
    _require_device(load_board(board), devices)  # before anything runs
    start = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with catching_interrupts(progress):
        return _tune_all(tasks, board, trials, out_dir, batch_size, config, progress, seed,
                         model, devices, parallel, start, search == "model")


def _earlier_references(out_dir: Path, tasks: list[Task]) -> dict[str, float]:
    """The untuned kernels' times an earlier run of this directory recorded (a resumed run
    may measure no batch of a task, and still reports what the task was untuned)."""
    if not (out_dir / RECORDS_NAME).is_file():
        return {}
    try:
        records = read_records(out_dir).records
    except ExportError:  # nothing valid there yet
        return {}
    found: dict[str, float] = {}
    for task in tasks:
        times = [r.reference_secs for r in records
                 if r.workload == task.workload and r.reference_secs is not None]
        if times:
            found[task.name] = min(times)
    return found


def _tune_all(tasks, board, trials, out_dir, batch_size, config, progress, seed, model,
              devices, parallel, start, guided) -> TuneSummary:
    log = TuneLog.open(out_dir)
    measurer = Measurer(board, out_dir, log, config or EvaluatorConfig(seed=seed),
                        devices=devices, parallel=parallel, say=progress)
    measurer.reference_secs.update(_earlier_references(out_dir, tasks))
    if guided and not cost_model_available() and progress:
        progress("xgboost is not installed: candidates are drawn at random, not ranked by the "
                 "cost model (pip install xgboost-cpu)")
    summary = TuneSummary(model, board, out_dir, trials, counters=measurer.counters)
    shares = budgets(tasks, trials)
    carry = 0  # trials earlier tasks could not use (their space ran out): the later ones get them
    for index, task in enumerate(tasks):
        extra = round(carry * task.weight / sum(t.weight for t in tasks[index:]))
        share, carry = shares[index] + extra, carry - extra

        def report(task=task, share=share, index=index) -> None:
            if progress:
                ref = measurer.reference_secs.get(task.name)
                progress(f"task {index + 1}/{len(tasks)} {task.name}: "
                         f"{min(log.measured(task.workload), share)}/{share} trials, best "
                         f"{_us(log.best(task.workload))}" + (f" (untuned {_us(ref)})" if ref
                                                         else ""))

        measurer.task = task
        check_interrupt()
        if log.measured(task.workload) < share:
            used = _tune_task(task, share, measurer, batch_size, seed, report, guided)
        else:
            used = share
            report()
        carry += share - used
        summary.tasks.append(TaskSummary(task.name, task.weight, share,
                                         log.measured(task.workload), log.best(task.workload),
                                         measurer.reference_secs.get(task.name)))
    summary.seconds = time.monotonic() - start
    return summary


def task_rng(seed: int, task: Task) -> np.random.Generator:
    """A task's random state: the same for the same seed and kernel, run after run."""
    return np.random.default_rng([seed & 0xFFFFFFFF, int(task.workload, 16) & 0xFFFFFFFF])


def _tune_task(task: Task, share: int, measurer: Measurer, batch_size: int, seed: int,
               report: Callable[[], None], guided: bool = True) -> int:
    """Tune one task with up to `share` candidates; returns how many it had."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = task_rng(seed, task)
    ctx = tune_context(task.mod, task.name, "replay-trace", int(rng.integers(1, 2**30)))
    try:
        proposer = _Proposer(task, ctx, rng, guided)
    except Exception as exc:  # TVM refuses the kernel (e.g. ill-formed TIR): not tunable
        if measurer.say:
            measurer.say(f"{task.name}: MetaSchedule cannot make its search space, not tuned: "
                         f"{last_line(exc)}")
        return 0
    runner = DeviceRunner(measurer)
    args_info = ArgInfo.from_prim_func(task.func)
    answered = 0  # candidates proposed in this run (each gets a result: measured, failed, logged)

    def next_round() -> list[list]:
        """One batch per device session measured at the same time."""
        nonlocal answered
        batches: list[list] = []
        while len(batches) < max(1, measurer.parallel) and answered < share:
            schedules = proposer.propose(min(batch_size, share - answered))
            if not schedules:
                break
            answered += len(schedules)
            batches.append(schedules)
        return batches

    # Round k+1 builds while round k is measured; round k+2 is proposed while round k+1
    # builds, after round k's results are in (so a mutation starts from them).
    with BuildAhead(measurer) as ahead:
        current = next_round()
        if current:
            ahead.start(current)
        following = next_round()
        while current:
            check_interrupt()
            built = ahead.result()
            check_interrupt()
            if following:
                ahead.start(following)
            _measure_round(task, current, built, runner, args_info, measurer, proposer)
            report()
            current, following = following, next_round()
    if answered < share and measurer.say:
        measurer.say(f"{task.name}: no new candidates in the search space; "
                     f"{answered} of {share} trials")
    return answered


def _measure_round(task: Task, rounds: list[list], built: list[list], runner, args_info,
                   measurer: Measurer, proposer: _Proposer) -> None:
    """Measure the candidates of a built round; each timed one goes to the records and
    becomes a possible parent of mutations."""
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    pending = [(s, a) for schedules, artifacts in zip(rounds, built, strict=True)
               for s, a in zip(schedules, artifacts, strict=True)
               if not isinstance(a, Exception)]
    futures = runner.run([RunnerInput(a, "cpu", args_info) for _, a in pending])
    check_interrupt()
    for (sch, artifact), future in zip(pending, futures, strict=True):
        result = future.result()
        if not result.run_secs:
            proposer.learn_failed(sch)
            continue
        reference = measurer.reference_secs.get(task.name)
        secs = [float(s) for s in result.run_secs]
        tiling = tiling_of(sch)  # another kernel: no trace
        trace = [] if tiling else plain(sch.trace.as_json(remove_postproc=True))
        if not artifact.startswith(CACHED):  # a rerun's replay: recorded already
            append_record(measurer.work_dir, Record(
                task.name, task.workload, candidate_hash(sch.mod), secs, trace, reference,
                tiling))
        if tiling is not None:  # another kernel, not a trace: nothing to mutate or learn
            continue
        proposer.add_parent(trace, min(secs))
        if reference:  # a speed-up needs the untuned kernel's time
            proposer.learn(trace, reference / min(secs))
    for schedules, artifacts in zip(rounds, built, strict=True):  # failed to build
        for sch, artifact in zip(schedules, artifacts, strict=True):
            if isinstance(artifact, Exception):
                proposer.learn_failed(sch)


def tiling_of(sch) -> str | None:
    """The tiling a candidate is built in (a conv2d's other tilings), or None: a schedule
    of the task's kernel."""
    from generator.export.qkernels import TILING_ATTR

    attrs = sch.mod["main"].attrs
    return str(attrs[TILING_ATTR]) if attrs is not None and TILING_ATTR in attrs else None


TILING_REGISTERS = 8  # accumulators most cores keep in registers next to the operands


def tiling_cost(tiling) -> float:
    """A guess at a tiling's loads, loop turns and spilled accumulators per multiply-add,
    to measure the likely fastest first (the device decides)."""
    accumulators = tiling.pixels * tiling.channels
    return (1 / tiling.channels + 1 / tiling.pixels + 2 / (accumulators * tiling.unroll)
            + 0.1 * max(0, accumulators - TILING_REGISTERS))


def propose_candidates(task: Task, count: int, seed: int = 0) -> list:
    """Up to `count` distinct schedules of `task` from its search space (what the first batch
    of `tune` with this seed builds), without measuring anything."""
    rng = task_rng(seed, task)
    ctx = tune_context(task.mod, task.name, "replay-trace", int(rng.integers(1, 2**30)))
    return _Proposer(task, ctx, rng).propose(count)


class _Proposer:
    """New candidates: first the task's kernel in each of its other tilings (a clipped
    conv2d's, the likely fastest first), then random decisions on the design space's
    traces, or a mutation of one of the best traces measured."""

    def __init__(self, task: Task, ctx, rng: np.random.Generator, guided: bool = True) -> None:
        self.task = task
        self.workload = task.workload
        self.ctx = ctx
        self.rng = rng
        self.spaces = ctx.generate_design_space()
        self.postprocs = list(ctx.space_generator.postprocs)
        self.mutators = list(ctx.space_generator.mutator_probs.items())
        self.parents: list[tuple[float, list]] = []  # (best seconds, trace JSON)
        self.model = CostModel() if guided and cost_model_available() else None
        self.seen: set[str] = set()  # every candidate proposed in this run
        self.tiled = self._tiled_schedules()  # not proposed yet

    def learn(self, trace_json: list, speedup: float | None) -> None:
        """A candidate's result for the cost model (speed-up over untuned; None: failed)."""
        if self.model is not None:
            self.model.add(trace_json, speedup)

    def learn_failed(self, sch) -> None:
        """A candidate that failed (to build, or on the device), for the cost model."""
        if self.model is not None and tiling_of(sch) is None:
            self.model.add(plain(sch.trace.as_json(remove_postproc=True)), None)

    def _tiled_schedules(self) -> list:
        """The task's kernel in each of its other tilings, the likely fastest first."""
        import tvm
        from tvm import s_tir

        tilings = self.task.tilings
        if tilings is None:
            return []
        return [s_tir.Schedule(tvm.IRModule({"main": tilings.build(t)}))
                for t in sorted(tilings.choices, key=tiling_cost)]

    def add_parent(self, trace_json: list, secs: float) -> None:
        self.parents.append((secs, trace_json))
        self.parents.sort(key=lambda p: p[0])
        del self.parents[PARENTS:]

    def propose(self, count: int) -> list:
        """Up to `count` new candidates: once the cost model has enough measurements, the
        ones it ranks fastest among POOL_FACTOR times as many drawn (and a share drawn at
        random, so that it keeps learning); before, the first ones drawn."""
        tiled = []
        while self.tiled and len(tiled) < count:
            sch = self.tiled.pop(0)
            h = candidate_hash(sch.mod)
            if h not in self.seen:
                self.seen.add(h)
                tiled.append(sch)
        count -= len(tiled)
        if not count:
            return tiled
        guided = self.model is not None and self.model.ready()
        drawn = self._draw(count * POOL_FACTOR if guided else count)
        if guided and len(drawn) > count:
            drawn = self._rank(drawn, count)
        for h, _ in drawn:
            self.seen.add(h)
        return tiled + [sch for _, sch in drawn]

    def _draw(self, count: int) -> list[tuple[str, object]]:
        out: dict[str, object] = {}
        for _ in range(count * PROPOSE_TRIES):
            if len(out) == count:
                break
            sch = self._one()
            if sch is None:
                continue
            h = candidate_hash(sch.mod)
            if h in self.seen or h in out:
                continue  # proposed already (a rerun finds earlier runs' results in the log)
            out[h] = sch
        return list(out.items())

    def _rank(self, drawn: list, count: int) -> list:
        """`count` of `drawn`: the model's best, then EXPLORE_SHARE of them at random."""
        traces = [plain(sch.trace.as_json(remove_postproc=True)) for _, sch in drawn]
        order = [int(i) for i in np.argsort(-self.model.predict(traces), kind="stable")]
        explore = int(count * EXPLORE_SHARE)
        chosen = order[:count - explore]
        rest = order[count - explore:]
        picks = self.rng.choice(len(rest), size=min(explore, len(rest)), replace=False)
        chosen += [rest[int(i)] for i in sorted(picks)]
        return [drawn[i] for i in chosen]

    def _one(self):
        from tvm import s_tir
        from tvm.s_tir.schedule import Trace

        seed = int(self.rng.integers(1, 2**30))
        try:
            sch = s_tir.Schedule(self.task.mod, seed=seed)
            if self.parents and self.rng.random() < MUTATE_SHARE:
                parent = self.parents[int(self.rng.integers(len(self.parents)))][1]
                base = s_tir.Schedule(self.task.mod, seed=seed)
                Trace.apply_json_to_schedule(parent, base)
                probs = np.array([float(p) for _, p in self.mutators])
                mutator = self.mutators[int(self.rng.choice(len(probs), p=probs / probs.sum()))]
                trace = _mutate(mutator[0], base.trace, int(self.rng.integers(1, 2**30)))
                if trace is None:
                    return None
            else:
                space = self.spaces[int(self.rng.integers(len(self.spaces)))]
                trace = Trace(space.trace.insts, {})
            trace.apply_to_schedule(sch, remove_postproc=True)
            if not all(p.apply(sch) for p in self.postprocs):
                return None
            return sch
        except Exception:  # a sample TVM refuses: draw another
            check_interrupt()
            return None


def _mutate(mutator, trace, seed: int):
    """`mutator.apply(trace)` with a given random state (`apply` draws a fresh one)."""
    from tvm.s_tir.meta_schedule import _ffi_api

    return _ffi_api.MutatorApply(mutator, trace, seed)


def _us(secs: float | None) -> str:
    return "-" if secs is None else f"{secs * 1e6:.3f} us"
