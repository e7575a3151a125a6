"""On-device tuning (generator/tune): real builds, a real host-driven device, real timing."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from generator.tune.cost_model import MIN_TRAINING, CostModel
from generator.tune.interrupt import STOPPING
from generator.tune.records import plain
from tests.conftest import REPO, SHARED, leaked_processes, require_board_tools

BOARD = "host"


def _int8_dense(bias: int = 0):
    """An int8 dense with int32 accumulation (4x64 by 32x64), optionally off by `bias`."""
    from tvm import te

    x = te.placeholder((4, 64), name="x", dtype="int8")
    w = te.placeholder((32, 64), name="w", dtype="int8")
    k = te.reduce_axis((0, 64), "k")
    out = te.compute((4, 32), lambda i, j: te.sum(
        x[i, k].astype("int32") * w[j, k].astype("int32") + (bias if bias else 0), axis=k),
        name="qdense")
    return te.create_prim_func([x, w, out])


def _task():
    from generator.tune.tasks import tasks_from_calls

    (task,) = tasks_from_calls({"qdense": _int8_dense()}, ["qdense", "qdense"])
    return task


def _log(directory) -> list[dict]:
    return [json.loads(line) for line in (directory / "log.jsonl").read_text().splitlines()]


def test_tasks_are_deduplicated_and_weighted():
    from generator.tune.tasks import tasks_from_calls

    tasks = tasks_from_calls({"a": _int8_dense(), "b": _int8_dense(), "c": _int8_dense(1)},
                             ["a", "b", "a", "c"])
    assert [(t.name, t.weight, t.kernels) for t in tasks] == [("a", 3, ["a", "b"]),
                                                              ("c", 1, ["c"])]


def test_int8_model_tasks_are_the_integer_kernels():
    from generator.tune.tasks import extract_tasks

    model = SHARED / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
    if not model.exists():
        pytest.skip(f"needs {model}")
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    tasks = extract_tasks(model)
    assert [t.name for t in tasks] == ["q_dense", "q_dense1", "q_dense2"]
    for t in tasks:  # int8 in, int8 out: the rewrite's kernels, not dequantize → float
        dtypes = [str(a.dtype) for a in ArgInfo.from_prim_func(t.func)]
        assert dtypes[0] == "int8" and dtypes[-1] == "int8", dtypes


def test_outputs_compare_bit_exact_for_integers_and_within_1e5_for_floats():
    from generator.tune.runner import outputs_match

    a = np.arange(12, dtype="int8").reshape(3, 4)
    b = a.copy()
    assert outputs_match(a, b) is None
    b[2, 1] += 1
    assert "1 of 12 elements (first [2, 1]" in outputs_match(a, b)
    f = np.linspace(0, 1, 8, dtype="float32")
    assert outputs_match(f, f + 5e-6) is None
    assert outputs_match(f, f + 1e-3) is not None
    assert outputs_match(f, np.full_like(f, np.nan)) is not None


def test_trace_json_is_plain_and_replays_to_the_same_kernel():
    from generator.tune.log import candidate_hash
    from generator.tune.records import Record, apply_record, plain
    from generator.tune.space import tune_context

    task = _task()
    ctx = tune_context(task.mod, task.name, "replay-trace", 1)
    (space, *_) = ctx.generate_design_space()
    trace = json.loads(json.dumps(plain(space.trace.as_json(remove_postproc=True))))
    record = Record(task.name, "w", "c", [1.0], trace)
    replayed = apply_record(task.func, record)
    import tvm

    assert candidate_hash(tvm.IRModule({"main": replayed})) == candidate_hash(space.mod)


def test_tune_measures_checks_and_resumes(tmp_path):
    """8 trials in one firmware; a rerun measures nothing; more trials measure only new
    candidates (no candidate is measured twice, from the log)."""
    from generator.tune import tune_tasks

    require_board_tools(BOARD)
    lines: list[str] = []
    first = tune_tasks([_task()], BOARD, 8, tmp_path, batch_size=8, progress=lines.append)
    assert first.counters.builds == 1
    assert first.counters.measured == 8
    log = _log(tmp_path)
    assert len(log) == 8
    timed = [e for e in log if "run_secs" in e]
    assert timed, log
    for e in log:
        assert e["task"] == "qdense" and e["batch"] == 0 and e["device"] == "local"
        assert e["workload"] == _task().workload
        assert len(e["candidate"]) == 16
        assert ("run_secs" in e) != ("error" in e)
    assert all(len(e["run_secs"]) == 3 and all(s > 0 for s in e["run_secs"]) for e in timed)
    records = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(records) == len(timed)
    (summary,) = first.tasks
    assert summary.weight == 2 and summary.done == 8
    assert summary.best_secs == min(min(e["run_secs"]) for e in timed)
    assert summary.reference_secs and summary.reference_secs > 0
    assert any("task 1/1 qdense: 8/8 trials, best" in line for line in lines)
    assert not (tmp_path / "batches" / "00000").exists()  # the batch's build is removed

    again = tune_tasks([_task()], BOARD, 8, tmp_path, batch_size=8)
    assert (again.counters.builds, again.counters.measured) == (0, 0)
    assert _log(tmp_path) == log
    # Nothing measured this time, and still the untuned time the first run recorded.
    assert again.tasks[0].reference_secs == summary.reference_secs

    more = tune_tasks([_task()], BOARD, 12, tmp_path, batch_size=8)
    assert more.counters.builds == 1 and more.counters.measured == 4
    measured = [e["candidate"] for e in _log(tmp_path) if not e.get("cached")]
    assert len(measured) == 12 and len(set(measured)) == 12


def test_a_wrong_candidate_is_recorded_failed_not_timed(tmp_path):
    """A kernel whose outputs differ from the untuned kernel's gets an error, no time."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from generator.tune.log import TuneLog
    from generator.tune.measure import BatchBuilder, DeviceRunner, Measurer

    require_board_tools(BOARD)
    task = _task()
    measurer = Measurer(BOARD, tmp_path, TuneLog.open(tmp_path), task=task)
    good = task.mod
    wrong = tvm.IRModule({"main": _int8_dense(bias=1)})
    built = BatchBuilder(measurer).build([BuilderInput(good, tvm.target.Target("c")),
                                          BuilderInput(wrong, tvm.target.Target("c"))])
    assert [b.error_msg for b in built] == [None, None]
    assert measurer.counters.builds == 1
    futures = DeviceRunner(measurer).run(
        [RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(task.func)) for b in built])
    ok, bad = [f.result() for f in futures]
    assert ok.error_msg is None and len(ok.run_secs) == 3
    assert bad.run_secs is None
    assert "output differs from the reference at 128 of 128 elements" in bad.error_msg
    log = _log(tmp_path)
    assert "run_secs" in log[0] and "error" not in log[0]
    assert "run_secs" not in log[1] and "differs from the reference" in log[1]["error"]


