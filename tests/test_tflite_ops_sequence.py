"""SVDF and UNIDIRECTIONAL_SEQUENCE_LSTM through our TFLite importer, against TFLite's
reference kernels (BUILTIN_REF): integer outputs byte-equal, float within 1e-5.

State tensors are variables: TFLite starts them at zero and the exported model starts each
run from zero, so every sample is compared with a fresh interpreter's first Invoke
(`tests.tflite_builder.reference` builds one per call)."""

from __future__ import annotations

import numpy as np
import pytest

from generator.errors import ExportError
from generator.export.api import export_model
from generator.project.generate import generate
from generator.run import run_project
from tests.c_runner import CModel
from tests.conftest import require_board_tools
from tests.tflite_builder import ModelBuilder, Tensor, litert_missing, op_model, reference
from tests.tflite_cases import Case, check_case, f32, q8

pytestmark = pytest.mark.skipif(litert_missing() is not None, reason=str(litert_missing()))

RNG = np.random.default_rng(2024)


def _uniform(shape, scale=0.5):
    return RNG.uniform(-scale, scale, shape).astype(np.float32)


def _state(shape, dtype="float32", scale=None, zero=None):
    return Tensor(tuple(shape), dtype, scale, zero, is_variable=True)


# ---- SVDF --------------------------------------------------------------------------------------

def _svdf_float(id_, batch, depth, units, rank, memory, act, bias=True):
    filters = units * rank
    inputs = [f32((batch, depth)), f32((filters, depth), _uniform((filters, depth))),
              f32((filters, memory), _uniform((filters, memory))),
              f32((units,), _uniform((units,))) if bias else None,
              _state((batch, memory * filters))]
    return Case(id_, "SVDF", inputs, [f32((batch, units))],
                {"rank": rank, "fused_activation_function": act})


def _svdf_int8(id_, batch, depth, units, rank, memory, zero_in, zero_out, bias=True,
               state_scale=0.002):
    """int8 SVDF as TFLite's quantizer lays it out: int8 feature weights, int16 time weights
    and state (zero point 0), int32 bias. TFLite's integer SVDF takes only a fused RELU and
    does not apply it (the output is only clamped to int8): the output zero point and scale
    are chosen so that negative results occur, and the reference keeps them."""
    filters = units * rank
    wf = Tensor((filters, depth), "int8", 0.01, 0,
                data=RNG.integers(-127, 128, (filters, depth)))
    wt = Tensor((filters, memory), "int16", 5e-5, 0,
                data=RNG.integers(-30000, 30001, (filters, memory)))
    b = Tensor((units,), "int32", 5e-5 * state_scale, 0,
               data=RNG.integers(-200000, 200000, units)) if bias else None
    inputs = [q8((batch, depth), 0.03, zero_in), wf, wt, b,
              _state((batch, memory * filters), "int16", state_scale, 0)]
    return Case(id_, "SVDF", inputs, [q8((batch, units), 0.1, zero_out)],
                {"rank": rank, "fused_activation_function": "RELU"})


SVDF_CASES = [
    _svdf_float("svdf-float-rank1", 1, 5, 4, 1, 3, "NONE"),
    _svdf_float("svdf-float-rank2-batch2-relu", 2, 6, 3, 2, 4, "RELU"),
    _svdf_float("svdf-float-rank3-nobias-tanh", 1, 4, 2, 3, 2, "TANH", bias=False),
    _svdf_int8("svdf-int8-rank1", 1, 8, 4, 1, 3, 3, -5),
    _svdf_int8("svdf-int8-rank2-batch2", 2, 10, 3, 2, 5, -7, 10),
    _svdf_int8("svdf-int8-rank2-nobias-saturated-state", 1, 6, 5, 2, 2, 0, 0, bias=False,
               state_scale=0.0002),
]


@pytest.mark.parametrize("case", SVDF_CASES, ids=lambda c: c.id)
def test_svdf(case, tmp_path):
    check_case(case, tmp_path)


def test_svdf_int8_refuses_other_activations(tmp_path):
    """TFLite's integer SVDF refuses any fused activation but RELU; so do we."""
    case = _svdf_int8("svdf-int8-none", 1, 4, 2, 1, 2, 0, 0)
    case.options = {"rank": 1, "fused_activation_function": "NONE"}
    path = tmp_path / "m.tflite"
    path.write_bytes(case.model())
    with pytest.raises(ExportError, match="RELU only"):
        export_model(path, tmp_path / "m.tar")


# ---- LSTM --------------------------------------------------------------------------------------

