"""`microtvm-gen pipeline` (generator/pipeline/): the plan's cuts, memory and predictions; kws
streamed over 2 PEs in QEMU, bit-exact with one PE, each PE's instructions counted by QEMU
and predicted by the plan; a PE killed mid-stream stops everything in one line, and a rerun
with --resume does only the inputs left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from generator.boards import load_board
from generator.cli import main
from generator.errors import ExportError, InputError
from generator.export.stages import balanced_cuts
from generator.pipeline import layout
from generator.pipeline.plan import (
    LINK_COST,
    call_costs,
    plan_pipeline,
    plan_stages,
    processing_element,
)
from generator.pipeline.planning import Request, make_plan
from generator.pipeline.refine import choose_row_splits, pointwise_calls
from generator.pipeline.stream import run_stream
from generator.run import run_project
from tests.conftest import REPO, built_once, require_board_tools
from tests.test_json_schemas import validate

KWS = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"
HELLO = REPO / "tests" / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
HELLO_INPUT = "serving_default_dense_input:0"
BOARD = "qemu-mps2-an385"
pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def kws_split():
    from generator.export.stages import split_model

    return split_model(KWS)


def _kws_inputs(count: int) -> np.ndarray:
    return np.random.default_rng(11).integers(-128, 128, (count, 1, 49, 10, 1), dtype=np.int8)


def test_cuts_weigh_each_stage_link_and_memory():
    costs = [4, 4, 4, 4]
    assert balanced_cuts(costs, 2, {1, 2, 3}) == [2]
    # a link that makes cutting after call 1 dear moves the cut
    assert balanced_cuts(costs, 2, {1, 2, 3}, overhead=lambda a, b: 9 if 2 in (a, b) else 0) \
        == [1]
    # a stage of three calls fits nowhere: [0, 2) and [2, 4)
    assert balanced_cuts([1, 1, 1, 9], 2, {1, 2, 3}, fits=lambda a, b: b - a <= 2) == [2]
    with pytest.raises(ExportError, match="that each fit"):
        balanced_cuts([1, 1, 1, 1], 2, {1, 2, 3}, fits=lambda a, b: b - a <= 1)


def test_kws_by_macs_in_three_stages(kws_split):
    """The cuts that make the costliest of 3 stages as cheap as can be, by MACs."""
    costs = [max(1, m) for m in kws_split.macs]
    cuts = balanced_cuts(costs, 3, kws_split.cut_points())
    assert cuts == [4, 7]
    bounds = [0, *cuts, kws_split.calls]
    assert [sum(costs[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)] == \
        [976_000, 1_096_000, 584_770]
    first, last = kws_split.stage_program(0, 4), kws_split.stage_program(7, 12)
    assert first[1] == ["input_1"] and last[2] == ["Identity"]
    assert kws_split.stage_program(4, 7)[1] == first[2]  # stage 1 takes what stage 0 makes


def test_plan_of_kws_over_two_pes(kws_split):
    pe = processing_element(load_board(BOARD))
    costs, unit = call_costs(kws_split, None)
    assert unit == "estimated instructions" and len(costs) == kws_split.calls == 12
    plan = plan_pipeline(kws_split, costs, unit, [pe], 2)
    first, second = plan.stages
    assert (first.first, first.end, second.first, second.end) == (0, 5, 5, 12)
    # stage 0 takes the model's input and hands on one 25x5x64 activation
    assert (first.need.input_bytes, first.need.output_bytes) == (490, 8000)
    assert (second.need.input_bytes, second.need.output_bytes) == (8000, 12)
    assert first.time(LINK_COST) == first.cost + 490 * 69 + 8000 * 34.4 + 5800
    assert plan.period == max(first.time(LINK_COST), second.time(LINK_COST))
    assert plan.latency == first.time(LINK_COST) + second.time(LINK_COST)
    assert 1.5 < plan.speedup < 1.8
    assert plan.to_json()["stages"][1]["kernels"][0] == "q_depthwise_conv2d"


def test_more_pes_than_stages_replicate_the_fastest_depth(kws_split):
    pe = processing_element(load_board(BOARD))
    costs, unit = call_costs(kws_split, None)
    plan = plan_pipeline(kws_split, costs, unit, [pe], 7296)
    # the whole model fits one PE: a copy per PE is the most throughput there is
    assert (len(plan.stages), plan.replicas, plan.pes_used) == (1, 7296, 7296)
    forced = plan_pipeline(kws_split, costs, unit, [pe], 64, depth=4)
    assert (len(forced.stages), forced.replicas) == (4, 16)
    assert forced.speedup == pytest.approx(16 * forced.single / forced.period)
    with pytest.raises(InputError, match="--depth 13"):
        plan_pipeline(kws_split, costs, unit, [pe], 64, depth=13)


def test_a_stage_must_fit_its_pe(kws_split):
    board = load_board(BOARD)
    costs, unit = call_costs(kws_split, None)
    # kws needs 16,502 B of buffers on one PE; with 16,400 no 2 stages fit (a stage with a
    # depthwise and its pointwise holds 3 activations), one call per PE does
    tight = processing_element(board, ram=(board.stack_bytes or 0) + 4096 + 16_400)
    for depth in (1, 2):
        with pytest.raises(ExportError, match=f"cannot be cut into {depth} stages that each"):
            plan_pipeline(kws_split, costs, unit, [tight], depth)
    plan = plan_pipeline(kws_split, costs, unit, [tight], 12)
    assert len(plan.stages) == 12 and max(s.need.ram for s in plan.stages) <= 16_400
    microbit = processing_element(load_board("qemu-microbit"))
    with pytest.raises(ExportError, match="that each fit"):
        plan_pipeline(kws_split, costs, unit, [microbit], 1)
    with pytest.raises(InputError, match="not within"):
        processing_element(board, ram=board.ram_bytes + 1)


def test_plan_only_prints_and_writes_nothing(tmp_path, capsys):
    assert main(["pipeline", str(HELLO), "--board", BOARD, "--pes", "64", "--plan-only",
                 "--link-cost", "50,20", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    validate("pipeline", printed)
    plan = printed["plan"]
    assert (plan["pes"], plan["pes_used"], plan["depth"]) == (64, 64, 1)
    assert plan["link"] == {"rx_per_byte": 50.0, "tx_per_byte": 20.0, "per_input": 0.0}
    assert main(["pipeline", str(KWS), "--board", BOARD, "--pes", "3", "--plan-only",
                 "--no-split-layers"]) == 0
    text = capsys.readouterr().out
    assert "3 stage(s) x 1 replica(s)" in text and "predicted: one inference every" in text
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--pes", "2", "--plan-only"], "--pes N needs --board"),
    (["--pes", "two", "--board", BOARD, "--plan-only"], "leave out --board"),
    (["--pes", "qemu-mps2-an385,,host", "--plan-only"], "a count, or board names"),
    (["--pes", "2", "--board", BOARD, "--link-cost", "fast", "--plan-only"],
     "--link-cost 'fast'"),
    (["--pes", "2", "--board", BOARD], "-o DIR is needed"),
    (["--pes", "2", "--board", BOARD, "--plan-only", "--profile", "/nonexistent"],
     "cannot read the profile"),
    (["--pes", "2", "--board", "no-such-board", "--plan-only"], "no-such-board"),
    (["--pes", f"{BOARD}+vanilla", "--tracker", "127.0.0.1:9", "--plan-only"],
     "leave out +ACCELERATOR"),
])
def test_bad_requests_are_one_line(argv, message, capsys):
    assert main(["pipeline", str(KWS), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.fixture(scope="module")
def kws_two_pes(tmp_path_factory):
    """kws over 2 PEs of qemu-mps2-an385 as `pipeline` plans it (a pointwise layer split in
    rows: the test below proves the five calls equal the one, byte for byte), generated and
    built once."""
    require_board_tools(BOARD)
    splits, plan = make_plan(Request(KWS, [processing_element(load_board(BOARD))], 2))
    assert plan.row_splits  # the estimate's best cut falls inside a pointwise layer
    root = tmp_path_factory.mktemp("pipeline") / "kws2"
    layout.create(splits, plan, root, force=False)
    return root


def test_row_splits_balance_what_layers_cannot(kws_split):
    pe = processing_element(load_board(BOARD))
    costs, unit = call_costs(kws_split, None)
    layers = plan_pipeline(kws_split, costs, unit, [pe], 4)

    def period_of(candidate, candidate_costs):
        tried = plan_stages(candidate, candidate_costs, unit, [pe] * 4, 1, 4, LINK_COST)
        return tried.period, [st.first for st in tried.stages]

    rows, split_costs = choose_row_splits(kws_split, costs, 3, period_of)
    assert 1 <= len(rows) <= 3 and all(2 <= r <= 23 for r in rows.values())
    # each split: five calls for one, the halves' costs summing to the layer's
    assert len(split_costs) == len(costs) + 4 * len(rows)
    assert period_of(*_simulate(kws_split, costs, rows))[0] < layers.period
    assert pointwise_calls(kws_split.program)[0].call == 2  # kws: calls 2, 4, 6, 8


def _simulate(split, costs, rows):
    """`split` with `rows` simulated in order (what choose_row_splits returns)."""
    from generator.pipeline.refine import _layer_bytes, simulated, split_costs

    for ordinal, row in sorted(rows.items(), reverse=True):  # later layers first: indices hold
        layer = pointwise_calls(split.program)[ordinal]
        costs = split_costs(costs, layer, row, *_layer_bytes(split, layer))
        split = simulated(split, layer, row)
    return split, costs


@pytest.mark.qemu
def test_kws_over_two_pes_equals_one_pe(kws_two_pes, tmp_path_factory):
    x = _kws_inputs(3)
    report = run_stream(kws_two_pes, {"input_1": x}, resume=False, timeout=60)
    whole = run_project(built_once(tmp_path_factory, KWS, BOARD),
                        [{"input_1": s} for s in x])
    assert [o[0].tobytes() for o in report.outputs] == \
        [o["Identity"].tobytes() for o in whole.outputs]
    plan = report.plan
    assert [pe.inputs for pe in report.pes] == [3, 3]
    # QEMU counted each PE's instructions: its stage's run and its link, per input, as the
    # plan predicted from the calls' estimates and the measured link cost (within 15 %:
    # the estimate is MACs and bytes, not a profile)
    for pe, stage in zip(report.pes, plan["stages"], strict=True):
        assert pe.received_bytes == 3 * stage["input_bytes"]
        assert pe.sent_bytes == 3 * stage["output_bytes"]
        link = pe.per_input - pe.run_count / pe.inputs
        expected = LINK_COST.of(stage["input_bytes"], stage["output_bytes"])
        assert abs(link - expected) < 0.05 * expected, (link, expected)
        assert abs(pe.per_input - stage["time"]) < 0.15 * stage["time"]
    assert report.period == max(pe.per_input for pe in report.pes)
    # each firmware within its PE, as the build measured it
    assert all(s["firmware_ram_bytes"] <= load_board(BOARD).ram_bytes for s in plan["stages"])


def _firmware_of(root: Path) -> list[int]:
    """Processes running a firmware under `root` (QEMU's -kernel, or the ELF itself)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.startswith(str(root).encode()) and a.endswith(b"firmware.elf")
                   for a in argv) and b"-m" not in argv:
                found.append(int(entry.name))
    return found


