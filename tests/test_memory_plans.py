"""`export --memory small`: kernels that write over their input, and a plan below the
lifetime bound (docs/memory.md).

kws's four depthwise and four pointwise convolutions take their input's bytes: the plan
halves (16,000 → 8,064 B), the outputs stay TFLite Micro's byte for byte on the host, the
AN385 and the micro:bit, where the lifetime-bound plan does not fit."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from generator.cli import main
from generator.export import export_model
from generator.export.api import ram_needed
from generator.export.ccode import over_input_aliases, pool_intervals
from generator.export.lower import KernelCall, Program, Tensor
from generator.export.planner import lower_bound
from generator.project.generate import generate
from generator.run import run_project
from tests.conftest import REPO, require_board_tools

KWS = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"
SMALL_BOARDS = ["host", "qemu-mps2-an385", "qemu-microbit"]


def _program(calls: list[tuple[str, list[int]]], sizes: list[int], outputs: list[int]) -> Program:
    """Tensor 0 is the model's input, the rest activations of the given sizes."""
    tensors = [Tensor(0, (sizes[0],), "int8", "input")]
    tensors += [Tensor(i, (n,), "int8", "activation") for i, n in enumerate(sizes) if i]
    return Program(tensors, [0], outputs, ["out"] * len(outputs),
                   [KernelCall(kernel, args) for kernel, args in calls])


def test_outputs_take_their_inputs_bytes_only_when_nothing_reads_them_later():
    # 0 -conv-> 1 -dw-> 2 -pw-> 3 -dw-> 4 -pool-> 5 (returned)
    chain = _program([("conv", [0, 1]), ("dw", [1, 2]), ("pw", [2, 3]), ("dw", [3, 4]),
                      ("pool", [4, 5])], [10, 64, 64, 64, 64, 4], [5])
    in_place = {"dw": 1, "pw": 1, "add": 3}  # bit i: may write over input i
    aliases = over_input_aliases(chain, in_place, set())
    assert aliases == {2: 1, 3: 1, 4: 1}  # a chain maps to its first tensor
    intervals = pool_intervals(chain, set(), aliases)
    assert [(i.tensor, i.first, i.last) for i in intervals] == [(1, 0, 4), (5, 4, 5)]
    assert lower_bound(intervals) == 64 + 16  # sizes aligned to 16
    assert lower_bound(pool_intervals(chain, set())) == 128
    # A residual: 1 is read again after the dw call, so the dw writes its own output; the
    # add, the last to read both, writes over the first.
    residual = _program([("conv", [0, 1]), ("dw", [1, 2]), ("add", [1, 2, 3]),
                         ("pool", [3, 4])], [10, 64, 64, 64, 4], [4])
    assert over_input_aliases(residual, in_place, set()) == {3: 1}
    # When the first input lives on, the second is taken.
    later = _program([("conv", [0, 1]), ("dw", [1, 2]), ("add", [1, 2, 3]),
                      ("add", [1, 3, 4])], [10, 64, 64, 64, 64], [4])
    assert over_input_aliases(later, {"add": 3}, set()) == {3: 2, 4: 1}
    # A returned input, a size change, an input the caller holds: no alias either.
    returned = _program([("conv", [0, 1]), ("dw", [1, 2])], [10, 64, 64], [1, 2])
    assert over_input_aliases(returned, in_place, set()) == {}
    # A 1x1 conv that grows or shrinks its pixels starts at its input's first byte: the
    # shared bytes are the larger tensor's.
    grown = _program([("conv", [0, 1]), ("pw", [1, 2]), ("pool", [2, 3])], [10, 32, 64, 4],
                     [3])
    aliases = over_input_aliases(grown, in_place, set())
    assert aliases == {2: 1}
    assert [(i.tensor, i.size) for i in pool_intervals(grown, set(), aliases)] == [(1, 64),
                                                                                   (3, 4)]
    direct = _program([("dw", [0, 1])], [64, 64], [1])
    assert over_input_aliases(direct, in_place, set()) == {}
    written_out = _program([("conv", [0, 1]), ("dw", [1, 2])], [10, 64, 64], [2])
    assert over_input_aliases(written_out, in_place, {2}) == {}  # 2 goes to the caller