def lstm_inputs(depth, cells, outputs=None, batch=1, steps=3, time_major=False, cifg=False,
                peephole=False, projection=False, layer_norm=False):
    """The 20 (or 24, with layer norm) inputs of a float UNIDIRECTIONAL_SEQUENCE_LSTM."""
    outputs = cells if outputs is None else outputs
    x_shape = (steps, batch, depth) if time_major else (batch, steps, depth)
    gates = ["input", "forget", "cell", "output"]

    def gate_tensor(g, shape):
        return None if (cifg and g == "input") else f32(shape, _uniform(shape))

    ins = [f32(x_shape)]
    ins += [gate_tensor(g, (cells, depth)) for g in gates]
    ins += [gate_tensor(g, (cells, outputs)) for g in gates]
    ins += [gate_tensor(g, (cells,)) if peephole else None
            for g in ("input", "forget", "output")]
    ins += [gate_tensor(g, (cells,)) for g in gates]
    ins += [f32((outputs, cells), _uniform((outputs, cells))) if projection else None,
            f32((outputs,), _uniform((outputs,))) if projection else None]
    ins += [_state((batch, outputs)), _state((batch, cells))]
    if layer_norm:
        ins += [None if (cifg and g == "input") else
                f32((cells,), RNG.uniform(0.5, 1.5, cells).astype(np.float32))
                for g in gates]
    out_shape = (steps, batch, outputs) if time_major else (batch, steps, outputs)
    return ins, f32(out_shape)


def _lstm(id_, depth, cells, *, time_major=False, cell_clip=0.0, proj_clip=0.0,
          act="TANH", **kw):
    ins, out = lstm_inputs(depth, cells, time_major=time_major, **kw)
    return Case(id_, "UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [out],
                {"fused_activation_function": act, "time_major": time_major,
                 "cell_clip": cell_clip, "proj_clip": proj_clip})


LSTM_CASES = [
    _lstm("lstm-float-batch-major", 3, 4, steps=4),
    _lstm("lstm-float-time-major-batch2", 2, 3, time_major=True, batch=2, steps=3),
    _lstm("lstm-float-peephole-cifg", 4, 3, steps=3, peephole=True, cifg=True),
    _lstm("lstm-float-peephole-projection-clips", 3, 5, outputs=2, steps=4, peephole=True,
          projection=True, cell_clip=0.4, proj_clip=0.3),
    _lstm("lstm-float-layer-norm", 3, 4, steps=3, layer_norm=True, batch=2),
]


@pytest.mark.parametrize("case", LSTM_CASES, ids=lambda c: c.id)
def test_lstm(case, tmp_path):
    check_case(case, tmp_path)


def test_an_lstm_with_int8_input_and_float_weights_is_refused_with_a_reason(tmp_path):
    """int8 input, float weights: neither the float nor the integer LSTM (8x8→16) takes
    it; export names the operator and why."""
    ins, _ = lstm_inputs(2, 2)
    ins[0] = q8(ins[0].shape, 0.02, 0)
    path = tmp_path / "m.tflite"
    path.write_bytes(op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [q8((1, 3, 2), 0.02, 0)],
                              {"fused_activation_function": "TANH"}))
    with pytest.raises(ExportError, match="UNIDIRECTIONAL_SEQUENCE_LSTM .*int8 LSTM with a"):
        export_model(path, tmp_path / "m.tar")


# ---- an LSTM classifier: LSTM → FULLY_CONNECTED → SOFTMAX ---------------------------------------

STEPS, FEATURES, CELLS, CLASSES = 6, 4, 8, 5


def lstm_classifier() -> bytes:
    m = ModelBuilder()
    ins, out = lstm_inputs(FEATURES, CELLS, steps=STEPS, peephole=True)
    idx = [-1 if t is None else m.tensor(t) for t in ins]
    seq = m.tensor(out)
    m.op("UNIDIRECTIONAL_SEQUENCE_LSTM", idx, [seq],
         {"fused_activation_function": "TANH", "time_major": False})
    w = m.tensor(f32((CLASSES, STEPS * CELLS), _uniform((CLASSES, STEPS * CELLS))))
    b = m.tensor(f32((CLASSES,), _uniform((CLASSES,))))
    logits = m.tensor(f32((1, CLASSES)))
    m.op("FULLY_CONNECTED", [seq, w, b], [logits])
    probs = m.tensor(f32((1, CLASSES)))
    m.op("SOFTMAX", [logits], [probs], {"beta": 1.0})
    m.inputs(idx[0])
    m.outputs(probs)
    return m.build()


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lstm")
    model = lstm_classifier()
    path = tmp / "lstm.tflite"
    path.write_bytes(model)
    result = export_model(path, tmp / "lstm.tar")
    rng = np.random.default_rng(7)
    xs = [rng.uniform(-1, 1, (1, STEPS, FEATURES)).astype(np.float32) for _ in range(3)]
    want = [reference(model, [x])[0] for x in xs]
    return tmp, result, xs, want


def test_lstm_classifier_on_the_host(classifier, tmp_path):
    _, result, xs, want = classifier
    model = CModel(result, tmp_path)
    for x, w in zip(xs, want, strict=True):
        np.testing.assert_allclose(model(x)[0], w, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_lstm_classifier_on_the_board(classifier, tmp_path):
    board = "qemu-mps2-an385"
    require_board_tools(board)
    _, result, xs, want = classifier
    project = tmp_path / "proj"
    generate(result.path, board, project)
    report = run_project(project, [{result.inputs[0].name: x} for x in xs])
    for out, w in zip(report.outputs, want, strict=True):
        got = next(iter(out.values()))
        np.testing.assert_allclose(got.reshape(w.shape), w, rtol=1e-5, atol=1e-6)