@pytest.mark.qemu
@pytest.mark.slow
def test_killed_pe_stops_the_stream_and_resume_finishes_it(kws_two_pes, tmp_path):
    root = tmp_path / "kws2"
    shutil.copytree(kws_two_pes, root)  # the firmware is built: the copy only runs it
    layout.clear_results(root)
    x = _kws_inputs(6)
    np.save(tmp_path / "x.npy", x)
    argv = [sys.executable, "-m", "generator", "pipeline", str(KWS), "-o", str(root),
            "--resume", "--input", f"input_1={tmp_path / 'x.npy'}", "--timeout", "20"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = "microtvm-gen: "  # progress lines, then the first output: the stream flows
        while line.startswith("microtvm-gen: "):
            line = proc.stdout.readline()
        assert line.startswith("[0] "), line
        stage1 = _firmware_of(root / "stage1")
        assert len(stage1) == 1
        os.kill(stage1[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("microtvm-gen pipeline: error: PE 1 (stage 1, "
                                "qemu-mps2-an385) stopped the pipeline with input "), lines
    assert not [line for line in lines if "Traceback" in line]
    deadline = time.monotonic() + 10
    while _firmware_of(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _firmware_of(root) == []
    done = layout.done_inputs(root, len(x))
    assert 0 < len(done) < len(x)
    # the rerun streams only the inputs left; the results are every input's
    rerun = subprocess.run(argv[:-2] + ["--json"], capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    record = json.loads(rerun.stdout)
    assert record["skipped"] == sorted(done)
    assert sum(pe["inputs"] for pe in record["pes"]) == 2 * (len(x) - len(done))
    assert len(record["outputs"]) == len(x)


@pytest.mark.qemu
@pytest.mark.slow
def test_a_middle_pe_with_the_vanilla_accelerator(tmp_path, tmp_path_factory, capsys):
    require_board_tools(BOARD)
    x = _kws_inputs(2)
    np.save(tmp_path / "x.npy", x)
    pes = f"{BOARD},{BOARD}+vanilla,{BOARD}"
    assert main(["pipeline", str(KWS), "--pes", pes, "--no-split-layers", "-o",
                 str(tmp_path / "p"), "--input",
                 f"input_1={tmp_path / 'x.npy'}", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    validate("pipeline", record)
    assert [s["accelerators"] for s in record["plan"]["stages"]] == [[], ["vanilla"], []]
    whole = run_project(built_once(tmp_path_factory, KWS, BOARD), [{"input_1": s} for s in x])
    assert [o["Identity"] for o in record["outputs"]] == \
        [o["Identity"].tolist() for o in whole.outputs]
    middle = record["pes"][1]
    assert middle["board"] == f"{BOARD}+vanilla"
    # one pointwise convolution of kws (64x64 over 25x5) per input on the mock NPU
    assert middle["accelerator_counters"]["vanilla"]["macs"] == 2 * 25 * 5 * 64 * 64
    assert not record["pes"][0]["accelerator_counters"]


@pytest.mark.qemu
@pytest.mark.slow
def test_pes_from_a_stock_tracker(tmp_path, tmp_path_factory, capsys):
    """Two `serve --accept-firmware` devices under one key at a stock RPC tracker are the
    PEs: each stage's host-driven firmware is uploaded to the one the tracker hands out, its
    kernels called in order; the outputs are one PE's, byte for byte."""
    from tests.test_serve_firmware import servers_under_tracker

    require_board_tools(BOARD)
    root = tmp_path / "p"
    x = np.array([[[v]] for v in (-128, -40, 0, 77, 127)], dtype=np.int8)
    np.save(tmp_path / "x.npy", x)
    # made first (no tracker needed to build it); its stage 0 starts the servers
    assert main(["pipeline", str(HELLO), "--board", BOARD, "--pes", "2", "-o", str(root),
                 "--tracker", "127.0.0.1:9"]) == 0
    with servers_under_tracker(root / "stage0", tmp_path, "pipe", 2, "--timeout", "30") \
            as (port, served):
        capsys.readouterr()
        assert main(["pipeline", str(HELLO), "-o", str(root), "--resume", "--tracker",
                     f"127.0.0.1:{port}", "--key", "pipe", "--input",
                     f"{HELLO_INPUT}={tmp_path / 'x.npy'}", "--json"]) == 0, \
            capsys.readouterr().err
        record = json.loads(capsys.readouterr().out)
    validate("pipeline", record)
    assert record["plan"]["host_driven"] is True and record["plan"]["depth"] == 2
    whole = run_project(built_once(tmp_path_factory, HELLO, "host"),
                        [{HELLO_INPUT: v} for v in x])
    name = next(iter(whole.outputs[0]))
    assert [o[name] for o in record["outputs"]] == [o[name].tolist() for o in whole.outputs]
    servers = {f"127.0.0.1:{s.port}" for s in served}
    assert {pe["board"].split(" at ")[1] for pe in record["pes"]} == servers
    assert all(pe["inputs"] == len(x) and pe["instructions"] is None for pe in record["pes"])


@pytest.fixture(scope="module")
def kws_on_host_pes(tmp_path_factory, kws_split):
    """kws over 2 host-process PEs (fast to start and to stop)."""
    require_board_tools("host")
    pe = processing_element(load_board("host"))
    costs, unit = call_costs(kws_split, None)
    root = tmp_path_factory.mktemp("hostpipe") / "kws2"
    layout.create(lambda _: kws_split, plan_pipeline(kws_split, costs, unit, [pe], 2), root,
                  force=False)
    return root


def _stream_until_first_output(root: Path, tmp_path: Path, *extra: str) -> subprocess.Popen:
    x = _kws_inputs(400)
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.Popen([sys.executable, "-m", "generator", "pipeline", str(KWS), "-o",
                             str(root), "--resume", "--input", f"input_1={tmp_path / 'x.npy'}",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    line = "microtvm-gen: "
    while line.startswith("microtvm-gen: "):
        line = proc.stdout.readline()
    assert line.startswith("[0] "), line
    return proc


def test_a_hung_pe_stops_the_stream_after_the_timeout(kws_on_host_pes, tmp_path):
    root = tmp_path / "kws2"
    shutil.copytree(kws_on_host_pes, root)
    proc = _stream_until_first_output(root, tmp_path, "--timeout", "2")
    try:
        (stage1,) = _firmware_of(root / "stage1")
        os.kill(stage1, signal.SIGSTOP)  # alive, silent
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("microtvm-gen pipeline: error: PE 1 (stage 1, host) stopped the "
                           "pipeline with input ") and "did not answer within 2 s" in last
    assert _firmware_of(root) == []


def test_ctrl_c_keeps_the_outputs_that_left(kws_on_host_pes, tmp_path):
    root = tmp_path / "kws2"
    shutil.copytree(kws_on_host_pes, root)
    proc = _stream_until_first_output(root, tmp_path)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted; the outputs of" in err and "rerun with --resume" in err
    assert not [line for line in err.splitlines() if "Traceback" in line]
    assert 0 < len(layout.done_inputs(root, 400)) < 400
    assert _firmware_of(root) == []


def test_a_profile_must_be_of_this_model(kws_split, tmp_path):
    calls = [{"index": i, "kernel": k, "count": 1000 * (i + 1)}
             for i, k in enumerate(kws_split.kernels(0, kws_split.calls))]
    good = tmp_path / "profile.json"
    good.write_text(json.dumps({"unit": "instructions", "calls": calls}))
    assert call_costs(kws_split, good) == ([c["count"] for c in calls], "instructions")
    calls[3]["kernel"] = "q_softmax"
    (tmp_path / "other.json").write_text(json.dumps({"unit": "instructions", "calls": calls}))
    with pytest.raises(InputError, match="call 3 of the profile is 'q_softmax'"):
        call_costs(kws_split, tmp_path / "other.json")
    (tmp_path / "short.json").write_text(json.dumps({"unit": "ns", "calls": calls[:5]}))
    with pytest.raises(InputError, match="a profile of 5 calls; this model makes 12"):
        call_costs(kws_split, tmp_path / "short.json")
