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
    assert len(err) == 1, err
    assert "--memory, --ram-budget and --reuse-input apply to full-model" in err[0]


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
    """Our MobileNetV2-style model (tests/memory_models.py) and its `--memory small
    --reuse-input` export."""
    from tests.memory_models import mobilenet_v2_style

    folder = tmp_path_factory.mktemp("mbv2")
    model = folder / "mbv2.tflite"
    model.write_bytes(mobilenet_v2_style())
    return model, export_model(model, folder / "m.tar", memory="small", reuse_input=True)


def test_mobilenet_v2_style_fits_in_a_sixth_of_its_lifetime_bound(mobilenet_v2):
    """Its first six convolutions run as one chain and each expanding block as another
    (generator/export/conv_chain.py): the large tensors never exist whole; once the first
    chain has read the input, a 9,216 B tensor lives in the input buffer. `--ram-budget` a
    third of the bound counts the I/O buffers too, so it says what the model needs (the
    one line: the kws test above)."""
    model, result = mobilenet_v2
    assert result.lifetime_bound == 138_240
    assert result.plan.pool_bytes + result.scratch_bytes <= 138_240 / 5
    assert result.in_input_bytes == 9_216
    assert result.cpu_calls.count("q_conv_chain") == 1  # the stem's chain
    assert len([c for c in result.cpu_calls if c.startswith("q_conv_chain")]) == 6
    assert result.calls == 12  # 6 chains, 3 residual sums, conv, pool, dense
    with tarfile.open(result.path) as tar:
        source = tar.extractfile("./codegen/host/src/default_lib0.c").read().decode()
    assert "TVMBackendAllocWorkspace" not in source  # working rows: stack or pool
    assert ram_needed(result) == result.plan.pool_bytes + result.scratch_bytes + 27_648 + 10
    assert ram_needed(result) > 138_240 // 3


@pytest.mark.slow
@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
def test_mobilenet_v2_style_small_plan_is_tflite_micro_byte_for_byte(board, mobilenet_v2,
                                                                     tmp_path):
    """Chains (stride 1 and 2), residual sums over their block input, activations in the
    input buffer: three random inputs against TensorFlow Lite Micro's reference kernels."""
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