def test_a_candidate_that_crashes_the_device_fails_and_the_next_runs_on_a_fresh_one(tmp_path):
    """A kernel that stores far outside its buffer kills the firmware process (SIGSEGV): it
    is recorded as failed, and the candidate after it is measured on a new session."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput
    from tvm.script import tirx as T

    from generator.tune.log import TuneLog
    from generator.tune.measure import BatchBuilder, DeviceRunner, Measurer

    require_board_tools(BOARD)

    @T.prim_func(private=True)
    def crash(x: T.Buffer((4, 64), "int8"), w: T.Buffer((32, 64), "int8"),
              out: T.Buffer((4, 32), "int32")):
        for i in range(4):
            out[i, 268435456 * (i + 1)] = T.int32(1)  # 1 GiB and more past the buffer

    task = _task()
    said: list[str] = []
    measurer = Measurer(BOARD, tmp_path, TuneLog.open(tmp_path), task=task, say=said.append)
    target = tvm.target.Target("c")
    built = BatchBuilder(measurer).build([BuilderInput(tvm.IRModule({"main": crash}), target),
                                          BuilderInput(task.mod, target)])
    futures = DeviceRunner(measurer).run(
        [RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(task.func)) for b in built])
    crashed, fine = [f.result() for f in futures]
    assert crashed.run_secs is None
    assert "the call failed" in crashed.error_msg and "exit status -11" in crashed.error_msg
    assert fine.error_msg is None and len(fine.run_secs) == 3
    assert said == []  # the device came back: no "did not come back" line
    assert [("error" in e, "run_secs" in e) for e in _log(tmp_path)] == [(True, False),
                                                                         (False, True)]


def test_a_candidate_that_hangs_is_failed_after_the_reply_timeout(tmp_path):
    """An endless loop: the call fails after the reply timeout (3 s here), the stuck device
    is stopped, and the next candidate is measured on a fresh session."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput
    from tvm.script import tirx as T

    from generator.tune.log import TuneLog
    from generator.tune.measure import BatchBuilder, DeviceRunner, Measurer
    from generator.tune.runner import EvaluatorConfig

    require_board_tools(BOARD)

    @T.prim_func(private=True)
    def hang(x: T.Buffer((4, 64), "int8"), w: T.Buffer((32, 64), "int8"),
             out: T.Buffer((4, 32), "int32")):
        out[0, 0] = 0
        while out[0, 0] >= 0:
            out[0, 0] = out[0, 0] | 1

    task = _task()
    measurer = Measurer(BOARD, tmp_path, TuneLog.open(tmp_path), task=task,
                        config=EvaluatorConfig(reply_timeout=3.0))
    target = tvm.target.Target("c")
    built = BatchBuilder(measurer).build([BuilderInput(tvm.IRModule({"main": hang}), target),
                                          BuilderInput(task.mod, target)])
    start = time.monotonic()
    futures = DeviceRunner(measurer).run(
        [RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(task.func)) for b in built])
    hung, fine = [f.result() for f in futures]
    assert hung.run_secs is None and "did not answer within 3 s" in hung.error_msg
    assert fine.error_msg is None and len(fine.run_secs) == 3
    assert time.monotonic() - start < 45  # no wait per tensor freed on the stuck device


