"""The integer UNIDIRECTIONAL_SEQUENCE_LSTM (int8 activations and weights, int16 cell) through
our TFLite importer, byte-equal with TensorFlow Lite Micro's interpreter (the microcontroller
reference; TFLite's BUILTIN_REF computes this operator differently, see ops_lstm_int8.py).

The state is TFLite Micro's after allocation (hidden state at its zero point, cell at 0):
each sample runs in a fresh interpreter, as the exported model starts every run from it.
The three TFLite Micro example models are checked whole and, where their classifier head
saturates on random inputs, at the LSTM's own output (the graph output moved to it)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from generator.errors import ExportError
from generator.export.api import export_model
from tests.c_runner import CModel
from tests.tflite_builder import ModelBuilder, Tensor

try:
    from tflite_micro.python.tflite_micro import runtime
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"tflite_micro is not importable ({exc})", allow_module_level=True)

CORPUS = Path(__file__).parent / "fixtures" / "models" / "corpus"
MNIST = CORPUS / "tflm_mnist_lstm_int8" / "trained_lstm_int8.tflite"
DTLN = CORPUS / "tflm_dtln_noise_suppression" / "dtln_noise_suppression.tflite"
SPEECH = CORPUS / "tflm_micro_speech_lstm" / "micro_speech_lstm.tflite"
SAMPLES = 3


def tflm(model: bytes, x: np.ndarray) -> np.ndarray:
    """The model's first output in a fresh TFLite Micro interpreter."""
    interp = runtime.Interpreter.from_bytes(model)
    interp.set_input(x, 0)
    interp.invoke()
    return np.array(interp.get_output(0))


def with_output(model: bytes, tensor: int) -> bytes:
    """The model with its (one) graph output moved to `tensor`: the flatbuffer's outputs
    vector overwritten in place."""
    import tflite

    buf = bytearray(model)
    graph = tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0)
    assert graph.OutputsLength() == 1
    field = graph._tab.Offset(8)  # SubGraph.outputs
    struct.pack_into("<i", buf, graph._tab.Vector(field), tensor)
    return bytes(buf)