def _conv_layer(x_shape, cout, k, stride=1, pads=(0, 0, 0, 0), dilation=1, depthwise=False):
    from generator.export.conv_chain import ConvLayer
    from generator.export.qkernels import Requant

    n, h, w, cin = x_shape
    extent = (k - 1) * dilation + 1
    out = (n, (h + pads[0] + pads[2] - extent) // stride + 1,
           (w + pads[1] + pads[3] - extent) // stride + 1, cout)
    weights = np.ones((k, k, cout) if depthwise else (cout, k, k, cin), np.int64)
    return ConvLayer(tuple(x_shape), weights, np.zeros(cout, np.int64), out, (stride, stride),
                     pads, (dilation, dilation), 0, Requant(1 << 30, 0, 0), depthwise)


def test_chain_rings_hold_the_rows_still_to_be_read():
    """A 3x3 depthwise (padding 1) reads three rows of its input per output row: a ring of
    3; before a stride-2 layer the ring holds its window (3 rows); a 1x1 layer before a
    stride-2 3x3 computes its first three rows in one step, so the ring under it holds 3;
    a dilated 3x3 reads across 5 rows."""
    from generator.export.conv_chain import ring_rows, work_bytes

    expand = _conv_layer((1, 16, 16, 4), 24, 1)
    dw = _conv_layer((1, 16, 16, 24), 24, 3, pads=(1, 1, 1, 1), depthwise=True)
    assert ring_rows([expand, dw]) == [3]
    down = _conv_layer((1, 16, 16, 24), 24, 3, stride=2, pads=(0, 0, 1, 1), depthwise=True)
    assert ring_rows([expand, down]) == [3]
    first = _conv_layer((1, 16, 16, 4), 24, 3, pads=(1, 1, 1, 1))
    assert ring_rows([first, _conv_layer((1, 16, 16, 24), 24, 1), down]) == [3, 3]
    assert work_bytes([expand, dw]) == 3 * 16 * 24
    dilated = _conv_layer((1, 16, 16, 24), 24, 3, pads=(2, 2, 2, 2), dilation=2,
                          depthwise=True)
    assert ring_rows([expand, dilated]) == [5]


def test_chain_length_cuts_where_the_most_pool_bytes_are_least():
    """An expanding block (1x1 to 6x channels, depthwise, 1x1 back) is one chain; a run
    that never grows stays layer by layer (its layers write over their inputs); the
    caller's input buffer does not count."""
    from generator.export.conv_chain import chain_length

    expand = _conv_layer((1, 24, 24, 16), 96, 1)
    dw = _conv_layer((1, 24, 24, 96), 96, 3, pads=(1, 1, 1, 1), depthwise=True)
    project = _conv_layer((1, 24, 24, 96), 16, 1)
    assert chain_length([expand, dw, project], input_ours=True) == 3
    thin = [_conv_layer((1, 24, 24, 16), 16, 3, pads=(1, 1, 1, 1), depthwise=True),
            _conv_layer((1, 24, 24, 16), 16, 1)]
    assert chain_length(thin, input_ours=True) == 0
    assert chain_length([expand], input_ours=True) == 0


@pytest.fixture(scope="module")
def conv_chain(tmp_path_factory) -> tuple[Path, object]:
    """tests/memory_models.py's conv_chain_style and its `--memory small` export, once for
    both boards (generate only reads the archive)."""
    from tests.memory_models import conv_chain_style

    folder = tmp_path_factory.mktemp("chain")
    model = folder / "chain.tflite"
    model.write_bytes(conv_chain_style())
    return model, export_model(model, folder / "c.tar", memory="small")


@pytest.mark.slow
@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
def test_a_chain_of_every_geometry_is_tflite_micro_byte_for_byte(board, conv_chain, tmp_path):
    """tests/memory_models.py's conv_chain_style: regular and depthwise, dilation 2,
    multiplier 2, stride 2, SAME and VALID padding, in one kernel; outputs TensorFlow Lite
    Micro's for three random inputs, with the pool a third of the lifetime bound."""
    from tests.test_export import tflm_outputs

    require_board_tools(board)
    model, result = conv_chain
    assert result.cpu_calls == ["q_conv_chain", "q_avg_pool2d"]
    assert result.plan.pool_bytes < result.lifetime_bound / 2
    generate(result.path, board, tmp_path / "p")
    rng = np.random.default_rng(5)
    xs = [rng.integers(-128, 128, (1, 32, 32, 4), dtype=np.int8) for _ in range(3)]
    name = result.inputs[0].name
    report = run_project(tmp_path / "p", [{name: x} for x in xs])
    got = [next(iter(o.values())) for o in report.outputs]
    want = tflm_outputs(model, xs)
    assert len({w.tobytes() for w in want}) == 3
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


def test_activations_move_into_the_input_buffer_only_after_its_last_read():
    """move_to_regions: the pool's fullest step gives up its largest tensor that fits the
    input buffer and starts after the input's last reader; one that starts earlier stays."""
    from generator.export.planner import Interval, Region, lower_bound, move_to_regions

    intervals = [Interval(1, 64, 0, 1), Interval(2, 64, 1, 2), Interval(3, 48, 2, 3),
                 Interval(4, 16, 3, 4)]
    left, moved = move_to_regions(intervals, [Region(0, 64, 1)])
    assert moved == {2: (0, 0)}
    assert lower_bound(left) == 64
    # nothing live at the fullest step fits: nothing moves (the peak would not shrink)
    assert move_to_regions(intervals, [Region(0, 32, 1)])[1] == {}
    assert move_to_regions(intervals, [Region(0, 64, 5)])[1] == {}


def test_reuse_input_is_recorded_and_said(tmp_path, capsys):
    """kws with --memory small --reuse-input: the archive's header says the run writes over
    its inputs, `info` and --json say how many bytes live there; outputs TensorFlow Lite
    Micro's on the host (the AN385: the MobileNetV2-style test)."""
    from tests.test_export import _kws_inputs, tflm_outputs

    out = tmp_path / "k.tar"
    assert main(["export", str(KWS), "-o", str(out), "--memory", "small", "--reuse-input",
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["reuse_input"], printed["in_input_bytes"], printed["pool_bytes"]) == (
        True, 64, 8_000)
    with tarfile.open(out) as tar:
        header = tar.extractfile("./codegen/host/include/tvmgen_default.h").read().decode()
        source = tar.extractfile("./codegen/host/src/default_lib1.c").read().decode()
    assert "#define TVMGEN_DEFAULT_REUSES_INPUTS 1" in header
    assert "(uint8_t*)inputs->input_1 + 0)" in source
    assert main(["info", str(out)]) == 0
    assert "64 B more in the input buffers once read" in capsys.readouterr().out
    # the library's one header says so, and its run checks the inputs' 16-byte alignment
    assert main(["generate", str(out), "--format", "library", "-o", str(tmp_path / "l")]) == 0
    library_h = (tmp_path / "l" / "include" / "default.h").read_text()
    assert "#define DEFAULT_REUSES_INPUTS 1" in library_h
    assert "bad_buffer(inputs->input_1, 16u)" in (tmp_path / "l" / "src" / "default.c").read_text()
    xs, _ = _kws_inputs()
    generate(out, "host", tmp_path / "p")
    report = run_project(tmp_path / "p", [{"input_1": x} for x in xs[:5]])
    got = [o["Identity"] for o in report.outputs]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in tflm_outputs(KWS, xs[:5])]


def test_an_accelerator_leaves_chains_to_the_cpu_and_export_says_so(tmp_path):
    """The vanilla NPU takes convolutions, but not the layers of a chain: they stay one
    CPU kernel, and export says so in a note."""
    from tests.memory_models import conv_chain_style
    from tests.test_accelerators import export

    model = tmp_path / "chain.tflite"
    model.write_bytes(conv_chain_style())
    printed = export(model, tmp_path / "c.tar", "--accelerator", "vanilla", "--memory",
                     "small")
    assert printed["cpu_kernels"] == ["q_conv_chain", "q_avg_pool2d"]
    assert "--memory small: 1 convolution chain on the CPU (accelerators do not take a " \
        "chain's layers)" in printed["notes"]
