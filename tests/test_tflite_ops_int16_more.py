"""The operators that blocked real int16 and mixed-type models (ops_int16_more.py): one
operator at a time and the corpus models that use them, exported, built on the host and
compared byte for byte with TensorFlow Lite Micro (the microcontroller reference) and with
TFLite's reference kernels (BUILTIN_REF) where those run the operator the same way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from generator.errors import ExportError
from generator.export.api import export_model
from tests.c_runner import CModel
from tests.tflite_builder import Tensor, litert_missing, op_model, random_input, reference
from tests.tflite_cases import f32, q8

pytestmark = pytest.mark.skipif(litert_missing() is not None, reason=str(litert_missing()))

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "models" / "corpus"
RNG = np.random.default_rng(1624)
EVERY = (1, 65536)  # an int16 input of this shape runs on every int16 value
ARENA = 4 << 20


def q16(shape, scale, zero=0, dtype="int16"):
    return Tensor(tuple(shape), dtype, scale, zero)


def q32(shape, scale, zero=0):
    return Tensor(tuple(shape), "int32", scale, zero)


@dataclass
class Case:
    """One operator; `litert` says what BUILTIN_REF does with it: "equal" (the same
    bytes as TFLM), "differs" (TFLM is followed; the reason is in the case's comment) or
    "refuses" (no such kernel in LiteRT)."""

    id: str
    op: str
    inputs: list
    outputs: list
    options: dict | None = None
    litert: str = "equal"

    def model(self) -> bytes:
        return op_model(self.op, self.inputs, self.outputs, self.options)


def tflm(model: Path, xs: list[np.ndarray], outputs: int) -> list[np.ndarray]:
    """TensorFlow Lite Micro's outputs, from a fresh interpreter."""
    from tflite_micro.python.tflite_micro import runtime

    it = runtime.Interpreter.from_file(str(model), arena_size=ARENA)
    for i, x in enumerate(xs):
        it.set_input(x, i)
    it.invoke()
    return [np.array(it.get_output(i)) for i in range(outputs)]


def _litert(model: bytes, xs: list[np.ndarray]) -> list[np.ndarray] | None:
    try:
        return reference(model, xs)
    except RuntimeError:  # LiteRT has no kernel for these dtypes
        return None


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and got.tobytes() == want.reshape(got.shape).tobytes()


def _first_difference(got: np.ndarray, want: np.ndarray) -> str:
    g, w = got.reshape(-1), want.reshape(-1)
    diff = np.flatnonzero(g != w)
    if got.dtype != want.dtype or diff.size == 0:
        return f"dtypes {got.dtype} / {want.dtype}"
    return f"{diff.size} of {w.size} differ, first at {diff[0]}: got {g[diff[0]]}, want " \
           f"{w[diff[0]]}"


def _samples(case: Case) -> list[list[np.ndarray]]:
    graph = [t for t in case.inputs if t is not None and t.data is None]
    if len(graph) == 1 and graph[0].shape == EVERY:
        return [[np.arange(-32768, 32768, dtype=np.int16).reshape(EVERY)]]
    rng = np.random.default_rng(7)
    return [[random_input(rng, t) for t in graph] for _ in range(3)]


def check(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "model.tflite"
    model = case.model()
    path.write_bytes(model)
    result = export_model(path, tmp_path / "model.tar")
    assert not result.quant.fallback, result.quant.fallback
    c = CModel(result, tmp_path)
    litert_same = []
    for xs in _samples(case):
        got = c(*xs)
        want = tflm(path, xs, len(got))
        for g, w in zip(got, want, strict=True):
            assert _same(g, w), _first_difference(g, w)
        ref = _litert(model, xs)
        litert_same.append(ref is not None and all(
            _same(g, r) for g, r in zip(got, ref, strict=True)))
        if case.litert == "refuses":
            assert ref is None
    if case.litert == "equal":
        assert all(litert_same)
    elif case.litert == "differs":
        assert not all(litert_same)


# ---- one operator ---------------------------------------------------------------------------

def _tconv(id_, stride, pad, in_hw, out_hw, bias="int64", act="NONE", litert="equal"):
    cin, cout, k = 5, 3, (3, 4)
    w_shape = (cout, *k, cin)
    scales = list(RNG.uniform(0.004, 0.03, cout))
    w = Tensor(w_shape, "int8", scales, 0, quantized_dimension=0,
               data=RNG.integers(-127, 128, w_shape))
    shape = np.array([1, *out_hw, cout], np.int32)
    ins = [Tensor((4,), "int32", data=shape), w, q16((1, *in_hw, cin), 0.0009)]
    if bias is not None:
        lim = 30_000 if bias == "int16" else 3_000_000
        ins.append(Tensor((cout,), bias, [0.0009 * s for s in scales], 0,
                          data=RNG.integers(-lim, lim, cout)))
    opts = {"padding": pad, "stride_h": stride[0], "stride_w": stride[1],
            "fused_activation_function": act}
    return Case(id_, "TRANSPOSE_CONV", ins, [q16((1, *out_hw, cout), 0.0011)], opts, litert)


CASES = [
    # TFLM computes both multipliers in double from the float32 scales; LiteRT's reference
    # divides in float32 (the older TFLM too), so some rescaled values differ by one
    Case("leaky-relu-rescaled", "LEAKY_RELU", [q16(EVERY, 0.0058368747)],
         [q16(EVERY, 0.0046422905)], {"alpha": 0.3}, litert="differs"),
    Case("leaky-relu-same-scale", "LEAKY_RELU", [q16(EVERY, 0.0017)], [q16(EVERY, 0.0017)],
         {"alpha": 0.2}),
    Case("leaky-relu-alpha-above-one", "LEAKY_RELU", [q16(EVERY, 0.0004)],
         [q16(EVERY, 0.0009)], {"alpha": 1.7}),
    _tconv("tconv-same-stride2", (2, 2), "SAME", (3, 4), (6, 8)),
    _tconv("tconv-valid-stride-1x2-nobias", (1, 2), "VALID", (2, 3), (4, 9), bias=None),
    _tconv("tconv-same-stride1-int16-bias", (1, 1), "SAME", (3, 3), (3, 3), bias="int16",
           litert="refuses"),
    _tconv("tconv-same-stride2-relu", (2, 2), "SAME", (2, 3), (4, 6), act="RELU"),
    Case("quantize-int16-int32", "QUANTIZE", [q16(EVERY, 0.000494312)],
         [q32(EVERY, 1.49012e-07)]),
    Case("quantize-int16-int32-down", "QUANTIZE", [q16(EVERY, 0.0003)],
         [q32(EVERY, 0.0007, 3)]),
    Case("quantize-int32-int16", "QUANTIZE", [q32((4, 40), 1.49012e-07)],
         [q16((4, 40), 0.000921971)]),
    Case("quantize-int32-int8", "QUANTIZE", [q32((4, 40), 2e-06, 5)],
         [q8((4, 40), 0.02, -3)]),
    Case("quantize-int8-int32", "QUANTIZE", [q8((4, 40), 0.05, 7)],
         [q32((4, 40), 0.0002)], litert="refuses"),
    Case("softmax-int8-int16", "SOFTMAX", [q8((3, 12), 0.1, -7)],
         [q16((3, 12), 1 / 65536, -32768)], {"beta": 1.0}),
    Case("softmax-int8-int16-beta-4d", "SOFTMAX", [q8((1, 2, 3, 9), 0.25, 4)],
         [q16((1, 2, 3, 9), 1 / 65536, -32768)], {"beta": 0.6}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_operator_equals_tflm(case, tmp_path):
    check(case, tmp_path)


@pytest.mark.parametrize("code", ["CONV_2D", "FULLY_CONNECTED"])
def test_hybrid_operator_is_refused_as_tflm_does(code, tmp_path):
    # float32 activations with int8 weights: TFLite's hybrid kernels; TFLM refuses them
    # ("Hybrid models are not supported on TFLite Micro"), and so does the export
    if code == "CONV_2D":
        w = Tensor((4, 3, 3, 2), "int8", 0.01, 0, data=RNG.integers(-127, 128, (4, 3, 3, 2)))
        model = op_model(code, [f32((1, 5, 5, 2)), w, f32((4,), np.zeros(4, np.float32))],
                         [f32((1, 5, 5, 4))], {"padding": "SAME", "stride_h": 1,
                                                "stride_w": 1})
    else:
        w = Tensor((3, 8), "int8", 0.01, 0, data=RNG.integers(-127, 128, (3, 8)))
        model = op_model(code, [f32((1, 8)), w, None], [f32((1, 3))])
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    with pytest.raises(RuntimeError):
        tflm(path, [np.zeros((1, 5, 5, 2) if code == "CONV_2D" else (1, 8), np.float32)], 1)
    with pytest.raises(ExportError) as err:
        export_model(path, tmp_path / "model.tar")
    text = err.value.one_line()
    assert f"hybrid {code}" in text and "TensorFlow Lite Micro refuses hybrid" in text


# ---- the corpus models ----------------------------------------------------------------------

def named(buf: bytes) -> bytes:
    """The model with its unnamed graph inputs and outputs named `tensor<i>` (the export
    refuses an empty name; TFLM's SEANET and keyword tests leave them empty)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(buf), 0)
    for sg in model.subgraphs:
        for i in [*sg.inputs, *sg.outputs]:
            if not sg.tensors[i].name:
                sg.tensors[i].name = f"tensor{i}"
    b = flatbuffers.Builder(len(buf) + 1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


EXACT = ["tflm_seanet_leaky_relu0", "tflm_seanet_leaky_relu1", "tflm_seanet_transpose_conv0",
         "tflm_seanet_transpose_conv1", "tflm_seanet_quantize0", "tflm_seanet_quantize1",
         "tflm_seanet_sub0", "tflm_seanet_sub1", "tflm_seanet_pad0", "tflm_seanet_pad1",
         "tflm_seanet_strided_slice0", "tflm_seanet_strided_slice1", "tflm_keyword_scrambled"]
# tflm_keyword_scrambled_8bit: test_tflite_ops_svdf_int8_state.py::test_keyword_scrambled_model
# (the same comparison with TFLite Micro, three random inputs).


def _random(spec, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(spec.dtype)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -32768), min(info.max, 32767), size=spec.shape,
                        endpoint=True).astype(dt)


@pytest.mark.parametrize("name", EXACT)
def test_corpus_model_equals_tflm(name, tmp_path):
    src = next((CORPUS / name).glob("*.tflite"))
    path = tmp_path / "model.tflite"
    path.write_bytes(named(src.read_bytes()))
    result = export_model(path, tmp_path / "model.tar")
    assert not result.quant.fallback, result.quant.fallback
    c = CModel(result, tmp_path)
    rng = np.random.default_rng(0)
    for _ in range(3):
        xs = [_random(s, rng) for s in result.inputs]
        got = c(*xs)
        for g, w in zip(got, tflm(path, xs, len(got)), strict=True):
            assert _same(g, w), _first_difference(g, w)


@pytest.mark.parametrize("name,why", [
    ("mlperf_kws_float", "hybrid CONV_2D"),
])
def test_corpus_model_refused_with_the_reason(name, why, tmp_path):
    src = next((CORPUS / name).glob("*.tflite"))
    path = tmp_path / "model.tflite"
    path.write_bytes(named(src.read_bytes()))
    with pytest.raises(ExportError) as err:
        export_model(path, tmp_path / "model.tar")
    assert why in err.value.one_line()