@pytest.mark.slow
@pytest.mark.qemu
def test_tune_on_qemu_mps2_an385_stopped_and_rerun_ends_with_the_same_best(tmp_path):
    """Under -icount the times are virtual and repeatable: a run stopped after its first
    batch and run again proposes the same candidates, measures none twice and ends with
    the same log (times included) and best as an uninterrupted run with the same seed."""
    from generator.tune import tune_tasks

    require_board_tools("qemu-mps2-an385")
    whole = tune_tasks([_task()], "qemu-mps2-an385", 8, tmp_path / "a", batch_size=4, seed=3)
    assert whole.counters.builds == 2 and whole.counters.measured == 8
    (task,) = whole.tasks
    assert task.best_secs and task.reference_secs  # virtual time under -icount
    tune_tasks([_task()], "qemu-mps2-an385", 4, tmp_path / "b", batch_size=4, seed=3)
    resumed = tune_tasks([_task()], "qemu-mps2-an385", 8, tmp_path / "b", batch_size=4,
                         seed=3)
    assert (resumed.counters.cached, resumed.counters.measured) == (4, 4)

    def results(log):
        return [(e["candidate"], e.get("run_secs"), e.get("error")) for e in log
                if not e.get("cached")]

    assert results(_log(tmp_path / "b")) == results(_log(tmp_path / "a"))
    assert resumed.tasks[0].best_secs == task.best_secs
    records = [json.loads(x) for x in (tmp_path / "b" / "records.jsonl").read_text().splitlines()]
    assert len({r["candidate"] for r in records}) == len(records) == 8


