"""The int8 SVDF with int8 time weights and int8 state (TensorFlow Lite Micro's
`EvalInt8SvdfReference`; TFLite itself takes only int16 time weights and state) through our
TFLite importer, byte-equal with TFLite Micro's interpreter.

TFLite Micro starts an int8 state at its zero point: each sample runs in a fresh
interpreter, as the exported model starts every run from that state. The state's nonzero
zero point is added to the saturated feature activation and the sum stored in int8, which
wraps; the one-operator cases are scaled so that it does, and so that their outputs spread
over int8. The keyword model's scrambled weights saturate every SVDF output, so it checks
the graph, not the rounding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from generator.errors import ExportError
from generator.export.api import export_model
from tests.c_runner import CModel
from tests.tflite_builder import Tensor, op_model

try:
    from tflite_micro.python.tflite_micro import runtime
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"tflite_micro is not importable ({exc})", allow_module_level=True)

KEYWORD = (Path(__file__).parent / "fixtures" / "models" / "corpus"
           / "tflm_keyword_scrambled_8bit" / "keyword_scrambled_8bit.tflite")
SAMPLES = 3


def tflm(model: bytes, x: np.ndarray) -> np.ndarray:
    """The model's first output in a fresh TFLite Micro interpreter."""
    interp = runtime.Interpreter.from_bytes(model, arena_size=8 << 20)
    interp.set_input(x, 0)
    interp.invoke()
    return np.array(interp.get_output(0))


def check(model: bytes, tmp_path: Path, seed: int = 0) -> list[np.ndarray]:
    """Export `model`, run its C on the host and compare with TFLite Micro on random inputs
    of the model's input type, byte for byte; returns TFLite Micro's outputs."""
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    result = export_model(path, tmp_path / "model.tar")
    assert not result.quant.fallback, result.quant.fallback
    c_model = CModel(result, tmp_path)
    rng = np.random.default_rng(seed)
    spec = result.inputs[0]
    info = np.iinfo(spec.dtype)
    wants = []
    for _ in range(SAMPLES):
        x = rng.integers(info.min, info.max + 1, spec.shape).astype(spec.dtype)
        want = tflm(model, x)
        got = c_model(x)[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        wants.append(want)
    return wants


def test_keyword_scrambled_model(tmp_path):
    """TFLite Micro's keyword benchmark: int16 input, seven int8-state SVDFs."""
    check(KEYWORD.read_bytes(), tmp_path)


# ---- one operator ------------------------------------------------------------------------------

def svdf_model(batch: int, depth: int, units: int, rank: int, memory: int, act: str,
               zero_state: int, state_dtype: str = "int8", time_dtype: str = "int8",
               seed: int = 0) -> bytes:
    """An int8 SVDF: int8 input (zero point −5) and feature weights, int32 bias at the
    state·time-weights scale (TFLite Micro checks it), variable state of
    `state_dtype` with zero point `zero_state`."""
    rng = np.random.default_rng(seed)
    filters = units * rank
    s_state, s_time = 0.06, 0.01
    limit = 127 if time_dtype == "int8" else 32767
    inputs = [
        Tensor((batch, depth), "int8", 0.03, -5),
        Tensor((filters, depth), "int8", 0.01, 0,
               data=rng.integers(-127, 128, (filters, depth))),
        Tensor((filters, memory), time_dtype, s_time, 0,
               data=rng.integers(-limit, limit + 1, (filters, memory))),
        Tensor((units,), "int32", float(np.float32(s_state) * np.float32(s_time)), 0,
               data=rng.integers(-3000, 3000, units)),
        Tensor((batch, memory * filters), state_dtype, s_state, zero_state, is_variable=True),
    ]
    out = Tensor((batch, units), "int8", 0.05, 3)
    return op_model("SVDF", inputs, [out], {"rank": rank, "fused_activation_function": act})


@pytest.mark.parametrize("kw", [
    dict(batch=2, depth=24, units=16, rank=1, memory=4, act="RELU", zero_state=40),
    dict(batch=1, depth=20, units=12, rank=2, memory=3, act="NONE", zero_state=-70),
], ids=["rank1-batch2-relu", "rank2-none"])
def test_one_svdf(kw, tmp_path):
    wants = check(svdf_model(**kw), tmp_path)
    assert len(np.unique(np.concatenate([w.ravel() for w in wants]))) > 8  # not saturated


def test_mixed_time_weights_and_state_types_are_refused(tmp_path):
    """TFLite Micro picks the kernel by the time weights' type and reads the state as that
    type: int8 time weights with an int16 state has no meaning; export refuses it."""
    path = tmp_path / "m.tflite"
    path.write_bytes(svdf_model(1, 4, 2, 1, 2, "RELU", 0, state_dtype="int16"))
    with pytest.raises(ExportError, match="int8 time weights and int16 state"):
        export_model(path, tmp_path / "m.tar")
