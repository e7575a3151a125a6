"""The importer's kernels on a board: models chaining many converted operators, exported,
generated and run on the host board and on qemu-mps2-an385, byte-equal with TFLite's
reference kernels (the per-operator tests compile the same C on this machine only)."""

from __future__ import annotations

import numpy as np
import pytest

from generator.export import export_model
from generator.project.generate import generate
from generator.run import run_project
from tests.conftest import require_board_tools
from tests.tflite_builder import ModelBuilder, Tensor, litert_missing, reference
from tests.tflite_cases import f32, q8

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(litert_missing() is not None, reason=str(litert_missing()))]
SAMPLES = 3


def _int8_chain() -> bytes:
    """int8 through tables, arithmetic, a convolution and layout operators:
    DEPTHWISE_CONV_2D → HARD_SWISH → MUL (a constant) → SUB → LOGISTIC → TRANSPOSE →
    MAX_POOL_2D → MEAN → FULLY_CONNECTED → TANH → CONCATENATION (with the FC's input)."""
    rng = np.random.default_rng(11)
    m = ModelBuilder()
    x = m.tensor(q8((1, 6, 6, 4), 0.04, -3))
    dw = m.tensor(Tensor((1, 3, 3, 4), "int8", list(rng.uniform(0.01, 0.03, 4)), 0,
                         quantized_dimension=3, data=rng.integers(-127, 128, (1, 3, 3, 4))))
    db = m.tensor(Tensor((4,), "int32", data=rng.integers(-200, 200, 4)))
    a = m.tensor(q8((1, 6, 6, 4), 0.05, 2))
    hs = m.tensor(q8((1, 6, 6, 4), 0.04, -20))
    k = m.tensor(q8((1, 1, 1, 4), 0.02, 0, data=rng.integers(-100, 100, (1, 1, 1, 4))))
    mu = m.tensor(q8((1, 6, 6, 4), 0.03, 1))
    su = m.tensor(q8((1, 6, 6, 4), 0.06, -4))
    lg = m.tensor(q8((1, 6, 6, 4), 1 / 256, -128))
    perm = m.tensor(Tensor((4,), "int32", data=np.array([0, 2, 1, 3])))
    tr = m.tensor(q8((1, 6, 6, 4), 1 / 256, -128))
    mp = m.tensor(q8((1, 3, 3, 4), 1 / 256, -128))
    axes = m.tensor(Tensor((2,), "int32", data=np.array([1, 2])))
    me = m.tensor(q8((1, 4), 1 / 300, -100))
    fw = m.tensor(Tensor((6, 4), "int8", 0.02, 0, data=rng.integers(-127, 128, (6, 4))))
    fb = m.tensor(Tensor((6,), "int32", data=rng.integers(-300, 300, 6)))
    fc = m.tensor(q8((1, 6), 0.01, 5))
    th = m.tensor(q8((1, 6), 1 / 128, 0))
    out = m.tensor(q8((1, 12), 1 / 128, 0))
    m.op("DEPTHWISE_CONV_2D", [x, dw, db], [a],
         {"padding": "SAME", "stride_h": 1, "stride_w": 1, "depth_multiplier": 1})
    m.op("HARD_SWISH", [a], [hs])
    m.op("MUL", [hs, k], [mu])
    m.op("SUB", [mu, hs], [su])
    m.op("LOGISTIC", [su], [lg])
    m.op("TRANSPOSE", [lg, perm], [tr])
    m.op("MAX_POOL_2D", [tr], [mp], {"padding": "VALID", "stride_h": 2, "stride_w": 2,
                                     "filter_height": 2, "filter_width": 2})
    m.op("MEAN", [mp, axes], [me], {"keep_dims": False})
    m.op("FULLY_CONNECTED", [me, fw, fb], [fc])
    m.op("TANH", [fc], [th])
    m.op("CONCATENATION", [th, th], [out], {"axis": 1})
    m.inputs(x)
    m.outputs(out)
    return m.build()


def _float_io() -> bytes:
    """float outside, int8 inside: QUANTIZE → CONV_2D → RESHAPE → FULLY_CONNECTED →
    SOFTMAX → DEQUANTIZE."""
    from tests.test_tflite_ops import _float_io_model

    return _float_io_model()


MODELS = {"int8-chain": (_int8_chain, q8((1, 6, 6, 4), 0.04, -3)),
          "float-io": (_float_io, f32((1, 6, 6, 2)))}


@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
@pytest.mark.parametrize("name", list(MODELS))
def test_importer_model_equals_tflite_on_the_board(name, board, tmp_path):
    require_board_tools(board)
    make, inp = MODELS[name]
    buf = make()
    path = tmp_path / "model.tflite"
    path.write_bytes(buf)
    result = export_model(path, tmp_path / "model.tar")
    assert result.quant.fallback == []
    rng = np.random.default_rng(3)
    if inp.dtype == "float32":
        xs = [rng.uniform(-2, 2, inp.shape).astype(np.float32) for _ in range(SAMPLES)]
    else:
        xs = [rng.integers(-128, 128, inp.shape).astype(np.int8) for _ in range(SAMPLES)]
    project = tmp_path / "proj"
    generate(result.path, board, project)
    report = run_project(project, [{result.inputs[0].name: x} for x in xs])
    for x, outputs in zip(xs, report.outputs, strict=True):
        (got,) = outputs.values()
        assert np.asarray(got).tobytes() == reference(buf, [x])[0].tobytes()