def check(model: bytes, tmp_path: Path, seed: int = 0) -> None:
    """Export `model`, run its C on the host and compare with TFLite Micro on random int8
    inputs, byte for byte."""
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    result = export_model(path, tmp_path / "model.tar")
    c_model = CModel(result, tmp_path)
    rng = np.random.default_rng(seed)
    shape = result.inputs[0].shape
    for _ in range(SAMPLES):
        x = rng.integers(-128, 128, shape).astype(np.int8)
        want = tflm(model, x)
        got = c_model(x)[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


# ---- the TFLite Micro example models -------------------------------------------------------

@pytest.mark.parametrize("path", [MNIST, DTLN, SPEECH], ids=["mnist", "dtln", "micro_speech"])
def test_corpus_model(path, tmp_path):
    check(path.read_bytes(), tmp_path)


@pytest.mark.parametrize("path", [MNIST, SPEECH], ids=["mnist", "micro_speech"])
def test_corpus_lstm_output(path, tmp_path):
    """The LSTM's own output (the classifiers' softmax saturates on random inputs)."""
    from generator.export.tflite.model import read_tflite

    data = path.read_bytes()
    model = read_tflite(data, str(path))
    lstm = next(op for op in model.ops if op.code == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    check(with_output(data, lstm.outputs[0]), tmp_path, seed=1)


# ---- synthetic LSTMs: the options and scales the examples leave out ------------------------

def lstm_model(depth=5, cells=6, steps=4, batch=1, time_major=False, act="TANH",
               cell_clip=0.0, cell_scale=2.0 ** -12, input_zero=-3, hidden_zero=5,
               hidden_scale=1 / 128, variant: str = "", seed: int = 0) -> bytes:
    """An int8 LSTM laid out as TFLite's converter writes it: int8 weights (zero point 0),
    int32 biases at input·weight scale, variable int8 hidden and int16 cell state, the
    five intermediates (the last at the hidden state's quantization). `variant` adds one
    input TFLite Micro refuses: cifg, peephole, projection, layer_norm, per_channel."""
    rng = np.random.default_rng(seed)
    x_scale = 0.03
    m = ModelBuilder()
    x_shape = (steps, batch, depth) if time_major else (batch, steps, depth)
    out_shape = (steps, batch, cells) if time_major else (batch, steps, cells)
    x = m.tensor(Tensor(x_shape, "int8", x_scale, input_zero))

    def weights(shape, scale):
        if variant == "per_channel":
            scale = [scale] * shape[0]
        return m.tensor(Tensor(shape, "int8", scale, 0, data=rng.integers(-127, 128, shape)))

    w_scales = rng.uniform(0.01, 0.03, 8)
    w_in = [weights((cells, depth), w_scales[g]) for g in range(4)]
    w_rec = [weights((cells, cells), w_scales[4 + g]) for g in range(4)]
    biases = [m.tensor(Tensor((cells,), "int32", x_scale * w_scales[g], 0,
                              data=rng.integers(-4000, 4000, cells))) for g in range(4)]
    if variant == "cifg":
        w_in[0] = w_rec[0] = biases[0] = -1
    peephole = [-1] * 3
    if variant == "peephole":
        peephole = [m.tensor(Tensor((cells,), "int16", 1e-4, 0,
                                    data=rng.integers(-300, 300, cells))) for _ in range(3)]
    projection = [-1, -1]
    if variant == "projection":
        projection[0] = weights((cells, cells), 0.02)
    hidden = m.tensor(Tensor((batch, cells), "int8", hidden_scale, hidden_zero,
                             is_variable=True))
    cell = m.tensor(Tensor((batch, cells), "int16", cell_scale, 0, is_variable=True))
    norm = [-1] * 4
    if variant == "layer_norm":
        norm = [m.tensor(Tensor((cells,), "int16", 1e-3, 0,
                                data=rng.integers(500, 1500, cells))) for _ in range(4)]
    inter = [m.tensor(Tensor((0,), "float32")) for _ in range(4)]  # as the converter's
    inter.append(m.tensor(Tensor((0,), "int8", hidden_scale, hidden_zero)))
    out = m.tensor(Tensor(out_shape, "int8", hidden_scale, hidden_zero))
    m.op("UNIDIRECTIONAL_SEQUENCE_LSTM",
         [x, *w_in, *w_rec, *peephole, *biases, *projection, hidden, cell, *norm], [out],
         {"fused_activation_function": act, "time_major": time_major,
          "cell_clip": cell_clip, "proj_clip": 0.0}, intermediates=inter)
    m.inputs(x)
    m.outputs(out)
    return m.build()


SYNTHETIC = {
    "batch-major": {},
    "time-major-batch2": {"time_major": True, "batch": 2, "steps": 3},
    "batch2-batch-major": {"batch": 2, "steps": 3, "input_zero": 7, "hidden_zero": -9},
    "cell-clip-cell-scale-2^-14": {"cell_clip": 0.3, "cell_scale": 2.0 ** -14, "steps": 6},
    "cell-scale-2^-11": {"cell_scale": 2.0 ** -11, "steps": 5, "hidden_scale": 1 / 200},
    "cell-scale-2^-15": {"cell_scale": 2.0 ** -15, "steps": 5},
}


@pytest.mark.parametrize("kw", SYNTHETIC.values(), ids=SYNTHETIC.keys())
def test_synthetic_lstm(kw, tmp_path):
    check(lstm_model(**kw), tmp_path, seed=2)


REFUSED = {"cifg": "with CIFG", "peephole": "with peephole", "projection": "with projection",
           "layer_norm": "with layer norm", "per_channel": "with per-channel input-to-input"}


@pytest.mark.parametrize("variant", REFUSED)
def test_variants_tflm_refuses_are_refused(variant, tmp_path):
    """TFLite Micro's integer LSTM takes only the plain LSTM with per-tensor weights."""
    path = tmp_path / "model.tflite"
    path.write_bytes(lstm_model(variant=variant))
    with pytest.raises(ExportError, match=f"UNIDIRECTIONAL_SEQUENCE_LSTM.*int8 LSTM "
                                          f"{REFUSED[variant]}"):
        export_model(path, tmp_path / "model.tar")


@pytest.mark.slow
@pytest.mark.parametrize("board", ["qemu-mps2-an385"])
def test_lstm_output_on_the_board(board, tmp_path):
    """The mnist LSTM's own output on a Cortex-M3, byte-equal with TFLite Micro."""
    from generator.export.tflite.model import read_tflite
    from generator.project.generate import generate
    from generator.run import run_project
    from tests.conftest import require_board_tools

    require_board_tools(board)
    data = MNIST.read_bytes()
    lstm = next(op for op in read_tflite(data, str(MNIST)).ops
                if op.code == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    model = with_output(data, lstm.outputs[0])
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    result = export_model(path, tmp_path / "model.tar")
    generate(result.path, board, tmp_path / "proj")
    rng = np.random.default_rng(4)
    xs = [rng.integers(-128, 128, result.inputs[0].shape).astype(np.int8) for _ in range(2)]
    report = run_project(tmp_path / "proj", [{result.inputs[0].name: x} for x in xs])
    for x, outputs in zip(xs, report.outputs, strict=True):
        (got,) = outputs.values()
        np.testing.assert_array_equal(np.asarray(got), tflm(model, x))
