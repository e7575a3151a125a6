"""Unquantized integer arithmetic, CAST and TFLite Micro's signal operators (ops_signal.py):
exported, run on the host (tests/c_runner.py) and compared byte for byte with TFLite Micro's
interpreter (the tflite_micro wheel). Each model runs in a fresh interpreter: the spectral
subtraction's noise estimate starts at zero, as in an exported model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flatbuffers import flexbuffers

from generator.export.api import export_model
from generator.export.tflite import survey
from generator.export.tflite.model import read_tflite
from tests.c_runner import CModel
from tests.tflite_builder import ModelBuilder, Tensor, op_model

runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")

CORPUS = Path(__file__).parent / "fixtures" / "models" / "corpus"
I32_MIN, I32_MAX = -2**31, 2**31 - 1


def tflm(model: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Every output of one Invoke in a new TFLite Micro interpreter."""
    it = runtime.Interpreter.from_file(str(model), arena_size=8 << 20)
    for i, x in enumerate(inputs):
        it.set_input(x, i)
    it.invoke()
    outs, i = [], 0
    while True:
        try:
            outs.append(np.array(it.get_output(i)))
        except Exception:  # past the last output
            return outs
        i += 1


def run_both(tmp_path: Path, model: bytes | Path, inputs: list[np.ndarray], name: str = "m"):
    if isinstance(model, bytes):
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(model)
    else:
        path = model
    result = export_model(path, tmp_path / f"{name}.tar")
    work = tmp_path / f"{name}_c"
    work.mkdir()
    got = CModel(result, work)(*inputs)
    want = tflm(path, inputs)
    assert len(got) == len(want)
    return got, want


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        w = w.reshape(g.shape)
        assert g.dtype == w.dtype, k
        assert g.tobytes() == w.tobytes(), (k, g.ravel()[:8], w.ravel()[:8])


# ---- integer arithmetic ------------------------------------------------------------------

def test_int32_arithmetic(tmp_path):
    """ADD (its fused activation ignored, as TFLM does), SUB, MUL and DIV (with fused
    activations), MINIMUM, MAXIMUM; broadcasting of a scalar and of a row; wrapping sums
    and products; DIV truncating toward zero."""
    m = ModelBuilder()
    a = m.tensor(Tensor((3, 4), "int32"))
    b = m.tensor(Tensor((3, 4), "int32"))
    row = m.tensor(Tensor((1, 4), "int32", data=np.array([[7, -3, 1000, -65536]])))
    scalar = m.tensor(Tensor((), "int32", data=np.array(-5)))
    divisor = m.tensor(Tensor((1, 4), "int32", data=np.array([[3, -7, 2, 1 << 20]])))
    outs = []

    def op(name, x, y, act="NONE"):
        o = m.tensor(Tensor((3, 4), "int32"))
        options = {"fused_activation_function": act}
        m.op(name, [x, y], [o], options if name not in ("MINIMUM", "MAXIMUM") else None)
        outs.append(o)

    op("ADD", a, b)
    op("ADD", a, scalar, "RELU")
    op("SUB", a, row, "RELU6")
    op("SUB", a, b)
    op("MUL", a, b)
    op("MUL", a, row, "RELU_N1_TO_1")
    op("DIV", a, divisor)
    op("DIV", a, scalar, "RELU")
    op("MINIMUM", a, row)
    op("MAXIMUM", b, scalar)
    m.inputs(a, b)
    m.outputs(*outs)
    rng = np.random.default_rng(0)
    x = rng.integers(I32_MIN, I32_MAX, (3, 4), dtype=np.int64).astype(np.int32)
    y = rng.integers(-100, 100, (3, 4)).astype(np.int32)
    x[0, :2] = [I32_MAX, I32_MIN]
    got, want = run_both(tmp_path, m.build(), [x, y])
    assert_same(got, want)


@pytest.mark.parametrize("dtype", ["int16", "int64"])
def test_min_max_other_widths(tmp_path, dtype):
    m = ModelBuilder()
    a = m.tensor(Tensor((2, 5), dtype))
    b = m.tensor(Tensor((5,), dtype))
    lo, hi = m.tensor(Tensor((2, 5), dtype)), m.tensor(Tensor((2, 5), dtype))
    m.op("MINIMUM", [a, b], [lo])
    m.op("MAXIMUM", [a, b], [hi])
    m.inputs(a, b)
    m.outputs(lo, hi)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    x = rng.integers(info.min, info.max, (2, 5), dtype=np.int64).astype(dtype)
    y = rng.integers(info.min, info.max, (5,), dtype=np.int64).astype(dtype)
    assert_same(*run_both(tmp_path, m.build(), [x, y]))