@pytest.fixture(scope="module")
def kws_small(tmp_path_factory):
    return export_model(KWS, tmp_path_factory.mktemp("small") / "kws.tar", memory="small")


def test_kws_small_plan_is_half_the_lifetime_bound(kws_small, capsys):
    r = kws_small
    assert (r.memory, r.over_inputs, r.lifetime_bound) == ("small", 8, 16_000)
    assert r.plan.pool_bytes == 8_064  # 8,000 B of activations + the pool's 64 B output
    assert r.plan.pool_bytes + r.scratch_bytes <= 9_000  # issue 27's figure for kws
    with tarfile.open(r.path) as tar:
        meta = json.load(tar.extractfile("./metadata.json"))["modules"]["default"]
    pool = meta["pools"][0]
    assert (pool["size_bytes"], pool["lower_bound_bytes"], pool["memory_preset"],
            pool["over_input_calls"]) == (8_064, 16_000, "small", 8)
    # Each depthwise and pointwise call reads and writes the same pool bytes.
    for layer in meta["layers"]:
        if layer["kernel"].startswith(("q_depthwise_conv2d", "q_conv2d1")):
            refs = [a["ref"] for a in layer["args"] if a["kind"] == "activation"]
            assert len(refs) == 2 and refs[0] == refs[1], layer
    assert main(["info", str(r.path)]) == 0
    assert "activations 8064 B in one pool (3 tensors, --memory small, 8 calls write over " \
        "their input); lifetime lower bound 16000 B (0.50x)" in capsys.readouterr().out