def test_cli_refuses_an_unknown_board_in_one_line(tmp_path):
    model = SHARED / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
    proc = subprocess.run([sys.executable, "-m", "generator", "tune", str(model), "--board",
                           "no-such-board", "-o", str(tmp_path / "t")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("microtvm-gen tune: error: unknown board 'no-such-board'")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_ctrl_c_then_rerun_continues_without_measuring_again(tmp_path):
    """Ctrl-C (SIGINT to the process group) after the first batch: "stopping" said at once,
    exit 130 within 2 s, no traceback, no device left running, the log intact; the same
    command then finishes the trials and measures no candidate a second time."""
    model = SHARED / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
    if not model.exists():
        pytest.skip(f"needs {model}")
    require_board_tools(BOARD)
    out = tmp_path / "tuning"
    argv = [sys.executable, "-m", "generator", "tune", str(model), "--board", BOARD,
            "--trials", "3", "--batch", "1", "-o", str(out)]
    proc = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stderr is not None and proc.stdout is not None
    deadline = time.monotonic() + 600
    for line in proc.stdout:  # progress lines come with the results
        if "trials, best" in line or time.monotonic() > deadline:
            break
    signalled = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    took = time.monotonic() - signalled
    said, rest = proc.stdout.read(), proc.stderr.read()
    assert "Traceback" not in rest, rest
    assert said.splitlines()[0] == "microtvm-gen: " + STOPPING, said
    assert rest.splitlines() == ["microtvm-gen: interrupted"], rest
    assert took < 2.0, f"tune took {took:.2f} s to stop"
    first = _log(out)
    assert 1 <= len(first) < 3
    # serve's device gets SIGTERM, then SIGKILL, as serve exits: no serve, firmware or build
    # may be left a few seconds later.
    deadline = time.monotonic() + 5
    while leaked_processes(os.getpid(), tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leaked_processes(os.getpid(), tmp_path)

    done = subprocess.run(argv + ["--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    log = _log(out)
    assert log[:len(first)] == first
    measured = [(e["task"], e["candidate"]) for e in log if not e.get("cached")]
    assert len(measured) == len(set(measured)) == 3
    assert summary["measured"] == 3 - len(first)


def test_a_physical_board_that_is_not_there_fails_before_any_build(tmp_path, capsys):
    """tune on a physical board with nothing plugged in: one line, exit 2, within seconds,
    nothing built and the log as it was (a later run, board plugged in, measures all)."""
    from generator.boards import load_board
    from generator.cli import main
    from generator.device.serial_ports import connected_ports

    board = "nucleo-f746zg"
    if connected_ports([load_board(board)]):
        pytest.skip(f"a {board} is connected: this test needs it absent")
    model = REPO / "tests" / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
    out = tmp_path / "tuning"
    out.mkdir()
    (out / "log.jsonl").write_text('{"earlier": "entry"}\n')
    started = time.monotonic()
    assert main(["tune", str(model), "--board", board, "--trials", "4", "-o", str(out)]) == 2
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert f"no {board} is connected" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["log.jsonl"]
    assert (out / "log.jsonl").read_text() == '{"earlier": "entry"}\n'


# ---- the cost model (generator/tune/cost_model.py) -----------------------------------------

def _traces(count: int, seed: int = 0) -> list[list]:
    from generator.tune.tuner import propose_candidates

    return [plain(s.trace.as_json(remove_postproc=True))
            for s in propose_candidates(_task(), count, seed=seed)]


def _inner_tile(trace: list) -> int:
    """The product of the innermost factor of every spatial tiling (4 levels): the block of
    outputs a candidate computes at once."""
    product = 1
    for _, decision in trace[1]:
        if isinstance(decision, list) and len(decision) == 4:
            product *= int(decision[-1])
    return product


def test_features_are_the_decisions_and_their_level_products():
    pytest.importorskip("xgboost", reason="xgboost (the [test] extra) is the cost model")
    model = CostModel()
    (trace,) = _traces(1)
    row = model.features(trace)
    assert np.array_equal(row, CostModel().features(trace))  # no state: any order, any run
    tiles = [d for _, d in trace[1] if isinstance(d, list)]
    spatial = [t for t in tiles if len(t) == 4]
    assert spatial  # MultiLevelTiling's four spatial levels per loop
    innermost = sum(math.log2(t[-1]) for t in spatial)
    assert row[4] == pytest.approx(innermost)  # [space, 4 spatial levels, 2 reduction, ...]
    assert math.log2(tiles[0][0]) in row[7:].tolist()


def test_the_model_ranks_unseen_candidates_by_what_it_learned():
    """Trained on candidates whose 'speed-up' grows with their block of outputs, it ranks
    40 others in nearly that order (a failure counts as slowest)."""
    pytest.importorskip("xgboost", reason="xgboost (the [test] extra) is the cost model")
    traces = _traces(80)
    speed = [math.log2(_inner_tile(t)) + 1.0 for t in traces]
    model = CostModel()
    assert not model.ready()
    for trace, s in zip(traces[:40], speed[:40], strict=True):
        model.add(trace, s)
    model.add(traces[0], None)
    assert model.ready() and model.trained_on == 40
    predicted = model.predict(traces[40:])
    wanted = np.array(speed[40:])
    ranks = np.argsort(np.argsort(predicted)), np.argsort(np.argsort(wanted))
    assert np.corrcoef(*ranks)[0, 1] > 0.7


def test_a_guided_proposer_proposes_the_same_batch_for_the_same_results_in_any_order():
    from generator.tune.space import tune_context
    from generator.tune.tuner import _Proposer, task_rng

    pytest.importorskip("xgboost", reason="xgboost (the [test] extra) is the cost model")
    task = _task()
    traces = _traces(MIN_TRAINING + 4, seed=5)
    results = [(t, 1.0 + i / 10) for i, t in enumerate(traces)]

    def proposer(order):
        rng = task_rng(0, task)
        ctx = tune_context(task.mod, task.name, "replay-trace", int(rng.integers(1, 2**30)))
        p = _Proposer(task, ctx, rng)
        for trace, s in order:
            p.learn(trace, s)
        assert p.model.ready()
        return [s.trace.as_json(remove_postproc=True) for s in p.propose(4)]

    first = proposer(results)
    assert len(first) == 4
    assert [plain(t) for t in proposer(results[::-1])] == [plain(t) for t in first]