CASTS = [("int32", "int8"), ("int32", "int16"), ("int32", "uint32"), ("uint32", "int32"),
         ("int16", "int32"), ("int16", "float32"), ("int32", "float32"), ("uint32", "float32"),
         ("int8", "int16"), ("float32", "int32"), ("float32", "int8"), ("float32", "int16")]


def test_cast(tmp_path):
    """static_cast: integers wrap, integers round to float, floats truncate (in range)."""
    m = ModelBuilder()
    rng = np.random.default_rng(2)
    ins, values, outs = {}, [], []
    for src, dst in CASTS:
        if src not in ins:
            ins[src] = m.tensor(Tensor((16,), src))
            if src == "float32":
                v = rng.uniform(-120, 120, 16).astype(np.float32)
                v[:4] = [-0.99, 0.99, -127.5, 126.75]
            else:
                info = np.iinfo(src)
                v = rng.integers(info.min, info.max, 16, dtype=np.int64).astype(src)
                v[:2] = [info.min, info.max]
            values.append(v)
        o = m.tensor(Tensor((16,), dst))
        m.op("CAST", [ins[src]], [o])
        outs.append(o)
    m.inputs(*ins.values())
    m.outputs(*outs)
    assert_same(*run_both(tmp_path, m.build(), values))


def reasons(model: bytes) -> list[str]:
    return [s.reason for s in survey(read_tflite(model, "m.tflite")) if s.status == "unsupported"]


def test_refusals():
    """A computed divisor, a divisor of 0, int32 ADD on 16 bits, a constant float out of
    range cast to an integer."""
    x = Tensor((4,), "int32")
    div = op_model("DIV", [x, Tensor((4,), "int32")], [Tensor((4,), "int32")],
                   {"fused_activation_function": "NONE"})
    assert "not a constant" in reasons(div)[0]
    zero = op_model("DIV", [x, Tensor((4,), "int32", data=np.array([1, 0, 2, 3]))],
                    [Tensor((4,), "int32")], {"fused_activation_function": "NONE"})
    assert "divisor of 0" in reasons(zero)[0]
    add16 = op_model("ADD", [Tensor((4,), "int16"), Tensor((4,), "int16")],
                     [Tensor((4,), "int16")], {"fused_activation_function": "NONE"})
    assert reasons(add16)
    m = ModelBuilder()
    c = m.tensor(Tensor((2,), "float32", data=np.array([1.0, 3e9], np.float32)))
    y = m.tensor(Tensor((2,), "int32"))
    z = m.tensor(Tensor((2,), "int32"))
    s = m.tensor(Tensor((2,), "int32"))
    m.op("CAST", [c], [y])
    m.op("ADD", [y, z], [s], {"fused_activation_function": "NONE"})
    m.inputs(z)
    m.outputs(s)
    assert "range" in reasons(m.build())[0]


# ---- the signal operators ----------------------------------------------------------------

def custom(code: str, inputs, outputs, options: dict | None = None) -> bytes:
    raw = bytes(flexbuffers.Dumps(options)) if options else None
    return op_model("CUSTOM", inputs, outputs, None, custom_code=code, custom_options=raw)


def test_fft_auto_scale_edges(tmp_path):
    """MaxAbs16's int16 wrap of −32768 and the most significant bit of 0 (GCC's form)."""
    model = custom("SignalFftAutoScale", [Tensor((8,), "int16")],
                   [Tensor((8,), "int16"), Tensor((), "int32")])
    path = tmp_path / "scale.tflite"
    path.write_bytes(model)
    result = export_model(path, tmp_path / "scale.tar")
    (tmp_path / "c").mkdir()
    cm = CModel(result, tmp_path / "c")
    for x in ([0] * 8, [-32768, 5, 0, 0, 0, 0, 0, 0], [3, -32768, 100, -7, 0, 0, 0, 1],
              [1, -1, 2, 0, 0, 0, 0, 0], [-200, 17, 0, 0, 0, 0, 0, 0]):
        x = np.array(x, np.int16)
        assert_same(cm(x), tflm(path, [x]))


@pytest.mark.parametrize("length", [8, 64])
def test_rfft_full_scale(tmp_path, length):
    """The int16 real FFT on full-scale, short and zero-padded inputs."""
    width = length - 3
    model = custom("SignalRfft", [Tensor((2, width), "int16")],
                   [Tensor((2, length + 2), "int16")], {"T": 7, "fft_length": length})
    path = tmp_path / "rfft.tflite"
    path.write_bytes(model)
    result = export_model(path, tmp_path / "rfft.tar")
    (tmp_path / "c").mkdir()
    cm = CModel(result, tmp_path / "c")
    rng = np.random.default_rng(length)
    for x in (np.full((2, width), -32768), np.full((2, width), 32767),
              rng.integers(-32768, 32768, (2, width))):
        x = x.astype(np.int16)
        assert_same(cm(x), tflm(path, [x]))