def test_memory_preset_is_checked_and_named(tmp_path, capsys):
    out = tmp_path / "k.tar"
    assert main(["export", str(KWS), "-o", str(out), "--memory", "small", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["memory"], printed["pool_bytes"], printed["lower_bound_bytes"],
            printed["over_input_calls"]) == ("small", 8_064, 16_000, 8)
    # TensorFlow Lite Micro's arena beside it (the [test] extra installs tflite_micro)
    assert printed["tflm_arena_bytes"] == 24_272
    assert main(["export", str(KWS), "-o", str(tmp_path / "o.tar"), "--style", "operator",
                 "--memory", "small"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--memory and --ram-budget apply to full-model" in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize("board", SMALL_BOARDS)
def test_small_plan_is_bit_identical_to_tflite_micro(board, kws_small, tmp_path):
    """25 vectors; on the micro:bit (16 KiB of RAM), where the fast plan is refused
    (tests/test_export.py::test_too_big_for_the_microbit_is_refused), kws now runs."""
    from tests.test_export import _kws_inputs, tflm_outputs

    require_board_tools(board)
    xs, expected = _kws_inputs()
    project = tmp_path / "p"
    generate(kws_small.path, board, project)
    report = run_project(project, [{"input_1": x} for x in xs])
    got = [o["Identity"] for o in report.outputs]
    assert [int(np.argmax(g)) for g in got] == expected
    assert [g.tobytes() for g in got] == [w.tobytes() for w in tflm_outputs(KWS, xs)]



def test_ram_budget_takes_the_first_preset_that_fits(tmp_path, capsys):
    """kws needs 16,000 + 520 + 502 B fast, 8,064 + 656 + 502 B small (activations, kernel
    scratch, I/O buffers)."""
    out = tmp_path / "k.tar"
    assert main(["export", str(KWS), "-o", str(out), "--ram-budget", "12000", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["memory"], printed["pool_bytes"]) == ("small", 8_064)
    refused = tmp_path / "r.tar"
    assert main(["export", str(KWS), "-o", str(refused), "--ram-budget", "9000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["microtvm-gen export: error: the model needs at least 9,222 B of RAM "
                   "(activations, kernel scratch and I/O buffers, --memory small); "
                   "--ram-budget is 9,000 B"], err
    assert not refused.exists()


@pytest.fixture(scope="module")
def mobilenet_v2(tmp_path_factory) -> tuple[Path, object]:
    """Our MobileNetV2-style model (tests/memory_models.py) and its `--memory small`
    export."""
    from tests.memory_models import mobilenet_v2_style

    folder = tmp_path_factory.mktemp("mbv2")
    model = folder / "mbv2.tflite"
    model.write_bytes(mobilenet_v2_style())
    return model, export_model(model, folder / "m.tar", memory="small")


def test_mobilenet_v2_style_fits_in_a_third_of_its_lifetime_bound(mobilenet_v2):
    """Its expansions run as fused blocks (expand, depthwise, project row by row): the
    expanded tensors never exist whole. `--ram-budget` a third of the bound counts the I/O
    buffers too, so it says what the model needs (the one line: the kws test above)."""
    model, result = mobilenet_v2
    assert result.lifetime_bound == 138_240
    assert result.plan.pool_bytes + result.scratch_bytes <= 138_240 / 3
    assert "inverted_residual" in " ".join(result.cpu_calls)
    with tarfile.open(result.path) as tar:
        source = tar.extractfile("./codegen/host/src/default_lib0.c").read().decode()
    assert "TVMBackendAllocWorkspace" not in source  # working rows: stack or pool
    assert ram_needed(result) == result.plan.pool_bytes + result.scratch_bytes + 27_648 + 10
    assert ram_needed(result) > 138_240 // 3


@pytest.mark.slow
@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
def test_mobilenet_v2_style_small_plan_is_tflite_micro_byte_for_byte(board, mobilenet_v2,
                                                                     tmp_path):
    """Fused blocks (stride 1 and 2), residual sums over their block input, a depthwise in
    place: three random inputs against TensorFlow Lite Micro's reference kernels."""
    from tests.test_export import tflm_outputs

    require_board_tools(board)
    model, result = mobilenet_v2
    project = tmp_path / "p"
    generate(result.path, board, project)
    rng = np.random.default_rng(3)
    xs = [rng.integers(-128, 128, (1, 96, 96, 3), dtype=np.int8) for _ in range(3)]
    name = result.inputs[0].name
    got = [next(iter(o.values())) for o in run_project(project, [{name: x} for x in xs]).outputs]
    want = tflm_outputs(model, xs)
    assert len({w.tobytes() for w in want}) == 3  # the outputs follow the input
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


@pytest.mark.slow
def test_small_plan_with_an_accelerator_leaves_its_layers_their_own_outputs(tmp_path):
    """kws with the vanilla NPU: it takes the convolutions and the dense layer, whose
    outputs stay apart from their inputs (its driver writes whole tensors), so the peak
    stays at one pointwise layer's input and output; the depthwise layers left to us still
    write over their input; outputs TFLite Micro's on the host."""
    from tests.test_accelerators import export, run_on
    from tests.test_export import _kws_inputs, tflm_outputs

    xs, _ = _kws_inputs()
    xs = xs[:5]
    printed = export(KWS, tmp_path / "k.tar", "--accelerator", "vanilla", "--memory", "small")
    assert printed["accelerators"][0]["operators"] == {"conv2d": 5, "dense": 1}
    assert printed["over_input_calls"] == 4 and printed["pool_bytes"] == 16_000
    report = run_on(tmp_path / "k.tar", "host", [{"input_1": x} for x in xs], tmp_path)
    got = [o["Identity"] for o in report.outputs]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in tflm_outputs(KWS, xs)]


def test_the_fast_plan_reaches_the_bound_where_greedy_orders_do_not():
    """The MobileNetV2-style model's tensors: every greedy order places the residual block's
    input above the expansion's pair (147,456 B); the local search over orders finds the
    bound (138,240 B)."""
    from generator.export.planner import Interval, plan

    lives = [(36864, 0, 1), (36864, 1, 2), (18432, 2, 3), (110592, 3, 4), (27648, 4, 5),
             (9216, 5, 9), (55296, 6, 7), (55296, 7, 8), (9216, 8, 9), (9216, 9, 10),
             (55296, 10, 11), (13824, 11, 12)]
    intervals = [Interval(i, size, first, last) for i, (size, first, last) in enumerate(lives)]
    result = plan(intervals)
    assert result.lower_bound == 138_240 and result.pool_bytes == 138_240
    assert plan(intervals) == result  # the same plan every time