@pytest.mark.parametrize("kind", ["int8", "float"])
def test_audio_preprocessor(tmp_path, kind):
    """TFLM's audio preprocessor models: window, FFT, energy, filter bank, square root,
    spectral subtraction, PCAN, log, then integer arithmetic or a float scale."""
    path = CORPUS / f"tflm_audio_preprocessor_{kind}" / f"audio_preprocessor_{kind}.tflite"
    result = export_model(path, tmp_path / "m.tar")
    (tmp_path / "c").mkdir()
    cm = CModel(result, tmp_path / "c")
    rng = np.random.default_rng(7)
    for k in range(3):
        x = (rng.integers(-32768, 32768, (1, 480)) >> (4 * k)).astype(np.int16)
        (got,), (want,) = cm(x), tflm(path, [x])
        want = want.reshape(got.shape)
        if kind == "float":
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        assert got.tobytes() == want.tobytes()


U32_EDGES = [0, 1, 2, 3, 4, 5, 7, 8, 1023, 1024, 2047, 8191, 8192, 65535, 65536, 1 << 20,
             (1 << 29) - 1, 1 << 29, (1 << 31) - 1, 1 << 31, (1 << 32) - 2, (1 << 32) - 1]


def single(tmp_path: Path, model: bytes, inputs: list[np.ndarray]) -> None:
    got, want = run_both(tmp_path, model, inputs)
    assert_same(got, want)


def test_filter_bank_log_edges(tmp_path):
    """0 and 1 (→ 0), the shift that wraps, the clamp to INT16_MAX, a wrapping scale."""
    n = len(U32_EDGES)
    for bits, scale in ((3, 64), (0, 1 << 20)):
        model = custom("SignalFilterBankLog", [Tensor((n,), "uint32")], [Tensor((n,), "int16")],
                       {"input_correction_bits": bits, "output_scale": scale})
        sub = tmp_path / f"log{bits}"
        sub.mkdir()
        single(sub, model, [np.array(U32_EDGES, np.uint32)])


@pytest.mark.parametrize("clamping", [False, True])
def test_spectral_subtraction_and_pcan(tmp_path, clamping):
    """Spectral subtraction from a zero estimate, its output through PCAN (the gain from
    the estimate: the table's small-value entries and every interval)."""
    n = len(U32_EDGES)
    m = ModelBuilder()
    x = m.tensor(Tensor((n,), "uint32"))
    out, noise, agc = (m.tensor(Tensor((n,), "uint32")) for _ in range(3))
    lut = np.random.default_rng(3).integers(-32768, 32768, 125).astype(np.int16)
    table = m.tensor(Tensor((125,), "int16", data=lut))
    opts = {"alternate_one_minus_smoothing": 15401, "alternate_smoothing": 983,
            "clamping": clamping, "min_signal_remaining": 819, "num_channels": n,
            "one_minus_smoothing": 15975, "smoothing": 409, "smoothing_bits": 10,
            "spectral_subtraction_bits": 14}
    m.op("CUSTOM", [x], [out, noise], custom_code="SignalFilterBankSpectralSubtraction",
         custom_options=bytes(flexbuffers.Dumps(opts)))
    m.op("CUSTOM", [out, x, table], [agc], custom_code="SignalPCAN",
         custom_options=bytes(flexbuffers.Dumps({"snr_shift": 6})))
    m.inputs(x)
    m.outputs(out, noise, agc)
    single(tmp_path, m.build(), [np.array(U32_EDGES, np.uint32)])


def test_window_and_energy_edges(tmp_path):
    """The window's clamp to int16, |−32768|² sums that wrap in uint32."""
    m = ModelBuilder()
    x = m.tensor(Tensor((2, 8), "int16"))
    w = m.tensor(Tensor((8,), "int16", data=np.array([32767, -32768, 4096, 1, 0, -1, 8191,
                                                       16384])))
    y = m.tensor(Tensor((2, 8), "int16"))
    flat = m.tensor(Tensor((16,), "int16"))
    shape = m.tensor(Tensor((1,), "int32", data=np.array([16])))
    e = m.tensor(Tensor((8,), "uint32"))
    m.op("CUSTOM", [x, w], [y], custom_code="SignalWindow",
         custom_options=bytes(flexbuffers.Dumps({"shift": 3})))
    m.op("RESHAPE", [y, shape], [flat], {"new_shape": [16]})
    m.op("CUSTOM", [flat], [e], custom_code="SignalEnergy",
         custom_options=bytes(flexbuffers.Dumps({"end_index": 8, "start_index": 0})))
    m.inputs(x)
    m.outputs(y, e)
    v = np.array([[-32768, -32768, 32767, 5, 9, -32768, 32767, -32768],
                  [32767, 32767, -32768, -32768, 1, 2, -3, 4]], np.int16)
    single(tmp_path, m.build(), [v])
